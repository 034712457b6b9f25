"""The design of seed 000: FastAPI + uvicorn, model work on a ThreadPoolExecutor(max_workers=8).

Run: uvicorn --workers 2 --port PORT benchmarks.peers.seed_fastapi:app
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from fastapi import FastAPI, Request

app = FastAPI(title="High-Throughput ML Gateway")
executor = ThreadPoolExecutor(max_workers=8)


def run_model(features: dict[str, Any]) -> dict[str, float]:
    return {"sum": float(sum(features["values"]))}


@app.post("/infer")
async def infer(request: Request) -> dict[str, Any]:
    body = await request.json()
    loop = asyncio.get_running_loop()
    output = await loop.run_in_executor(executor, run_model, body["features"])
    return {"output": output}
