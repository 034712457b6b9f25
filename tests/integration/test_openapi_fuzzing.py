"""schemathesis against the live server's /openapi.json: no server errors, no schema violations.

Every operation gets its documented examples, the coverage phase's boundary and
schema-violating cases, and 40 random examples; ``SERVINGLIB_TEST_FUZZ_LONG=1`` raises that
to 200 per operation (about 4 minutes on 2 cores instead of about 1).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import LiveServer, stop

pytestmark = pytest.mark.integration

FIXTURE = Path(__file__).parent.parent / "fixtures" / "service"
V2_INFER = r"v2/models/[^/]+/(versions/\{version\}/)?infer"
# Models that declare no inputs: any tensors, so one generic schema for them.
UNDECLARED_INFER = r"v2/models/\{model\}/(versions/\{version\}/)?infer"
# The scorer declares x (FP64, shape []): its own infer operations, with an exact schema.
DECLARED_INFER = r"v2/models/scorer/(versions/\{version\}/)?infer"
MAX_EXAMPLES = "200" if os.environ.get("SERVINGLIB_TEST_FUZZ_LONG") == "1" else "40"


def fuzz_service(tmp_path: Path) -> Path:
    """The fixture service without its deliberately failing input, with tensor inputs declared."""
    shutil.copytree(FIXTURE / "models", tmp_path / "models")
    text = (FIXTURE / "servinglib.yaml").read_text()
    text = text.replace("        explode: {type: boolean}\n", "")
    text = text.replace(
        "      additionalProperties: false\n",
        "      additionalProperties: false\n    inputs: [{name: x, datatype: FP64, shape: []}]\n"
        "    outputs: [{name: score, datatype: FP64, shape: [1]}]\n",
        1,
    )
    config = tmp_path / "servinglib.yaml"
    config.write_text(text)
    return config


def schemathesis(url: str, report: Path, *options: str) -> subprocess.CompletedProcess[str]:
    command = [
        str(Path(sys.executable).parent / "schemathesis"),
        "run",
        f"{url}/openapi.json",
        "--checks",
        "all",
        "--max-examples",
        MAX_EXAMPLES,
        "--seed",
        "20261129",
        # One thread: CPython before 3.11.8 can fail ast.parse (which hypothesis calls to
        # describe strategies) with "AST constructor recursion depth mismatch" when two
        # threads parse at once (python/cpython#106905).
        "--workers",
        "1",
        "--no-shrink",
        "--report",
        "junit",
        "--report-junit-path",
        str(report),
        *options,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)


def test_schemathesis_finds_no_server_error_and_no_schema_violation(
    tmp_path: Path, start_server: Any
) -> None:
    server: LiveServer = start_server(fuzz_service(tmp_path), "--workers", "2")
    # Every operation but tensor inference, with every check.
    rest = schemathesis(
        server.url,
        tmp_path / "rest.xml",
        "--exclude-path-regex",
        V2_INFER,
        "--phases",
        "examples,coverage,fuzzing",
    )
    assert rest.returncode == 0, rest.stdout[-6000:]
    # A model that declares its inputs: the schema is exact, so every check, including
    # "a schema-valid request is accepted".
    declared = schemathesis(
        server.url,
        tmp_path / "declared.xml",
        "--include-path-regex",
        DECLARED_INFER,
        "--phases",
        "examples,coverage,fuzzing",
    )
    assert declared.returncode == 0, declared.stdout[-6000:]
    # Models that declare no inputs take any tensors, whose element count must equal the
    # product of the shape, which JSON Schema cannot express: schema-valid bodies can still
    # be refused (400), so the positive-acceptance check is skipped there only.
    tensors = schemathesis(
        server.url,
        tmp_path / "v2.xml",
        "--include-path-regex",
        UNDECLARED_INFER,
        "--exclude-checks",
        "positive_data_acceptance",
        "--phases",
        "examples,fuzzing",
    )
    assert tensors.returncode == 0, tensors.stdout[-6000:]
    stop(server.process)  # workers flush their log lines (a background thread) on the way out
    assert "raised while predicting" not in server.log()
    assert "unhandled error" not in server.log()
