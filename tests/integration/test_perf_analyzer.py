"""Triton's ``perf_analyzer``, unchanged, against the examples served by servinglib.

``-b 4`` needs a truthful model configuration (``max_batch_size`` > 0); the concurrency
sweep needs every request of every model to succeed.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator

import pytest
import yaml

from tests.conftest import REPO_ROOT, LiveServer, launch, stop
from tests.integration._tools import perf_analyzer

pytestmark = pytest.mark.integration

EXAMPLES = REPO_ROOT / "examples"
# Short windows, a bounded number of trials, any spread accepted: the point is that every
# request succeeds, not a stable figure (benchmarks/ measures those).
QUICK = ["-p", "300", "--max-trials", "3", "--stability-percentage", "999"]


@pytest.fixture(scope="module")
def examples_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """breast-cancer (Python, unbatched) and digits (ONNX, batched), without the example's log."""
    config = yaml.safe_load((EXAMPLES / "servinglib.yaml").read_text())
    models = [m for m in config["models"] if m["name"] in ("breast-cancer", "digits")]
    root = tmp_path_factory.mktemp("examples")
    for example in ("breast-cancer", "digits-classifier"):  # paths stay inside the config's dir
        shutil.copytree(EXAMPLES / example / "models", root / example / "models")
    for model in models:
        model.pop("shadow", None)
        model.pop("traffic", None)
    path = root / "servinglib.yaml"
    path.write_text(yaml.safe_dump({"service": "examples", "models": models}, sort_keys=False))
    server = launch(path, root, "--workers", "1")
    yield server
    stop(server.process)


def _perf(server: LiveServer, model: str, *extra: str) -> str:
    command, env = perf_analyzer()
    result = subprocess.run(
        [
            *command,
            "-m",
            model,
            "-u",
            server.url.removeprefix("http://"),
            "-i",
            "http",
            *QUICK,
            *extra,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_batched_model_with_b4_and_a_concurrency_sweep(examples_server: LiveServer) -> None:
    out = _perf(examples_server, "digits", "-b", "4", "--concurrency-range", "1:8:2")
    for concurrency in (1, 3, 5, 7):
        assert f"Concurrency: {concurrency}, throughput:" in out, out


@pytest.mark.parametrize("model", ["breast-cancer", "digits"])
def test_every_example_model_under_a_concurrency_sweep(
    examples_server: LiveServer, model: str
) -> None:
    out = _perf(examples_server, model, "--concurrency-range", "1:4:3")
    assert "Concurrency: 4, throughput:" in out, out
