"""Validation of every tool parameter (types, ranges, lengths, enums, timestamps, ids, namespaces).

Validation happens before anything is embedded or written; a rejected call changes nothing.
Errors name the parameter and say what to send instead.
"""

from __future__ import annotations

import json
import math
import re
from datetime import datetime
from types import UnionType
from typing import Annotated, Any, Literal, NoReturn, TypeVar, Union, get_args, get_origin

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from ferrex.config.base import NAMESPACE_PATTERN
from ferrex.config.settings import LimitsConfig
from ferrex.core import errors
from ferrex.core.clock import parse_timestamp
from ferrex.core.errors import FerrexError
from ferrex.core.ids import MEMORY_ID_PATTERN
from ferrex.core.memory import MEMORY_TYPES

_NAMESPACE = re.compile(NAMESPACE_PATTERN)
MAX_JSON_DEPTH = 8
MAX_VERSION = 1_000_000  # procedure versions: far beyond any real history, within SQLite ints

TypeName = Literal["episodic", "semantic", "procedural"]


def fail(code: str, message: str) -> NoReturn:
    """Refuse a value with a stable error ``code`` (``core/errors.py``): the code travels with
    the validation error to the agent, never guessed from the message."""
    raise PydanticCustomError(code, message)


def _limits(info: ValidationInfo) -> LimitsConfig:
    context = info.context or {}
    limits = context.get("limits")
    return limits if isinstance(limits, LimitsConfig) else LimitsConfig()


_INVALID = errors.INVALID_PARAMS
_TOO_LARGE = errors.TOO_LARGE


def _text(value: Any, what: str, max_chars: int, *, allow_blank: bool = False) -> str:
    if not isinstance(value, str):
        fail(_INVALID, f"{what} must be a string")
    if "\x00" in value:
        fail(_INVALID, f"{what} must not contain NUL characters")
    if not allow_blank and not value.strip():
        fail(_INVALID, f"{what} must not be empty")
    if len(value) > max_chars:
        fail(_TOO_LARGE, f"{what} is too long ({len(value)} characters, at most {max_chars})")
    return value


def _string_list(value: Any, what: str, max_items: int, max_chars: int) -> list[str]:
    if not isinstance(value, list):
        fail(_INVALID, f"{what} must be a list of strings")
    if len(value) > max_items:
        fail(_TOO_LARGE, f"{what} has {len(value)} items, at most {max_items}")
    return [_text(item, f"each item of {what}", max_chars) for item in value]


def _timestamp(value: Any, what: str) -> datetime:
    if not isinstance(value, str):
        fail(_INVALID, f"{what} must be an ISO-8601 string such as 2026-04-03T10:30:00Z")
    try:
        return parse_timestamp(value)
    except ValueError as exc:
        fail(_INVALID, f"{what}: {exc}")
    except OverflowError:  # e.g. 0001-01-01T00:00:00+01:00 is before datetime.min in UTC
        fail(_INVALID, f"{what}: timestamp year must be between 1970 and 9998")


def _namespace(value: Any) -> str:
    # fullmatch: with match(), "$" would also accept a trailing newline ("team\n").
    if not isinstance(value, str) or not _NAMESPACE.fullmatch(value):
        fail(
            errors.INVALID_NAMESPACE,
            "namespace must be 1-64 characters: letters, digits, '.', '_' or '-', starting with a "
            "letter or digit",
        )
    return value


def _memory_id(value: Any, what: str) -> str:
    if not isinstance(value, str) or not MEMORY_ID_PATTERN.fullmatch(value):
        fail(_INVALID, f"{what} must be a memory id as returned by store or recall (e.g. mem_…)")
    return value


def validate_namespace(value: Any) -> str:
    """The tools' namespace rule (public: export files are checked with it too)."""
    return _namespace(value)


def validate_memory_id(value: Any, what: str) -> str:
    """The tools' memory-id rule (public: export files are checked with it too)."""
    return _memory_id(value, what)


def _json_depth(value: Any, depth: int = 0) -> int:
    if isinstance(value, dict):
        return max([depth + 1, *(_json_depth(v, depth + 1) for v in value.values())])
    if isinstance(value, list):
        return max([depth + 1, *(_json_depth(v, depth + 1) for v in value)])
    return depth


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


