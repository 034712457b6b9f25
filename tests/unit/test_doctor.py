"""``servinglib doctor``: every check runs against this machine, and a taken port is flagged."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import tomllib
from pathlib import Path

from servinglib.cli.doctor import run_doctor
from servinglib.cli.starter import write_starter
from servinglib.serve.versions import GUNICORN_MINIMUM

FLOORS = dict(
    re.fullmatch(r"([\w-]+)>=([\d.]+)", requirement).groups()  # type: ignore[union-attr]
    for requirement in tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())[
        "project"
    ]["dependencies"]
)


def test_doctor_reports_python_extras_builds_and_a_free_port(tmp_path: Path) -> None:
    write_starter(tmp_path)
    findings = {f.what: f for f in run_doctor(tmp_path / "servinglib.yaml")}
    assert findings["python"].status == "ok"
    assert findings["python"].detail.startswith(".".join(map(str, sys.version_info[:2])))
    assert {"extra onnx", "extra torch", "extra generator"} <= set(findings)
    assert findings["torch build"].status in ("ok", "warn")
    assert "onnxruntime" in findings
    assert findings["config"].detail.endswith("(1 model(s))")


def test_a_taken_port_is_something_to_fix(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        write_starter(tmp_path)
        config = tmp_path / "servinglib.yaml"
        config.write_text(config.read_text() + f"server: {{port: {port}}}\n")
        result = subprocess.run(
            [sys.executable, "-m", "servinglib.cli.main", "doctor"],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=120,
            check=False,
        )
    assert result.returncode == 1, result.stdout
    assert f"127.0.0.1:{port} is taken by another process" in result.stdout
    assert "-> pass --port N or set SERVINGLIB_PORT" in result.stdout
    assert result.stdout.rstrip().endswith("1 thing(s) to fix")


def test_a_missing_extra_says_what_to_install() -> None:
    findings = {f.what: f for f in run_doctor(None, {"imaginary": ("servinglib_no_such_module",)})}
    missing = findings["extra imaginary"]
    assert missing.status == "warn"
    assert missing.detail == "not installed (missing servinglib_no_such_module)"
    assert missing.fix == "pip install 'servinglib[imaginary]'"


def _older_gunicorn(tmp_path: Path) -> dict[str, str]:
    """An environment whose gunicorn metadata says 25.0.0 (first on the path), as
    ``pip install gunicorn==25.0.0`` leaves it for importlib.metadata."""
    info = tmp_path / "site" / "gunicorn-25.0.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: gunicorn\nVersion: 25.0.0\n")
    return {**os.environ, "PYTHONPATH": f"{tmp_path / 'site'}:{os.environ.get('PYTHONPATH', '')}"}


def test_the_gunicorn_floor_of_the_code_is_the_declared_one() -> None:
    assert FLOORS["gunicorn"] == GUNICORN_MINIMUM


def test_serve_refuses_a_gunicorn_below_the_floor_by_name(tmp_path: Path) -> None:
    write_starter(tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "servinglib.cli.main", "serve", "--port", "0"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=_older_gunicorn(tmp_path),
        timeout=120,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.endswith(
        f"error: gunicorn 25.0.0 is older than {GUNICORN_MINIMUM}, the oldest servinglib's "
        f"server runs on; pip install 'gunicorn>={GUNICORN_MINIMUM}'\n"
    )
    assert "Traceback" not in result.stderr


def test_a_core_dependency_below_its_floor_is_something_to_fix(tmp_path: Path) -> None:
    write_starter(tmp_path)
    env = _older_gunicorn(tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "servinglib.cli.main", "doctor"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
        check=False,
    )
    assert result.returncode == 1, result.stdout
    floor = FLOORS["gunicorn"]
    assert f"fix   gunicorn           25.0.0 is older than the {floor} servinglib needs" in (
        result.stdout
    )
    assert f"-> pip install 'gunicorn>={floor}'" in result.stdout
    for extra in ("batch", "ray", "drift"):
        assert f"extra {extra}" in result.stdout


def test_doctor_knows_every_extra_a_user_can_install() -> None:
    import tomllib

    from servinglib.cli.doctor import EXTRAS

    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    declared = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    extras = set(declared["optional-dependencies"]) - {"dev", "bench", "examples"}
    assert extras <= set(EXTRAS), f"add {sorted(extras - set(EXTRAS))} to doctor.EXTRAS"
