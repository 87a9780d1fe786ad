"""How the model's runtime shares the cores.

**One BLAS thread.** NumPy's BLAS (OpenBLAS in the wheels) starts a thread per core for any
product and leaves them spinning after it returns; the ONNX runtime does the same with its own
pool (below). On a 2-core machine each pool's spinning threads took the other's cores: a
store's small matrix products (token pooling) waited for ONNX's threads, and the next model run
for BLAS's. ferrex's products are small (a memory's tokens, a recall's candidates), so one BLAS
thread loses nothing and a store is about twice as fast (docs/performance.md, "BLAS threads").

A limit the user set (``OPENBLAS_NUM_THREADS``, ``MKL_NUM_THREADS``, ``OMP_NUM_THREADS``,
``BLIS_NUM_THREADS``) is left as it is; a library that cannot be limited is logged and left too
(the model loads either way).

**Spinning between runs** (``runtime_spin``). The ONNX runtime's pool threads spin after a run
returns, waiting for the next one: after one query embedding (~3 ms of work) they keep a core
busy for ~40 ms. Calls that come in bursts find the threads (and, on a VM, the vCPU) awake and
run faster; an idle server burns that core meanwhile. ``runtime_spin = false`` adds
``session.force_spinning_stop``: the threads spin while a run lasts and stop when it returns.
fastembed builds the session and exposes no such option, so the session it built is built again
from its own options with this one added (docs/performance.md, "Spinning between runs").
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import threading
from typing import Any

import structlog

log = structlog.get_logger("ferrex.embed")

# The ONNX runtime's session option: intra-op threads stop spinning when a run returns.
SPIN_STOP = "session.force_spinning_stop"

USER_LIMITS = ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS", "BLIS_NUM_THREADS")

_lock = threading.Lock()
_done = False


def limit_blas_threads() -> None:
    """Limit the BLAS libraries loaded in this process (NumPy's) to one thread. Decided once
    per process: a user's environment variable, or a library that cannot be limited, leaves
    BLAS as it is."""
    global _done
    with _lock:
        if _done:
            return
        _done = True
        if any(os.environ.get(name) for name in USER_LIMITS):
            return
        import numpy  # noqa: F401  (its BLAS must be loaded to be limited)

        try:
            from threadpoolctl import threadpool_limits

            threadpool_limits(limits=1, user_api="blas")
        except Exception as exc:  # a speed setting: never a reason not to load the model
            log.warning("BLAS threads not limited", error=str(exc)[:200])
            return
        log.debug("BLAS limited to one thread")


def stop_spinning_between_runs(owner: Any) -> None:
    """Replace ``owner.model``, the ONNX runtime session fastembed built, with one built from
    the same file, providers and options plus ``SPIN_STOP``; then give the heap the first one
    freed back to the system. A session that cannot be rebuilt as it was (same providers) is
    logged and kept: a CPU-use setting, never a reason not to load the model."""
    session = getattr(owner, "model", None)
    path = getattr(session, "_model_path", None)
    if session is None or not isinstance(path, str | os.PathLike):
        log.warning("ONNX session not rebuilt: no model file to build it from")
        return
    try:
        import onnxruntime as ort

        options = session.get_session_options()
        options.add_session_config_entry(SPIN_STOP, "1")
        providers = session.get_providers()
        provider_options = session.get_provider_options()
        # The runtime prints to stdout when a provider fails and it falls back to another:
        # stdout is the MCP protocol.
        with contextlib.redirect_stdout(sys.stderr):
            rebuilt = ort.InferenceSession(
                os.fspath(path),
                sess_options=options,
                providers=providers,
                provider_options=[provider_options.get(name, {}) for name in providers],
            )
    except Exception as exc:
        log.warning("ONNX session not rebuilt", error=str(exc)[:200])
        return
    if rebuilt.get_providers() != providers:
        log.warning("ONNX session not rebuilt: its providers changed", providers=providers)
        return
    owner.model = rebuilt
    del session  # the last reference to the first session: freed before the heap is trimmed
    release_freed_memory()


def release_freed_memory() -> None:
    """Return the C heap's free pages to the system (glibc's ``malloc_trim``; elsewhere
    nothing). Building a model session and dropping one leaves tens of MB freed but resident:
    the bundled model's process kept ~55 MB more without it (docs/performance.md)."""
    if not sys.platform.startswith("linux"):
        return
    # The C library the process already loaded (``find_library`` would search for it, with
    # ldconfig in a subprocess: 2.7 ms here, against 0.05 ms).
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # a C library without it (musl has a no-op; none here)
        return
    trim(0)
