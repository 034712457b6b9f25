"""The hand-written baseline: Flask under gunicorn, no batching, no metrics, no validation.

Run: gunicorn -w 2 -k gthread --threads 8 -b 127.0.0.1:PORT 'benchmarks.peers.naive_flask:app'
"""

from __future__ import annotations

from typing import Any

from flask import Flask, jsonify, request

app = Flask(__name__)


@app.post("/infer")
def infer() -> Any:
    features = request.get_json()["features"]
    return jsonify(output={"sum": float(sum(features["values"]))})