# Parameter descriptions are the agent's: every tools/list carries them (server/schemas.py makes
# the input schemas from these models), so they stay short.
_NS = Field(default=None)  # the server's namespace when not given
_ISO = "ISO-8601"


def _ns() -> Any:
    return _NS


class StoreRequest(_Request):
    type: TypeName | None = Field(
        default=None,
        description="Omit to auto-detect from the fields given",
    )
    content: str | None = Field(
        default=None,
        description="Self-contained: what | when | where | who | why",
    )
    subject: str | None = Field(default=None, description="Fact: the entity")
    predicate: str | None = Field(default=None, description="Fact: relation or property")
    object: str | None = Field(default=None, description="Fact: the value")
    confidence: float = Field(default=1.0, description="0.0-1.0, default 1.0")
    source: str | None = Field(
        default=None, description="Provenance; memory:<id> validates that memory"
    )
    entities: list[str] | None = Field(default=None, description="Entity names, for filtering")
    context: dict[str, Any] | None = Field(default=None, description="Task, project, outcome...")
    supersedes: str | None = Field(default=None, description="Memory id this replaces")
    namespace: str | None = _ns()
    timestamp: datetime | None = Field(default=None, description=_ISO + " event time; default now")
    t_valid: datetime | None = Field(
        default=None, description=_ISO + ": fact true since; default now"
    )
    t_invalid: datetime | None = Field(
        default=None, description=_ISO + ": fact true until (history)"
    )
    name: str | None = Field(default=None, description="Procedure name (a known one: new version)")
    conditions: list[str] | None = Field(default=None, description="When the procedure applies")
    steps: list[str] | None = Field(default=None, description="Procedure steps")
    multi_valued: StrictBool = Field(default=False, description="Several values hold at once")
    pinned: StrictBool = Field(default=False, description="Never decay or evict")
    rollback_to: StrictInt | None = Field(
        default=None, ge=1, le=MAX_VERSION, description="With name: restore this version"
    )
    version: StrictInt | None = Field(
        default=None,
        ge=1,
        le=MAX_VERSION,
        description="Informational (auto-numbered)",
    )

    @field_validator("type", mode="before")
    @classmethod
    def _type(cls, value: Any) -> Any:
        if value is None:
            return None
        if not isinstance(value, str) or value not in MEMORY_TYPES:
            fail(
                errors.UNKNOWN_TYPE,
                "unknown memory type; use one of: episodic, semantic, procedural",
            )
        return value

    @field_validator("content", mode="before")
    @classmethod
    def _content(cls, value: Any, info: ValidationInfo) -> Any:
        return None if value is None else _text(value, "content", _limits(info).max_content_chars)

    @field_validator("subject", "predicate", "object", "source", "name", mode="before")
    @classmethod
    def _short_text(cls, value: Any, info: ValidationInfo) -> Any:
        if value is None:
            return None
        return _text(value, str(info.field_name), _limits(info).max_field_chars).strip()

    @field_validator("confidence", mode="before")
    @classmethod
    def _confidence(cls, value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, int | float):
            fail(_INVALID, "confidence must be a number between 0.0 and 1.0")
        if not math.isfinite(float(value)) or not 0.0 <= float(value) <= 1.0:
            fail(_INVALID, "confidence must be between 0.0 and 1.0")
        return float(value)

    @field_validator("entities", mode="before")
    @classmethod
    def _entities(cls, value: Any, info: ValidationInfo) -> Any:
        if value is None:
            return None
        return _string_list(value, "entities", _limits(info).max_entities, 200)

    @field_validator("conditions", mode="before")
    @classmethod
    def _conditions(cls, value: Any, info: ValidationInfo) -> Any:
        if value is None:
            return None
        return _string_list(value, "conditions", 50, _limits(info).max_field_chars)

    @field_validator("steps", mode="before")
    @classmethod
    def _steps(cls, value: Any, info: ValidationInfo) -> Any:
        if value is None:
            return None
        limits = _limits(info)
        return _string_list(value, "steps", limits.max_steps, limits.max_field_chars)

    @field_validator("context", mode="before")
    @classmethod
    def _context(cls, value: Any, info: ValidationInfo) -> Any:
        if value is None:
            return None
        if not isinstance(value, dict):
            fail(_INVALID, 'context must be an object, e.g. {"task": "bug-fix"}')
        try:
            encoded = json.dumps(value, allow_nan=False)
        except (TypeError, ValueError):
            fail(_INVALID, "context must contain only JSON values")
        if len(encoded.encode()) > _limits(info).max_context_bytes:
            fail(
                _TOO_LARGE,
                f"context is too large (at most {_limits(info).max_context_bytes} bytes)",
            )
        if _json_depth(value) > MAX_JSON_DEPTH:
            fail(_TOO_LARGE, f"context is nested too deeply (at most {MAX_JSON_DEPTH} levels)")
        return value

    @field_validator("supersedes", mode="before")
    @classmethod
    def _supersedes(cls, value: Any) -> Any:
        return None if value is None else _memory_id(value, "supersedes")

    @field_validator("namespace", mode="before")
    @classmethod
    def _ns(cls, value: Any) -> Any:
        return None if value is None else _namespace(value)

    @field_validator("timestamp", "t_valid", "t_invalid", mode="before")
    @classmethod
    def _when(cls, value: Any, info: ValidationInfo) -> Any:
        return None if value is None else _timestamp(value, str(info.field_name))

    @model_validator(mode="after")
    def _procedure_size(self, info: ValidationInfo) -> StoreRequest:
        """A procedure's steps and conditions together are bounded like content (they are
        embedded too): refused here, before anything is embedded."""
        limit = _limits(info).max_content_chars
        total = sum(len(s) for s in (*(self.steps or ()), *(self.conditions or ())))
        if total > limit:
            fail(
                _TOO_LARGE,
                f"steps and conditions are too long together ({total} characters, at most "
                f"{limit}); split the procedure",
            )
        return self


