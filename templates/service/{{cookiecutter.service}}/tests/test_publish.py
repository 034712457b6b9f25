"""CI's publish job end to end: `servinglib publish` into an S3 API on this machine (moto in
server mode), then `servinglib serve` from the bucket answers as the local folders do."""

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
import requests
import yaml
from flask.testing import FlaskClient
from moto.server import ThreadedMotoServer
from servinglib.testing import infer

BUCKET = "models"


@pytest.fixture(scope="module")
def store_env() -> Iterator[dict[str, str]]:
    """A fresh S3 API on a free loopback port, and the AWS_* variables that reach it."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_ENDPOINT_URL": f"http://{host}:{port}",
    }
    boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], **_keys(env)).create_bucket(
        Bucket=BUCKET
    )
    yield {**os.environ, **env}
    server.stop()


def _keys(env: dict[str, str]) -> dict[str, str]:
    return {
        "aws_access_key_id": env["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": env["AWS_SECRET_ACCESS_KEY"],
        "region_name": env["AWS_DEFAULT_REGION"],
    }


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _bucket_config(config_path: Path, to: str, cache: Path) -> tuple[Path, dict[str, Path]]:
    """A copy of servinglib.yaml beside it whose local repositories are the bucket's."""
    document = yaml.safe_load(config_path.read_text())
    local = {}
    for model in document["models"]:
        if "://" not in str(model.get("repository", "://")):
            local[model["name"]] = config_path.parent / model["repository"]
            model["repository"] = f"{to}/{model['name']}"
    document["model_cache"] = {"dir": str(cache)}
    copy = config_path.parent / f".publish-test-{os.getpid()}.yaml"
    copy.write_text(yaml.safe_dump(document))
    return copy, local


def _serve(config: Path, env: dict[str, str], log: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    command = [sys.executable, "-m", "servinglib", "serve", "--config", str(config)]
    command += ["--port", str(port), "--workers", "1"]
    with log.open("wb") as handle:
        process = subprocess.Popen(command, env=env, stdout=handle, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"servinglib serve exited {process.returncode}:\n{log.read_text()}")
        try:
            if requests.get(f"{url}/readyz", timeout=2).status_code == 200:
                return process, url
        except requests.RequestException:
            pass
        time.sleep(0.2)
    process.terminate()
    pytest.fail(f"servinglib serve not ready after 120 s:\n{log.read_text()}")


def test_published_versions_serve_from_the_bucket(
    servinglib_config_path: Path,
    servinglib_client: FlaskClient,
    store_env: dict[str, str],
    tmp_path: Path,
) -> None:
    service = yaml.safe_load(servinglib_config_path.read_text())["service"]
    to = f"s3://{BUCKET}/{service}"
    publish = [sys.executable, "-m", "servinglib", "publish", "--config"]
    publish += [str(servinglib_config_path), "--to", to]
    published = subprocess.run(publish, env=store_env, capture_output=True, text=True, check=False)
    assert published.returncode == 0, published.stderr

    config, local = _bucket_config(servinglib_config_path, to, tmp_path / "cache")
    try:
        process, url = _serve(config, store_env, tmp_path / "serve.log")
    finally:
        config.unlink()
    try:
        for model, repository in local.items():
            for test_data in sorted(repository.glob("*/test_data.json")):
                version = test_data.parent.name
                features = json.loads(test_data.read_text())["cases"][0]["input"]
                body = {"model_id": model, "version": version, "features": features}
                answer = requests.post(f"{url}/infer", json=body, timeout=30)
                assert answer.status_code == 200, answer.text
                expected = infer(servinglib_client, model, features, version)
                assert answer.json()["output"] == expected, (model, version)
    finally:
        process.terminate()
        process.wait(timeout=60)
