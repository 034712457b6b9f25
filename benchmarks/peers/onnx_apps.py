"""Peers serving the MiniLM ONNX file: the seed's FastAPI design and a naive Flask app.

Both read ``BENCH_ONNX`` (the model path) and take the same pre-tokenized request as
servinglib: ``{"features": {"input_ids": [[...]], "attention_mask": [[...]]}}``.

    uvicorn --port PORT benchmarks.peers.onnx_apps:fastapi_app
    gunicorn -k gthread --threads 8 -b 127.0.0.1:PORT 'benchmarks.peers.onnx_apps:flask_app'
"""

from __future__ import annotations

import asyncio
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import onnxruntime as ort
from fastapi import FastAPI, Request
from flask import Flask, jsonify, request

_options = ort.SessionOptions()
_options.intra_op_num_threads = int(os.environ.get("BENCH_THREADS", "2"))
session = ort.InferenceSession(
    os.environ["BENCH_ONNX"], _options, providers=["CPUExecutionProvider"]
)
executor = ThreadPoolExecutor(max_workers=8)


def run(features: dict[str, Any]) -> list[float]:
    inputs = {
        name: np.asarray(features[name], dtype=np.int64) for name in ("input_ids", "attention_mask")
    }
    result: list[float] = session.run(None, inputs)[0].tolist()
    return result


fastapi_app = FastAPI()


@fastapi_app.post("/infer")
async def fastapi_infer(req: Request) -> dict[str, Any]:
    body = await req.json()
    loop = asyncio.get_running_loop()
    return {"output": await loop.run_in_executor(executor, run, body["features"])}


flask_app = Flask(__name__)


@flask_app.post("/infer")
def flask_infer() -> Any:
    return jsonify(output=run(request.get_json()["features"]))
