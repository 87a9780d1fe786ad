"""Configuration: precedence CLI > env > file > defaults, validation, unknown keys, the example."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from tests.support.harness import ferrex_command
from tests.support.paths import ROOT

from ferrex.bootstrap import ensure_data_dir
from ferrex.config import ConfigError, Settings, load_settings


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_are_the_spec_values() -> None:
    settings, warnings = load_settings(cli={}, environ={}, config_path=None)
    assert warnings == [] or all("unknown" not in w for w in warnings)
    assert settings.model_tier == "best" and settings.reranker_tier == "default"
    assert settings.retrieval.prefetch_limit == 30 and settings.retrieval.rrf_k == 60
    assert settings.retrieval.default_limit == 5 and settings.retrieval.rerank_top_n == 20
    assert settings.dedup.threshold == 0.95
    assert (
        settings.entities.fuzzy_threshold == 0.85 and settings.entities.embedding_threshold == 0.92
    )
    assert settings.predicates.fuzzy_threshold == 0.85
    thresholds = settings.staleness.defaults
    assert (thresholds.episodic.fresh, thresholds.episodic.stale) == (30, 90)  # type: ignore[union-attr]
    assert (thresholds.semantic.fresh, thresholds.semantic.stale) == (90, 180)  # type: ignore[union-attr]
    assert (thresholds.procedural.fresh, thresholds.procedural.stale) == (180, 365)  # type: ignore[union-attr]
    assert settings.lifecycle.superseded_retention_days == 180
    assert (
        settings.recency.episodic.amplitude == 0.3
        and settings.recency.episodic.half_life_days == 30
    )


def test_precedence_cli_over_env_over_file_over_defaults(tmp_path: Path) -> None:
    config = _write(
        tmp_path / "ferrex.toml",
        'namespace = "from-file"\nmodel_tier = "mid"\n'
        'log_level = "error"\n[retrieval]\nrrf_k = 10\nprefetch_limit = 40\n',
    )
    env = {
        "FERREX_NAMESPACE": "from-env",
        "FERREX_MODEL_TIER": "small",
        "FERREX_RETRIEVAL__RRF_K": "20",
    }
    settings, _ = load_settings(cli={"namespace": "from-cli"}, environ=env, config_path=config)
    assert settings.namespace == "from-cli"  # CLI beats env and file
    assert settings.model_tier == "small"  # env beats file
    assert settings.retrieval.rrf_k == 20  # env (nested) beats file
    assert settings.retrieval.prefetch_limit == 40  # file beats default
    assert settings.log_level == "error"
    assert settings.retrieval.default_limit == 5  # default


def test_default_config_path_is_in_the_data_dir(tmp_path: Path) -> None:
    _write(tmp_path / "ferrex.toml", 'namespace = "team"\n')
    settings, _ = load_settings(cli={"data_dir": str(tmp_path)}, environ={})
    assert settings.namespace == "team"
    settings, _ = load_settings(cli={}, environ={"FERREX_HOME": str(tmp_path)})
    assert settings.namespace == "team" and settings.data_dir == tmp_path


def test_unknown_keys_warn(tmp_path: Path) -> None:
    config = _write(
        tmp_path / "c.toml", 'namespce = "typo"\n[retrieval]\nrrf = 3\n[nonsense]\nx = 1\n'
    )
    settings, warnings = load_settings(
        cli={}, environ={"FERREX_MODEL_TEIR": "x"}, config_path=config
    )
    text = "\n".join(warnings)
    assert "namespce" in text and "retrieval.rrf" in text and "nonsense" in text
    assert "FERREX_MODEL_TEIR" in text
    assert settings.namespace == "default"


def test_unknown_nested_environment_keys_warn_like_top_level_ones() -> None:
    settings, warnings = load_settings(
        cli={},
        environ={
            "FERREX_BOGUS": "1",
            "FERREX_RETRIEVAL__BOGUS": "1",
            "FERREX_STALENESS__DEFAULTS__EPISODIC__FRESHNESS": "3",
            "FERREX_RETRIEVAL__RRF_K": "7",
            "FERREX_STALENESS__NAMESPACES__CI__EPISODIC__FRESH": "1",
            "FERREX_STALENESS__NAMESPACES__CI__EPISODIC__AGING": "2",
            "FERREX_STALENESS__NAMESPACES__CI__EPISODIC__STALE": "3",
        },
    )
    assert sorted(warnings) == [
        f"unknown environment variable {name} (ignored)"
        for name in (
            "FERREX_BOGUS",
            "FERREX_RETRIEVAL__BOGUS",
            "FERREX_STALENESS__DEFAULTS__EPISODIC__FRESHNESS",
        )
    ]
    assert settings.retrieval.rrf_k == 7
    assert settings.staleness.thresholds("ci", "episodic").stale == 3


def test_unknown_staleness_keys_name_the_staleness_file(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"  # no ferrex.toml there
    staleness = _write(
        tmp_path / "staleness.toml",
        "[staleness.defaults]\nepisodc = { fresh = 1, aging = 2, stale = 3 }\n"
        "[retrieval]\nrrf_k = 3\n",
    )
    _, warnings = load_settings(
        cli={"data_dir": str(data_dir)}, environ={}, staleness_path=staleness
    )
    assert len(warnings) == 2, warnings
    assert all(str(staleness) in w for w in warnings), warnings
    assert not any("ferrex.toml" in w for w in warnings), warnings
    assert any("'staleness.defaults.episodc'" in w for w in warnings)
    assert any("'retrieval'" in w and "only [staleness]" in w for w in warnings)
    # The same keys in the config file are still reported against the config file.
    config = _write(tmp_path / "c.toml", "[staleness.weights]\nagee = 1\n")
    _, warnings = load_settings(cli={}, environ={}, config_path=config, staleness_path=staleness)
    assert any(str(config) in w and "staleness.weights.agee" in w for w in warnings)
    assert sum(str(staleness) in w for w in warnings) == 2


@pytest.mark.parametrize(
    "content",
    [
        'model_tier = "huge"\n',
        "[dedup]\nthreshold = 2\n",
        "[staleness.defaults]\nepisodic = { fresh = 90, aging = 30, stale = 10 }\n",
        'namespace = "bad name!"\n',
        "not toml at all [[[",
    ],
)
def test_invalid_values_are_refused_with_a_message(tmp_path: Path, content: str) -> None:
    config = _write(tmp_path / "c.toml", content)
    with pytest.raises(ConfigError) as info:
        load_settings(cli={}, environ={}, config_path=config)
    assert str(info.value)


def test_staleness_config_file_and_namespace_overrides(tmp_path: Path) -> None:
    staleness = _write(
        tmp_path / "staleness.toml",
        "[staleness.defaults]\nepisodic = { fresh = 10, aging = 20, stale = 20 }\n"
        '[staleness.namespaces."ci-infra"]\nprocedural = { fresh = 7, aging = 14, stale = 30 }\n',
    )
    settings, _ = load_settings(cli={}, environ={}, staleness_path=staleness)
    assert settings.staleness.thresholds("x", "episodic").fresh == 10
    assert settings.staleness.thresholds("ci-infra", "procedural").stale == 30
    assert settings.staleness.thresholds("x", "procedural").stale == 365
    assert settings.staleness.thresholds("ci-infra", "semantic").stale == 180


def test_a_partial_threshold_table_takes_the_rest_from_the_defaults(tmp_path: Path) -> None:
    """`episodic = { fresh = 14 }` sets one threshold; a namespace's partial table completes
    from the configured defaults, then the built-in ones."""
    staleness = _write(
        tmp_path / "staleness.toml",
        "[staleness.defaults]\nepisodic = { fresh = 14 }\nsemantic = { stale = 200 }\n"
        '[staleness.namespaces."ops"]\nsemantic = { fresh = 30 }\n',
    )
    settings, _ = load_settings(cli={}, environ={}, staleness_path=staleness)
    episodic = settings.staleness.thresholds("x", "episodic")
    assert (episodic.fresh, episodic.aging, episodic.stale) == (14, 90, 90)
    ops = settings.staleness.thresholds("ops", "semantic")
    assert (ops.fresh, ops.aging, ops.stale) == (30, 180, 200)
    # A partial table that breaks the order is still refused, with the reason.
    broken = _write(tmp_path / "broken.toml", "[staleness.defaults]\nepisodic = { fresh = 100 }\n")
    with pytest.raises(ConfigError, match="fresh <= aging <= stale"):
        load_settings(cli={}, environ={}, staleness_path=broken)


def _fields(model: type[BaseModel], prefix: str = "") -> set[str]:
    out: set[str] = set()
    for name, field in model.model_fields.items():
        annotation: Any = field.annotation
        candidates = [annotation, *getattr(annotation, "__args__", ())]
        sub = next(
            (c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None
        )
        if sub is not None and name not in {"episodic", "semantic", "procedural"}:
            out |= _fields(sub, f"{prefix}{name}.")
        else:
            out.add(f"{prefix}{name}")
    return out


def test_example_file_documents_every_key_with_its_default() -> None:
    text = (ROOT / "ferrex.toml.example").read_text(encoding="utf-8")
    setting = re.compile(r"^#\s*(\[[^\]]+\]\s*$|[A-Za-z_][\w-]*\s*=)")
    lines = [line.lstrip("# ") if setting.match(line) else line for line in text.splitlines()]
    documented = tomllib.loads("\n".join(line for line in lines if not line.startswith("#")))
    missing = []
    for dotted in sorted(_fields(Settings)):
        node: Any = documented
        for part in dotted.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if node is None and not dotted.startswith(
            ("staleness.namespaces", "conflict.namespaces", "predicates.namespaces")
        ):
            missing.append(dotted)
    assert missing == []
    # The active (uncommented) part parses to exactly the defaults.
    active = tomllib.loads(text)
    active.pop("data_dir")
    settings = Settings.model_validate(active)
    assert settings.model_dump(exclude={"data_dir"}) == Settings().model_dump(exclude={"data_dir"})


def test_data_dir_is_created_private(tmp_path: Path) -> None:
    target = tmp_path / "new" / "ferrex"
    ensure_data_dir(target)
    assert stat.S_IMODE(target.stat().st_mode) == 0o700
    loose = tmp_path / "loose"
    loose.mkdir(mode=0o755)
    os.chmod(loose, 0o755)
    ensure_data_dir(loose)
    assert stat.S_IMODE(loose.stat().st_mode) == 0o700


def test_cli_reports_config_errors_without_traceback(tmp_path: Path) -> None:
    config = _write(tmp_path / "c.toml", "[retrieval]\nrrf_k = -4\n")
    process = subprocess.run(
        [ferrex_command(), "--config", str(config), "doctor"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert process.returncode == 2
    assert "retrieval.rrf_k" in process.stderr and "Traceback" not in process.stderr


def test_help_lists_every_flag() -> None:
    process = subprocess.run(
        [ferrex_command(), "--help"], capture_output=True, text=True, timeout=60
    )
    for flag in (
        "--data-dir",
        "--config",
        "--namespace",
        "--model-tier",
        "--model-path",
        "--reranker-tier",
        "--reranker-path",
        "--no-rerank",
        "--qdrant-url",
        "--qdrant-api-key",
        "--staleness-config",
        "--log-level",
        "--offline",
        "init",
        "doctor",
        "rebuild-index",
        "export",
        "import",
    ):
        assert flag in process.stdout
