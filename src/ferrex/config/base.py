"""What every settings section shares: its pydantic base, and the named values settings take."""

from __future__ import annotations

from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
)

ModelTier = Literal["small", "mid", "best", "best-large", "multilingual"]
RerankerTier = Literal[
    "default", "multilingual", "v2-m3", "v2-m3-int8", "turbo", "tiny", "ms-marco"
]
LogLevel = Literal["debug", "info", "warning", "error"]
MemoryTypeName = Literal["episodic", "semantic", "procedural"]

NAMESPACE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"


class Section(BaseModel):
    """A settings section: unknown keys ignored here (reported by the loader), assignments
    validated."""

    model_config = ConfigDict(extra="ignore", validate_assignment=True)
