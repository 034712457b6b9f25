"""Sentence embeddings with all-MiniLM-L6-v2: tokenize in Python, run ONNX on padded batches.

Each version directory holds (built by ``prepare.py``):

- ``model.onnx``: BERT (6 layers, 384 dimensions) followed by mean pooling over the attention
  mask and L2 normalization, exactly the three modules of sentence-transformers; inputs
  ``input_ids`` and ``attention_mask`` [batch, sequence], output ``sentence_embedding``
  [batch, 384];
- ``tokenizer.json``: the model's WordPiece tokenizer (``tokenizers`` library).

A request is ``{"text": "..."}``; the answer is ``{"embedding": [384 numbers]}``, a unit
vector, so the cosine similarity of two sentences is the dot product of their embeddings.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

import servinglib
from servinglib import InvalidInputError, TensorSpec

__all__ = ["DIMENSIONS", "MAX_TOKENS", "SentenceEmbedder", "Tokens"]

DIMENSIONS = 384
# sentence-transformers' max_seq_length for this model: longer texts are truncated.
MAX_TOKENS = 256
MAX_CHARACTERS = 20_000


@dataclass(frozen=True)
class Tokens:
    """One request after ``prepare``: token ids of one text (no padding)."""

    ids: npt.NDArray[np.int64]


class SentenceEmbedder(servinglib.Model):
    """Answers ``{"text": str}`` with ``{"embedding": [384 floats]}`` (L2-normalized)."""

    inputs = (TensorSpec("text", "BYTES", (1,)),)
    outputs = (TensorSpec("embedding", "FP32", (DIMENSIONS,)),)

    def load(self, path: Path) -> None:
        """Open the tokenizer and the ONNX session (in the worker, after fork)."""
        import onnxruntime as ort
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
        tokenizer.no_padding()  # the file pads to 128; batches are padded to their longest
        tokenizer.enable_truncation(MAX_TOKENS)
        self.tokenizer = tokenizer
        options = ort.SessionOptions()
        options.intra_op_num_threads = int(
            self.settings.runtime_options.get("intra_op_threads", _threads(self.settings.workers))
        )
        options.inter_op_num_threads = 1
        self.session = ort.InferenceSession(
            str(path / "model.onnx"), options, providers=["CPUExecutionProvider"]
        )

    def prepare(self, features: Any) -> Tokens:
        """Check and tokenize one request before it joins a batch."""
        text = _text(features)
        return Tokens(np.asarray(self.tokenizer.encode(text).ids, dtype=np.int64))

    def predict(self, features: Any) -> dict[str, Any]:
        """Embed one text."""
        return self.predict_batch([features])[0]

    def predict_batch(self, batch: Sequence[Any]) -> list[dict[str, Any]]:
        """One session run for the whole batch, padded to its longest text."""
        if not batch:
            return []
        tokens = [item if isinstance(item, Tokens) else self.prepare(item) for item in batch]
        length = max(len(t.ids) for t in tokens)
        ids = np.zeros((len(tokens), length), dtype=np.int64)
        mask = np.zeros((len(tokens), length), dtype=np.int64)
        for row, t in enumerate(tokens):
            ids[row, : len(t.ids)] = t.ids
            mask[row, : len(t.ids)] = 1
        (embeddings,) = self.session.run(
            ["sentence_embedding"], {"input_ids": ids, "attention_mask": mask}
        )
        return [{"embedding": row} for row in embeddings]


def _threads(workers: int) -> int:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, (cores or 1) // max(1, workers))


def _text(features: Any) -> str:
    """The text of ``{"text": str}``; Open Inference hands in a BYTES tensor of one element."""
    if not isinstance(features, dict) or "text" not in features:
        raise InvalidInputError('expected {"text": "a sentence"}', field="text")
    value = features["text"]
    if isinstance(value, np.ndarray | list | tuple):
        flat = np.asarray(value, dtype=object).ravel()
        if flat.size != 1:
            raise InvalidInputError(
                f"text must hold one string, got {flat.size}; send one request per text",
                field="text",
            )
        value = flat[0]
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    if not isinstance(value, str):
        raise InvalidInputError(f"text must be a string, got {type(value).__name__}", field="text")
    if len(value) > MAX_CHARACTERS:
        raise InvalidInputError(
            f"text has {len(value)} characters; at most {MAX_CHARACTERS} are accepted "
            f"(the model reads the first {MAX_TOKENS} tokens)",
            field="text",
        )
    return value
