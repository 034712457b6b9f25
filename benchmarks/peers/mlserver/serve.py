"""Start MLServer on one model of this folder, on 127.0.0.1 and the given HTTP port.

Run in the MLServer venv (see ``batching_peers.ensure_venv("mlserver")``)::

    BENCH_MODEL=trivial python benchmarks/peers/mlserver/serve.py --port N
    BENCH_MODEL=minilm BENCH_ONNX=model.onnx python benchmarks/peers/mlserver/serve.py --port N

Does what ``mlserver start`` does with ``settings.json`` and ``<model>/model-settings.json``
from this folder, but loads only the selected model and overrides the ports: the gRPC server
(which MLServer cannot turn off) gets ``--grpc-port`` or a free port.

Settings, from short ``hey -c 32`` runs on 2 cores: inference in the server process
(``parallel_workers: 0``; MLServer's default of one worker process gave a quarter of the
trivial throughput and no gain on MiniLM), metrics server and its per-request middleware off
(``metrics_endpoint: null``; on, the trivial model lost a third), access log off
(``debug: false``). ``BENCH_MLSERVER_WORKERS=N`` and ``BENCH_MLSERVER_METRICS=1`` override.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--grpc-port", type=int, default=0, help="default: a free port")
    args = parser.parse_args()
    model = os.environ.get("BENCH_MODEL", "trivial")
    if model not in ("trivial", "minilm"):
        raise SystemExit(f"BENCH_MODEL must be trivial or minilm, not {model!r}")

    # The runtimes module must import here and in MLServer's worker processes.
    sys.path[:0] = [str(HERE), str(HERE.parent)]  # runtimes.py, and _batch_stats.py
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(HERE), str(HERE.parent), os.environ.get("PYTHONPATH", "")) if p
    )
    from mlserver import MLServer
    from mlserver.repository.load import load_model_settings
    from mlserver.settings import Settings
    from mlserver.utils import install_uvloop_event_loop

    options = json.loads((HERE / "settings.json").read_text())
    options.update(
        http_port=args.port,
        grpc_port=args.grpc_port or _free_port(),
        model_repository_root=str(HERE / model),
    )
    if "BENCH_MLSERVER_WORKERS" in os.environ:
        options["parallel_workers"] = int(os.environ["BENCH_MLSERVER_WORKERS"])
    if os.environ.get("BENCH_MLSERVER_METRICS") == "1":
        options.update(metrics_endpoint="/metrics", metrics_port=_free_port())
    settings = Settings(**options)
    model_settings = load_model_settings(str(HERE / model / "model-settings.json"))

    async def serve() -> None:  # MLServer installs its signal handlers on the running loop
        await MLServer(settings).start([model_settings])

    install_uvloop_event_loop()
    asyncio.run(serve())


if __name__ == "__main__":
    main()
