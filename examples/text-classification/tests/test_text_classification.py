"""Tests of the text-classification example: the data, each step, and the pipeline served.

The integration tests use the example's own build when ``prepare.py`` finds it up to date;
otherwise they run it, which builds the git-ignored files in place (the MiniLM ONNX files of
../sentence-embeddings first, about two minutes on two cores when they are missing too).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests
import yaml

from servinglib.checks import run_all_selftests
from servinglib.config.spec import load_config
from servinglib.errors import InvalidInputError
from servinglib.lifecycle.registry import VersionState
from servinglib.testing import import_file
from tests.conftest import LiveServer, launch, stop
from tests.integration.test_shadow_traffic_server import total

EXAMPLE = Path(__file__).resolve().parent.parent
CONFIG = EXAMPLE / "servinglib.yaml"
MIN_HELD_OUT_ACCURACY = 0.9

prepare_module = import_file(EXAMPLE / "prepare.py")
tokenize_module = import_file(EXAMPLE / "models" / "tokenize" / "model.py")
classify_module = import_file(EXAMPLE / "models" / "classify" / "model.py")

# Building MiniLM (when it is not built yet) exports with torch's TorchScript exporter on
# purpose; see examples/sentence-embeddings/tests for each warning.
EXPORT_WARNINGS = (
    "ignore:You are using the legacy TorchScript-based ONNX export:DeprecationWarning",
    "ignore:The feature will be removed:DeprecationWarning",
    "ignore:Converting a tensor to a Python boolean:torch.jit.TracerWarning",
    "ignore:Exporting aten..index operator:UserWarning",
)


def cases(model: str) -> list[dict[str, Any]]:
    path = EXAMPLE / "models" / model / "1" / "test_data.json"
    document: dict[str, Any] = json.loads(path.read_text())
    return list(document["cases"])


# --- fast: data and each step's input handling ---------------------------------------------


def test_tickets_are_labelled_varied_and_balanced() -> None:
    texts, labels = prepare_module.read_tickets()
    assert len(set(texts)) == len(texts) == 200
    assert Counter(labels) == {"billing": 50, "technical": 50, "shipping": 50, "account": 50}
    lengths = [len(text.split()) for text in texts]
    assert min(lengths) <= 6
    assert max(lengths) >= 18
    split = prepare_module.split_tickets()
    assert len(split.test_texts) == 50
    assert set(Counter(split.test_labels).values()) == {12, 13}  # a quarter of each class
    assert not set(prepare_module.SELF_TEST_TICKETS.values()) & set(texts)


def test_built_files_are_not_committed() -> None:
    ignored = (EXAMPLE / ".gitignore").read_text().splitlines()
    for pattern in ("*.onnx", "models/tokenize/*/tokenizer.json", "models/classify/*/weights.npz"):
        assert pattern in ignored


def test_every_example_served_together_includes_this_pipeline_unchanged() -> None:
    own = yaml.safe_load(CONFIG.read_text())
    combined = yaml.safe_load((EXAMPLE.parent / "servinglib.yaml").read_text())
    entries = {model["name"]: model for model in combined["models"]}
    for model in own["models"]:
        entry = entries[model["name"]]
        for key in ("class", "repository"):  # paths are relative to each file
            if key in model:
                assert entry[key] == f"{EXAMPLE.name}/{model[key]}"
        assert {k: v for k, v in entry.items() if k not in ("class", "repository")} == {
            k: v for k, v in model.items() if k not in ("class", "repository")
        }
    assert combined["server"]["threads"] >= own["server"]["threads"]


def test_the_embed_step_is_held_to_the_reference_embeddings() -> None:
    reference = json.loads(prepare_module.EMBED_ATOL_FILE.read_text())["cases"]
    for case, want in zip(cases("embed"), reference, strict=True):
        assert case["expected"] == {"sentence_embedding": [want["expected"]["embedding"]]}
        assert case["tolerance"] == want["tolerance"]
        assert case["input"]["input_ids"][0][0] == 101  # [CLS]


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    """The tokenize step on the tokenizer packaged with MiniLM (no build needed)."""
    model = tokenize_module.TextTokenizer()
    model.load(prepare_module.minilm_prepare().model_dir())
    return model


def test_tokenize_answers_one_unpadded_row_on_both_protocols(tokenizer: Any) -> None:
    answer = tokenizer.predict({"text": "Hello world"})
    assert answer["input_ids"].tolist() == [[101, 7592, 2088, 102]]  # [CLS] hello world [SEP]
    assert answer["attention_mask"].tolist() == [[1, 1, 1, 1]]
    for v2 in (np.array([b"Hello world"], dtype=object), ["Hello world"]):
        assert tokenizer.predict({"text": v2})["input_ids"].tolist() == [[101, 7592, 2088, 102]]
    long = tokenizer.predict({"text": "word " * 1000})["input_ids"]
    assert long.shape == (1, tokenize_module.MAX_TOKENS)


@pytest.mark.parametrize(
    ("features", "message"),
    [
        ({"ticket": "x"}, "expected"),
        ({"text": ["a", "b"]}, "one string, got 2"),
        ({"text": 3}, "must be a string"),
        ({"text": "x" * 20_001}, "at most 20000"),
    ],
    ids=["no-text", "two-texts", "number", "too-long"],
)
def test_tokenize_refuses_bad_requests(tokenizer: Any, features: Any, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        tokenizer.predict(features)


@pytest.fixture
def classifier(tmp_path: Path) -> Any:
    """The classify step on weights that make class i win for embeddings along axis i."""
    coef = np.zeros((3, 384), dtype=np.float32)
    coef[[0, 1, 2], [0, 1, 2]] = 10.0
    classes = np.array(["a", "b", "c"])
    np.savez(tmp_path / "weights.npz", classes=classes, coef=coef, intercept=np.zeros(3))
    model = classify_module.TicketClassifier()
    model.load(tmp_path)
    return model


def test_classify_answers_the_most_probable_label_flat_or_as_a_row(classifier: Any) -> None:
    embedding = np.zeros(384, dtype=np.float32)
    embedding[1] = 1.0
    flat = classifier.predict({"embedding": embedding.tolist()})
    assert flat["label"] == "b"
    assert flat["confidence"] == pytest.approx(np.exp(10) / (np.exp(10) + 2))
    assert classifier.predict({"embedding": embedding.reshape(1, 384)}) == flat
    rows = [{"embedding": np.roll(embedding, shift)} for shift in (-1, 0, 1)]
    assert [a["label"] for a in classifier.predict_batch(rows)] == ["a", "b", "c"]


@pytest.mark.parametrize(
    ("features", "message"),
    [
        ({"vector": [0.0] * 384}, "expected"),
        ({"embedding": [0.0] * 383}, "384 finite numbers"),
        ({"embedding": [[0.0] * 384] * 2}, "one sentence"),
        ({"embedding": ["x"] * 384}, "must be numbers"),
        ({"embedding": [float("nan")] * 384}, "finite"),
    ],
    ids=["no-embedding", "short", "two-rows", "strings", "nan"],
)
def test_classify_refuses_bad_requests(classifier: Any, features: Any, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        classifier.predict(features)


# --- integration: the built steps and the pipeline, served ----------------------------------


@pytest.fixture(scope="module")
def built() -> Path:
    """The example's config, its files built (in place, git-ignored) when not up to date."""
    if not prepare_module.up_to_date():
        prepare_module.prepare(quick=True)
    return CONFIG


