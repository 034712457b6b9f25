"""LitServe and MLServer as batching peers, each in its own venv under ``<repo>/.venv-peers``.

    from peers.batching_peers import request_body, start_litserve  # with benchmarks/ on sys.path

    server = start_litserve("minilm", workdir, env)  # env carries BENCH_ONNX (and BENCH_THREADS)
    path, body = request_body("litserve", "minilm", features)
    run_hey(label, server.url + path, body, 32, 10)
    server.stop()

Models: "trivial" (sum of 16 floats, batching off) and "minilm" (ONNX Runtime on ``BENCH_ONNX``,
batches of up to 32 within 2 ms). ``features`` is servinglib's: ``{"values": [16 floats]}`` or
``{"input_ids": [[...]], "attention_mask": [[...]]}``.

    python benchmarks/peers/batching_peers.py   # install both venvs, check every answer
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
VENVS = ROOT / ".venv-peers"
MODELS = ("trivial", "minilm")

sys.path.insert(0, str(HERE.parent))
from _load import Server, free_port  # noqa: E402

__all__ = [
    "PEERS",
    "answer",
    "ensure_venv",
    "request_body",
    "start_litserve",
    "start_mlserver",
]


def ensure_venv(name: str) -> Path:
    """Create ``.venv-peers/<name>`` with ``requirements-<name>.txt`` once; its bin dir.

    A stamp file holds the requirements' hash; when they change the venv is rebuilt.
    """
    requirements = HERE / f"requirements-{name}.txt"
    if not requirements.is_file():
        raise SystemExit(f"no {requirements}")
    digest = hashlib.sha256(requirements.read_bytes()).hexdigest()
    venv = VENVS / name
    stamp = venv / ".requirements.sha256"
    bin_dir = venv / "bin"
    if stamp.is_file() and stamp.read_text().strip() == digest:
        return bin_dir
    if venv.exists():
        print(f"[peers] {requirements.name} changed: rebuilding {venv}", flush=True)
        shutil.rmtree(venv)
    python = shutil.which("python3.11") or (
        sys.executable if sys.version_info[:2] == (3, 11) else None
    )
    if python is None:
        raise SystemExit("the batching peers need python3.11 on PATH to create their venvs")
    print(f"[peers] creating {venv}", flush=True)
    subprocess.run([python, "-m", "venv", str(venv)], check=True)
    log = venv / "pip-install.log"
    print(f"[peers] pip install -r {requirements.name} (log: {log})", flush=True)
    with log.open("wb") as out:
        done = subprocess.run(
            [str(bin_dir / "python"), "-m", "pip", "install", "-r", str(requirements)],
            stdout=out,
            stderr=subprocess.STDOUT,
            check=False,
        )
    if done.returncode != 0:
        tail = log.read_text(errors="replace").splitlines()[-15:]
        raise SystemExit(f"installing {requirements.name} failed:\n" + "\n".join(tail))
    site = next((venv / "lib").glob("python3.*/site-packages"))
    unwanted = [p.name for p in site.iterdir() if p.name.startswith(("torch", "nvidia"))]
    if unwanted:
        raise SystemExit(f"{venv} must not hold torch or CUDA packages: {unwanted}")
    stamp.write_text(digest + "\n")
    print(f"[peers] {venv} ready", flush=True)
    return bin_dir


def _check(model: str, env: dict[str, str]) -> None:
    if model not in MODELS:
        raise SystemExit(f"model must be one of {MODELS}, not {model!r}")
    if model == "minilm" and not env.get("BENCH_ONNX"):
        raise SystemExit("the minilm model needs BENCH_ONNX (path to model.onnx) in env")


def _wait_ok(server: Server, path: str, timeout: float = 120.0) -> Server:
    """Wait until ``path`` answers 200 (``Server`` also accepts 4xx as ready)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(server.url + path, timeout=2) as response:
                if response.status == 200:
                    return server
        except (urllib.error.HTTPError, OSError):
            pass
        if server.process.poll() is not None or time.monotonic() > deadline:
            server.stop()
            raise SystemExit(f"{server.url}{path} never answered 200; see the server log")
        time.sleep(0.2)


def start_litserve(model: str, workdir: Path, env: dict[str, str]) -> Server:
    """LitServe serving ``model``: ``POST /infer`` (see ``litserve_app.py``)."""
    _check(model, env)
    bin_dir = ensure_venv("litserve")
    port = free_port()
    command = [str(bin_dir / "python"), str(HERE / "litserve_app.py"), "--port", str(port)]
    server = Server(command, port, "/health", workdir, {**env, "BENCH_MODEL": model})
    return _wait_ok(server, "/health")


