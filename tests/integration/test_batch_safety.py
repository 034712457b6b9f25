"""servinglib batch-predict never destroys data or hangs: the real command, as a subprocess.

--overwrite deletes only what a manifest lists; an output overlapping the input is refused;
a hung model call becomes error rows; --resume trusts only parts that match their record and
refuses a changed input; one job at a time per output directory.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytestmark = pytest.mark.integration

CONFIG = Path(__file__).parent.parent / "fixtures" / "batch" / "servinglib.yaml"


def _write(path: Path, first: int, n: int, row_group_size: int = 100, **options: str) -> Path:
    rows = [{"id": i, "x": i, "extra": []} for i in range(first, first + n)]
    schema = pa.schema([("id", pa.int64()), ("x", pa.int64()), ("extra", pa.list_(pa.float64()))])
    pq.write_table(
        pa.Table.from_pylist(rows, schema), path, row_group_size=row_group_size, **options
    )
    return path


def _batch(
    *args: str, env: dict[str, str] | None = None, timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    command = [
        sys.executable, "-m", "servinglib.cli.main", "batch-predict", "--config", str(CONFIG),
        "--model", "summer", "--id-column", "id", "--no-progress", "--max-error-rate", "0.2",
        "--call-timeout-s", "0",  # in the command's process: one model load less per run
        *args,  # a later --call-timeout-s wins
    ]  # fmt: skip
    return subprocess.run(
        command,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _digests(folder: Path) -> dict[str, str]:
    """SHA-256 of every file under ``folder`` (links followed) but locks, by relative path."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != "_lock"
    }


@pytest.fixture
def spark(tmp_path: Path) -> Path:
    """A Spark-style input directory: part-NNNNN-<uuid>.snappy.parquet and an unrelated CSV."""
    folder = tmp_path / "spark"
    folder.mkdir()
    for i in range(2):
        name = f"part-{i:05d}-{uuid.uuid4()}-c000.snappy.parquet"
        _write(folder / name, 100 * i, 100, compression="snappy")
    (folder / "part-99999.csv").write_text("id,x\n1,2\n")
    (folder / "_SUCCESS").write_text("")
    return folder