class TimeRange(_Request):
    model_config = ConfigDict(json_schema_extra={"additionalProperties": None})

    after: datetime | None = None
    before: datetime | None = None

    @field_validator("after", "before", mode="before")
    @classmethod
    def _when(cls, value: Any, info: ValidationInfo) -> Any:
        return None if value is None else _timestamp(value, f"time_range.{info.field_name}")

    @model_validator(mode="after")
    def _ordered(self) -> TimeRange:
        if self.after and self.before and self.after > self.before:
            fail(_INVALID, "time_range.after must not be later than time_range.before")
        return self


class RecallRequest(_Request):
    query: str = Field(description="What to search for")
    types: list[TypeName] | None = None
    limit: StrictInt | None = Field(default=None, ge=1, description="Max results, default 5")
    time_range: TimeRange | None = Field(
        default=None, description="{after, before}: ISO-8601 bounds"
    )
    entities: list[str] | None = Field(default=None, description="Involving these entities")
    include_stale: StrictBool = Field(default=False, description="Include stale")
    include_invalidated: StrictBool = Field(default=False, description="Include past facts")
    namespace: str | None = _ns()
    as_of: datetime | None = Field(default=None, description=_ISO + ": what was true then")
    explain: StrictBool = Field(default=False, description="Ranking details")
    max_tokens: StrictInt | None = Field(
        default=None, ge=1, le=1_000_000, description="Token budget"
    )
    version: StrictInt | None = Field(
        default=None, ge=1, le=MAX_VERSION, description="Procedure version"
    )

    @field_validator("limit")
    @classmethod
    def _limit(cls, value: int | None, info: ValidationInfo) -> int | None:
        maximum = (info.context or {}).get("max_limit")
        if value is not None and isinstance(maximum, int) and value > maximum:
            fail(_TOO_LARGE, f"limit is at most {maximum} (got {value})")
        return value

    @field_validator("query", mode="before")
    @classmethod
    def _query(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, str) and not value.strip():
            fail(errors.EMPTY_QUERY, "query must not be empty: say what to search for")
        return _text(value, "query", _limits(info).max_query_chars)

    @field_validator("types", mode="before")
    @classmethod
    def _types(cls, value: Any) -> Any:
        if value is None:
            return None
        if not isinstance(value, list) or not value:
            fail(_INVALID, "types must be a non-empty list of: episodic, semantic, procedural")
        for item in value:
            if item not in MEMORY_TYPES:
                fail(
                    errors.UNKNOWN_TYPE,
                    f"unknown memory type {str(item)[:40]!r}; use episodic, semantic or procedural",
                )
        return sorted(set(value))

    @field_validator("entities", mode="before")
    @classmethod
    def _entities(cls, value: Any, info: ValidationInfo) -> Any:
        if value is None:
            return None
        return _string_list(value, "entities", _limits(info).max_entities, 200)

    @field_validator("namespace", mode="before")
    @classmethod
    def _ns(cls, value: Any) -> Any:
        return None if value is None else _namespace(value)

    @field_validator("as_of", mode="before")
    @classmethod
    def _as_of(cls, value: Any) -> Any:
        return None if value is None else _timestamp(value, "as_of")

    @field_validator("time_range", mode="before")
    @classmethod
    def _range(cls, value: Any) -> Any:
        if value is not None and not isinstance(value, dict):
            fail(
                _INVALID,
                'time_range must be an object like {"after": "2026-01-01", "before": "2026-02-01"}',
            )
        return value


