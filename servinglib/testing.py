"""pytest plugin for service repositories: the app in-process, a client, and assertions.

Enable it in the service's ``tests/conftest.py``::

    pytest_plugins = ["servinglib.testing"]

then test a model through the real app, exactly as gunicorn would serve it::

    def test_infer(servinglib_client):
        output = infer(servinglib_client, "eta", {"distance_km": 2.0})
        assert_close(output, {"eta_s": 312.0}, rtol=0.01)

Fixtures:
    servinglib_config_path: ``servinglib.yaml`` in pytest's root directory; override the
        fixture in a conftest.py to test another file.
    servinglib_app: the app of :func:`servinglib.serve.app.create_app_from_config`, every
        model loaded and self-tested; built once per test session.
    servinglib_client: a Flask test client of that app.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from servinglib.checks import run_all_selftests
from servinglib.config.spec import load_config
from servinglib.lifecycle.importing import import_file_as
from servinglib.lifecycle.registry import VersionRecord, VersionState
from servinglib.lifecycle.selftest import compare_outputs, to_plain
from servinglib.model import Tolerance
from servinglib.wire.datatypes import datatype_of, numpy_dtype

if TYPE_CHECKING:
    from flask import Flask
    from flask.testing import FlaskClient

__all__ = [
    "assert_close",
    "assert_selftests_pass",
    "import_file",
    "infer",
    "infer_v2",
    "servinglib_app",
    "servinglib_client",
    "servinglib_config_path",
]


@pytest.fixture(scope="session")
def servinglib_config_path(request: pytest.FixtureRequest) -> Path:
    """``servinglib.yaml`` in pytest's root directory (the service repository)."""
    path = Path(request.config.rootpath) / "servinglib.yaml"
    if not path.is_file():
        raise pytest.UsageError(
            f"{path} not found; run pytest from the service repository or override the "
            "servinglib_config_path fixture in conftest.py"
        )
    return path


@pytest.fixture(scope="session")
def servinglib_app(servinglib_config_path: Path) -> Iterator[Flask]:
    """The service's app with every model loaded and self-tested, as a gunicorn worker has it."""
    from servinglib.monitoring.logs import flush_logs
    from servinglib.serve.app import create_app_from_config

    app = create_app_from_config(servinglib_config_path)
    _logs_to_pytest()
    yield app
    flush_logs()  # the last log lines, before pytest's summary


def _logs_to_pytest() -> None:
    """Hand servinglib's log records to pytest, which shows them with a failing test.

    Written to stderr by the background writer, request-log lines would land after pytest's
    summary; pytest's log capture keeps them with the test that caused them.
    """
    from servinglib.monitoring.logs import release_logging

    release_logging()


@pytest.fixture
def servinglib_client(servinglib_app: Flask) -> Iterator[FlaskClient]:
    """A test client of :func:`servinglib_app`: requests go through the whole HTTP stack.

    The access-log lines of the test's requests are written before the test ends (the log
    writer batches them), so pytest shows them with the test.
    """
    from servinglib.monitoring.logs import flush_logs

    yield servinglib_app.test_client()
    flush_logs()


def assert_selftests_pass(
    config_path: str | os.PathLike[str], model: str | None = None
) -> list[VersionRecord]:
    """Load every version (of ``model``, or of every model) and run its self-tests.

    Returns:
        The records of the versions, all READY.

    Raises:
        AssertionError: naming each version that failed to load or failed a self-test.
    """
    config = load_config(config_path)
    if model is not None:
        selected = tuple(m for m in config.models if m.name == model)
        if not selected:
            names = ", ".join(m.name for m in config.models)
            raise AssertionError(f"{config_path} has no model {model!r}; its models: {names}")
        config = dataclasses.replace(config, models=selected)
    records = run_all_selftests(config)
    failed = [r for r in records if r.state is not VersionState.READY]
    if failed:
        lines = [f"  {r.model} version {r.version}: {r.state.value}: {r.reason}" for r in failed]
        raise AssertionError(f"{len(failed)} version(s) are not READY:\n" + "\n".join(lines))
    return records


def infer(client: FlaskClient, model: str, features: Any, version: str | None = None) -> Any:
    """``POST /infer`` and return the ``output``; raises AssertionError unless it is 200."""
    body: dict[str, Any] = {"model_id": model, "features": to_plain(features)}
    if version is not None:
        body["version"] = version
    response = client.post("/infer", json=body)
    if response.status_code != 200:
        raise AssertionError(
            f"POST /infer for model {model!r} answered {response.status_code}: "
            f"{response.get_data(as_text=True)}"
        )
    return response.get_json()["output"]


def infer_v2(
    client: FlaskClient, model: str, inputs: Mapping[str, Any], version: str | None = None
) -> dict[str, np.ndarray]:
    """Open Inference v2 request with JSON tensors; returns each output as an array.

    Each input is converted with ``numpy.asarray``; its dtype picks the v2 datatype, so pass
    ``np.array(..., dtype=np.float32)`` for an FP32 input.

    Raises:
        AssertionError: the answer is not 200.
    """
    tensors = []
    for name, value in inputs.items():
        array = np.asarray(value)
        datatype = datatype_of(array)
        tensors.append(
            {
                "name": name,
                "shape": list(array.shape),
                "datatype": datatype,
                "data": to_plain(array.reshape(-1)),
            }
        )
    path = f"/v2/models/{model}" + (f"/versions/{version}" if version else "") + "/infer"
    response = client.post(path, json={"inputs": tensors})
    if response.status_code != 200:
        raise AssertionError(
            f"POST {path} answered {response.status_code}: {response.get_data(as_text=True)}"
        )
    outputs: dict[str, np.ndarray] = {}
    for output in response.get_json()["outputs"]:
        dtype = numpy_dtype(output["datatype"])
        outputs[output["name"]] = np.asarray(output["data"], dtype=dtype).reshape(output["shape"])
    return outputs


def import_file(path: Path) -> ModuleType:
    """Import a Python file by path (a training script, a model file) for a test.

    The module gets a private name made from the whole path, so the ``train.py`` or
    ``model.py`` of one example never shadows another's; importing it again reuses it.
    """
    resolved = path.resolve()
    return import_file_as(resolved, "servinglib_test_files." + re.sub(r"\W", "_", str(resolved)))


def assert_close(actual: Any, expected: Any, *, atol: float = 1e-8, rtol: float = 1e-5) -> None:
    """Compare like a self-test does: numbers within tolerance, the rest exactly.

    Arrays are compared as nested lists, so ``{"y": np.array([[2.0]])}`` matches
    ``{"y": [[2.0]]}``.

    Raises:
        AssertionError: listing every difference with its path, e.g. ``$.y[0][0]``.
    """
    problems = compare_outputs(to_plain(expected), actual, Tolerance(atol=atol, rtol=rtol))
    if problems:
        raise AssertionError("outputs differ:\n  " + "\n  ".join(problems))
