"""The export file format (JSON lines) and its validation before an import writes anything.

An export file is input like any other: a hand-edited or corrupted file must not put a
memory in a namespace no tool can reach ("../../etc"), crash the import with a traceback, or
import half of itself. Every line is checked with the same rules the tools apply (namespace
and id patterns, ISO timestamps, enum values, ranges) before the first write.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal, NoReturn

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from ferrex.core import errors
from ferrex.core.clock import parse_timestamp
from ferrex.core.errors import FerrexError
from ferrex.core.requests import validate_memory_id, validate_namespace

EXPORT_FORMAT = "ferrex-export"
EXPORT_VERSION = 1


def _timestamp(value: str) -> str:
    parse_timestamp(value)
    return value


Timestamp = Annotated[str, AfterValidator(_timestamp)]
Namespace = Annotated[str, AfterValidator(validate_namespace)]
MemoryId = Annotated[str, AfterValidator(lambda v: validate_memory_id(v, "id"))]
Text = Annotated[str, Field(max_length=1_000_000)]


class _Record(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=False)


class HeaderModel(_Record):
    name: str | None = None
    # An integer; files exported by earlier builds carry it as a string ("384"): accepted.
    dimension: int | None = Field(default=None, ge=0)
    variant: str | None = None


class HeaderRecord(_Record):
    kind: Literal["header"]
    format: Literal["ferrex-export"]
    version: int = Field(ge=1, le=EXPORT_VERSION)
    model: HeaderModel | None = None


class AliasRecord(_Record):
    alias: Annotated[str, Field(min_length=1, max_length=1000)]
    method: Annotated[str, Field(min_length=1, max_length=32)]
    score: float = Field(ge=0.0, le=1.0)
    created_at: Timestamp


class CandidateRecord(_Record):
    name: Annotated[str, Field(min_length=1, max_length=1000)]
    score: float = Field(ge=-1.0, le=1.0)
    created_at: Timestamp


class EntityRecord(_Record):
    kind: Literal["entity"]
    id: int
    namespace: Namespace
    name: Annotated[str, Field(min_length=1, max_length=1000)]
    display_name: Annotated[str, Field(min_length=1, max_length=1000)]
    entity_type: str | None = None
    created_at: Timestamp
    updated_at: Timestamp
    aliases: list[AliasRecord] = []
    alias_candidates: list[CandidateRecord] = []


class MemoryRecord(_Record):
    kind: Literal["memory"]
    id: MemoryId
    namespace: Namespace
    type: Literal["episodic", "semantic", "procedural"]
    content: Text | None = None
    subject: Text | None = None
    predicate: Text | None = None
    predicate_canonical: Text | None = None
    object: Text | None = None
    subject_entity_id: int | None = None
    name: Text | None = None
    conditions: list[Text] | None = None
    steps: list[Text] | None = None
    version: int | None = Field(default=None, ge=1)
    confidence: float = Field(default=1.0, ge=0.0, le=1.0)
    source: Text | None = None
    context: dict[str, Any] | None = None
    entity_ids: list[int] = []
    created_at: Timestamp
    updated_at: Timestamp
    event_time: Timestamp
    t_valid: Timestamp | None = None
    t_invalid: Timestamp | None = None
    superseded_by: MemoryId | None = None
    last_accessed: Timestamp | None = None
    last_validated: Timestamp | None = None
    access_count: int = Field(default=0, ge=0)
    pinned: bool = False
    multi_valued: bool = False
    chunk_count: int = Field(default=1, ge=1, le=10_000)
    embed_model: str | None = None


class AuditRecord(_Record):
    kind: Literal["audit"]
    at: Timestamp
    namespace: Namespace
    action: Annotated[str, Field(min_length=1, max_length=64)]
    memory_id: str | None = None
    other_id: str | None = None
    detail: Any = None


_MODELS: dict[str, type[_Record]] = {
    "header": HeaderRecord,
    "entity": EntityRecord,
    "memory": MemoryRecord,
    "audit": AuditRecord,
}


def check_records(records: Sequence[Any]) -> None:
    """Raise one clear ``invalid_params`` error naming the first bad line; return when every
    line is a valid record and the first one is the header."""
    if not records:  # an empty file is not an export (every export starts with its header)
        raise FerrexError(
            errors.INVALID_PARAMS,
            "not a ferrex export file: the file is empty, the header line is missing; "
            "nothing was imported",
        )
    entities: set[int] = set()
    for number, record in enumerate(records, start=1):
        if not isinstance(record, dict):
            _bad(number, "not a JSON object")
        kind = record.get("kind")
        if number == 1 and kind != "header":
            raise FerrexError(
                errors.INVALID_PARAMS,
                "not a ferrex export file: the header line is missing; nothing was imported",
            )
        model = _MODELS.get(kind) if isinstance(kind, str) else None
        if model is None:
            _bad(number, "unknown record kind (expected header, entity, memory or audit)")
        try:
            parsed = model.model_validate(record)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"]) or "record"
            if kind == "header":
                raise FerrexError(
                    errors.INVALID_PARAMS,
                    "not a ferrex export file (or from a newer ferrex); nothing was imported",
                ) from None
            _bad(number, f"{where}: {first['msg']}")
        if isinstance(parsed, EntityRecord):
            entities.add(parsed.id)
        elif isinstance(parsed, MemoryRecord):
            unknown = [e for e in parsed.entity_ids if e not in entities]
            if parsed.subject_entity_id is not None and parsed.subject_entity_id not in entities:
                unknown.append(parsed.subject_entity_id)
            if unknown:
                _bad(number, f"entity {unknown[0]} is not an entity record earlier in the file")


def _bad(number: int, reason: str) -> NoReturn:
    raise FerrexError(
        errors.INVALID_PARAMS,
        f"line {number} of the export file is not valid ({reason[:300]}); nothing was imported",
        line=number,
    )
