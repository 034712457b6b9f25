"""Models served from object storage: a real S3 API (moto server) over HTTP on 127.0.0.1,
reached through boto3/s3fs as in a deployment; servinglib's I/O is not patched."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import requests

from servinglib.serve.admin_client import AdminClient
from tests.conftest import LiveServer, free_port, run_cli, stop
from tests.integration.test_admin_rollout import TOKEN, Load
from tests.object_store import S3Store, StallingProxy

pytestmark = pytest.mark.integration

FIXTURE = Path(__file__).parent.parent / "fixtures" / "service" / "models" / "scorer"


def version_files(weight: float) -> dict[str, bytes]:
    """A scorer version: its weights and a self-test that expects them."""
    cases = {"cases": [{"name": "unit x", "input": {"x": 1.0}, "expected": {"score": weight}}]}
    return {
        "weights.json": json.dumps({"weight": weight}).encode(),
        "test_data.json": json.dumps(cases).encode(),
    }


def service(
    tmp_path: Path, url: str, *, admin_port: int = 0, extra: str = "", cache: str = "cache"
) -> Path:
    """A service whose scorer comes from ``url`` (its code stays beside the config)."""
    (tmp_path / "code").mkdir(exist_ok=True)
    shutil.copy(FIXTURE / "model.py", tmp_path / "code" / "model.py")
    text = (
        "service: store-test\n"
        "server: {workers: 2, threads: 4}\n"
        f"model_cache: {{dir: {cache}}}\n"
        "models:\n"
        "  - name: scorer\n"
        "    class: code/model.py:ScorerModel\n"
        f"    repository: {url}\n"
        '    default_version: "2"\n'
        f"{extra}"
    )
    if admin_port:
        text += f"admin: {{enabled: true, port: {admin_port}}}\n"
    config = tmp_path / "servinglib.yaml"
    config.write_text(text)
    return config


def bucket(store: S3Store, name: str) -> str:
    store.client.create_bucket(Bucket=name)
    store.put_tree(name, "scorer/1", version_files(1.5))
    store.put_tree(name, "scorer/2", version_files(3.0))
    return f"s3://{name}/scorer"


def infer(url: str) -> dict[str, Any]:
    response = requests.post(
        f"{url}/infer", json={"model_id": "scorer", "features": {"x": 1.0}}, timeout=10
    )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def wait_until(condition: Any, what: str, timeout_s: float = 60) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = condition()
        if result:
            return result
        time.sleep(0.1)
    pytest.fail(f"timed out after {timeout_s}s waiting for {what}")


def worker_states(client: AdminClient, version: str) -> dict[str, str]:
    workers = client.status()["workers"]
    return {
        pid: w["models"]["scorer"]["versions"].get(version, {}).get("state", "ABSENT")
        for pid, w in workers.items()
    }


def test_two_workers_download_once_sync_new_versions_under_load_and_refuse_a_bad_pin(
    tmp_path: Path, s3_store: S3Store, start_server: Any
) -> None:
    url = bucket(s3_store, "serve-sync")
    good = version_files(6.0)
    pin = hashlib.sha256(good["weights.json"]).hexdigest()
    config = service(
        tmp_path,
        url,
        admin_port=(admin_port := free_port()),
        extra=f'    model_sync: {{interval_s: 0.3}}\n    sha256: {{"6/weights.json": "{pin}"}}\n',
    )
    start = len(s3_store.log.lines)
    env = {**s3_store.env, "SERVINGLIB_ADMIN_TOKEN": TOKEN}
    server: LiveServer = start_server(config, "--workers", "2", env=env)
    gets = s3_store.log.gets(start)
    keys = [f"/serve-sync/scorer/{v}/{f}" for v in ("1", "2") for f in good]
    assert {k: gets[k] for k in keys} == dict.fromkeys(keys, 1), gets  # once per server
    first = infer(server.url)
    assert (first["version"], first["output"]) == ("2", {"score": 3.0})
    client = AdminClient(admin_port, TOKEN)
    with Load(server.url) as load:
        s3_store.put_tree("serve-sync", "scorer/5", version_files(5.0))
        states = wait_until(
            lambda: (s := worker_states(client, "5")) and set(s.values()) == {"READY"} and s,
            "version 5 READY in every worker",
        )
        assert len(states) == 2
        client.promote("scorer", "5")
        wait_until(lambda: infer(server.url)["version"] == "5", "version 5 answering")
        # A file that differs from its pin: FAILED with both digests; 5 keeps serving.
        s3_store.put_tree("serve-sync", "scorer/6", {**good, "weights.json": b'{"weight": 7}'})
        states = wait_until(
            lambda: (s := worker_states(client, "6")) and set(s.values()) == {"FAILED"} and s,
            "version 6 FAILED in every worker",
        )
    assert len(states) == 2
    reason = client.status()["workers"].popitem()[1]["models"]["scorer"]["versions"]["6"]
    assert pin in reason["reason"]
    assert hashlib.sha256(b'{"weight": 7}').hexdigest() in reason["reason"]
    assert load.errors == []
    assert set(load.statuses) == {200}, load.statuses
    assert load.versions["5"] > 0
    assert infer(server.url)["version"] == "5"
    models = requests.get(f"{server.url}/models", timeout=10).json()["models"]
    sync = next(m for m in models if m["name"] == "scorer")["sync"]
    assert sync["ok"] is True
    assert sync["store_versions"] == ["1", "2", "5", "6"]


def test_store_down_warm_cache_serves_cold_cache_waits_for_the_store(
    tmp_path: Path, s3_store: S3Store, start_server: Any
) -> None:
    from moto.server import ThreadedMotoServer

    url = bucket(s3_store, "store-down")
    config = service(tmp_path, url)
    filled = subprocess.run(  # validate fills the cache, as a server's start would
        [sys.executable, "-m", "servinglib.cli.main", "validate", "--config", str(config)],
        env=_python_env() | s3_store.env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert filled.returncode == 0, filled.stderr
    dead = free_port()  # nothing listens there: the store is down
    down = {**s3_store.env, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{dead}"}
    warm = start_server(config, env=down)
    assert infer(warm.url)["output"] == {"score": 3.0}
    assert "cannot list s3://store-down/scorer" in warm.log()
    stop(warm.process)

    extra = "    model_sync: {interval_s: 1}\n"  # retries back off up to the interval
    cold = service(tmp_path, url, cache="cold-cache", extra=extra)
    port = free_port()
    log_path = tmp_path / "cold.log"
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            [sys.executable, "-m", "servinglib.cli.main", "serve", "--config", str(cold)],
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env={**down, "SERVINGLIB_PORT": str(port), "PATH": ""} | _python_env(),
        )
    try:
        base = f"http://127.0.0.1:{port}"
        wait_until(lambda: _ready_answer(base) is not None, "an answer")
        answer = _ready_answer(base)
        assert answer is not None
        assert answer.status_code == 503
        assert "scorer" in answer.json()["models"][0]["sync"]["error"]
        wait_until(lambda: "no version is cached" in log_path.read_text(), "the cold-cache error")
        sync = wait_until(lambda: _sync_of(base), "the sync state in /models")
        assert sync["ok"] is False
        assert "cannot list s3://store-down/scorer" in sync["error"]
        back = ThreadedMotoServer(ip_address="127.0.0.1", port=dead, verbose=False)
        back.start()  # the same in-process backend: the store is back with its objects
        try:
            wait_until(
                lambda: (r := _ready_answer(base)) is not None and r.status_code == 200,
                "ready once the store answers",
            )
            # /readyz answered for one worker; until the other has loaded too, it answers
            # 503 with Retry-After (the version is coming), never 404.
            answers: list[requests.Response] = []
            wait_until(lambda: _infer_answer(base, answers).status_code == 200, "an answer")
            early = [(r.status_code, r.headers.get("Retry-After")) for r in answers[:-1]]
            assert set(early) <= {(503, "5")}, [r.text for r in answers]
            # not here yet, or here and still loading (LOADING, SELF_TEST, WARMING)
            assert all(
                "model 'scorer' version '2' is " in r.json()["error"] for r in answers[:-1]
            ), [r.text for r in answers]
            assert answers[-1].json()["output"] == {"score": 3.0}
        finally:
            back.stop()
    finally:
        stop(process)


def _python_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k not in ("AWS_ENDPOINT_URL",)} | {
        "PATH": os.environ.get("PATH", "")
    }


def _infer_answer(base: str, answers: list[requests.Response]) -> requests.Response:
    body = {"model_id": "scorer", "features": {"x": 1.0}}
    answers.append(requests.post(f"{base}/infer", json=body, timeout=10))
    return answers[-1]


def _ready_answer(base: str) -> requests.Response | None:
    try:
        return requests.get(f"{base}/readyz", timeout=2)
    except requests.RequestException:
        return None


def _sync_of(base: str) -> dict[str, Any] | None:
    try:
        models = requests.get(f"{base}/models", timeout=2).json()["models"]
    except (requests.RequestException, ValueError):
        return None
    sync: dict[str, Any] | None = next(m for m in models if m["name"] == "scorer").get("sync")
    return sync if sync and sync.get("polls", 0) >= 1 else None


def test_a_killed_download_leaves_no_partial_version(
    tmp_path: Path, s3_store: S3Store, start_server: Any
) -> None:
    url = bucket(s3_store, "killed")
    big = bytes(range(256)) * (16 << 10)  # 4 MiB that the proxy stops half-way
    s3_store.put_tree("killed", "scorer/2", {"padding.bin": big})
    config = service(tmp_path, url)
    port = int(s3_store.endpoint.rsplit(":", 1)[1])
    proxy = StallingProxy(port, stall_after=1 << 20)
    env = {**_python_env(), **s3_store.env, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{proxy.port}"}
    selftest = subprocess.Popen(
        [sys.executable, "-m", "servinglib.cli.main", "selftest", "--config", str(config)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert proxy.stalled.wait(60), "the download never started"
        cache = next((tmp_path / "cache").iterdir())
        wait_until(lambda: list(cache.glob(".partial-2-*/padding.bin")), "a partial file")
        selftest.kill()  # SIGKILL mid-download
        selftest.wait()
    finally:
        proxy.close()
    assert not (cache / "2").exists()  # the half download is invisible under its name
    server = start_server(config, env=s3_store.env)  # the next sync finishes it
    assert infer(server.url)["output"] == {"score": 3.0}
    assert (cache / "2" / "padding.bin").read_bytes() == big
    assert not list(cache.glob(".partial-*"))


def test_selftest_validate_and_batch_predict_run_on_a_url_repository(
    tmp_path: Path, s3_store: S3Store
) -> None:
    url = bucket(s3_store, "ci-selftest")
    s3_store.put_tree("ci-selftest", "scorer/3", {**version_files(2.0), "weights.json": b"{}"})
    config = service(tmp_path, url)
    import os

    os.environ.update(s3_store.env)  # the CLI inherits the AWS chain
    try:
        failed = run_cli("selftest", "--config", str(config))
        s3_store.client.delete_object(Bucket="ci-selftest", Key="scorer/3/weights.json")
        s3_store.client.delete_object(Bucket="ci-selftest", Key="scorer/3/test_data.json")
        passed = run_cli("selftest", "--config", str(config))
        valid = run_cli("validate", "--config", str(config))
        (tmp_path / "rows.csv").write_text("x\n1.0\n2.0\n")
        scored = run_cli(
            "batch-predict",
            "--config",
            str(config),
            "--model",
            "scorer",
            "--input",
            str(tmp_path / "rows.csv"),
            "--output",
            str(tmp_path / "scores"),
            "--no-progress",
        )
    finally:
        for key in s3_store.env:
            os.environ.pop(key, None)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "scorer" in failed.stdout
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert valid.returncode == 0, valid.stdout + valid.stderr
    assert scored.returncode == 0, scored.stdout + scored.stderr
    assert "2 rows, 0 errors" in scored.stdout + scored.stderr


def test_a_missing_store_package_is_a_config_error(tmp_path: Path) -> None:
    config = service(tmp_path, "nosuchproto://bucket/scorer")
    result = run_cli("validate", "--config", str(config))
    assert result.returncode != 0
    assert "models[0].repository" in result.stderr
    assert "nosuchproto" in result.stderr


def test_admin_load_fetches_a_store_version_and_when_ready_promotes_by_itself(
    tmp_path: Path, s3_store: S3Store, start_server: Any
) -> None:
    url = bucket(s3_store, "admin-load")
    admin_port = free_port()
    config = service(tmp_path, url, admin_port=admin_port)
    env = {**s3_store.env, "SERVINGLIB_ADMIN_TOKEN": TOKEN}
    server = start_server(config, env=env)
    s3_store.put_tree("admin-load", "scorer/7", version_files(7.0))
    client = AdminClient(admin_port, TOKEN)
    status, body = client.call("POST", "/admin/models/scorer/versions/8/load")
    assert status == 404
    assert "no version '8'" in body["error"]
    client.wait_converged(client.load("scorer", "7")["revision"])
    assert set(client.wait_for("scorer", "7").values()) == {"READY"}
    client.promote("scorer", "7")
    wait_until(lambda: infer(server.url)["version"] == "7", "version 7 answering")
    stop(server.process)

    (tmp_path / "auto").mkdir()
    auto = service(
        tmp_path / "auto",
        url,
        extra="    model_sync: {interval_s: 0.3, promote: when_ready}\n",
    )
    server = start_server(auto, env=s3_store.env)
    assert infer(server.url)["version"] == "2"
    s3_store.put_tree("admin-load", "scorer/9", version_files(9.0))
    wait_until(lambda: infer(server.url)["version"] == "9", "version 9 promoted by itself")
    metrics = requests.get(f"{server.url}/metrics", timeout=10).text
    assert 'servinglib_model_sync_up{model="scorer"} 1.0' in metrics
    assert 'servinglib_model_sync_downloads_total{model="scorer"} 1.0' in metrics