def test_overwrite_into_a_spark_input_deletes_nothing_and_exits_2(
    tmp_path: Path, spark: Path
) -> None:
    before = _digests(tmp_path)
    first = next(spark.glob("part-00000-*.parquet"))
    (tmp_path / "link").symlink_to(spark)
    cases = [  # the rest of the overlap rules: tests/unit/test_batch_overlap.py
        ("--input", str(spark), "--output", str(spark)),  # the same directory
        ("--input", str(first), "--output", str(tmp_path / "link")),  # a link to its folder
        ("--input", str(tmp_path), "--output", str(spark / "scores")),  # nested in the input
    ]
    for case in cases:
        done = _batch(*case, "--overwrite")
        assert done.returncode == 2, (case, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr
        assert "outside the input" in done.stderr, done.stderr
        assert _digests(tmp_path) == before, case  # every input byte in place
    assert not (spark / "scores").exists()
    assert not (tmp_path / "scores").exists()


def test_overwrite_deletes_only_what_the_manifest_lists(tmp_path: Path, spark: Path) -> None:
    out, spark_files = tmp_path / "out", f"{spark}/*.parquet"
    done = _batch("--input", spark_files, "--output", str(out))
    assert done.returncode == 0, done.stderr
    manifest = json.loads((out / "_manifest.json").read_text())
    assert manifest["complete"] is True
    assert sorted(manifest["parts"]) == ["part-00000.parquet", "part-00001.parquet"]

    (out / "part-99999.csv").write_text("not a part of this job\n")  # somebody else's file
    before = _digests(out)
    refused = _batch("--input", spark_files, "--output", str(out), "--overwrite")
    assert refused.returncode == 2, refused.stderr
    assert "part-99999.csv" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert _digests(out) == before  # nothing deleted, not even the job's own parts

    (out / "part-99999.csv").unlink()
    again = _batch("--input", spark_files, "--output", str(out), "--overwrite")
    assert again.returncode == 0, again.stderr
    assert pq.read_table(out).column("id").to_pylist() == list(range(200))


def test_overwrite_refuses_a_directory_without_a_manifest(tmp_path: Path, spark: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    foreign = _write(out / "part-00000.parquet", 0, 10)  # named like a part, not ours
    digest = hashlib.sha256(foreign.read_bytes()).hexdigest()
    refused = _batch("--input", f"{spark}/*.parquet", "--output", str(out), "--overwrite")
    assert refused.returncode == 2, refused.stderr
    assert "no _manifest.json" in refused.stderr
    assert hashlib.sha256(foreign.read_bytes()).hexdigest() == digest


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "Z" not in _state(pid)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "X"


def test_a_call_that_hangs_becomes_error_rows_and_its_worker_is_replaced(
    tmp_path: Path,
) -> None:
    source = _write(tmp_path / "in.parquet", 0, 300)  # 3 units of 100 rows
    pids = tmp_path / "pids"
    pids.mkdir()
    env = {"SERVINGLIB_TEST_BATCH_HANG": "150:151", "SERVINGLIB_TEST_BATCH_HANG_PIDS": str(pids)}
    started = time.monotonic()
    done = _batch(
        "--input", str(source), "--output", str(tmp_path / "out"), "--batch-size", "10",
        "--call-timeout-s", "2", env=env,
    )  # fmt: skip
    elapsed = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    assert "300 rows, 2 errors" in done.stdout  # the hanging row, and x = 13
    rows = pq.read_table(tmp_path / "out").to_pylist()
    assert [r["id"] for r in rows] == list(range(300))  # every row once, in order
    timed_out = [r["id"] for r in rows if (r["error"] or "").startswith("prediction timed out")]
    assert timed_out == [150]  # its 9 neighbours in the call were called again one by one
    assert all(r["total"] == r["id"] + 0.5 for r in rows if r["error"] is None)  # offset 0.5
    hung = [int(p.name) for p in pids.iterdir()]
    assert len(hung) == 2  # in its call of 10 rows, then alone: two workers replaced
    assert not any(_alive(pid) for pid in hung)
    manifest = json.loads((tmp_path / "out" / "_manifest.json").read_text())
    assert manifest["complete"] is True
    print(f"one hung call, 2 s timeout: the job took {elapsed:.1f} s")


def test_a_model_that_hangs_on_every_call_stops_the_job(tmp_path: Path) -> None:
    source = _write(tmp_path / "in.parquet", 1000, 100)  # x >= 1000: self-tests pass
    pids = tmp_path / "pids"
    pids.mkdir()
    env = {"SERVINGLIB_TEST_BATCH_HANG": "1000:2000", "SERVINGLIB_TEST_BATCH_HANG_PIDS": str(pids)}
    started = time.monotonic()
    done = _batch(
        "--input", str(source), "--output", str(tmp_path / "out"), "--batch-size", "10",
        "--call-timeout-s", "1", env=env,
    )  # fmt: skip
    elapsed = time.monotonic() - started
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "the model hangs: 3 calls in a row ran past --call-timeout-s 1 s" in done.stderr
    assert "Traceback" not in done.stderr
    hung = [int(p.name) for p in pids.iterdir()]
    # the command's own check of the first rows (left behind after the call timeout), then
    # three workers killed: on a call of 10 rows, then on 2 rows alone
    assert len(hung) == 4
    assert "did not answer within --call-timeout-s 1 s; the workers score them" in done.stderr
    assert not any(_alive(pid) for pid in hung)
    manifest = json.loads((tmp_path / "out" / "_manifest.json").read_text())
    assert manifest["complete"] is False
    assert "the model hangs" in manifest["failed"]
    print(f"every call hangs, 1 s timeout: the job stopped after {elapsed:.1f} s")


def test_resume_refuses_an_input_changed_in_place_with_the_same_size_and_times(
    tmp_path: Path,
) -> None:
    source = tmp_path / "in.csv"
    source.write_text("id,x\n" + "".join(f"{i},{i}\n" for i in range(100, 200)))
    out = tmp_path / "out"
    done = _batch("--input", str(source), "--output", str(out))
    assert done.returncode == 0, done.stderr
    stamp = source.stat()
    source.write_text(source.read_text().replace("150,150", "150,151"))  # fixed in place
    os.utime(source, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))  # as cp -p, rsync -t do
    assert source.stat().st_size == stamp.st_size
    assert source.stat().st_mtime_ns == stamp.st_mtime_ns
    before = _digests(out)
    refused = _batch("--input", str(source), "--output", str(out), "--resume")
    assert refused.returncode == 2, refused.stderr
    assert f"its input files ({source}: added, removed or their content changed)" in refused.stderr
    assert _digests(out) == before


def test_resume_scores_again_every_part_that_does_not_match_its_record(tmp_path: Path) -> None:
    source = _write(tmp_path / "in.parquet", 0, 500)  # 5 units of 100 rows
    out = tmp_path / "out"
    done = _batch("--input", str(source), "--output", str(out))
    assert done.returncode == 0, done.stderr
    expected = pq.read_table(out)
    foreign = _write(tmp_path / "foreign.parquet", 0, 1)  # a valid Parquet file, not a part
    foreign_digest = hashlib.sha256(foreign.read_bytes()).hexdigest()
    (out / "part-00001.parquet").write_bytes(b"")  # : > part-00001.parquet
    (out / "part-00002.parquet").write_bytes(foreign.read_bytes())
    (out / "part-00003.parquet").unlink()
    (out / "part-00003.parquet").symlink_to(foreign)
    whole = (out / "part-00004.parquet").read_bytes()
    (out / "part-00004.parquet").write_bytes(whole[: len(whole) // 2])  # truncated
    resumed = _batch("--input", str(source), "--output", str(out), "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert "Traceback" not in resumed.stderr
    assert "resumed: 100 rows were already written" in resumed.stdout  # part-00000 only
    assert pq.read_table(out).equals(expected)
    assert not (out / "part-00003.parquet").is_symlink()
    assert hashlib.sha256(foreign.read_bytes()).hexdigest() == foreign_digest  # link target kept
    manifest = json.loads((out / "_manifest.json").read_text())
    assert manifest["complete"] is True
    assert manifest["rows"] == 500
    for name, record in manifest["parts"].items():
        assert record["rows"] == 100
        assert record["sha256"] == hashlib.sha256((out / name).read_bytes()).hexdigest()


def _held_at_the_gate(out: Path) -> bool:
    """Four parts recorded and the fifth open: the job waits on the gate, writing nothing."""
    try:
        parts = json.loads((out / "_manifest.json").read_text())["parts"]
    except (OSError, ValueError, KeyError):
        return False
    return sum(1 for r in parts.values() if r) == 4 and any(out.glob(".part-00004.*.tmp"))


def test_a_second_job_on_a_busy_output_is_refused_naming_the_holder(tmp_path: Path) -> None:
    source = _write(tmp_path / "in.parquet", 0, 2000, row_group_size=250)  # x >= 1000 waits
    gate = tmp_path / "gate"
    out = tmp_path / "out"
    env = {"SERVINGLIB_TEST_BATCH_GATE": str(gate)}
    command = [
        sys.executable, "-m", "servinglib.cli.main", "batch-predict", "--config", str(CONFIG),
        "--model", "summer", "--id-column", "id", "--no-progress",
        "--input", str(source), "--output", str(out),
    ]  # fmt: skip
    log = (tmp_path / "first.log").open("wb")
    first = subprocess.Popen(command, env={**os.environ, **env}, stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 120
        while not _held_at_the_gate(out):
            assert first.poll() is None, (tmp_path / "first.log").read_text()
            assert time.monotonic() < deadline, "the first job wrote no parts"
            time.sleep(0.1)
        before = _digests(out)
        for flags in ((), ("--resume",), ("--overwrite",)):
            second = _batch("--input", str(source), "--output", str(out), *flags, env=env)
            assert second.returncode == 2, (flags, second.stderr)
            assert f"is in use by another batch job (pid {first.pid} on host" in second.stderr
            assert _digests(out) == before, flags  # nothing deleted or written
        gate.touch()
        assert first.wait(timeout=180) == 0, (tmp_path / "first.log").read_text()
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
        log.close()
    assert pq.read_table(out).column("id").to_pylist() == list(range(2000))
    # a lock file left by a job that is gone (no flock held) is taken over
    (out / "_lock").write_text(json.dumps({"pid": 2**22 + 1, "host": "elsewhere", "started": 0}))
    again = _batch("--input", str(source), "--output", str(out), "--overwrite", env=env)
    assert again.returncode == 0, again.stderr
    assert json.loads((out / "_lock").read_text())["pid"] != 2**22 + 1


def test_a_job_stopped_by_its_error_rate_is_not_complete(tmp_path: Path) -> None:
    source = _write(tmp_path / "in.parquet", 0, 100)  # x = 13 fails
    out = tmp_path / "out"
    done = _batch("--input", str(source), "--output", str(out), "--max-error-rate", "0")
    assert done.returncode == 1, done.stderr
    assert "1 of 100 rows failed, more than --max-error-rate 0" in done.stderr
    manifest = json.loads((out / "_manifest.json").read_text())
    assert manifest["complete"] is False
    assert "--max-error-rate" in manifest["failed"]
