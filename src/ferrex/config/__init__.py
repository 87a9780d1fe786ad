"""Configuration: one pydantic model holding every setting with the spec's defaults.

Precedence: CLI flag > ``FERREX_*`` environment > ``ferrex.toml`` > defaults. Unknown keys in the
TOML file (or ``FERREX_*`` variables that name no setting) are reported as warnings, never
silently ignored. ``ferrex.toml.example`` at the repository root documents every key.
"""

from ferrex.config.loading import ConfigError, load_settings, model_path_problem
from ferrex.config.settings import Settings

__all__ = ["ConfigError", "Settings", "load_settings", "model_path_problem"]
