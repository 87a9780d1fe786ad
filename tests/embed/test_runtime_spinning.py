"""``runtime_spin = false``: the ONNX runtime's threads stop spinning when a model run returns
(ferrex/embed/threads.py).

Left as fastembed builds them (the default), the runtime's pool keeps a core busy for ~40 ms
after every query embedding, waiting for the next run: bursts of calls are faster, an idle
server burns a core meanwhile. With the setting off it burns nothing; measured here as what the
process itself burns while idle after a run, in a fresh process (a clean CPU account), with the
real model. The cross-encoder the tests build is too small to spin: its session is checked to be
the rebuilt one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.support.tiny_cross_encoder import build_tiny_cross_encoder

from ferrex.bootstrap import Options, build_service
from ferrex.config import load_settings
from ferrex.embed.embedder import FastEmbedEmbedder
from ferrex.embed.reranker import FastEmbedReranker, register_local_cross_encoder
from ferrex.embed.threads import SPIN_STOP, stop_spinning_between_runs

PROBE = """
import json, resource, sys, time
from pathlib import Path
from ferrex.embed.embedder import FastEmbedEmbedder

def cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime

def idle_after(run):
    burnt = []
    for i in range(8):
        run(i)
        start = cpu()
        time.sleep(0.1)
        burnt.append(round((cpu() - start) * 1000, 2))
    return burnt

model = FastEmbedEmbedder("small", Path(sys.argv[1]), offline=True, allow_bundled=True,
                          prefer_bundled=True, spin=False)
model.load()
print(json.dumps({
    "idle_ms": idle_after(
        lambda i: model.embed_query(f"where did the team move the deploys in week {i}?")),
    "dimension": len(model.embed_query("still embeds")),
}))
"""


def _spin_stop(session: Any) -> str | None:
    """The session's ``SPIN_STOP`` entry (None: not set; the runtime raises for a missing key)."""
    try:
        value: str = session.get_session_options().get_session_config_entry(SPIN_STOP)
    except RuntimeError:
        return None
    return value


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_cross_encoder(tmp_path_factory.mktemp("tiny-cross-encoder"))


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one core: the runtime has no pool to spin")
def test_the_embedding_runtime_burns_no_cpu_between_calls(models_dir: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(models_dir)],
        capture_output=True,
        text=True,
        timeout=180,
        check=True,
    )
    probe = json.loads(done.stdout.strip().splitlines()[-1])
    assert probe["dimension"] == 384  # the rebuilt session still embeds
    # Spinning burnt ~40 ms of each 100 ms idle; without it a process burns well under 1 ms
    # (the median keeps one stray wake-up, e.g. the garbage collector, from deciding).
    idle = sorted(probe["idle_ms"])
    assert idle[len(idle) // 2] < 5.0, probe["idle_ms"]


def test_a_session_is_rebuilt_with_the_option(tiny_model: Path, models_dir: Path) -> None:
    from fastembed.rerank.cross_encoder import TextCrossEncoder

    name = register_local_cross_encoder(tiny_model)
    model = TextCrossEncoder(name, cache_dir=str(models_dir), specific_model_path=str(tiny_model))
    built = model.model.model
    assert _spin_stop(built) is None  # as fastembed builds it
    before = list(model.rerank("deploy target?", ["the deploy target is arm", "lunch"]))
    stop_spinning_between_runs(model.model)
    rebuilt = model.model.model
    assert rebuilt is not built
    assert _spin_stop(rebuilt) == "1"
    assert rebuilt.get_providers() == built.get_providers()
    after = list(model.rerank("deploy target?", ["the deploy target is arm", "lunch"]))
    assert after == pytest.approx(before)  # the same model, the same scores


@pytest.mark.parametrize("spin", [True, False])
def test_the_reranker_follows_the_setting(tiny_model: Path, models_dir: Path, spin: bool) -> None:
    reranker = FastEmbedReranker(
        "default", models_dir, reranker_path=tiny_model, offline=True, spin=spin
    )
    reranker.load()
    assert reranker.available
    assert _spin_stop(reranker._model.model.model) == (None if spin else "1")
    assert len(reranker.score("deploy target?", ["the deploy target is arm", "lunch"])) == 2


def test_the_setting_reaches_the_embedding_model(tmp_path: Path, models_dir: Path) -> None:
    """``runtime_spin``: on by default; ``FERREX_RUNTIME_SPIN=false`` (or the file's key) gives
    the service an embedding model whose session stops spinning."""
    default, _ = load_settings(cli={"data_dir": str(tmp_path / "a")}, environ={})
    assert default.runtime_spin is True
    (tmp_path / "ferrex.toml").write_text("runtime_spin = false\n")
    from_file, _ = load_settings(
        cli={"data_dir": str(tmp_path / "a")}, environ={}, config_path=tmp_path / "ferrex.toml"
    )
    assert from_file.runtime_spin is False
    for spin, environ in ((True, {}), (False, {"FERREX_RUNTIME_SPIN": "false"})):
        settings, _ = load_settings(
            cli={
                "data_dir": str(tmp_path / f"d-{spin}"),
                "models_dir": str(models_dir),
                "model_tier": "small",
                "offline": True,
                "rerank": False,
            },
            environ=environ,
        )
        service = build_service(settings, Options(explicit_model_tier=True))
        try:
            service.ensure_ready()
            embedder = service.embedder
            assert isinstance(embedder, FastEmbedEmbedder) and embedder.spin is spin
            assert _spin_stop(embedder._model.model.model) == (None if spin else "1")
        finally:
            service.close()