class ForgetRequest(_Request):
    ids: list[str] = Field(description="Memory ids (from recall)")
    cascade: StrictBool = Field(default=False, description="Also remove entities only these named")
    namespace: str | None = _ns()

    @field_validator("ids", mode="before")
    @classmethod
    def _ids(cls, value: Any, info: ValidationInfo) -> Any:
        if not isinstance(value, list) or not value:
            fail(_INVALID, "ids must be a non-empty list of memory ids (find them with recall)")
        if len(value) > _limits(info).max_ids:
            fail(_TOO_LARGE, f"ids has {len(value)} items, at most {_limits(info).max_ids}")
        return [_memory_id(item, "each id") for item in value]

    @field_validator("namespace", mode="before")
    @classmethod
    def _ns(cls, value: Any) -> Any:
        return None if value is None else _namespace(value)


class ReflectRequest(_Request):
    namespace: str | None = _ns()
    limit: StrictInt = Field(default=10, ge=1, le=200, description="Max per category")
    include_contradictions: StrictBool = True
    include_stale: StrictBool = True
    confirm_ids: list[str] | None = Field(default=None, description="Reviewed: still accurate")
    pin_ids: list[str] | None = None
    unpin_ids: list[str] | None = None

    @field_validator("namespace", mode="before")
    @classmethod
    def _ns(cls, value: Any) -> Any:
        return None if value is None else _namespace(value)

    @field_validator("confirm_ids", "pin_ids", "unpin_ids", mode="before")
    @classmethod
    def _ids(cls, value: Any, info: ValidationInfo) -> Any:
        if value is None:
            return None
        if not isinstance(value, list):
            fail(_INVALID, f"{info.field_name} must be a list of memory ids")
        if len(value) > _limits(info).max_ids:
            fail(
                _TOO_LARGE,
                f"{info.field_name} has {len(value)} items, at most {_limits(info).max_ids}",
            )
        return [_memory_id(item, f"each id in {info.field_name}") for item in value]


class StatsRequest(_Request):
    namespace: str | None = _ns()
    detailed: StrictBool = Field(default=False, description="Full diagnostics")

    @field_validator("namespace", mode="before")
    @classmethod
    def _ns(cls, value: Any) -> Any:
        return None if value is None else _namespace(value)


R = TypeVar("R", bound=_Request)


def parse(
    model: type[R],
    arguments: Any,
    limits: LimitsConfig,
    tool: str,
    *,
    max_limit: int | None = None,
) -> R:
    """Validate tool arguments; raise FerrexError with a stable code and an actionable message.

    ``max_limit``: recall's configured ``retrieval.max_limit``."""
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise FerrexError(errors.INVALID_PARAMS, f"{tool}: arguments must be a JSON object")
    bad = invalid_text_field(arguments)
    if bad is not None:
        raise invalid_text_error(tool, bad)
    try:
        return model.model_validate(
            _lenient(model, arguments), context={"limits": limits, "max_limit": max_limit}
        )
    except ValidationError as exc:
        raise _to_error(exc, model, tool) from None


_SURROGATE = re.compile("[\ud800-\udfff]")


