"""Embed a text corpus into Parquet with the MiniLM model, one job, the same model code.

    python prepare.py                  # once: builds the ONNX versions (not committed)
    python embed_corpus.py             # sentences.txt -> build/corpus-embeddings/

Each line of ``sentences.txt`` becomes one row ``{"id": line number, "text": line}`` of
``build/corpus.parquet``; ``servinglib batch-predict`` tokenizes it in ``prepare()``, embeds
32 texts per ONNX run (the model's ``batching.max_batch_size``) and writes
``build/corpus-embeddings/part-*.parquet`` with ``id``, ``embedding`` (384 floats, a unit
vector), ``model``, ``version`` and ``error``. The same job from the command line::

    servinglib batch-predict --model minilm --input build/corpus.parquet \\
        --output build/corpus-embeddings --id-column id
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from servinglib.batch import BatchJob, predict

HERE = Path(__file__).resolve().parent


def write_corpus(text_file: Path, path: Path) -> Path:
    """One row per non-empty line of ``text_file``."""
    lines = [line.strip() for line in text_file.read_text(encoding="utf-8").splitlines()]
    texts = [line for line in lines if line]
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"id": np.arange(len(texts)), "text": texts}), path)
    return path


def main() -> None:
    source = write_corpus(HERE / "sentences.txt", HERE / "build" / "corpus.parquet")
    output = HERE / "build" / "corpus-embeddings"
    summary = predict(
        BatchJob(
            config=str(HERE / "servinglib.yaml"),
            model="minilm",
            input=str(source),
            output=str(output),
            id_column="id",
            overwrite=True,
        )
    )
    print(summary.describe())
    embeddings = np.stack(pq.read_table(output, columns=["embedding"]).column(0).to_numpy(False))
    texts = pq.read_table(source).column("text").to_pylist()
    nearest = np.argsort(-(embeddings @ embeddings[0]))[1]  # unit vectors: dot = cosine
    print(f"closest to {texts[0]!r}: {texts[nearest]!r}")


if __name__ == "__main__":
    main()
