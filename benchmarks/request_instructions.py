"""CPU instructions per trivial /infer request, this tree beside another: a speed check
that a busy machine cannot blur.

    python benchmarks/request_instructions.py --baseline DIR    # DIR: git archive REV servinglib | tar -x -C DIR
    python benchmarks/request_instructions.py --requests 800
    python benchmarks/request_instructions.py --env OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=http://127.0.0.1:9/v1/traces  # tracing on, nothing sampled

Requests/s on a shared machine moves by 20 % between runs of the same tree; instructions do
not. Each tree serves the trivial model (benchmarks/services/trivial, metrics and the JSON
access log on; ``--env`` adds environment variables, e.g. to turn tracing on, as a worker
does after its fork) in one process: the asyncio worker's own HTTP protocol class and ASGI app,
fed complete requests over 8 kept-alive in-memory connections (no sockets, so the kernel's
share is left out). After a warm-up, valgrind's callgrind counts the instructions of every
thread (the event loop, the log writer, the watchdog) over ``--requests`` requests.
Needs valgrind (Debian: apt-get install valgrind); about a minute per tree.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "benchmarks/services/trivial/servinglib.yaml"
BODY = json.dumps({"model_id": "summer16", "features": {"values": [0.5] * 16}}).encode()
REQUEST = (
    b"POST /infer HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    b"Content-Length: " + str(len(BODY)).encode() + b"\r\n\r\n" + BODY
)
CONNECTIONS = 8


class _Transport:
    """An in-memory transport: resolves ``done`` once a whole response is written."""

    def __init__(self) -> None:
        self.done: asyncio.Future[bytes] | None = None
        self._buffer = b""

    def write(self, data: bytes) -> None:
        self._buffer += data
        head, found, rest = self._buffer.partition(b"\r\n\r\n")
        if not found:
            return
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        if len(rest) >= length and self.done is not None:
            self._buffer, done, self.done = b"", self.done, None
            done.set_result(head)

    def writelines(self, parts: list[bytes]) -> None:
        self.write(b"".join(parts))

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 50000)}.get(
            name, default
        )

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def _serve(requests: int, flag: str) -> None:
    """The child: build the tree's worker, warm up, then answer ``requests`` when told."""
    import gc

    from uvicorn.config import Config
    from uvicorn.server import ServerState

    from servinglib.http.app import create_asgi_app
    from servinglib.monitoring.logs import configure_logging
    from servinglib.serve.app import worker_from_environment
    from servinglib.serve.asgi_worker import limited_protocol
    from servinglib.serve.tracing_setup import start_tracing, stop_tracing

    start_tracing()  # when --env asks for it, as gunicorn's post_fork hook does
    serving = worker_from_environment()
    server = serving.config.server
    configure_logging(server.log_level, server.log_format)
    app = create_asgi_app(serving.service, serving.metrics, server, liveness=serving.is_live)
    protocol = limited_protocol(8190, 100)
    config = Config(app=app, loop="none", http=protocol, lifespan="off", access_log=False)
    config.load()
    state, loop = ServerState(), asyncio.get_running_loop()
    connections = []
    for _ in range(CONNECTIONS):
        transport, connection = (
            _Transport(),
            protocol(config=config, server_state=state, app_state={}),
        )
        connection.connection_made(transport)  # type: ignore[arg-type]  # in memory
        connections.append((connection, transport))

    async def one(connection: Any, transport: _Transport) -> None:
        transport.done = loop.create_future()
        connection.data_received(REQUEST)
        head = await transport.done
        assert head.startswith(b"HTTP/1.1 200"), head

    async def rounds(count: int) -> None:
        for _ in range(count // CONNECTIONS):
            await asyncio.gather(*(one(c, t) for c, t in connections))

    await rounds(1600)  # warm-up: the lanes learn their quick calls, caches fill
    gc.collect()
    gc.freeze()  # as gunicorn's post_worker_init does
    print("READY", flush=True)
    while not os.path.exists(flag + ".go"):
        await asyncio.sleep(0.05)
    await rounds(requests)
    print("DONE", flush=True)
    while not os.path.exists(flag + ".stop"):
        await asyncio.sleep(0.05)
    serving.close()
    stop_tracing()


def count(tree: Path | None, requests: int, environ: dict[str, str] | None = None) -> float:
    """Instructions per request of ``tree`` (None: this checkout), ``environ`` added."""
    work = Path(tempfile.mkdtemp(prefix="servinglib-instructions-"))
    flag, out = str(work / "flag"), work / "callgrind.out"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SERVINGLIB_")}
    env |= {
        "PYTHONPATH": str(tree or ROOT),
        "SERVINGLIB_CONFIG": str(CONFIG),
        "PROMETHEUS_MULTIPROC_DIR": str(work),
        **(environ or {}),
    }
    command = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}"]
    command += [sys.executable, __file__, "--child", str(requests), flag]
    with (work / "stderr").open("w") as stderr:
        child = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=stderr, text=True, env=env, cwd=work
        )
        assert child.stdout is not None

        def wait_for(word: str) -> None:
            for line in child.stdout:  # type: ignore[union-attr]
                if line.strip() == word:
                    return
            raise SystemExit(f"the server of {tree or ROOT} stopped; see {work / 'stderr'}")

        wait_for("READY")
        subprocess.run(["callgrind_control", "-i", "on", str(child.pid)], check=True)
        Path(flag + ".go").touch()
        wait_for("DONE")
        subprocess.run(["callgrind_control", "-i", "off", str(child.pid)], check=True)
        Path(flag + ".stop").touch()
        child.wait()
    total = 0
    for dump in work.glob("callgrind.out*"):
        for line in dump.read_text().splitlines():
            if line.startswith(("summary:", "totals:")):
                total = max(total, int(line.split()[1]))
    return total / requests


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        asyncio.run(_serve(int(sys.argv[2]), sys.argv[3]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", type=Path, help="another source tree of servinglib")
    parser.add_argument("--requests", type=int, default=400, help="requests counted per tree")
    parser.add_argument("--repeats", type=int, default=1, help="counts per tree (median kept)")
    parser.add_argument(
        "--env", action="append", default=[], metavar="NAME=VALUE", help="for both trees"
    )
    args = parser.parse_args()
    environ = dict(pair.split("=", 1) for pair in args.env)
    trees: list[tuple[str, Path | None]] = [("this tree", None)]
    if args.baseline:
        trees.append((f"baseline {args.baseline}", args.baseline))
    counts: dict[str, list[float]] = {label: [] for label, _ in trees}
    for _ in range(args.repeats):
        for label, tree in trees:
            started = time.monotonic()
            counts[label].append(count(tree, args.requests, environ))
            print(f"{label}: {counts[label][-1]:,.0f} ({time.monotonic() - started:.0f} s)")
    medians = {label: sorted(c)[len(c) // 2] for label, c in counts.items()}
    print("| tree | instructions per /infer request |\n|---|---|")
    for label, value in medians.items():
        print(f"| {label} | {value:,.0f} |")
    if args.baseline:
        ratio = medians["this tree"] / medians[f"baseline {args.baseline}"]
        print(f"\nthis tree / baseline: {ratio:.3f}x the instructions")


if __name__ == "__main__":
    main()
