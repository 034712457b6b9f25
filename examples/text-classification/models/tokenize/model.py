"""The tokenize step: text in, MiniLM's token ids out, for ``model.onnx`` under ``runtime: onnx``.

``<version>/tokenizer.json`` is all-MiniLM-L6-v2's WordPiece tokenizer (copied there by
``prepare.py``). A request is ``{"text": "..."}`` (or a one-element BYTES tensor); the answer
is ``{"input_ids": [[...]], "attention_mask": [[...]]}``, INT64 tensors of shape [1, tokens]
with no padding: the embed step's batcher pads each batch to its longest text
(``runtime_options.pad_inputs``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

import servinglib
from servinglib import InvalidInputError, TensorSpec

__all__ = ["MAX_CHARACTERS", "MAX_TOKENS", "TextTokenizer", "load_tokenizer"]

# sentence-transformers' max_seq_length for MiniLM: longer texts are truncated.
MAX_TOKENS = 256
MAX_CHARACTERS = 20_000


class TextTokenizer(servinglib.Model):
    """Answers ``{"text": str}`` with ``{"input_ids", "attention_mask"}`` ([1, tokens] each)."""

    inputs = (TensorSpec("text", "BYTES", (1,)),)
    outputs = (
        TensorSpec("input_ids", "INT64", (1, -1)),
        TensorSpec("attention_mask", "INT64", (1, -1)),
    )

    def load(self, path: Path) -> None:
        """Open the version's ``tokenizer.json``."""
        self.tokenizer = load_tokenizer(path / "tokenizer.json")

    def predict(self, features: Any) -> dict[str, npt.NDArray[np.int64]]:
        """Tokenize one text."""
        ids = np.asarray([self.tokenizer.encode(_text(features)).ids], dtype=np.int64)
        return {"input_ids": ids, "attention_mask": np.ones_like(ids)}


def load_tokenizer(path: Path) -> Any:
    """The tokenizer of ``path`` without its fixed padding, truncating at :data:`MAX_TOKENS`."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(path))
    tokenizer.no_padding()  # the file pads to 128; the embed step pads batches itself
    tokenizer.enable_truncation(MAX_TOKENS)
    return tokenizer


def _text(features: Any) -> str:
    """The one text of a request: a string, or a one-element BYTES tensor of Open Inference."""
    if not isinstance(features, dict) or "text" not in features:
        raise InvalidInputError('expected {"text": "a support ticket"}', field="text")
    value = features["text"]
    if isinstance(value, np.ndarray | list | tuple):
        flat = np.asarray(value, dtype=object).ravel()
        if flat.size != 1:
            raise InvalidInputError(
                f"text must hold one string, got {flat.size}; send one request per ticket",
                field="text",
            )
        value = flat[0]
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    if not isinstance(value, str):
        raise InvalidInputError(f"text must be a string, got {type(value).__name__}", field="text")
    if len(value) > MAX_CHARACTERS:
        raise InvalidInputError(
            f"text has {len(value)} characters; at most {MAX_CHARACTERS} are accepted",
            field="text",
        )
    return value
