"""Tests of the sentence-embeddings example: data, input handling, prepared versions, serving.

The integration tests reuse the example's own build when ``prepare.py`` finds it up to date,
and otherwise build into a temporary directory (about a minute on two cores).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from servinglib.checks import run_all_selftests
from servinglib.config.spec import load_config
from servinglib.errors import InvalidInputError
from servinglib.lifecycle.registry import VersionState
from servinglib.testing import import_file

EXAMPLE = Path(__file__).resolve().parent.parent
REPOSITORY = EXAMPLE / "models" / "minilm"

# Exporting MiniLM: the TorchScript exporter is chosen on purpose, and transformers' masking
# code trips the tracer's data-dependent-branch warning (the export is verified numerically).
EXPORT_WARNINGS = [
    pytest.mark.filterwarnings(
        "ignore:You are using the legacy TorchScript-based ONNX export:DeprecationWarning"
    ),
    pytest.mark.filterwarnings("ignore:The feature will be removed:DeprecationWarning"),
    pytest.mark.filterwarnings(
        "ignore:Converting a tensor to a Python boolean:torch.jit.TracerWarning"
    ),
    pytest.mark.filterwarnings("ignore:Exporting aten..index operator:UserWarning"),
]


prepare_module = import_file(EXAMPLE / "prepare.py")

# A fresh checkout builds MiniLM's FP32 and INT8 files once (export, quantize, measure): it
# takes minutes on a busy 2-core machine, and the first test that needs them waits for it.
pytestmark = pytest.mark.timeout(1200)
model_module = import_file(REPOSITORY / "model.py")


def lines(name: str) -> list[str]:
    return (EXAMPLE / name).read_text(encoding="utf-8").splitlines()


def cases(version: str) -> list[dict[str, Any]]:
    document: dict[str, Any] = json.loads((REPOSITORY / version / "test_data.json").read_text())
    return list(document["cases"])


# --- fast: data and input handling --------------------------------------------------------


def test_sentences_are_many_and_varied() -> None:
    sentences, calibration = lines("sentences.txt"), lines("calibration.txt")
    assert len(set(sentences)) == len(sentences) >= 200
    assert not set(sentences) & set(calibration)
    tokens = [len(e.ids) for e in prepare_module.tokenizer().encode_batch(sentences)]
    assert min(tokens) <= 4
    assert max(tokens) >= 60
    assert any(not s.isascii() for s in sentences)


def test_onnx_artifacts_are_not_committed() -> None:
    assert "*.onnx" in (EXAMPLE / ".gitignore").read_text().splitlines()


@pytest.mark.parametrize(("version", "atol"), [("1", 1e-4), ("2", 0.05)])
def test_self_tests_hold_reference_unit_vectors(version: str, atol: float) -> None:
    found = cases(version)
    assert len(found) == 5
    for case in found:
        vector = np.asarray(case["expected"]["embedding"])
        assert vector.shape == (384,)
        assert np.linalg.norm(vector) == pytest.approx(1.0, abs=1e-5)
        assert case["tolerance"] == {"atol": atol, "rtol": 0.0}
    assert cases("1")[0]["expected"] == cases("2")[0]["expected"]  # the same reference


@pytest.fixture
def embedder() -> Any:
    """A SentenceEmbedder with the packaged tokenizer and no ONNX session."""
    model = model_module.SentenceEmbedder()
    model.tokenizer = prepare_module.tokenizer()
    return model


def test_prepare_tokenizes_once_and_accepts_both_protocols(embedder: Any) -> None:
    tokens = embedder.prepare({"text": "Hello world"})
    assert tokens.ids.tolist() == [101, 7592, 2088, 102]  # [CLS] hello world [SEP]
    for open_inference in (np.array([b"Hello world"], dtype=object), ["Hello world"]):
        assert embedder.prepare({"text": open_inference}).ids.tolist() == tokens.ids.tolist()
    long = embedder.prepare({"text": "word " * 1000})
    assert len(long.ids) == model_module.MAX_TOKENS


@pytest.mark.parametrize(
    ("features", "message"),
    [
        ({"sentence": "x"}, "expected"),
        ({"text": ["a", "b"]}, "one string, got 2"),
        ({"text": 3}, "must be a string"),
        ({"text": "x" * 20_001}, "at most 20000"),
    ],
    ids=["no-text", "two-texts", "number", "too-long"],
)
def test_prepare_rejects_bad_requests(embedder: Any, features: Any, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        embedder.prepare(features)


# --- integration: the built versions ------------------------------------------------------


@dataclass(frozen=True)
class Build:
    """A prepared model repository, a config serving it and its optimize report."""

    repository: Path
    config: Path
    report: dict[str, Any]


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Build]:
    if prepare_module.up_to_date(REPOSITORY):
        built = EXAMPLE / "build" / "report" / "optimize-report.json"
        committed = EXAMPLE / "report" / "optimize-report.json"
        report = json.loads((built if built.is_file() else committed).read_text())
        yield Build(REPOSITORY, EXAMPLE / "servinglib.yaml", report)
        return
    root = tmp_path_factory.mktemp("sentence-embeddings")
    repository = root / "models" / "minilm"
    prepare_module.prepare(repository, report_dir=root / "report", build=root / "build", quick=True)
    config = root / "servinglib.yaml"
    # the same config: its paths are relative, and prepare copied model.py into root
    config.write_text((EXAMPLE / "servinglib.yaml").read_text())
    report = json.loads((root / "report" / "optimize-report.json").read_text())
    yield Build(repository, config, report)


@pytest.mark.integration
@pytest.mark.usefixtures("build")
@EXPORT_WARNINGS[0]
@EXPORT_WARNINGS[1]
@EXPORT_WARNINGS[2]
@EXPORT_WARNINGS[3]
def test_prepared_versions_pass_their_self_tests(build: Build) -> None:
    records = run_all_selftests(load_config(build.config))
    assert sorted(r.version for r in records) == ["1", "2"]
    for record in records:
        assert record.state is VersionState.READY, (record.version, record.reason)
        assert len(record.report.cases) == 5
    assert prepare_module.up_to_date(build.repository)


@pytest.mark.integration
@EXPORT_WARNINGS[0]
@EXPORT_WARNINGS[1]
@EXPORT_WARNINGS[2]
@EXPORT_WARNINGS[3]
def test_int8_meets_the_size_and_similarity_bars(build: Build) -> None:
    report = build.report
    assert report["chosen"] == "dynamic-per-token per-channel"
    assert report["change"]["size_reduction_pct"] >= 70.0
    assert report["accuracy"]["metric"] == "cosine"
    assert report["accuracy"]["optimized"] >= 0.99
    assert report["settings"]["validation_samples"] >= 200
    assert report["optimized"]["invariance"]["invariant"] is True
    rejected = {c["name"]: c for c in report["candidates"]}
    assert not rejected["dynamic"]["accepted"]  # per-tensor dynamic: mean cosine ~0.96


@pytest.mark.integration
@EXPORT_WARNINGS[0]
@EXPORT_WARNINGS[1]
@EXPORT_WARNINGS[2]
@EXPORT_WARNINGS[3]
def test_batched_answers_equal_lone_answers(build: Build) -> None:
    model = model_module.SentenceEmbedder()
    model.load(build.repository / "2")
    texts = lines("sentences.txt")[:24]
    alone = np.stack([model.predict(model.prepare({"text": t}))["embedding"] for t in texts])
    batched = np.stack(
        [a["embedding"] for a in model.predict_batch([model.prepare({"text": t}) for t in texts])]
    )
    np.testing.assert_allclose(batched, alone, atol=1e-5)
    for case in cases("2"):
        got = model.predict({"text": case["input"]["text"]})["embedding"]
        assert float(got @ np.asarray(case["expected"]["embedding"])) >= 0.98


@pytest.mark.integration
@EXPORT_WARNINGS[0]
@EXPORT_WARNINGS[1]
@EXPORT_WARNINGS[2]
@EXPORT_WARNINGS[3]
def test_served_with_batching_on_both_protocols(build: Build) -> None:
    from servinglib.serve.app import create_app_from_config

    client = create_app_from_config(build.config).test_client()
    response = client.post("/infer", json={"model_id": "minilm", "features": {"text": "Hi!"}})
    assert response.status_code == 200, response.get_json()
    embedding = np.asarray(response.get_json()["output"]["embedding"])
    assert embedding.shape == (384,)
    assert np.linalg.norm(embedding) == pytest.approx(1.0, abs=1e-4)
    v2 = client.post(
        "/v2/models/minilm/infer",
        json={"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES", "data": ["Hi!"]}]},
    )
    assert v2.status_code == 200, v2.get_json()
    output = v2.get_json()["outputs"][0]
    assert output["name"] == "embedding"
    np.testing.assert_allclose(output["data"], embedding, atol=1e-6)
    bad = client.post("/infer", json={"model_id": "minilm", "features": {"text": 3}})
    assert bad.status_code == 400
