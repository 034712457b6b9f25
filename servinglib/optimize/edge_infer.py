"""Edge bundle script: load the model, warm up, time single-sample runs, print JSON.

Standalone on the device (needs only ``numpy`` and ``onnxruntime``; see requirements.txt)::

    python infer.py                      # model.ort, sample.npz, 1 thread
    python infer.py --iterations 500 --threads 1 --model model.ort

Prints one JSON object: the model's size in MB, p50/p95/mean latency in ms at batch 1 over
``--iterations`` runs after ``--warmup`` runs, the thread count and the CPUs it may run on.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark loop and print its figures as JSON."""
    import onnxruntime as ort

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=HERE / "model.ort")
    parser.add_argument("--sample", type=Path, default=HERE / "sample.npz")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--iterations", type=int, default=200)
    args = parser.parse_args(argv)
    options = ort.SessionOptions()
    options.intra_op_num_threads = args.threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    session = ort.InferenceSession(
        str(args.model), sess_options=options, providers=["CPUExecutionProvider"]
    )
    with np.load(args.sample, allow_pickle=False) as archive:
        feed = {name: archive[name][:1] for name in archive.files}
    for _ in range(args.warmup):
        session.run(None, feed)
    times = []
    for _ in range(args.iterations):
        start = time.perf_counter()
        session.run(None, feed)
        times.append((time.perf_counter() - start) * 1e3)
    p50, p95 = np.percentile(times, [50, 95])
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    print(
        json.dumps(
            {
                "model": args.model.name,
                "size_mb": args.model.stat().st_size / 1e6,
                "p50_ms": float(p50),
                "p95_ms": float(p95),
                "mean_ms": float(np.mean(times)),
                "iterations": args.iterations,
                "threads": args.threads,
                "cpus": cpus,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
