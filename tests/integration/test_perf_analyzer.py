"""Triton's ``perf_analyzer``, unchanged, against the examples served by servinglib.

``-b 4`` needs a truthful model configuration (``max_batch_size`` > 0) and, for MiniLM (a
Python model whose input has no batch dimension), requests of 4 rows answered row by row;
the concurrency sweep needs every request of every model to succeed. MiniLM is served from
its FP32 export (version 1: the example's own build when it is up to date, as bin/test
leaves it, else exported here), not the INT8 optimize run.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from servinglib.testing import import_file
from tests.conftest import REPO_ROOT, stop
from tests.integration._tools import perf_analyzer
from tests.integration._tools_grpc import GrpcServer, launch_grpc

pytestmark = pytest.mark.integration

EXAMPLES = REPO_ROOT / "examples"
# Short windows, a bounded number of trials, any spread accepted: the point is that every
# request succeeds, not a stable figure (benchmarks/ measures those).
# Count windows, not time windows: a window ends after 6 answers however slow the machine
# (a 300 ms time window saw no MiniLM batch of 4 finish at concurrency 5 under load).
QUICK = [
    *("--measurement-mode", "count_windows", "--measurement-request-count", "6"),
    # A window can miss the count on a loaded machine; more trials only cost time then.
    *("--max-trials", "10", "--stability-percentage", "999"),
]


MINILM = EXAMPLES / "sentence-embeddings"
HAS_MINILM = all(importlib.util.find_spec(p) for p in ("torch", "transformers", "tokenizers"))
EXPORT = f"""
import sys
from pathlib import Path
from servinglib.testing import import_file
prepare = import_file(Path({str(MINILM / "prepare.py")!r}))
destination = Path(sys.argv[1])
prepare.export_fp32(destination / "model.onnx")
(destination / "tokenizer.json").write_bytes((prepare.model_dir() / "tokenizer.json").read_bytes())
"""


def _minilm(root: Path, entry: dict[str, Any]) -> None:
    """Version 1 of the MiniLM example (FP32 ONNX export) in ``root``; ``entry`` serves it."""
    repository = root / "sentence-embeddings" / "models" / "minilm"
    (repository / "1").mkdir(parents=True)
    shutil.copy(MINILM / "models" / "minilm" / "model.py", repository / "model.py")
    shutil.copy(MINILM / "models" / "minilm" / "1" / "test_data.json", repository / "1")
    if import_file(MINILM / "prepare.py").up_to_date(MINILM / "models" / "minilm"):
        for name in ("model.onnx", "tokenizer.json"):  # the same export_fp32, done once
            shutil.copy(MINILM / "models" / "minilm" / "1" / name, repository / "1")
    else:
        subprocess.run(
            [sys.executable, "-c", EXPORT, str(repository / "1")],
            check=True,
            capture_output=True,
            timeout=600,
        )
    entry.update(
        {
            "class": "sentence-embeddings/models/minilm/model.py:SentenceEmbedder",
            "repository": "sentence-embeddings/models/minilm",
            "default_version": "1",
        }
    )


@pytest.fixture(scope="module")
def examples_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GrpcServer]:
    """Every example model, without the example's shadows, canary and prediction log (HTTP
    and gRPC)."""
    config = yaml.safe_load((EXAMPLES / "servinglib.yaml").read_text())
    names = ("breast-cancer", "breast-cancer-ensemble", "digits")
    names += ("minilm",) if HAS_MINILM else ()
    models = [m for m in config["models"] if m["name"] in names]
    root = tmp_path_factory.mktemp("examples")
    for example in ("breast-cancer", "digits-classifier"):  # paths stay inside the config's dir
        shutil.copytree(EXAMPLES / example / "models", root / example / "models")
    for model in models:
        model.pop("shadow", None)
        model.pop("traffic", None)
        if model["name"] == "minilm":
            _minilm(root, model)
    path = root / "servinglib.yaml"
    served = {"service": "examples", "python_path": config["python_path"], "models": models}
    path.write_text(yaml.safe_dump(served, sort_keys=False))
    server = launch_grpc(path, root, "--workers", "1")
    yield server
    stop(server.live.process)


TEXT_CLASSIFICATION = EXAMPLES / "text-classification"


@pytest.fixture(scope="module")
def pipeline_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GrpcServer]:
    """The text-classification example as it ships: its pipeline and the three steps."""
    if not HAS_MINILM:
        pytest.skip("the text-classification example needs torch, transformers and tokenizers")
    prepare = import_file(TEXT_CLASSIFICATION / "prepare.py")
    if not prepare.up_to_date():
        prepare.prepare(quick=True)
    server = launch_grpc(
        TEXT_CLASSIFICATION / "servinglib.yaml", tmp_path_factory.mktemp("text"), "--workers", "1"
    )
    yield server
    stop(server.live.process)


# perf_analyzer's random floats fall outside the numeric models' declared input bounds
# (digits' pixels are 0 to 16), which the server rightly refuses with a 400; zeros are inside.
# Random FP32 bytes hold NaN now and then, which the server refuses too (classify's input).
ZERO = ("--input-data", "zero")
TICKET = ("--string-data", "I was charged twice for my order")
NUMERIC_DATA = {
    "breast-cancer": ZERO,
    "breast-cancer-ensemble": ZERO,
    "digits": ZERO,
    "classify": (*ZERO, "--shape", "embedding:1,384"),
    "tokenize": TICKET,
    "ticket-router": TICKET,
}


def _perf(server: GrpcServer, model: str, *extra: str, protocol: str = "http") -> str:
    command, env = perf_analyzer()
    address = server.grpc_address if protocol == "grpc" else server.url.removeprefix("http://")
    result = subprocess.run(
        [
            *command,
            "-m",
            model,
            "-u",
            address,
            "-i",
            protocol,
            *QUICK,
            *NUMERIC_DATA.get(model, ()),
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


def _needs(model: str) -> None:
    if model == "minilm" and not HAS_MINILM:
        pytest.skip("the MiniLM example needs torch, transformers and tokenizers to export")


@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize("model", ["digits", "minilm"])
def test_batched_models_with_b4_and_a_concurrency_sweep(
    examples_server: GrpcServer, model: str, protocol: str
) -> None:
    _needs(model)
    sweep = ("-b", "4", "--concurrency-range", "1:8:2")
    out = _perf(examples_server, model, *sweep, protocol=protocol)
    for concurrency in (1, 3, 5, 7):
        assert f"Concurrency: {concurrency}, throughput:" in out, out


@pytest.mark.parametrize(
    ("model", "protocol"),
    [
        (model, protocol)
        for model in ("breast-cancer", "breast-cancer-ensemble", "digits", "minilm")
        for protocol in ("http", "grpc")
    ],
)
def test_every_example_model_under_a_concurrency_sweep(
    examples_server: GrpcServer, model: str, protocol: str
) -> None:
    _needs(model)
    out = _perf(examples_server, model, "--concurrency-range", "1:4:3", protocol=protocol)
    assert "Concurrency: 4, throughput:" in out, out


@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize("model", ["ticket-router", "tokenize", "classify"])
def test_the_pipeline_and_its_steps_under_a_concurrency_sweep(
    pipeline_server: GrpcServer, model: str, protocol: str
) -> None:
    out = _perf(pipeline_server, model, "--concurrency-range", "1:4:3", protocol=protocol)
    assert "Concurrency: 4, throughput:" in out, out


def test_the_batched_embed_step_takes_token_ids_alone(
    pipeline_server: GrpcServer, tmp_path: Path
) -> None:
    """Token ids from the example's tokenizer (random INT64s are not in the vocabulary); the
    server computes the mask, and one text per request is all the config allows."""
    tokenizer = import_file(TEXT_CLASSIFICATION / "models" / "tokenize" / "model.py")
    model = tokenizer.TextTokenizer()
    model.load(TEXT_CLASSIFICATION / "models" / "tokenize" / "1")
    tokens = model.predict({"text": ["I was charged twice for my order"]})
    ids = [int(i) for i in tokens["input_ids"][0]]
    data = {"data": [{"input_ids": {"content": ids, "shape": [len(ids)]}}]}
    path = tmp_path / "embed.json"
    path.write_text(json.dumps(data))
    out = _perf(pipeline_server, "embed", "--input-data", str(path), "--concurrency-range", "1:8:2")
    for concurrency in (1, 3, 5, 7):
        assert f"Concurrency: {concurrency}, throughput:" in out, out
