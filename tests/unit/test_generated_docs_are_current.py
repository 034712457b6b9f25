"""Generated reference pages and the Grafana dashboard match the code they are made from."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "script", ["docs/generate_reference.py", "docs/grafana/generate_dashboard.py"]
)
def test_generated_file_is_current(script: str) -> None:
    result = subprocess.run(
        [sys.executable, script, "--check"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
