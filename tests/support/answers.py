"""An answer as agents' clients check it: valid for the tool's output schema (generated from
its answer model, as tools/list declares it), and read back unchanged by that model."""

from __future__ import annotations

from typing import Any

import jsonschema

from ferrex import registry
from ferrex.server.tools import TOOLS

_SCHEMAS = {tool.name: tool.output_schema for tool in TOOLS}


def conforms(tool: str, answer: dict[str, Any]) -> dict[str, Any]:
    """``answer`` itself, once checked against ``tool``'s declared output schema and model."""
    jsonschema.validate(answer, _SCHEMAS[tool])
    model = registry.resolve(registry.BY_NAME[tool].answer or "")
    assert model.model_validate(answer).model_dump(mode="json", exclude_unset=True) == answer
    return answer
