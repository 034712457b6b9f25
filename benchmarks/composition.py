"""Composed models against calling their members directly, side by side in one server.

Serves the composition fixture of the test suite (3-step pipeline with a batched ONNX
middle step; a 2-member ensemble) and drives each route with `hey` at concurrency 1:

- pipeline overhead per step: (p50 of the pipeline - sum of the p50s of its three steps
  called directly over HTTP) / 3;
- ensemble: p50 of the 2-member ensemble against the slower member's p50.

Run: ``flock /tmp/servinglib-heavy.lock python benchmarks/composition.py``.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._load import Server, free_port, run_hey  # noqa: E402
from benchmarks.composition_service import composition_service  # noqa: E402

SECONDS = 4.0
VALUES = [1.0, 2.0, 3.0, 4.0]
ROUTES = {
    "prep (step 1, direct)": {"model_id": "prep", "features": {"values": VALUES}},
    "linear (step 2, direct, ONNX)": {"model_id": "linear", "features": {"x": [VALUES]}},
    "head (step 3, direct)": {"model_id": "head", "features": {"y": [[4.0, 6.0]]}},
    "classify (3-step pipeline)": {
        "model_id": "classify",
        "version": "1",
        "features": {"values": VALUES},
    },
    "const (member 1, direct)": {"model_id": "const", "features": {}},
    "flaky (member 2, direct)": {"model_id": "flaky", "features": {}},
    "pair (2-member ensemble)": {"model_id": "pair", "features": {}},
}


def main() -> None:
    with tempfile.TemporaryDirectory() as directory:
        config = composition_service(Path(directory) / "service")
        port = free_port()
        command = [sys.executable, "-m", "servinglib.cli", "serve", "--config", str(config)]
        command += ["--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
        env = {**os.environ, "SERVINGLIB_LOG_LEVEL": "warning"}
        server = Server(command, port, "/readyz", Path(directory), env)
        try:
            p50 = {}
            print("| route | c | req/s | p50 ms | p99 ms |\n|---|---|---|---|---|")
            for label, body in ROUTES.items():
                run_hey(label, server.url + "/infer", body, 1, 1.0)  # warm up
                result = run_hey(label, server.url + "/infer", body, 1, SECONDS)
                assert set(result.statuses) == {200}, (label, result.statuses)
                p50[label] = result.p50_ms
                print(
                    f"| {label} | 1 | {result.rps:.0f} | {result.p50_ms:.2f} | "
                    f"{result.p99_ms:.2f} |"
                )
        finally:
            server.stop()
    steps = [p50[k] for k in list(ROUTES)[:3]]
    overhead = (p50["classify (3-step pipeline)"] - sum(steps)) / 3
    slower = max(p50["const (member 1, direct)"], p50["flaky (member 2, direct)"])
    print(f"\npipeline overhead per step over direct calls: {overhead:+.3f} ms (target <= 0.3)")
    print(
        f"ensemble p50 - slower member p50: {p50['pair (2-member ensemble)'] - slower:+.3f} ms "
        "(target <= 0.5)"
    )


if __name__ == "__main__":
    main()