def invalid_text_field(value: Any, path: str = "") -> str | None:
    """The first parameter (``content``, ``entities[1]``, ``context.k``) holding text that is
    not valid Unicode: a lone surrogate, which is how invalid UTF-8 bytes and escapes such as
    ``\\udc00`` arrive. None when every string (keys included) is valid."""
    if isinstance(value, str):
        return (path or "arguments") if _SURROGATE.search(value) else None
    if isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            if isinstance(key, str) and _SURROGATE.search(key):
                return path or "arguments"
            found = invalid_text_field(item, where)
            if found is not None:
                return found
    elif isinstance(value, list):
        for position, item in enumerate(value):
            found = invalid_text_field(item, f"{path}[{position}]")
            if found is not None:
                return found
    return None


def invalid_text_error(tool: str, field: str) -> FerrexError:
    shown = _SURROGATE.sub("?", field)[:60]
    return FerrexError(
        errors.INVALID_PARAMS,
        f"{tool}: '{shown}' is not valid UTF-8 text (invalid bytes or a lone surrogate such as "
        "\\udc00); send the text as valid UTF-8. Nothing was stored or changed.",
        field=shown,
    )


def _lenient(model: type[_Request], arguments: dict[str, Any]) -> dict[str, Any]:
    """JSON leniencies every parameter gets alike: ``null`` means "not given" (the default, or
    "missing" for a required parameter), and an integral number (``5.0``, ``1e2``) is an integer
    where one is expected, as JSON Schema's ``integer`` allows."""
    out: dict[str, Any] = {}
    for key, value in arguments.items():
        field = model.model_fields.get(key) if isinstance(key, str) else None
        if value is None and field is not None:
            continue  # an unknown parameter stays, null or not, and is refused by name
        if (
            field is not None
            and isinstance(value, float)
            and value.is_integer()
            and _expects_int(field.annotation)
        ):
            value = int(value)
        out[key] = value
    return out


def _expects_int(annotation: Any) -> bool:
    """Whether a field's type is an integer (possibly optional or annotated), not a float."""
    bases: set[Any] = set()

    def collect(kind: Any) -> None:
        origin = get_origin(kind)
        if origin is Annotated:
            collect(get_args(kind)[0])
        elif origin in (Union, UnionType):
            for arg in get_args(kind):
                collect(arg)
        else:
            bases.add(kind)

    collect(annotation)
    return int in bases and float not in bases


# Codes a validator gives with ``fail`` (the error's ``type``), and the codes of pydantic's own
# checks (type, range, enum) by their ``type``.
_FERREX_CODES = frozenset(
    {
        errors.INVALID_PARAMS,
        errors.MISSING_FIELD,
        errors.UNKNOWN_TYPE,
        errors.EMPTY_QUERY,
        errors.TOO_LARGE,
        errors.INVALID_NAMESPACE,
    }
)
_WRONG_TYPE = frozenset(
    {"string_type", "int_type", "bool_type", "float_type", "list_type", "dict_type", "model_type"}
)
_OUT_OF_RANGE = frozenset({"greater_than_equal", "less_than_equal", "greater_than", "less_than"})


def _to_error(exc: ValidationError, model: type[_Request], tool: str) -> FerrexError:
    first = exc.errors(include_url=False)[0]
    location = ".".join(str(part) for part in first["loc"]) or "arguments"
    kind = first["type"]
    message = str(first.get("msg", "invalid value"))
    if kind == "missing":
        return FerrexError(
            errors.MISSING_FIELD, f"{tool}: missing required parameter '{location}'", field=location
        )
    if kind == "extra_forbidden":
        allowed = ", ".join(sorted(model.model_fields))
        return FerrexError(
            errors.INVALID_PARAMS,
            f"{tool}: unknown parameter '{location[:60]}'; valid parameters: {allowed}",
            field=location[:60],
        )
    message = message.removeprefix(f"{location}: ")
    code = errors.INVALID_PARAMS
    if kind in _FERREX_CODES:
        code = kind
    elif kind == "literal_error":
        code = errors.UNKNOWN_TYPE
    elif kind in _WRONG_TYPE:
        message = f"wrong type ({message.lower()})"
    elif kind in _OUT_OF_RANGE:
        if location == "limit" and kind in {"less_than_equal", "less_than"}:
            code = errors.TOO_LARGE
        message = f"out of range ({message.lower()})"
    return FerrexError(code, f"{tool}: invalid '{location}': {message}", field=location)