@pytest.mark.integration
@pytest.mark.filterwarnings(*EXPORT_WARNINGS)
def test_every_step_and_the_pipeline_pass_their_self_tests(built: Path) -> None:
    records = {r.model: r for r in run_all_selftests(load_config(built))}
    assert set(records) == {"tokenize", "embed", "classify", "ticket-router"}
    for record in records.values():
        assert record.state is VersionState.READY, (record.model, record.reason)
    assert len(records["ticket-router"].report.cases) == 4


@pytest.fixture(scope="module")
def server(built: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    live = launch(built, tmp_path_factory.mktemp("text-classification"), "--workers", "1")
    yield live
    stop(live.process)


def route(url: str, text: str) -> dict[str, Any]:
    response = requests.post(
        f"{url}/infer", json={"model_id": "ticket-router", "features": {"text": text}}, timeout=30
    )
    assert response.status_code == 200, response.text
    output: dict[str, Any] = response.json()["output"]
    return output


@pytest.mark.integration
@pytest.mark.filterwarnings(*EXPORT_WARNINGS)
def test_held_out_tickets_are_routed_as_accurately_as_the_report_says(
    server: LiveServer,
) -> None:
    split = prepare_module.split_tickets()
    with ThreadPoolExecutor(max_workers=16) as pool:
        answers = list(pool.map(lambda text: route(server.url, text), split.test_texts))
    right = [a["label"] == want for a, want in zip(answers, split.test_labels, strict=True)]
    accuracy = float(np.mean(right))
    report = json.loads((EXAMPLE / "report" / "training.json").read_text())
    assert accuracy == pytest.approx(report["held_out_accuracy"], abs=0.021)  # one ticket
    assert accuracy >= MIN_HELD_OUT_ACCURACY
    assert all(0.25 < a["confidence"] <= 1.0 for a in answers)  # above chance of 4 classes


@pytest.mark.integration
@pytest.mark.filterwarnings(*EXPORT_WARNINGS)
def test_concurrent_pipeline_requests_share_embed_batches(server: LiveServer) -> None:
    before_sum = total(server.url, "servinglib_batch_size_sum", model="embed")
    before_count = total(server.url, "servinglib_batch_size_count", model="embed")
    texts = [f"Order {n} has not arrived and the tracking page is empty." for n in range(160)]
    with ThreadPoolExecutor(max_workers=16) as pool:
        labels = [a["label"] for a in pool.map(lambda text: route(server.url, text), texts)]
    assert Counter(labels).most_common(1)[0][0] == "shipping"
    batched = total(server.url, "servinglib_batch_size_sum", model="embed") - before_sum
    batches = total(server.url, "servinglib_batch_size_count", model="embed") - before_count
    assert batched == 160
    assert batches < batched  # batches of more than one formed across pipeline requests
    for step in ("tokenize", "embed", "classify"):
        count = total(
            server.url, "servinglib_step_duration_seconds_count", model="ticket-router", step=step
        )
        assert count >= 160


@pytest.mark.integration
@pytest.mark.filterwarnings(*EXPORT_WARNINGS)
def test_open_inference_json_and_binary_through_the_pipeline(server: LiveServer) -> None:
    import tritonclient.http as httpclient

    text = "I was charged twice for my subscription this month."
    expected = route(server.url, text)
    body = {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1], "data": [text]}]}
    response = requests.post(f"{server.url}/v2/models/ticket-router/infer", json=body, timeout=30)
    assert response.status_code == 200, response.text
    outputs = {o["name"]: o for o in response.json()["outputs"]}
    assert outputs["label"]["data"] == [expected["label"]] == ["billing"]
    assert outputs["confidence"]["datatype"] == "FP32"
    assert outputs["confidence"]["data"][0] == pytest.approx(expected["confidence"], abs=1e-6)
    client = httpclient.InferenceServerClient(url=server.url.removeprefix("http://"))
    try:
        config = client.get_model_config("ticket-router")
        assert config["platform"] == "ensemble"
        steps = config["ensemble_scheduling"]["step"]
        assert [s["model_name"] for s in steps] == ["tokenize", "embed", "classify"]
        assert steps[1]["input_map"] == {"input_ids": "tokenize.input_ids"}
        metadata = client.get_model_metadata("ticket-router")
        assert [o["name"] for o in metadata["outputs"]] == ["label", "confidence"]
        tensor = httpclient.InferInput("text", [1], "BYTES")
        tensor.set_data_from_numpy(np.array([text.encode()], dtype=object), binary_data=True)
        result = client.infer("ticket-router", [tensor])
        assert result.as_numpy("label").tolist() == [b"billing"]
        assert result.as_numpy("confidence")[0] == pytest.approx(expected["confidence"], abs=1e-6)
    finally:
        client.close()


