"""LitServe peer: the trivial sum or MiniLM on ONNX Runtime with LitServe's dynamic batching.

Run in its own venv (see ``batching_peers.ensure_venv("litserve")``)::

    BENCH_MODEL=trivial python benchmarks/peers/litserve_app.py --port N
    BENCH_MODEL=minilm BENCH_ONNX=model.onnx python benchmarks/peers/litserve_app.py --port N

``POST /infer`` with the body servinglib takes:

* trivial: ``{"features": {"values": [16 floats]}}`` -> ``{"output": {"sum": float}}``;
  batching off (``max_batch_size=1``).
* minilm: ``{"features": {"input_ids": [[...]], "attention_mask": [[...]]}}`` ->
  ``{"output": [[384 floats], ...]}``, one row per input row; ``max_batch_size=32``,
  ``batch_timeout=0.002`` s. Requests are padded to the longest in the batch (mask 0) and
  concatenated along axis 0. ``intra_op_num_threads`` comes from ``BENCH_THREADS`` (default 2).

Layout for 2 cores (best of short ``hey -c 32`` runs): two HTTP API server processes
(``num_api_servers=2``) feeding one inference worker process (``workers_per_device=1``),
access log off. One API server gave ~30% less throughput on both models (the API server is
the bottleneck), two inference workers gave less than one, and ``fast_queue`` (ZeroMQ) made
no measurable difference, so it stays at its default (off). ``BENCH_LITSERVE_API_SERVERS``,
``BENCH_LITSERVE_WORKERS`` and ``BENCH_LITSERVE_FAST_QUEUE=1`` override these. With
``BENCH_BATCH_STATS=1`` the worker prints the batch-size histogram every 2 s while serving.
"""

from __future__ import annotations

import argparse
import os
import signal
from typing import Any

import litserve as ls
import numpy as np
from _batch_stats import BatchStats  # benchmarks/peers/, this script's folder

MAX_BATCH_SIZE = 32
BATCH_TIMEOUT_S = 0.002


class TrivialAPI(ls.LitAPI):
    """Sum of the request's values; no batching."""

    # `request` stays unannotated: LitServe reads the annotation as the FastAPI body type,
    # and without one it passes the parsed JSON body.
    def decode_request(self, request, **kwargs: Any) -> list[float]:
        values: list[float] = request["features"]["values"]
        return values

    def predict(self, x: list[float], **kwargs: Any) -> float:
        return float(sum(x))

    def encode_response(self, output: float, **kwargs: Any) -> dict[str, Any]:
        return {"output": {"sum": output}}


Features = tuple[np.ndarray, np.ndarray]


class MiniLMAPI(ls.LitAPI):
    """MiniLM sentence embeddings; requests are padded and concatenated into one batch."""

    def setup(self, device: str) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = int(os.environ.get("BENCH_THREADS", "2"))
        self.session = ort.InferenceSession(
            os.environ["BENCH_ONNX"], options, providers=["CPUExecutionProvider"]
        )
        self.stats = BatchStats()

    def decode_request(self, request, **kwargs: Any) -> Features:
        features = request["features"]
        ids = np.asarray(features["input_ids"], dtype=np.int64)
        mask = np.asarray(features["attention_mask"], dtype=np.int64)
        if ids.ndim != 2 or ids.shape != mask.shape:
            raise ValueError("input_ids and attention_mask must be [batch, seq] of one shape")
        return ids, mask

    def batch(self, inputs: list[Features]) -> list[Features]:
        return inputs  # padded in predict, where the row counts are known

    def predict(self, x: list[Features], **kwargs: Any) -> list[np.ndarray]:
        self.stats.add(len(x))
        length = max(ids.shape[1] for ids, _ in x)
        rows = [ids.shape[0] for ids, _ in x]
        ids = np.zeros((sum(rows), length), dtype=np.int64)
        mask = np.zeros_like(ids)
        start = 0
        for (one_ids, one_mask), n in zip(x, rows, strict=True):
            ids[start : start + n, : one_ids.shape[1]] = one_ids
            mask[start : start + n, : one_mask.shape[1]] = one_mask
            start += n
        output = self.session.run(None, {"input_ids": ids, "attention_mask": mask})[0]
        return np.split(output, np.cumsum(rows)[:-1])

    def unbatch(self, output: list[np.ndarray]) -> list[np.ndarray]:
        return output

    def encode_response(self, output: np.ndarray, **kwargs: Any) -> dict[str, Any]:
        return {"output": output.tolist()}


def build(model: str) -> ls.LitServer:
    """The LitServer for ``model`` ("trivial" or "minilm")."""
    if model == "trivial":
        api: ls.LitAPI = TrivialAPI(api_path="/infer", max_batch_size=1)
    elif model == "minilm":
        api = MiniLMAPI(
            api_path="/infer", max_batch_size=MAX_BATCH_SIZE, batch_timeout=BATCH_TIMEOUT_S
        )
    else:
        raise SystemExit(f"BENCH_MODEL must be trivial or minilm, not {model!r}")
    return ls.LitServer(
        api,
        accelerator="cpu",
        devices=1,
        workers_per_device=int(os.environ.get("BENCH_LITSERVE_WORKERS", "1")),
        fast_queue=os.environ.get("BENCH_LITSERVE_FAST_QUEUE", "0") == "1",
    )


MAIN_PID = os.getpid()


def _interrupt(signum: int, frame: object) -> None:
    if os.getpid() == MAIN_PID:
        raise KeyboardInterrupt
    raise SystemExit(0)  # a forked worker that LitServe itself is stopping


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    server = build(os.environ.get("BENCH_MODEL", "trivial"))
    # A plain SIGTERM to this process would leave LitServe's worker processes behind: take it
    # as Ctrl-C, which LitServe answers with a graceful shutdown of all of them.
    signal.signal(signal.SIGTERM, _interrupt)
    server.run(
        host="127.0.0.1",
        port=args.port,
        num_api_servers=int(os.environ.get("BENCH_LITSERVE_API_SERVERS", "2")),
        log_level="warning",
        generate_client_file=False,
    )


if __name__ == "__main__":
    main()
