"""Loading settings: defaults < ``ferrex.toml`` < ``FERREX_*`` environment < CLI flags; unknown
keys reported as warnings, never silently ignored."""

from __future__ import annotations

import os
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    ValidationError,
)

from ferrex.config.settings import Settings

# Environment variables that map to top-level keys (besides the generic FERREX_<KEY> form).
ENV_ALIASES: dict[str, str] = {
    "FERREX_HOME": "data_dir",
    "FERREX_LOG": "log_level",
    "QDRANT_API_KEY": "qdrant_api_key",
}
_BOOL_TRUE = {"1", "true", "yes", "on"}
_BOOL_FALSE = {"0", "false", "no", "off"}


class ConfigError(Exception):
    """A configuration problem the user must fix (message says how)."""


def _fields_of(model: type[BaseModel]) -> dict[str, Any]:
    return dict(model.model_fields)


def unknown_keys(
    data: Mapping[str, Any], model: type[BaseModel], prefix: str = ""
) -> Iterator[str]:
    """Yield dotted paths of keys in ``data`` that the settings model does not know."""
    fields = _fields_of(model)
    for key, value in data.items():
        path = f"{prefix}{key}"
        if key not in fields:
            yield path
            continue
        annotation = fields[key].annotation
        if _is_dict_of_models(annotation) and isinstance(value, Mapping):
            # Checked first: a dict's value model (e.g. staleness.namespaces."ci-infra") is
            # also among its type arguments, but the dict's keys are free-form names.
            inner = _dict_value_model(annotation)
            for name, item in value.items():
                if inner is not None and isinstance(item, Mapping):
                    yield from unknown_keys(item, inner, prefix=f"{path}.{name}.")
            continue
        sub = _submodel(annotation)
        if sub is not None and isinstance(value, Mapping):
            yield from unknown_keys(value, sub, prefix=f"{path}.")


def _submodel(annotation: Any) -> type[BaseModel] | None:
    candidates = [annotation, *getattr(annotation, "__args__", ())]
    for candidate in candidates:
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def _is_dict_of_models(annotation: Any) -> bool:
    return (
        getattr(annotation, "__origin__", None) is dict
        and _dict_value_model(annotation) is not None
    )


def _dict_value_model(annotation: Any) -> type[BaseModel] | None:
    args: tuple[Any, ...] = getattr(annotation, "__args__", ())
    if len(args) == 2:
        return _submodel(args[1])
    return None


def deep_merge(base: dict[str, Any], overlay: Mapping[str, Any]) -> dict[str, Any]:
    """Merge ``overlay`` into a copy of ``base`` (nested dicts merge, other values replace)."""
    out = dict(base)
    for key, value in overlay.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(dict(out[key]), value)
        else:
            out[key] = value
    return out


