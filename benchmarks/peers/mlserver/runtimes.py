"""Custom MLServer runtimes for the batching-peer benchmarks (V2 / Open Inference protocol).

* ``SumRuntime`` ("trivial"): input ``values`` FP64 ``[n, 16]`` -> output ``sum`` FP64 ``[n, 1]``.
* ``MiniLMRuntime`` ("minilm"): inputs ``input_ids`` and ``attention_mask`` INT64
  ``[n, seq]`` -> output ``sentence_embedding`` FP32 ``[n, 384]``, on an ONNX Runtime session
  over ``BENCH_ONNX`` with ``BENCH_THREADS`` intra-op threads (default 2).

MLServer's adaptive batcher merges queued requests before ``predict`` by concatenating their
flat data and summing the first dimension, keeping the first request's other dimensions, so
requests batched together must share one sequence length (clients pad to a fixed length).
The runtime cannot pad: a batch whose data does not fill its shape is refused with 400, and
mixed lengths that happen to fill it are not detectable. With ``BENCH_BATCH_STATS=1`` the
runtime prints the batch-size histogram every 2 s while serving.
"""

from __future__ import annotations

import asyncio
import os

import numpy as np
from _batch_stats import BatchStats  # benchmarks/peers/, on the path set by serve.py
from mlserver import MLModel
from mlserver.codecs import NumpyCodec
from mlserver.errors import MLServerError
from mlserver.types import InferenceRequest, InferenceResponse, RequestInput


def _input(payload: InferenceRequest, name: str, dtype: type) -> np.ndarray:
    for request_input in payload.inputs:
        if request_input.name == name:
            return _as_array(request_input, dtype)
    raise MLServerError(f"missing input {name!r}", status_code=400)


def _as_array(request_input: RequestInput, dtype: type) -> np.ndarray:
    data = np.asarray(getattr(request_input.data, "root", request_input.data), dtype=dtype)
    shape = request_input.shape
    if data.size != int(np.prod(shape)):
        raise MLServerError(
            f"input {request_input.name!r} has {data.size} values for shape {shape} "
            "(requests batched together must share one sequence length)",
            status_code=400,
        )
    return data.reshape(shape)


class SumRuntime(MLModel):
    """Sum of each row of ``values``."""

    async def load(self) -> bool:
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        values = _input(payload, "values", np.float64)
        sums = values.reshape(values.shape[0], -1).sum(axis=1, keepdims=True)
        return InferenceResponse(
            model_name=self.name, outputs=[NumpyCodec.encode_output("sum", sums)]
        )


class MiniLMRuntime(MLModel):
    """MiniLM sentence embeddings with ONNX Runtime."""

    async def load(self) -> bool:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = int(os.environ.get("BENCH_THREADS", "2"))
        self.session = ort.InferenceSession(
            os.environ["BENCH_ONNX"], options, providers=["CPUExecutionProvider"]
        )
        self.stats = BatchStats()
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        ids = _input(payload, "input_ids", np.int64)
        mask = _input(payload, "attention_mask", np.int64)
        if ids.ndim != 2 or ids.shape != mask.shape:
            raise MLServerError(
                "input_ids and attention_mask must be [batch, seq] of one shape", status_code=400
            )
        self.stats.add(ids.shape[0])
        # Off the event loop, so the server keeps reading requests (and forming the next batch)
        # while ONNX Runtime works; ONNX Runtime releases the GIL.
        outputs = await asyncio.to_thread(
            self.session.run, None, {"input_ids": ids, "attention_mask": mask}
        )
        embedding = outputs[0]
        return InferenceResponse(
            model_name=self.name,
            outputs=[NumpyCodec.encode_output("sentence_embedding", embedding)],
        )
