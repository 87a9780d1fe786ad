"""Cross-encoder reranking with fastembed ``TextCrossEncoder``: raw scores only.

The reranker never blocks the server: a model in the cache or a local directory loads on first
use; a model that must be downloaded is fetched in the background while recall answers in fused
order and says so (``reranked: false``). With no network and no local file the reason is kept
and reported once on stderr, in every recall response and in stats.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import structlog

from ferrex.embed.models import RERANKER_TIERS, download, hub_reachable, quiet_fastembed
from ferrex.embed.threads import limit_blas_threads, stop_spinning_between_runs

log = structlog.get_logger("ferrex.rerank")


class FastEmbedReranker:
    """fastembed cross-encoder behind the Reranker port."""

    def __init__(
        self,
        tier: str,
        models_dir: Path,
        *,
        reranker_path: Path | None = None,
        enabled: bool = True,
        offline: bool = False,
        threads: int | None = None,
        spin: bool = True,
    ) -> None:
        self.model_name = RERANKER_TIERS[tier]
        self.models_dir = models_dir
        self.reranker_path = reranker_path
        self.enabled = enabled
        self.offline = offline or os.environ.get("HF_HUB_OFFLINE", "").lower() in {
            "1",
            "true",
            "yes",
        }
        self.threads = threads
        self.spin = spin  # False: its runtime's threads stop spinning between runs
        self._model: Any = None
        self._reason: str | None = None if enabled else "reranking disabled (--no-rerank)"
        self._lock = threading.Lock()
        self._attempted = False
        self._downloading = False
        self._warned = False

    # ------------------------------------------------------------------ state

    @property
    def available(self) -> bool:
        return self._model is not None

    @property
    def name(self) -> str | None:
        if self.reranker_path is not None:
            return f"local:{self.reranker_path.name}"
        return self.model_name

    @property
    def unavailable_reason(self) -> str | None:
        return None if self.available else self._reason

    # ------------------------------------------------------------------ loading

    def load(self, *, download: bool = True) -> None:
        """Load from a local path or the cache now; start a background download otherwise
        (``download=False``: say it is not cached, start nothing, try again next time)."""
        if not self.enabled or self._model is not None:
            return
        with self._lock:
            if self._model is not None or self._downloading:
                return
            if self._attempted:
                return
            self._attempted = True
            limit_blas_threads()
            try:
                self._model = self._load_local()
                if self._model is not None:
                    self._reason = None
                    log.info("reranker loaded", model=self.name)
                    return
            except Exception as exc:
                self._fail(f"reranker {self.name} failed to load: {str(exc)[:200]}")
                return
            if not download and not self.offline:
                self._attempted = False  # a later load (a server's) may still download it
                self._reason = (
                    f"reranker {self.model_name} is not cached; a server downloads it at "
                    "start-up, or run `ferrex models pull`"
                )
                return
            if self.offline or not hub_reachable():
                self._fail(
                    f"reranker {self.model_name} is unavailable (no network and not cached); "
                    "results are in fused order. Provide --reranker-path DIR or connect once."
                )
                return
            self._downloading = True
            self._reason = f"reranker {self.model_name} is downloading; results are in fused order"
            threading.Thread(
                target=self._download, name="ferrex-reranker-download", daemon=True
            ).start()

    def _fail(self, reason: str) -> None:
        self._reason = reason
        if not self._warned:
            self._warned = True
            log.warning(reason)

    def _load_local(self) -> Any:
        from fastembed.rerank.cross_encoder import TextCrossEncoder

        self.models_dir.mkdir(parents=True, exist_ok=True)
        if self.reranker_path is not None:
            name = register_local_cross_encoder(self.reranker_path)
            return self._with_spin_setting(
                TextCrossEncoder(
                    name,
                    cache_dir=str(self.models_dir),
                    specific_model_path=str(self.reranker_path),
                    threads=self.threads,
                )
            )
        try:
            with quiet_fastembed():
                model = TextCrossEncoder(
                    self.model_name,
                    cache_dir=str(self.models_dir),
                    local_files_only=True,
                    threads=self.threads,
                )
        except Exception:
            return None
        return self._with_spin_setting(model)

    def _with_spin_setting(self, model: Any) -> Any:
        """A loaded cross-encoder; with ``spin`` off, its runtime threads stop spinning between
        runs (fastembed's model, its ONNX session inside; none: logged, loaded as is)."""
        if not self.spin:
            stop_spinning_between_runs(getattr(model, "model", None))
        return model

    def _download(self) -> None:
        from fastembed.rerank.cross_encoder import TextCrossEncoder

        try:
            download(self.model_name, self.models_dir, reranker=True)  # progress on stderr
            model = self._with_spin_setting(
                TextCrossEncoder(
                    self.model_name,
                    cache_dir=str(self.models_dir),
                    local_files_only=True,
                    threads=self.threads,
                )
            )
        except Exception as exc:
            with self._lock:
                self._downloading = False
                self._fail(f"reranker {self.model_name} download failed: {str(exc)[:200]}")
            return
        with self._lock:
            self._model = model
            self._downloading = False
            self._reason = None
        log.info("reranker downloaded and loaded", model=self.model_name)

    # ------------------------------------------------------------------ scoring

    def score(self, query: str, documents: Sequence[str]) -> list[float]:
        if self._model is None:
            raise RuntimeError("reranker not available")
        if not documents:
            return []
        return [float(s) for s in self._model.rerank(query, list(documents), batch_size=32)]


def register_local_cross_encoder(directory: Path) -> str:
    """Register a cross-encoder ONNX directory with fastembed under a stable private name."""
    from fastembed.common.model_description import ModelSource
    from fastembed.rerank.cross_encoder import TextCrossEncoder

    model_file = "onnx/model.onnx" if (directory / "onnx" / "model.onnx").exists() else "model.onnx"
    digest = hashlib.sha1(str(directory.resolve()).encode()).hexdigest()[:12]
    name = f"ferrex-local/cross-encoder-{digest}"
    known = {m["model"].lower() for m in TextCrossEncoder.list_supported_models()}
    if name.lower() not in known:
        TextCrossEncoder.add_custom_model(
            model=name,
            sources=ModelSource(hf=name),
            model_file=model_file,
            description=f"local cross-encoder at {directory.name}",
        )
    return name