@pytest.mark.integration
@pytest.mark.filterwarnings(*EXPORT_WARNINGS)
def test_bad_requests_get_a_4xx_naming_the_problem(server: LiveServer) -> None:
    url = f"{server.url}/infer"
    missing = requests.post(url, json={"model_id": "ticket-router", "features": {}}, timeout=30)
    assert missing.status_code == 400
    assert "features: 'text' is a required property" in missing.json()["error"]
    number = requests.post(
        url, json={"model_id": "ticket-router", "features": {"text": 3}}, timeout=30
    )
    assert number.status_code == 400
    assert "features.text: 3 is not of type 'string'" in number.json()["error"]
    # The embed step alone: ids outside the vocabulary (ONNX Runtime would fail inside the
    # graph), and a mask, which the server computes from the ids it was sent.
    ids = {"input_ids": [[101, 40000, 102]]}
    answer = requests.post(url, json={"model_id": "embed", "features": ids}, timeout=30)
    assert answer.status_code == 400
    assert "40000 is greater than the maximum of 30521" in answer.json()["error"]
    tensors = [
        {"name": "input_ids", "datatype": "INT64", "shape": [1, 2], "data": [101, 102]},
        {"name": "attention_mask", "datatype": "INT64", "shape": [1, 3], "data": [1, 1, 1]},
    ]
    answer = requests.post(
        f"{server.url}/v2/models/embed/infer", json={"inputs": tensors}, timeout=30
    )
    assert answer.status_code == 400
    assert "no input(s) ['attention_mask']" in answer.json()["error"]
    tensors = [{"name": "input_ids", "datatype": "INT64", "shape": [1, 600], "data": [101] * 600}]
    answer = requests.post(
        f"{server.url}/v2/models/embed/infer", json={"inputs": tensors}, timeout=30
    )
    assert answer.status_code == 400  # BERT has 512 positions
    assert "has size 600 on axis 1; its input_schema allows 1 to 512" in answer.json()["error"]
