"""Tool input schemas made from the validating request models (``core/requests.py``).

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


def _simplify(node: Any, definitions: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_simplify(item, definitions) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = definitions[node["$ref"].rsplit("/", 1)[-1]]
        merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        return _simplify(merged, definitions)
    options = node.get("anyOf")
    if isinstance(options, list):
        kept = [o for o in options if o != {"type": "null"}]
        if len(kept) == 1:
            rest = {k: v for k, v in node.items() if k != "anyOf"}
            return _simplify({**kept[0], **rest}, definitions)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP:
            continue
        if key == "description" and isinstance(value, str):
            value = value.strip()
            if not value:
                continue
        if key == "properties":
            out[key] = {name: _simplify(v, definitions) for name, v in value.items()}
        elif key == "additionalProperties" and value is not False:
            continue  # the default (None: a nested model's, said once on the tool's schema)
        elif key == "maximum" and isinstance(value, int | float) and value >= IMPLEMENTATION_BOUND:
            continue  # a sanity bound no agent meets (validation still refuses past it)
        else:
            out[key] = _simplify(value, definitions)
    return out
