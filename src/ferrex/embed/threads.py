"""One BLAS thread in a ferrex process: the model's runtime owns the cores.

NumPy's BLAS (OpenBLAS in the wheels) starts a thread per core for any product and leaves them
spinning after it returns; the ONNX runtime does the same with its own pool. On a 2-core
machine each pool's spinning threads took the other's cores: a store's small matrix products
(token pooling) waited for ONNX's threads, and the next model run for BLAS's. ferrex's
products are small (a memory's tokens, a recall's candidates), so one BLAS thread loses nothing
and a store is about twice as fast (docs/performance.md, "BLAS threads").

A limit the user set (``OPENBLAS_NUM_THREADS``, ``MKL_NUM_THREADS``, ``OMP_NUM_THREADS``,
``BLIS_NUM_THREADS``) is left as it is; a library that cannot be limited is logged and left too
(the model loads either way).
"""

from __future__ import annotations

import os
import threading

import structlog

log = structlog.get_logger("ferrex.embed")

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
