"""Batch-score the breast-cancer classifier over a generated dataset, locally and on Ray.

    python batch_score.py                       # 1,000,000 rows, local engine, 2 workers
    python batch_score.py --rows 200000 --ray   # also on a new local Ray cluster

The input is ``data/patients.parquet``: perturbed copies of the 569 samples of
``load_breast_cancer`` (an ``id`` column and a fixed-size ``measurements`` column of 30
numbers), written 1 M rows at a time so memory stays flat. The scores land in
``data/scores-local/`` and ``data/scores-ray/`` (Parquet parts and ``_manifest.json``); both
engines write the same rows. The same jobs from the command line::

    servinglib batch-predict --model breast-cancer --input data/patients.parquet \\
        --output data/scores-local --id-column id --workers 2 --numpy-lists
    servinglib batch-predict --model breast-cancer --input data/patients.parquet \\
        --output data/scores-ray --id-column id --engine ray --workers 2 --numpy-lists
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from servinglib.batch import BatchJob, predict

HERE = Path(__file__).resolve().parent
CHUNK = 1_000_000


def write_rows(path: Path, rows: int, seed: int = 0) -> Path:
    """Write ``rows`` perturbed samples (5 % noise per measurement) to ``path``."""
    from sklearn.datasets import load_breast_cancer

    data = load_breast_cancer().data
    rng = np.random.default_rng(seed)
    schema = pa.schema([("id", pa.int64()), ("measurements", pa.list_(pa.float64(), 30))])
    path.parent.mkdir(parents=True, exist_ok=True)
    with pq.ParquetWriter(path, schema) as writer:
        for start in range(0, rows, CHUNK):
            n = min(CHUNK, rows - start)
            values = data[rng.integers(0, len(data), n)] * rng.normal(1.0, 0.05, (n, 30))
            measurements = pa.FixedSizeListArray.from_arrays(pa.array(values.ravel()), 30)
            ids = pa.array(np.arange(start, start + n))
            writer.write_table(pa.table([ids, measurements], schema=schema), row_group_size=65536)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--ray", action="store_true", help="also score on a local Ray cluster")
    args = parser.parse_args()
    source = write_rows(HERE / "data" / "patients.parquet", args.rows)
    engines = ["local", "ray"] if args.ray else ["local"]
    for engine in engines:
        summary = predict(
            BatchJob(
                config=str(HERE / "servinglib.yaml"),
                model="breast-cancer",
                input=str(source),
                output=str(HERE / "data" / f"scores-{engine}"),
                id_column="id",
                numpy_lists=True,  # the model takes arrays as well as lists
                workers=args.workers,
                engine=engine,
                overwrite=True,
            )
        )
        print(summary.describe())
    if args.ray:
        local = pq.read_table(HERE / "data" / "scores-local")
        print("identical outputs:", local.equals(pq.read_table(HERE / "data" / "scores-ray")))


if __name__ == "__main__":
    main()
