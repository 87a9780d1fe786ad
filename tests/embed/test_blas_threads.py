"""NumPy's BLAS runs one thread in a process that loaded the model (ferrex/embed/threads.py):
its spinning threads and the ONNX runtime's took each other's cores (store about 2x slower on
2 cores). A limit the user set in the environment is kept."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ferrex.embed.threads import USER_LIMITS

PROBE = """
import json, sys
from pathlib import Path
from threadpoolctl import threadpool_info
from ferrex.embed.embedder import FastEmbedEmbedder

def blas():
    return sorted({i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"})

before = blas()
model = FastEmbedEmbedder("small", Path(sys.argv[1]), offline=True, allow_bundled=True,
                          prefer_bundled=True)
model.load()
vector = model.embed_documents(["the BLAS pool and the model share the cores"])[0]
print(json.dumps({"before": before, "after": blas(), "dimension": len(vector)}))
"""


def _probe(models_dir: Path, **env: str) -> dict[str, list[int] | int]:
    clean = {k: v for k, v in os.environ.items() if k not in USER_LIMITS}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(models_dir)],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    result: dict[str, list[int] | int] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one core: BLAS has one thread anyway")
def test_loading_the_model_limits_blas_to_one_thread(models_dir: Path) -> None:
    # Two threads asked for explicitly first: the probe shows a limit really changes (a
    # 1-core machine would show 1 either way).
    kept = _probe(models_dir, OPENBLAS_NUM_THREADS="2")
    assert kept["before"] == [2]
    assert kept["after"] == [2]  # the user's limit is left as it is
    limited = _probe(models_dir)
    assert limited["before"] not in ([], [1])  # BLAS found, with more than one thread
    assert limited["after"] == [1]
    assert limited["dimension"] == 384  # and the model still embeds