def start_mlserver(model: str, workdir: Path, env: dict[str, str]) -> Server:
    """MLServer serving ``model``: ``POST /v2/models/<model>/infer`` (see ``mlserver/``)."""
    _check(model, env)
    bin_dir = ensure_venv("mlserver")
    port = free_port()
    command = [
        str(bin_dir / "python"),
        str(HERE / "mlserver" / "serve.py"),
        "--port",
        str(port),
        "--grpc-port",
        str(free_port()),
    ]
    ready = f"/v2/models/{model}/ready"
    server = Server(command, port, ready, workdir, {**env, "BENCH_MODEL": model})
    return _wait_ok(server, ready)


PEERS: dict[str, Callable[[str, Path, dict[str, str]], Server]] = {
    "litserve": start_litserve,
    "mlserver": start_mlserver,
}


def _v2_input(name: str, rows: list[list[Any]], datatype: str) -> dict[str, Any]:
    return {
        "name": name,
        "shape": [len(rows), len(rows[0])],
        "datatype": datatype,
        "data": [value for row in rows for value in row],
    }


def request_body(peer: str, model: str, features: dict[str, Any]) -> tuple[str, Any]:
    """The URL path and JSON body to POST to ``peer`` serving ``model`` for ``features``."""
    if peer == "litserve":
        return "/infer", {"features": features}
    if peer != "mlserver":
        raise ValueError(f"peer must be one of {sorted(PEERS)}, not {peer!r}")
    if model == "trivial":
        inputs = [_v2_input("values", [list(features["values"])], "FP64")]
    else:
        inputs = [
            _v2_input(name, features[name], "INT64") for name in ("input_ids", "attention_mask")
        ]
    return f"/v2/models/{model}/infer", {"inputs": inputs}


def answer(peer: str, model: str, response: dict[str, Any]) -> Any:
    """The sum (trivial) or the embedding rows (minilm) from a peer's JSON response."""
    if peer == "litserve":
        return response["output"]["sum"] if model == "trivial" else response["output"]
    output = response["outputs"][0]
    if model == "trivial":
        return float(output["data"][0])
    width = output["shape"][1]
    data = output["data"]
    return [data[i : i + width] for i in range(0, len(data), width)]


def main() -> int:
    """Install both venvs, start each peer on each model, and check one answer from each."""
    import numpy as np
    import onnxruntime as ort
    from tokenizers import Tokenizer

    model_dir = ROOT / "examples/sentence-embeddings/models/minilm/2"
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tokenizer.no_padding()
    encoding = tokenizer.encode(
        "The quick brown fox jumps over the lazy dog while the server batches requests for speed"
    )
    minilm = {"input_ids": [encoding.ids], "attention_mask": [encoding.attention_mask]}
    session = ort.InferenceSession(
        str(model_dir / "model.onnx"), providers=["CPUExecutionProvider"]
    )
    expected = session.run(None, {k: np.asarray(v, dtype=np.int64) for k, v in minilm.items()})[0]
    trivial = {"values": [0.5 * i for i in range(16)]}
    env = {**os.environ, "BENCH_ONNX": str(model_dir / "model.onnx"), "BENCH_THREADS": "2"}
    failures = 0
    with tempfile.TemporaryDirectory(prefix="batching-peers-") as tmp:
        for peer, start in PEERS.items():
            for model, features in (("trivial", trivial), ("minilm", minilm)):
                server = start(model, Path(tmp), env)
                try:
                    path, body = request_body(peer, model, features)
                    request = urllib.request.Request(
                        server.url + path,
                        json.dumps(body).encode(),
                        {"Content-Type": "application/json"},
                    )
                    with urllib.request.urlopen(request, timeout=30) as response:
                        got = answer(peer, model, json.load(response))
                finally:
                    server.stop()
                if model == "trivial":
                    ok = got == sum(trivial["values"])
                    detail = f"sum {got}"
                else:
                    error = float(np.abs(np.asarray(got) - expected).max())
                    ok = error <= 1e-4
                    detail = f"max |diff| {error:.2e}"
                failures += not ok
                print(f"{peer:9} {model:8} {'ok' if ok else 'WRONG'} ({detail}) POST {path}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
