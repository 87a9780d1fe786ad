"""The hand-written MCP input schemas and the validating request models stay in step: every
parameter an agent is shown is accepted, and every parameter accepted is shown."""

from __future__ import annotations

import pytest

from ferrex.core.requests import (
    ForgetRequest,
    RecallRequest,
    ReflectRequest,
    StatsRequest,
    StoreRequest,
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
