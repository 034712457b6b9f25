"""servinglib batch-predict as a command: refusal, resume after SIGKILL, Ray, serving results."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import requests

from tests.conftest import LiveServer, free_port

pytestmark = pytest.mark.integration

FIXTURE = Path(__file__).parent.parent / "fixtures" / "batch"
CONFIG = FIXTURE / "servinglib.yaml"
_RAY_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}


def _input(path: Path, n: int, row_group_size: int) -> Path:
    rows = [
        {"id": i, "x": i, "extra": [1.5] if i % 7 == 0 else ([float("nan")] if i == 9 else [])}
        for i in range(n)
    ]
    schema = pa.schema([("id", pa.int64()), ("x", pa.int64()), ("extra", pa.list_(pa.float64()))])
    pq.write_table(pa.Table.from_pylist(rows, schema), path, row_group_size=row_group_size)
    return path


def _command(*args: str, config: Path = CONFIG) -> list[str]:
    return [
        sys.executable, "-m", "servinglib.cli.main", "batch-predict", "--config", str(config),
        "--model", "summer", "--id-column", "id", "--no-progress", "--max-error-rate", "0.2",
        *args,
    ]  # fmt: skip


def _wait_for(
    condition: Callable[[], bool],
    what: str,
    process: subprocess.Popen[bytes] | None = None,
    timeout_s: float = 120,
) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if process is not None and process.poll() is not None:
            pytest.fail(f"the job exited with {process.returncode} before {what}")
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_a_version_failing_its_self_tests_is_refused_with_exit_1(tmp_path: Path) -> None:
    source = _input(tmp_path / "in.parquet", 10, 10)
    done = subprocess.run(
        _command("--version", "2", "--input", str(source), "--output", str(tmp_path / "out")),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1
    assert "refusing to score" in done.stderr
    assert "self-test 'two plus extras' failed" in done.stderr
    assert not (tmp_path / "out").exists()


def _recorded(out: Path) -> int:
    """Parts the manifest records as written (a part is trusted on --resume once recorded)."""
    try:
        parts = json.loads((out / "_manifest.json").read_text())["parts"]
    except (OSError, ValueError, KeyError):
        return 0  # not written yet, or being replaced
    return sum(1 for record in parts.values() if record)


def test_resume_after_sigkill_writes_every_row_exactly_once(tmp_path: Path) -> None:
    source = _input(tmp_path / "in.parquet", 2000, 250)  # 8 units; x >= 1000 waits on the gate
    gate = tmp_path / "gate"
    out = tmp_path / "out"
    env = {**os.environ, "SERVINGLIB_TEST_BATCH_GATE": str(gate)}
    log = (tmp_path / "job.log").open("wb")
    job = subprocess.Popen(
        _command("--input", str(source), "--output", str(out), "--workers", "2"),
        env=env,
        start_new_session=True,
        stdout=log,
        stderr=log,
    )
    try:
        _wait_for(lambda: _recorded(out) >= 4, "the first four parts recorded", job)
        os.killpg(job.pid, signal.SIGKILL)  # the job and its workers, mid-run
        job.wait(timeout=30)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
        log.close()
    assert not (out / "part-00007.parquet").exists()
    assert not json.loads((out / "_manifest.json").read_text())["complete"]

    gate.touch()
    resumed = subprocess.run(
        _command("--input", str(source), "--output", str(out), "--workers", "2", "--resume"),
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed: 1,000 rows were already written" in resumed.stdout
    table = pq.read_table(out)
    assert table.column("id").to_pylist() == list(range(2000))  # each once, in input order
    assert not list(out.glob(".part-*"))

    fresh = subprocess.run(
        _command("--input", str(source), "--output", str(tmp_path / "fresh")),
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert fresh.returncode == 0, fresh.stderr
    assert pq.read_table(tmp_path / "fresh").equals(table)


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real local Ray cluster with 2 CPUs (``ray start --head --block``), stopped afterwards.

    The cluster runs in its own process group, which teardown kills: ``ray stop`` would stop
    every Ray cluster of this user on the machine.
    """
    pytest.importorskip("ray")
    ray_cli = shutil.which("ray") or str(Path(sys.executable).parent / "ray")
    temp = tmp_path_factory.mktemp("ray")
    port = free_port()
    log = (temp / "head.log").open("wb")
    head = subprocess.Popen(
        [ray_cli, "start", "--head", "--block", "--num-cpus", "2", "--port", str(port),
         "--temp-dir", str(temp), "--include-dashboard", "false", "--disable-usage-stats"],
        env={**os.environ, **_RAY_ENV}, stdout=log, stderr=log, start_new_session=True,
    )  # fmt: skip
    try:
        _wait_for(lambda: _listening(port), "the Ray head to listen", head, timeout_s=180)
        yield f"127.0.0.1:{port}"
    finally:
        os.killpg(head.pid, signal.SIGTERM)
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
            head.wait()
        log.close()


