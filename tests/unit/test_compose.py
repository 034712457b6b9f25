"""servinglib.compose: composition keys refused with the step and the fix, combiners, runs."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from benchmarks.composition_service import composition_service
from servinglib.compose.combiners import CombineError, combine
from servinglib.compose.order import step_order
from servinglib.compose.spec import Reference, Step
from servinglib.config.spec import load_config
from servinglib.errors import ConfigError, DeadlineExceededError, PredictionError
from servinglib.lifecycle.registry import VersionState
from servinglib.serving.assembly import Worker, build_worker
from servinglib.serving.service import InferenceRequest

PROJECT = '{name: project, model: linear, version: "1", inputs: {x: scale.x}}'


@pytest.fixture(scope="module")
def worker(tmp_path_factory: pytest.TempPathFactory) -> Worker:
    config = composition_service(tmp_path_factory.mktemp("composition"))
    built = build_worker(load_config(config, environ={}))
    yield built  # type: ignore[misc]
    built.close()


def edited(tmp_path: Path, old: str, new: str) -> Path:
    config = composition_service(tmp_path)
    text = config.read_text()
    assert old in text
    config.write_text(text.replace(old, new, 1))
    return config


@pytest.mark.parametrize(
    ("old", "new", "where", "message"),
    [
        (
            "model: linear, version",
            "model: lineer, version",
            "models[5].pipeline.1.steps[1].model",
            "step 'project' calls model 'lineer', which is not configured",
        ),
        (
            'model: linear, version: "1"',
            'model: linear, version: "7"',
            "models[5].pipeline.1.steps[1].version",
            "step 'project' pins version '7' of model 'linear', which has no such version",
        ),
        (
            "inputs: {x: scale.x}",
            "inputs: {x: scael.x}",
            "models[5].pipeline.1.steps[1].inputs.x",
            "'project' reads 'scael.x', but there is no step 'scael'",
        ),
        (
            "inputs: {x: scale.x}",
            "inputs: {features: scale.x}",
            "models[5].pipeline.1.steps[1].inputs",
            "step 'project' maps inputs ['features'] but model 'linear' declares inputs ['x']",
        ),
        (
            "inputs: {y: project.y}",
            "inputs: {y: project.logits}",
            "models[5].pipeline.1.steps[2].inputs.y",
            "reads output 'logits' of step 'project', but model 'linear' declares outputs ['y']",
        ),
        (
            "inputs: {values: request.values}",
            "inputs: {values: decide.label}",
            "models[5].pipeline.1.steps",
            "wait for each other (a cycle)",
        ),
        (
            "combiner: weighted_mean\n        on_member_failure: fail",
            "combiner: custom\n        on_member_failure: fail",
            "models[7].ensemble.1.function",
            "a custom combiner needs `function: module:function`",
        ),
    ],
    ids=[
        "unknown-model",
        "missing-pin",
        "unknown-step",
        "input-names",
        "output-names",
        "step-cycle",
        "custom-needs-function",
    ],
)
def test_validate_names_the_step_and_the_fix(
    tmp_path: Path, old: str, new: str, where: str, message: str
) -> None:
    with pytest.raises(ConfigError) as e:
        load_config(edited(tmp_path, old, new), environ={})
    assert e.value.key_path == where
    assert message in str(e.value)


def test_composed_models_calling_each_other_are_a_cycle(tmp_path: Path) -> None:
    config = edited(
        tmp_path,
        "          - {model: flaky, weight: 2}\n        combiner: weighted_mean\n"
        "        on_member_failure: fail",
        "          - {model: vote-rest}\n        combiner: mean",
    )
    config.write_text(config.read_text().replace("{model: flaky, weight: 2}", "{model: vote-fail}"))
    with pytest.raises(ConfigError, match=r"cycle \(vote-fail -> vote-rest -> vote-fail\)"):
        load_config(config, environ={})


def test_independent_steps_share_a_wave() -> None:
    a = Step("a", "m", inputs={"x": Reference.parse("request.x")})
    b = Step("b", "m", inputs={"x": Reference.parse("request.x")})
    c = Step("c", "m", inputs={"x": Reference.parse("a.y"), "z": Reference.parse("b")})
    assert [[s.name for s in wave] for wave in step_order([c, a, b])] == [["a", "b"], ["c"]]


def test_combiners() -> None:
    assert combine("mean", [{"p": [0.2, 0.8]}, {"p": [0.4, 0.6]}], [1, 1]) == {
        "p": pytest.approx([0.3, 0.7])
    }
    assert combine("weighted_mean", [1.0, 4.0], [3.0, 1.0]) == pytest.approx(1.75)
    assert combine("max", [[1, 5], [3, 2]], [1, 1]) == [3.0, 5.0]
    assert combine("vote", ["cat", "dog", "dog"], [1, 1, 1]) == "dog"
    assert combine("vote", ["cat", "dog"], [3, 1]) == "cat"
    with pytest.raises(CombineError, match="different keys"):
        combine("mean", [{"a": 1}, {"b": 1}], [1, 1])


def test_a_member_failing_its_self_test_fails_the_version_naming_it(worker: Worker) -> None:
    view = worker.service.catalog.view("vote-fail", "2")
    assert view.state == VersionState.FAILED.value
    assert "step 'const:9' cannot run: model 'const' version '9' is FAILED" in view.reason
    assert worker.service.catalog.view("vote-fail", "1").ready


def test_pipeline_versions_pin_their_steps(worker: Worker) -> None:
    def score(version: str) -> float:
        request = InferenceRequest("classify", {"values": [1, 2, 3, 4]}, version=version)
        return float(worker.service.infer(request).output["score"])

    assert (score("1"), score("2")) == (6.0, 12.0)


def test_ensemble_failure_policies(worker: Worker) -> None:
    assert worker.service.infer(InferenceRequest("vote-rest", {})).output == {"score": 3.5}
    rest = worker.service.infer(InferenceRequest("vote-rest", {"fail": True}))
    assert rest.output == {"score": 2.0}
    with pytest.raises(PredictionError, match="model 'flaky' version '1' failed"):
        worker.service.infer(InferenceRequest("vote-fail", {"fail": True}))


def test_a_step_never_starts_past_the_shared_deadline(worker: Worker) -> None:
    request = InferenceRequest("classify", {"values": [1, 2, 3, 4]}, timeout_ms=1e-6)
    with pytest.raises(DeadlineExceededError):
        worker.service.infer(request)


def test_unbatched_shared_steps_run_on_the_composed_models_thread(
    worker: Worker, monkeypatch: pytest.MonkeyPatch
) -> None:
    # "Quick" is a measured duration: on a loaded machine a trivial step can take longer
    # than QUICK_S, so the bar is raised for this test (the mechanism is what it checks).
    monkeypatch.setattr("servinglib.serving.lanes.QUICK_S", 1.0)

    def batches(model: str) -> float:
        labels = {"model": model, "version": "1"}
        value = worker.metrics.registry.get_sample_value("servinglib_batch_size_count", labels)
        return value or 0.0

    request = InferenceRequest("classify", {"values": [1, 2, 3, 4]}, version="1")
    for _ in range(100):  # a step runs inline once its calls are measured quick
        worker.service.infer(request)
    before = {model: batches(model) for model in ("prep", "linear", "head")}
    for _ in range(20):
        assert worker.service.infer(request).output["score"] == 6.0
    assert batches("prep") == before["prep"]  # no step went through their executors
    assert batches("head") == before["head"]
    assert batches("linear") == before["linear"] + 20  # the batched step did


def test_on_an_event_loop_composed_models_await_their_steps(worker: Worker) -> None:
    def infer(request: InferenceRequest) -> object:
        return asyncio.run(worker.service.infer_async(request)).output

    def queued(model: str) -> float:
        labels = {"model": model, "version": "1"}
        value = worker.metrics.registry.get_sample_value("servinglib_batch_size_count", labels)
        return value or 0.0

    before = queued("classify")
    request = InferenceRequest("classify", {"values": [1, 2, 3, 4]}, version="1")
    assert infer(request) == {"label": 1, "score": 6.0}
    assert queued("classify") == before  # no thread of the pipeline's own executor
    assert infer(InferenceRequest("vote-rest", {"fail": True})) == {"score": 2.0}
    with pytest.raises(PredictionError, match="model 'flaky' version '1' failed"):
        infer(InferenceRequest("vote-fail", {"fail": True}))
    late = InferenceRequest("classify", {"values": [1, 2, 3, 4]}, timeout_ms=1e-6)
    with pytest.raises(DeadlineExceededError):
        infer(late)
