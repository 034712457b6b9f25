"""servinglib.testing: the helpers generated repositories test their models with."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from flask.testing import FlaskClient

from servinglib.lifecycle.registry import VersionState
from servinglib.testing import assert_close, assert_selftests_pass, infer, infer_v2


def test_selftests_of_one_model(service_config: Path) -> None:
    records = assert_selftests_pass(service_config, model="echo")
    assert [(r.model, r.version, r.state) for r in records] == [("echo", "1", VersionState.READY)]


def test_failed_versions_are_named(service_config: Path) -> None:
    with pytest.raises(AssertionError) as caught:
        assert_selftests_pass(service_config, model="scorer")
    message = str(caught.value)
    assert message.startswith("2 version(s) are not READY")
    assert "scorer version 3: FAILED" in message
    assert "scorer version 4: FAILED" in message


def test_an_unknown_model_is_named(service_config: Path) -> None:
    with pytest.raises(AssertionError, match="has no model 'nope'; its models: scorer, echo"):
        assert_selftests_pass(service_config, model="nope")


def test_infer_returns_the_output(client: FlaskClient) -> None:
    assert infer(client, "scorer", {"x": 1.5}) == {"score": 4.5}  # default version 2: 3 * x
    assert infer(client, "scorer", {"x": 1.5}, version="1") == {"score": 3.0}  # 2 * x


def test_infer_fails_with_the_answer(client: FlaskClient) -> None:
    with pytest.raises(AssertionError, match=r"answered 400: .*features"):
        infer(client, "scorer", {"x": "one"})


def test_infer_v2_round_trips_tensors(client: FlaskClient) -> None:
    outputs = infer_v2(
        client,
        "echo",
        {"a": np.array([[1.0, 2.0]], dtype=np.float32), "b": np.array([3, 4], dtype=np.int64)},
    )
    assert outputs["a"].dtype == np.float32
    assert outputs["a"].shape == (1, 2)
    assert outputs["b"].tolist() == [3, 4]
    with pytest.raises(AssertionError, match="answered 404"):
        infer_v2(client, "nope", {"a": [1.0]})


def test_assert_close_compares_like_a_self_test() -> None:
    assert_close({"y": np.array([[2.0000001]])}, {"y": [[2.0]]})
    with pytest.raises(AssertionError, match=r"\$\.y\[0\]\[0\]: expected 2\.0, got 2\.5"):
        assert_close({"y": [[2.5]]}, {"y": [[2.0]]})
    assert_close({"y": [2.5]}, {"y": [2.0]}, atol=0.5)


def test_request_logs_stay_with_pytest_not_after_its_summary(tmp_path: Path) -> None:
    import subprocess
    import sys

    from servinglib.cli.starter import write_starter

    write_starter(tmp_path)
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["servinglib.testing"]\n')
    # The request log goes through pytest's log capture (kept with the test, shown when it
    # fails), not through servinglib's background writer, whose late lines pytest would print
    # after its summary.
    (tmp_path / "test_eta.py").write_text(
        "import logging\n\n"
        "from servinglib.testing import infer\n\n\n"
        "def test_eta(servinglib_client, caplog):\n"
        '    assert infer(servinglib_client, "eta", {"distance_km": 2.0}) == {"eta_s": 312.0}\n'
        '    assert "POST /infer 200" in [r.getMessage() for r in caplog.records]\n'
        '    handlers = logging.getLogger("servinglib").handlers\n'
        '    assert "_QueueingHandler" not in [type(h).__name__ for h in handlers]\n'
    )
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.rstrip().splitlines()[-1].startswith("1 passed")
    assert "servinglib.access" not in result.stdout + result.stderr