@pytest.mark.ray
def test_local_and_ray_engines_write_the_same_rows(tmp_path: Path, ray_cluster: str) -> None:
    source = _input(tmp_path / "in.parquet", 600, 200)
    local = subprocess.run(
        _command("--input", str(source), "--output", str(tmp_path / "local"), "--batch-size", "64"),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert local.returncode == 0, local.stderr
    env = {**os.environ, **_RAY_ENV}
    on_ray = subprocess.run(
        _command(
            "--input",
            str(source),
            "--output",
            str(tmp_path / "ray"),
            "--batch-size",
            "64",
            "--engine",
            "ray",
            "--address",
            ray_cluster,
            "--workers",
            "2",
            "--cpus-per-worker",
            "0.5",
        ),
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert on_ray.returncode == 0, on_ray.stderr
    assert "(ray engine): 600 rows" in on_ray.stdout
    local_parts = sorted(p.name for p in (tmp_path / "local").glob("part-*.parquet"))
    ray_parts = sorted(p.name for p in (tmp_path / "ray").glob("part-*.parquet"))
    assert ray_parts == local_parts == [f"part-{i:05d}.parquet" for i in range(3)]
    for name in local_parts:  # same rows, same order, same outputs, same errors, same schema
        expected = pq.read_table(tmp_path / "local" / name)
        got = pq.read_table(tmp_path / "ray" / name)
        assert got.equals(expected, check_metadata=True)
    got = pq.read_table(tmp_path / "ray")
    errors = [e for e in got.column("error").to_pylist() if e]
    assert any(e.startswith("prediction failed: ValueError: 13") for e in errors)
    assert any("NaN or Infinity" in e for e in errors)


def _post(url: str, features: dict[str, Any]) -> requests.Response:
    return requests.post(
        f"{url}/infer", json={"model_id": "summer-nightly", "features": features}, timeout=30
    )


@pytest.mark.parametrize("worker", ["asyncio", "gthread"])  # the header: a task, a thread
def test_precomputed_answers_from_the_batch_output_and_falls_back_live(
    tmp_path: Path, start_server: Callable[..., LiveServer], worker: str
) -> None:
    service = tmp_path / "service"
    shutil.copytree(FIXTURE, service)
    nightly = service / "models" / "summer" / "nightly"
    nightly.mkdir()
    source = _input(tmp_path / "in.parquet", 100, 50)
    done = subprocess.run(
        _command("--input", str(source), "--output", str(nightly / "predictions"),
                 config=service / "servinglib.yaml"),
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    # a precomputed answer the live model would not give proves where it came from
    table = pq.read_table(nightly / "predictions").to_pylist()
    assert table[3]["total"] == 3.5
    (nightly / "test_data.json").write_text(
        json.dumps(
            {
                "cases": [
                    {
                        "name": "row 3",
                        "input": {"id": 3, "x": 3},
                        "expected": {"total": 3.5, "tag": "odd", "detail": {"x": 3, "n": 0}},
                    }
                ]
            }
        )
    )
    config = (
        (service / "servinglib.yaml").read_text()
        + """
  - name: summer-nightly
    runtime: precomputed
    repository: models/summer
    versions: [nightly]
    default_version: nightly
    runtime_options:
      key: id
      fallback_version: "1"
"""
    )
    (service / "servinglib.yaml").write_text(config)
    (service / "models" / "summer" / "1" / "offset.txt").write_text("100")  # live answers differ
    (service / "models" / "summer" / "1" / "test_data.json").write_text(
        json.dumps(
            {
                "cases": [
                    {
                        "name": "two",
                        "input": {"x": 2},
                        "expected": {"total": 102.0, "tag": "even", "detail": {"x": 2, "n": 0}},
                    }
                ]
            }
        )
    )
    server = start_server(service / "servinglib.yaml", "--workers", "1", "--worker", worker)

    hit = _post(server.url, {"id": 3, "x": 3})
    assert hit.status_code == 200, hit.text
    assert hit.json()["output"] == {"total": 3.5, "tag": "odd", "detail": {"x": 3, "n": 0}}
    assert hit.headers["x-servinglib-precomputed"] == "hit"
    miss = _post(server.url, {"id": 5000, "x": 4})
    assert miss.status_code == 200, miss.text
    assert miss.json()["output"]["total"] == 104.0
    assert miss.headers["x-servinglib-precomputed"] == "miss"
    errored = _post(server.url, {"id": 13, "x": 13})  # the batch row holds an error: a miss
    assert errored.status_code == 500
    # a miss goes through model summer's lane: its input_schema refuses what /infer refuses
    invalid = _post(server.url, {"id": 5000, "x": -2})
    assert invalid.status_code == 400, invalid.text
    assert "features.x: -2 is less than the minimum of 0" in invalid.json()["error"]
    key_only = _post(server.url, {"id": 5000})
    assert key_only.status_code == 400, key_only.text
    assert "holds only the key" in key_only.json()["error"]
    missing_key = _post(server.url, {"x": 4})
    assert missing_key.status_code == 400
    assert "'id'" in missing_key.json()["error"]
    _precomputed_over_open_inference(server.url)
    _hostile_keys_answer_400(server.url)
    metrics = requests.get(f"{server.url}/metrics", timeout=30).text
    lookups = {
        line.split("result=")[1].split('"')[1]: float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("servinglib_precomputed_lookups_total{")
    }
    assert lookups["hit"] >= 4  # the self-test, /infer, v2 and tritonclient
    assert lookups["miss"] == 5  # 5000 with x 4 and -2, the error row 13, key only, v2
    fallback_calls = [
        line
        for line in metrics.splitlines()
        if line.startswith("servinglib_requests_total{") and 'model="summer"' in line
    ]
    assert fallback_calls == []  # misses are not client requests of summer...
    steps = [
        line
        for line in metrics.splitlines()
        if line.startswith("servinglib_step_duration_seconds_count{") and 'step="fallback"' in line
    ]
    assert steps  # ...but calls of summer's lane, timed as the fallback step


def _precomputed_over_open_inference(url: str) -> None:
    """Lookups on v2 tensors: JSON, tritonclient, and the metadata that lists the key."""
    import numpy as np
    import tritonclient.http as httpclient

    metadata = requests.get(f"{url}/v2/models/summer-nightly", timeout=30).json()
    assert metadata["inputs"] == [{"name": "id", "datatype": "INT64", "shape": [1]}]
    body = {"inputs": [{"name": "id", "datatype": "INT64", "shape": [1], "data": [3]}]}
    hit = requests.post(f"{url}/v2/models/summer-nightly/infer", json=body, timeout=30)
    assert hit.status_code == 200, hit.text
    assert hit.headers["x-servinglib-precomputed"] == "hit"
    outputs = {o["name"]: o["data"] for o in hit.json()["outputs"]}
    assert outputs["total"] == [3.5]
    body["inputs"] = [
        {"name": "id", "datatype": "INT64", "shape": [1], "data": [5000]},
        {"name": "x", "datatype": "INT64", "shape": [1], "data": [4]},
    ]
    miss = requests.post(f"{url}/v2/models/summer-nightly/infer", json=body, timeout=30)
    assert miss.status_code == 200, miss.text
    assert miss.headers["x-servinglib-precomputed"] == "miss"
    assert {o["name"]: o["data"] for o in miss.json()["outputs"]}["total"] == [104.0]
    client = httpclient.InferenceServerClient(url=url.removeprefix("http://"))
    try:
        key = httpclient.InferInput("id", [1], "INT64")
        key.set_data_from_numpy(np.array([3], dtype=np.int64))
        result = client.infer("summer-nightly", [key])
        assert result.as_numpy("total").tolist() == [3.5]
    finally:
        client.close()


def _hostile_keys_answer_400(url: str) -> None:
    """Keys no row could hold, over /infer, v2 JSON and tritonclient: 400, never 5xx."""
    import numpy as np
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException

    statuses = []
    for key in ([3], {"id": 3}, 2**64, -(2**63) - 1, True, None, "3", 3.5, [], {}):
        response = _post(url, {"id": key, "x": 1})
        statuses.append(response.status_code)
        assert response.status_code == 400, (key, response.text)
        assert response.json()["error"]
    nan = requests.post(
        f"{url}/infer",
        data=b'{"model_id": "summer-nightly", "features": {"id": NaN, "x": 1}}',
        headers={"content-type": "application/json"},
        timeout=30,
    )
    statuses.append(nan.status_code)
    tensors = [
        {"name": "id", "datatype": "INT64", "shape": [2], "data": [3, 4]},
        {"name": "id", "datatype": "BYTES", "shape": [1], "data": ["3"]},
        {"name": "id", "datatype": "BOOL", "shape": [1], "data": [True]},
        {"name": "id", "datatype": "FP64", "shape": [1], "data": [3.5]},
        {"name": "id", "datatype": "UINT64", "shape": [1], "data": [2**64 - 1]},
        {"name": "id", "datatype": "INT64", "shape": [1], "data": [2**64]},
    ]
    for tensor in tensors:
        response = requests.post(
            f"{url}/v2/models/summer-nightly/infer", json={"inputs": [tensor]}, timeout=30
        )
        statuses.append(response.status_code)
        assert response.status_code == 400, (tensor, response.text)
    client = httpclient.InferenceServerClient(url=url.removeprefix("http://"))
    try:
        for array, datatype in (
            (np.array([3, 4], dtype=np.int64), "INT64"),
            (np.array([b"3"], dtype=np.object_), "BYTES"),
            (np.array([np.nan]), "FP64"),
            (np.array([2**64 - 1], dtype=np.uint64), "UINT64"),
        ):
            key = httpclient.InferInput("id", list(array.shape), datatype)
            key.set_data_from_numpy(array)
            with pytest.raises(InferenceServerException) as refused:
                client.infer("summer-nightly", [key])
            statuses.append(int(refused.value.status() or 0))
    finally:
        client.close()
    assert all(400 <= status < 500 for status in statuses), statuses