def read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError as exc:
        raise ConfigError(f"config file not found: {path}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from exc


def env_overrides(environ: Mapping[str, str]) -> tuple[dict[str, Any], list[str]]:
    """Settings from ``FERREX_*`` variables (``FERREX_MODEL_TIER``, ``FERREX_RETRIEVAL__RRF_K``)."""
    data: dict[str, Any] = {}
    unknown: list[str] = []
    top = _fields_of(Settings)
    for name, raw in environ.items():
        if name in ENV_ALIASES:
            data[ENV_ALIASES[name]] = raw
            continue
        if not name.startswith("FERREX_") or name.startswith("FERREX_TEST_"):
            continue
        path = name[len("FERREX_") :].lower().split("__")
        if path[0] not in top or _names_unknown_key(path):
            unknown.append(name)
            continue
        cursor = data
        for part in path[:-1]:
            cursor = cursor.setdefault(part, {})
        cursor[path[-1]] = _coerce_env(raw)
    return data, unknown


def _names_unknown_key(path: list[str]) -> bool:
    """True when a nested variable (``FERREX_RETRIEVAL__BOGUS``) names no setting."""
    probe: dict[str, Any] = {}
    cursor = probe
    for part in path[:-1]:
        cursor = cursor.setdefault(part, {})
    cursor[path[-1]] = None
    return any(True for _ in unknown_keys(probe, Settings))


def _coerce_env(raw: str) -> Any:
    lowered = raw.strip().lower()
    if lowered in _BOOL_TRUE:
        return True
    if lowered in _BOOL_FALSE:
        return False
    if raw.strip().startswith("["):
        try:
            import json

            return json.loads(raw)
        except ValueError:
            return raw
    return raw


def load_settings(
    cli: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    config_path: Path | None = None,
    staleness_path: Path | None = None,
) -> tuple[Settings, list[str]]:
    """Build the settings with precedence CLI > env > file > defaults.

    Returns the settings and a list of human-readable warnings (unknown keys...).
    """
    environ = os.environ if environ is None else environ
    cli = {k: v for k, v in (cli or {}).items() if v is not None}
    warnings: list[str] = []

    env_data, unknown_env = env_overrides(environ)
    warnings.extend(f"unknown environment variable {name} (ignored)" for name in unknown_env)

    data_dir = cli.get("data_dir") or env_data.get("data_dir")
    explicit_config = config_path is not None
    if config_path is None:
        base_dir = Path(str(data_dir)).expanduser() if data_dir else Path("~/.ferrex").expanduser()
        config_path = base_dir / "ferrex.toml"
    file_data: dict[str, Any] = {}
    if explicit_config or config_path.exists():
        file_data = read_toml(config_path)
        if not explicit_config:
            file_data.pop("data_dir", None)
    warnings.extend(
        f"unknown key '{key}' in {config_path} (ignored)"
        for key in unknown_keys(file_data, Settings)
    )
    if staleness_path is not None:
        extra = read_toml(staleness_path)
        staleness_only = extra.get("staleness", extra)
        if "staleness" in extra:
            warnings.extend(
                f"unknown key '{key}' in {staleness_path} (ignored: a --staleness-config file "
                "holds only [staleness])"
                for key in extra
                if key != "staleness"
            )
        warnings.extend(
            f"unknown key '{key}' in {staleness_path} (ignored)"
            for key in unknown_keys({"staleness": staleness_only}, Settings)
        )
        file_data = deep_merge(file_data, {"staleness": staleness_only})

    merged = deep_merge(deep_merge(file_data, env_data), _nest(cli))
    try:
        settings = Settings.model_validate(merged)
    except ValidationError as exc:
        raise ConfigError(_describe_validation(exc)) from exc
    if "model_tier" in cli:
        settings._tier_source = "--model-tier"
    elif "model_tier" in env_data:
        settings._tier_source = "FERREX_MODEL_TIER"
    elif "model_tier" in file_data:
        settings._tier_source = "the model_tier key of ferrex.toml"
        settings._tier_file = str(config_path)
    return settings, warnings


def model_path_problem(path: Path | None) -> str | None:
    """What is wrong with ``--model-path`` (``model_path``), or None when it looks usable.

    Checked at start-up so a typo fails fast with one line instead of an unusable server. The
    message names the directory: it is for the operator (stderr), never sent to an agent.
    """
    if path is None:
        return None
    hint = (
        "point it at a directory holding model.onnx and the tokenizer files (tokenizer.json, "
        "config.json, special_tokens_map.json, tokenizer_config.json), or drop the flag"
    )
    if not path.exists():
        return f"--model-path {path} does not exist; {hint}"
    if not path.is_dir():
        return f"--model-path {path} is not a directory; {hint}"
    try:
        has_onnx = any(path.glob("*.onnx")) or any(path.glob("*/*.onnx"))
        has_tokenizer = (path / "tokenizer.json").is_file()
    except OSError as exc:
        return f"--model-path {path} cannot be read ({exc.strerror or exc}); {hint}"
    if not has_onnx:
        return f"no ONNX model in --model-path {path}; {hint}"
    if not has_tokenizer:
        return f"no tokenizer.json in --model-path {path}; {hint}"
    return None


def _nest(flat: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in flat.items():
        parts = key.split(".")
        cursor = out
        for part in parts[:-1]:
            cursor = cursor.setdefault(part, {})
        cursor[parts[-1]] = value
    return out


def _describe_validation(exc: ValidationError) -> str:
    lines = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error["loc"])
        lines.append(f"invalid setting '{where}': {error['msg']}")
    return "; ".join(lines)
