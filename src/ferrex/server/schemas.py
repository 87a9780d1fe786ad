"""Tool schemas: inputs made from the validating request models (``core/requests.py``),
outputs from the answer models (``server/answers.py``).

One source for the schema an agent is shown, the validation a call gets and its error codes.
pydantic's JSON Schema is cut to what a model needs to call the tool (it is in every agent's
context): no titles or defaults, optional parameters without their ``null`` alternative (null
is accepted as "not given" anyway), timestamps as plain strings (ISO-8601 dates are accepted as
well as date-times), nested models inlined.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

_DROP = {"title", "default", "format"}
IMPLEMENTATION_BOUND = 1_000_000


def input_schema(model: type[BaseModel], *, maxima: dict[str, int] | None = None) -> dict[str, Any]:
    """The agent-facing JSON Schema of ``model``; ``maxima``: per-parameter maximums known only
    from the settings (recall's ``limit``)."""
    raw = model.model_json_schema()
    definitions = raw.pop("$defs", {})
    schema = _simplify(raw, definitions)
    schema.pop("description", None)  # the model's docstring: the tool description says it
    for name, maximum in (maxima or {}).items():
        schema["properties"][name]["maximum"] = maximum
    return schema


def output_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The JSON Schema of a tool's answer model: as lean as an input schema, without
    descriptions; a field that may be left out is absent (never null), while a field declared
    nullable without a default (``last_accessed``) keeps its ``null``."""
    raw = model.model_json_schema(mode="serialization")
    definitions = raw.pop("$defs", {})
    schema: dict[str, Any] = _simplify(raw, definitions, output=True)
    return schema


def _simplify(
    node: Any, definitions: dict[str, Any], *, output: bool = False, required: bool = False
) -> Any:
    """``node`` cut down; ``output``: an answer's schema (``required``: the property is one
    an answer always holds, so a ``null`` alternative is a value it may hold)."""
    if isinstance(node, list):
        return [_simplify(item, definitions, output=output) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = definitions[node["$ref"].rsplit("/", 1)[-1]]
        merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        return _simplify(merged, definitions, output=output, required=required)
    options = node.get("anyOf")
    if isinstance(options, list) and not (output and required):
        kept = [o for o in options if o != {"type": "null"}]
        if len(kept) == 1:
            rest = {k: v for k, v in node.items() if k != "anyOf"}
            return _simplify({**kept[0], **rest}, definitions, output=output)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if _dropped(key, value, output):
            continue
        if key == "description":
            out[key] = value.strip()
        elif key == "properties":
            needed = set(node.get("required", ()))
            out[key] = {
                name: _simplify(v, definitions, output=output, required=name in needed)
                for name, v in value.items()
            }
        else:
            out[key] = _simplify(value, definitions, output=output)
    return out


def _dropped(key: str, value: Any, output: bool) -> bool:
    """Whether a schema keyword is left out of what agents are shown."""
    if key in _DROP:
        return True
    if key == "description":  # an answer's schema has none; an empty one says nothing
        return output or not (isinstance(value, str) and value.strip())
    if key == "additionalProperties":
        return value is not False  # the default (None: a nested model's, said once on the tool)
    # A sanity bound no agent meets (validation still refuses past it).
    return key == "maximum" and isinstance(value, int | float) and value >= IMPLEMENTATION_BOUND
