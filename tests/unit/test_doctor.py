"""``servinglib doctor``: every check runs against this machine, and a taken port is flagged."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

from servinglib.cli.doctor import run_doctor
from servinglib.cli.starter import write_starter


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
