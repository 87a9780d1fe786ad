"""Getting a store ready to serve: the embedding model pin, the collection, the journal replay
and the start-up upkeep; and what the agent must know while it is degraded."""

from __future__ import annotations

import threading
import time

import structlog

from ferrex.core import errors
from ferrex.core.deps import Deps
from ferrex.core.errors import FerrexError
from ferrex.core.index.pins import (
    PIN_DIMENSION,
    PIN_NAME,
    PIN_VARIANT,
    REBUILD_PENDING,
    REBUILD_TARGET,
    REBUILD_TARGET_VARIANT,
    pin_model,
)
from ferrex.core.lifecycle.upkeep import Upkeep
from ferrex.core.ports import ModelInfo

log = structlog.get_logger("ferrex.service")

MODEL_RETRY_SECONDS = 60.0  # how often stats retries loading a model that failed


class ModelMismatchError(FerrexError):
    def __init__(self, message: str) -> None:
        super().__init__(errors.MODEL_MISMATCH, message)


class Readiness:
    def __init__(self, deps: Deps, upkeep: Upkeep, *, explicit_model: bool = False) -> None:
        self.deps = deps
        self.upkeep = upkeep
        self.explicit_model = explicit_model
        self.ready = False
        self.replayed_at_start = 0
        self._lock = threading.Lock()
        self._model_error: str | None = None
        self._model_error_at = -float("inf")

    # ------------------------------------------------------------------ the model pin

    def check_pin(self) -> None:
        """Refuse, before loading anything, a configured model that differs from the store's."""
        meta = self.deps.meta
        pinned = meta.get_meta(PIN_NAME)
        if pinned is None or not self.explicit_model:
            return
        intended = getattr(self.deps.embedder, "intended", None)
        if intended is not None and intended.name.lower() != pinned.lower():
            raise ModelMismatchError(self._mismatch_message(pinned, intended.name))

    def check_peer_model(self, name: str, dimension: int | None, source: str | None = None) -> None:
        """Refuse a peer process configured (``--model-tier``) for another model than this
        engine's: the store's pin, or the model this engine is about to pin. Same message as
        :meth:`check_pin` gives a process that opens the store itself."""
        meta = self.deps.meta
        pinned = meta.get_meta(PIN_NAME)
        pinned_dimension: str | None = meta.get_meta(PIN_DIMENSION)
        if pinned is None:
            own = getattr(self.deps.embedder, "intended", None)
            if own is None:
                return
            pinned, pinned_dimension = own.name, str(own.dimension)
        same_name = name.lower() == pinned.lower()
        same_dimension = (
            dimension is None or not pinned_dimension or (str(dimension) == pinned_dimension)
        )
        if not (same_name and same_dimension):
            raise ModelMismatchError(
                self._mismatch_message(pinned, name, pinned_dimension, source=source)
            )

    def _mismatch_message(
        self,
        pinned: str,
        configured: str,
        dimension: str | None = None,
        *,
        source: str | None = None,
    ) -> str:
        """Why the configured model is refused, naming what configured it (this process's
        settings, or the ``source`` a peer said in its hello)."""
        dimension = dimension or self.deps.meta.get_meta(PIN_DIMENSION) or "?"
        source = source or self.deps.settings.model_tier_source
        return (
            f"this store was created with the embedding model {pinned} ({dimension}-d) but ferrex "
            f"is configured for {configured} (by {source}). Vectors of different models cannot "
            f"be compared. Remove {source} (ferrex follows the store), or re-embed everything "
            f"with `ferrex rebuild-index --model-tier <tier>`."
        )

    def _pin(self, info: ModelInfo) -> None:
        meta = self.deps.meta
        pinned = meta.get_meta(PIN_NAME)
        if pinned is None:
            with meta.transaction():
                pin_model(meta, info)
            return
        dimension = int(meta.get_meta(PIN_DIMENSION) or 0)
        variant = meta.get_meta(PIN_VARIANT) or ""
        if pinned.lower() != info.name.lower() or dimension != info.dimension:
            raise ModelMismatchError(
                self._mismatch_message(pinned, f"{info.name} ({info.dimension}-d)")
            )
        if variant != info.variant and "local" not in (variant, info.variant):
            raise ModelMismatchError(
                f"this store was embedded with {pinned} variant '{variant or 'fastembed'}', "
                "but the "
                f"loaded model is variant '{info.variant or 'fastembed'}'; mixing them would make "
                "scores incomparable. Make the original variant available or run "
                "`ferrex rebuild-index`."
            )

    # ------------------------------------------------------------------ start-up

    def ensure_ready(self) -> None:
        """Load the model, pin it, create the collection and replay the journal (once)."""
        if self.ready:
            return
        with self._lock:
            if self.ready:
                return
            deps = self.deps
            info = deps.embedder.info
            self._pin(info)
            deps.index.ensure_collection(
                info.dimension,
                late_interaction=deps.settings.retrieval.late_interaction.enabled,
            )
            with deps.write:
                if deps.meta.get_meta(REBUILD_PENDING):
                    log.warning("an index rebuild was interrupted; rebuilding now")
                    deps.sync.reembed_entities()
                    deps.entities.invalidate()
                    deps.sync.rebuild()
                    deps.meta.set_meta(REBUILD_PENDING, "")
                    deps.meta.delete_meta(REBUILD_TARGET)
                    deps.meta.delete_meta(REBUILD_TARGET_VARIANT)
                # journal entries rolled forward at start-up (doctor reports them)
                self.replayed_at_start = deps.sync.recover()
            deps.access.start()
            self.ready = True
            try:
                self.upkeep.sweep_retention(force=True)
                self.upkeep.enforce_budget()
            except Exception as exc:  # lifecycle upkeep must never block serving
                log.warning("lifecycle upkeep failed at start-up", error=str(exc)[:200])

    def warm_up(self) -> None:
        """Background start-up work: model, journal replay, reranker."""
        try:
            self.ensure_ready()
        except FerrexError as exc:
            log.error("start-up failed", code=exc.code, error=exc.message)
            return
        except Exception as exc:  # a background thread: one log line, never a traceback
            log.error("start-up failed", code=errors.INTERNAL, error=repr(exc)[:300])
            return
        self.deps.index.start_background_work()  # the serving process's index upkeep
        self.deps.reranker.load()

    def try_ready(self) -> None:
        """Stats' attempt: the first call of a conversation reports the real model and cuts
        summaries with its tokenizer; a failure is said in every stats answer and retried at
        most once a minute (store and recall try on every call)."""
        if self.ready or time.monotonic() - self._model_error_at <= MODEL_RETRY_SECONDS:
            return
        try:
            self.ensure_ready()
        except Exception as exc:  # stats answers whatever keeps the store from working
            # Only a FerrexError's message is agent-safe.
            self._model_error = (
                exc.message
                if isinstance(exc, FerrexError)
                else "the embedding model failed to load; see the server log"
            )
            self._model_error_at = time.monotonic()
            log.warning("stats before the store is ready", error=str(exc)[:300])

    # ------------------------------------------------------------------ degraded operation

    @property
    def model_error(self) -> str | None:
        """Why the embedding model could not be used (stats says so), until it can."""
        return None if self.ready else self._model_error

    def warnings(self, *, brief: bool = False) -> list[str]:
        """What the agent must know about degraded operation (never hidden, spec principle 5)."""
        deps = self.deps
        out: list[str] = []
        if self._model_error is not None and not self.ready:
            out.append(f"not ready: {self._model_error[:160]}" if brief else self._model_error)
        loaded = getattr(deps.embedder, "loaded", True)
        if loaded and deps.embedder.warnings:
            if brief:
                info = deps.embedder.info
                out.append(
                    f"embedding model fallback: using bundled {info.name} ({info.dimension}-d)"
                )
            else:
                out.extend(deps.embedder.warnings)
        if (
            deps.settings.rerank
            and not deps.reranker.available
            and deps.reranker.unavailable_reason
        ):
            if brief:
                out.append("reranker unavailable: results are in fused order")
            else:
                out.append(deps.reranker.unavailable_reason)
        return out
