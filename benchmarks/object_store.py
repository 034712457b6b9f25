"""MiniLM served from object storage against the same files on local disk.

    python benchmarks/object_store.py [--seconds 5]

A moto S3 server (the S3 API over HTTP on 127.0.0.1) holds version 1 of the
sentence-embeddings example (the FP32 ONNX export, ~90 MB, its tokenizer and self-test).
Measured, with 2 workers each:

* cold start, seconds from ``servinglib serve`` to a 200 on /readyz: the files on local
  disk; from ``s3://`` with an empty cache (the master downloads, then the workers load);
  from ``s3://`` with a warm cache (nothing downloaded);
* steady state: ``hey`` at concurrency 1 and 8 on /infer with a sentence, local against
  ``s3://`` (the request path reads only the loaded model: the two should agree within
  noise).

Results are printed as Markdown for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _load import LoadResult, free_port, run_hey

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "sentence-embeddings"
SENTENCE = "The quick brown fox jumps over the lazy dog while the server batches requests for speed"


def build_version(directory: Path, reuse: Path | None = None) -> Path:
    """Version 1 (FP32) of the example: export, tokenizer, the committed self-test."""
    sys.path.insert(0, str(EXAMPLE))
    import prepare

    version = directory / "1"
    if reuse is not None:  # an earlier run's version directory
        shutil.copytree(reuse, version)
        return version
    version.mkdir(parents=True)
    prepare.export_fp32(version / "model.onnx")
    shutil.copy(prepare.model_dir() / "tokenizer.json", version / "tokenizer.json")
    shutil.copy(EXAMPLE / "models" / "minilm" / "1" / "test_data.json", version)
    return version


def service(directory: Path, repository: str) -> Path:
    """A one-model service of ``repository`` (the model's code beside the config)."""
    (directory / "code").mkdir(parents=True, exist_ok=True)
    shutil.copy(EXAMPLE / "models" / "minilm" / "model.py", directory / "code" / "model.py")
    config = directory / "servinglib.yaml"
    config.write_text(
        "service: bench-store\nserver: {workers: 2, threads: 16, log_level: warning}\n"
        "model_cache: {dir: cache}\nmodels:\n  - name: minilm\n"
        f"    class: code/model.py:SentenceEmbedder\n    repository: {repository}\n"
        "    default_version: '1'\n    batching: {max_batch_size: 32, max_queue_delay_us: 2000}\n"
    )
    return config


def start(config: Path, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], str, float]:
    """Serve ``config``; returns the process, its URL and the seconds it took to be ready."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "servinglib.cli.main", "serve", "--config", str(config)]
    started = time.perf_counter()
    log = (config.parent / f"server-{port}.log").open("wb")
    process = subprocess.Popen(
        [*command, "--port", str(port)], stdout=log, stderr=subprocess.STDOUT, env=env
    )
    while True:
        if process.poll() is not None:
            raise SystemExit(f"server exited; see {log.name}")
        try:
            with urllib.request.urlopen(url + "/readyz", timeout=2) as answer:
                if answer.status == 200:
                    return process, url, time.perf_counter() - started
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.05)


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    process.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--reuse", type=Path, help="version directory of an earlier run")
    args = parser.parse_args()
    import boto3
    from moto.server import ThreadedMotoServer

    work = Path(tempfile.mkdtemp(prefix="bench-store-"))
    local = work / "local"
    version = build_version(local / "models", args.reuse)
    size = sum(p.stat().st_size for p in version.iterdir())
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    moto.start()
    host, port = moto.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    credentials = {
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": endpoint,
    }
    env = {**os.environ, **credentials, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="bench",
        aws_secret_access_key="bench",
    )
    client.create_bucket(Bucket="bench-models")
    for path in version.iterdir():
        client.upload_file(str(path), "bench-models", f"minilm/1/{path.name}")
    body = {"model_id": "minilm", "features": {"text": SENTENCE}}
    rows, loads = [], []
    local_config = service(local, "models")
    remote_config = service(work / "s3", "s3://bench-models/minilm")
    # Each setup twice, interleaved: on a shared machine the spread between the two runs
    # of one setup is the noise the difference between setups must exceed.
    for label, config in (
        ("local disk", local_config),
        ("s3://, cold cache", remote_config),
        ("s3://, warm cache", remote_config),
        ("local disk", local_config),
        ("s3://, warm cache", remote_config),
    ):
        process, url, seconds = start(config, env)
        rows.append(f"| {label} | {seconds:.2f} |")
        if label != "s3://, cold cache":
            for concurrency in (1, 8):
                result: LoadResult = run_hey(label, f"{url}/infer", body, concurrency, args.seconds)
                loads.append(result.row())
        stop(process)
    moto.stop()
    print(f"Version 1 of the example: {size / 1e6:.1f} MB in {len(list(version.iterdir()))} files.")
    print("\n| Repository | Seconds to ready (2 workers) |\n|---|---|")
    print("\n".join(rows))
    print("\n| Setup | Concurrency | req/s | p50 ms | p95 ms | p99 ms | statuses |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(loads))
    print(json.dumps({"workdir": str(work)}))


if __name__ == "__main__":
    main()
