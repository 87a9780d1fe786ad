"""The hand-written MCP input schemas and the validating request models stay in step: every
parameter an agent is shown is accepted, and every parameter accepted is shown."""

from __future__ import annotations

from typing import Any

import pytest

from ferrex.config import Settings
from ferrex.core.errors import FerrexError
from ferrex.core.requests import (
    ForgetRequest,
    RecallRequest,
    ReflectRequest,
    StatsRequest,
    StoreRequest,
    parse,
)
from ferrex.server.tools import TOOLS

MODELS = {
    "store": StoreRequest,
    "recall": RecallRequest,
    "forget": ForgetRequest,
    "reflect": ReflectRequest,
    "stats": StatsRequest,
}


@pytest.mark.parametrize("tool", sorted(MODELS))
def test_schema_properties_match_the_request_model(tool: str) -> None:
    [spec] = [t for t in TOOLS if t.name == tool]
    shown = set(spec.input_schema["properties"])
    accepted = set(MODELS[tool].model_fields)
    difference = {"only in schema": shown - accepted, "only in model": accepted - shown}
    assert shown == accepted, difference
    required = set(spec.input_schema.get("required", []))
    assert required <= shown
    for name in required:
        assert MODELS[tool].model_fields[name].is_required(), name


def test_schemas_reject_unknown_parameters() -> None:
    for spec in TOOLS:
        assert spec.input_schema.get("additionalProperties") is False, spec.name


# --------------------------------------------------------------------------- JSON leniencies


LIMITS = Settings().limits


@pytest.mark.parametrize(
    ("model", "arguments"),
    [
        (StoreRequest, {"content": "x", "confidence": None, "pinned": None, "type": None}),
        (RecallRequest, {"query": "x", "include_stale": None, "limit": None, "explain": None}),
        (ForgetRequest, {"ids": ["mem_0123456789ab"], "cascade": None}),
        (ReflectRequest, {"limit": None, "include_stale": None}),
        (StatsRequest, {"detailed": None}),
    ],
)
def test_null_means_not_given_for_every_optional_parameter(
    model: type[Any], arguments: dict[str, Any]
) -> None:
    given = parse(model, arguments, LIMITS, "tool")
    defaults = parse(model, {k: v for k, v in arguments.items() if v is not None}, LIMITS, "tool")
    assert given == defaults


def test_an_unknown_parameter_is_refused_even_when_null() -> None:
    with pytest.raises(FerrexError) as error:
        parse(RecallRequest, {"query": "x", "includ_stale": None}, LIMITS, "recall")
    assert error.value.code == "invalid_params" and "includ_stale" in error.value.message


def test_null_for_a_required_parameter_is_missing() -> None:
    with pytest.raises(FerrexError) as error:
        parse(RecallRequest, {"query": None}, LIMITS, "recall")
    assert error.value.code == "missing_field" and error.value.details["field"] == "query"


@pytest.mark.parametrize("value", [5.0, 1e1])
def test_an_integral_number_is_an_integer(value: float) -> None:
    assert parse(RecallRequest, {"query": "x", "limit": value}, LIMITS, "recall").limit == int(
        value
    )
    with pytest.raises(FerrexError) as error:
        parse(RecallRequest, {"query": "x", "limit": 5.5}, LIMITS, "recall")
    assert error.value.code == "invalid_params"
    # A float parameter stays a float.
    assert parse(StoreRequest, {"content": "x", "confidence": 1}, LIMITS, "store").confidence == 1


def test_a_limit_past_its_maximum_is_too_large_in_every_tool() -> None:
    with pytest.raises(FerrexError) as error:
        parse(ReflectRequest, {"limit": 10**6}, LIMITS, "reflect")
    assert error.value.code == "too_large"


def test_messages_name_the_field_once() -> None:
    with pytest.raises(FerrexError) as error:
        parse(StoreRequest, {"content": "x", "timestamp": "0001-01-01"}, LIMITS, "store")
    assert "timestamp: timestamp" not in error.value.message, error.value.message
    assert error.value.message.startswith("store: invalid 'timestamp': ")
