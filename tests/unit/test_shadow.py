"""servinglib.shadow.router: comparators, and a bounded router that never touches the primary."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from servinglib.config.spec import ComparatorConfig, load_config
from servinglib.lifecycle.registry import ModelRegistry
from servinglib.shadow.copies import ShadowCopy
from servinglib.shadow.router import Comparison, ShadowRouter, make_comparator

FIXTURE = Path(__file__).parent.parent / "fixtures" / "shadowing"


def comparator(kind: str, **options: Any) -> Any:
    return make_comparator(ComparatorConfig(kind=kind, **options), FIXTURE)


def test_numeric_comparator_reports_the_largest_difference() -> None:
    compare = comparator("numeric", atol=0.01, rtol=0.0)
    assert compare({"p": [0.5, 0.2]}, {"p": [0.505, 0.2]}) == Comparison(True, pytest.approx(0.005))
    result = compare({"p": [0.5, 0.2]}, {"p": [0.5, 0.3]})
    assert not result.agree
    assert result.difference == pytest.approx(0.1)
    assert compare({"p": [1.0]}, {"q": [1.0]}).agree is False


def test_exact_cosine_and_top1() -> None:
    assert comparator("exact")({"label": "a"}, {"label": "a"}).agree
    assert not comparator("exact")({"label": "a"}, {"label": "b"}).agree
    cosine = comparator("cosine", min_similarity=0.99, field="embedding")
    same_direction = cosine({"embedding": [1.0, 2.0]}, {"embedding": [2.0, 4.0]})
    assert same_direction.agree
    assert same_direction.difference == pytest.approx(0.0, abs=1e-12)
    assert not cosine({"embedding": [1.0, 0.0]}, {"embedding": [0.0, 1.0]}).agree
    top1 = comparator("top1", field="probabilities")
    assert top1({"probabilities": [0.1, 0.7, 0.2]}, {"probabilities": [0.2, 0.5, 0.3]}).agree
    assert not top1({"probabilities": [0.1, 0.7, 0.2]}, {"probabilities": [0.6, 0.3, 0.1]}).agree
    assert comparator("top1", field="label")({"label": "cat"}, {"label": "cat"}).agree


def test_custom_comparator(tmp_path: Path) -> None:
    (tmp_path / "judge.py").write_text(
        "def same_sign(a, b):\n    return (a['s'] > 0) == (b['s'] > 0), abs(a['s'] - b['s'])\n"
    )
    compare = make_comparator(
        ComparatorConfig(kind="custom", function="judge.py:same_sign"), tmp_path
    )
    assert compare({"s": 1.0}, {"s": 3.0}) == Comparison(True, 2.0)
    assert not compare({"s": 1.0}, {"s": -1.0}).agree


class Recorder:
    def __init__(self) -> None:
        self.dropped = 0
        self.finished: list[str] = []
        self.compared: list[Comparison] = []
        self.done = threading.Condition()

    def shadow_dropped(self, model: str, primary: str, shadow: str) -> None:
        self.dropped += 1

    def shadow_finished(
        self, model: str, primary: str, shadow: str, outcome: str, seconds: float
    ) -> None:
        with self.done:
            self.finished.append(outcome)
            self.done.notify_all()

    def shadow_compared(
        self, model: str, primary: str, shadow: str, comparison: Comparison
    ) -> None:
        self.compared.append(comparison)

    def wait_for(self, count: int) -> None:
        with self.done:
            assert self.done.wait_for(lambda: len(self.finished) >= count, timeout=30)


def registry_with(tmp_path: Path, shadow_yaml: str, executor: str = "") -> ModelRegistry:
    shutil.copytree(FIXTURE / "models", tmp_path / "models")
    config = tmp_path / "servinglib.yaml"
    config.write_text(
        f"service: s\n{executor}models:\n  - name: scorer\n    class: models/scorer/model.py:BehavingScorer\n"
        f"    repository: models/scorer\n    default_version: '1'\n    shadow:\n{shadow_yaml}"
    )
    registry = ModelRegistry(load_config(config, environ={}))
    registry.load_all()
    return registry


def test_agreement_counts_match_a_hand_computation(tmp_path: Path) -> None:
    registry = registry_with(
        tmp_path,
        "      - {version: '4', comparator: {kind: numeric, atol: 1.0e-9}}\n",
        "shadow_executor: {max_concurrency: 2, max_queue: 1000}\n",
    )
    recorder = Recorder()
    router = ShadowRouter(registry, listener=recorder)
    primary = registry.get("scorer", "1").instance
    assert primary is not None
    for x in range(1, 101):
        features = {"x": x}
        router.submit(ShadowCopy("scorer", "1", features, primary.predict(features), f"r{x}"))
    recorder.wait_for(100)
    router.close()
    assert recorder.finished == ["ok"] * 100
    agreements = sum(c.agree for c in recorder.compared)
    assert (agreements, len(recorder.compared)) == (93, 100)
    assert agreements / len(recorder.compared) == pytest.approx(0.93)
    assert max(c.difference or 0.0 for c in recorder.compared) == pytest.approx(1.0)


def test_errors_timeouts_and_drops_are_counted_not_raised(tmp_path: Path) -> None:
    registry = registry_with(
        tmp_path,
        "      - {version: '2'}\n      - {version: '3', timeout_ms: 5}\n",
        "shadow_executor: {max_concurrency: 1, max_queue: 1}\n",
    )
    recorder = Recorder()
    router = ShadowRouter(registry, listener=recorder)
    started = time.perf_counter()
    for x in range(1, 11):
        router.submit(ShadowCopy("scorer", "1", {"x": x}, {"score": 2.0 * x}, f"r{x}"))
    # Waiting for version 3 alone would take 10 x 20 ms; queueing takes microseconds.
    assert time.perf_counter() - started < 0.15, "submit must never wait for shadows"
    router.close()
    assert recorder.dropped > 0
    assert len(recorder.finished) + recorder.dropped == 20
    assert "error" in recorder.finished
    assert set(recorder.finished) <= {"error", "timeout"}
    assert recorder.compared == []


def test_sampling_and_same_version_are_skipped(tmp_path: Path) -> None:
    registry = registry_with(
        tmp_path, "      - {version: '5', sample_rate: 0.25}\n      - {version: '1'}\n"
    )
    draws = iter([0.1, 0.3, 0.2, 0.9] * 10)
    recorder = Recorder()
    router = ShadowRouter(registry, listener=recorder, rng=lambda: next(draws))
    for x in range(1, 5):
        router.submit(ShadowCopy("scorer", "1", {"x": x}, {"score": 2.0 * x}, "r"))
    router.close()
    assert (
        len(recorder.finished) == 2
    )  # draws 0.1 and 0.2 hit the 25% sample; v1 never shadows itself


def test_shadow_copies_start_only_after_the_response_is_sent(tmp_path: Path) -> None:
    """The WSGI body's close(), called by the server after writing it, submits the copy."""
    import io
    import json

    from servinglib.http.app import create_app
    from servinglib.monitoring.metrics import ServingMetrics
    from servinglib.serving.service import InferenceService

    registry = registry_with(tmp_path, "      - {version: '4'}\n")
    recorder = Recorder()
    router = ShadowRouter(registry, listener=recorder)
    app = create_app(InferenceService(registry, shadows=router), ServingMetrics())
    body = json.dumps({"model_id": "scorer", "features": {"x": 3}}).encode()
    environ = {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": "/infer",
        "CONTENT_TYPE": "application/json",
        "CONTENT_LENGTH": str(len(body)),
        "wsgi.input": io.BytesIO(body),
    }
    statuses: list[str] = []
    response = app(environ, lambda status, headers: statuses.append(status))
    assert json.loads(b"".join(response))["output"] == {"score": 6.0}
    assert statuses == ["200 OK"]
    time.sleep(0.3)  # a copy submitted with the answer would have finished by now
    assert recorder.finished == []
    response.close()  # what gunicorn does once the body is written
    recorder.wait_for(1)
    router.close()
    assert recorder.finished == ["ok"]


def test_warnings_are_one_per_shadow_outcome_and_interval(caplog: pytest.LogCaptureFixture) -> None:
    from servinglib.shadow.router import _RateLimitedWarnings

    now = [0.0]
    warnings = _RateLimitedWarnings(60.0, clock=lambda: now[0])
    with caplog.at_level("WARNING", logger="servinglib.shadow.router"):
        for _ in range(5):
            warnings.warn("m", "2", "refused", "shadow %r version %r refused a copy: %s", "full")
        warnings.warn("m", "2", "not_ready", "shadow %r version %r cannot answer: %s", "FAILED")
        now[0] = 61.0
        warnings.warn("m", "2", "refused", "shadow %r version %r refused a copy: %s", "full")
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "shadow 'm' version '2' refused a copy: full",
        "shadow 'm' version '2' cannot answer: FAILED",
        "shadow 'm' version '2' refused a copy: full (4 more refused copies in the last 60 s "
        "not logged)",
    ]
