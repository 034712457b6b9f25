"""What ``runtime: sklearn`` refuses to load, under a real server and in ``servinglib validate``.

- a pickle (joblib) without ``allow_pickle``;
- a pickle with ``allow_pickle`` but no ``sha256`` pin;
- a ``.skops`` file holding a type skops does not trust by default, not listed in
  ``runtime_options.trusted_types`` (named in the reason);

while the same custom type listed in ``trusted_types``, and a pinned pickle with
``allow_pickle``, load and answer as the library does.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests

from tests.conftest import LiveServer, launch, run_cli, stop
from tests.tabular_models import (
    CUSTOM_STEP,
    diabetes_frame,
    pickle_estimator,
    write_sklearn_custom,
    write_sklearn_pipeline,
)

pytestmark = pytest.mark.integration

CONFIG = """\
service: refusals
server: {{workers: 2}}
python_path: [steps]
models:
  - name: plain            # 1: skops, 2: joblib without allow_pickle, 3: an untrusted type
    runtime: sklearn
    repository: models/plain
    default_version: "1"
  - name: trusting         # the untrusted type of plain/3, listed
    runtime: sklearn
    repository: models/trusting
    default_version: "1"
    runtime_options: {{trusted_types: [{custom}]}}
    # the custom first step does not record the features it takes: declared here
    inputs: [{columns}]
  - name: pickled          # 1: a pinned joblib, 2: a joblib without a pin
    runtime: sklearn
    repository: models/pickled
    default_version: "1"
    allow_pickle: true
    sha256: {{"1/model.joblib": "{pin}"}}
"""


def _build(root: Path) -> dict[str, Any]:
    write_sklearn_pipeline(root / "models/plain/1")
    pickle_estimator(root / "models/plain/2")
    custom = write_sklearn_custom(root / "models/plain/3", root / "steps")
    shutil.copytree(root / "models/plain/3", root / "models/trusting/1")
    pin = pickle_estimator(root / "models/pickled/1")
    pickle_estimator(root / "models/pickled/2")
    columns = ", ".join(
        f"{{name: {name}, datatype: FP64, shape: [-1]}}" for name in diabetes_frame()[0].columns
    )
    (root / "servinglib.yaml").write_text(
        CONFIG.format(custom=CUSTOM_STEP, pin=pin, columns=columns)
    )
    return {"custom": custom}


@pytest.fixture(scope="module")
def refusals(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, Path, Any]]:
    root = tmp_path_factory.mktemp("refusals")
    built = _build(root)
    server = launch(root / "servinglib.yaml", root, ready_timeout_s=240)
    yield server, root, built["custom"]
    stop(server.process)


def _reasons(server: LiveServer) -> dict[tuple[str, str], tuple[str, str]]:
    """``(model, version) -> (state, reason)`` from GET /models."""
    body = requests.get(f"{server.url}/models", timeout=10).json()
    return {
        (m["name"], v["version"]): (v["state"], v.get("reason", ""))
        for m in body["models"]
        for v in m["versions"]
    }


def test_the_server_refuses_pickles_unpinned_pickles_and_untrusted_types(
    refusals: tuple[LiveServer, Path, Any],
) -> None:
    server, _, _ = refusals
    states = _reasons(server)
    assert states[("plain", "1")][0] == "READY"
    state, reason = states[("plain", "2")]
    assert state == "FAILED"
    assert "model.joblib is pickle data" in reason
    state, reason = states[("plain", "3")]
    assert state == "FAILED"
    assert f"does not trust by default: ['{CUSTOM_STEP}']" in reason
    state, reason = states[("pickled", "2")]
    assert state == "FAILED"
    assert "no sha256 pin" in reason
    assert states[("pickled", "1")][0] == "READY"
    assert states[("trusting", "1")][0] == "READY"
    refused = requests.post(
        f"{server.url}/infer",
        json={"model_id": "plain", "version": "3", "features": [0.0] * 10},
        timeout=10,
    )
    assert refused.status_code == 503


def test_listed_types_and_pinned_pickles_answer_as_the_library(
    refusals: tuple[LiveServer, Path, Any],
) -> None:
    server, _, custom = refusals
    frame, target = diabetes_frame()
    rows = frame.iloc[:6]
    for model, expected in (
        ("trusting", custom.predict(rows)),
        ("pickled", _ridge_predictions(rows, frame, target)),
    ):
        response = requests.post(
            f"{server.url}/infer",
            json={"model_id": model, "features": {"rows": rows.to_dict("records")}},
            timeout=10,
        )
        assert response.status_code == 200, response.text
        np.testing.assert_allclose(response.json()["output"]["predict"], expected, rtol=1e-9)


def _ridge_predictions(rows: Any, frame: Any, target: Any) -> Any:
    from sklearn.linear_model import Ridge

    return Ridge().fit(frame, target).predict(rows)


def test_validate_reports_what_the_server_refuses(refusals: tuple[LiveServer, Path, Any]) -> None:
    _, root, _ = refusals
    result = run_cli("validate", "--config", str(root / "servinglib.yaml"))
    assert result.returncode != 0
    out = result.stdout + result.stderr
    assert "models[0] (plain): version '2'" in out
    assert "model.joblib is pickle" in out
    assert "models[0] (plain): version '3': " in out
    assert f"['{CUSTOM_STEP}']" in out
    assert "models[2] (pickled): version '2'" in out
    assert "no sha256 pin" in out
    assert "(trusting)" not in out
    assert "(pickled): version '1'" not in out
