"""gthread's admission control, with an injected clock: wait estimate, shedding, hold times."""

from __future__ import annotations

from servinglib.serve.body_timeout import BodyTimeout
from servinglib.serve.thread_admission import ThreadAdmission, inference_model


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_requests_are_admitted_until_the_expected_answer_passes_the_deadline() -> None:
    clock = Clock()
    admission = ThreadAdmission(threads=2, deadlines_s={"slow": 1.0, "quick": 10.0}, clock=clock)
    started = admission.started()
    clock.now += 0.4  # a served request held a thread 400 ms
    admission.finished(started, "slow")
    assert admission.hold_s > 0
    assert admission.served_s["slow"] > 0
    for _ in range(3):
        started = admission.started()
        clock.now += 0.4
        admission.finished(started, "slow")
    admitted = 0
    while admission.admit("slow"):
        admitted += 1
    # (waiting + 1) x hold / 2 threads x 1.5 + the served hold must stay within 1 s
    assert 0 < admitted < 10
    wait = admission.expected_wait_s() - admission.hold_s / 2  # with the last one admitted
    assert wait * 1.5 + admission.served_s["slow"] <= 1.0
    assert admission.admit("quick")  # a model with a longer deadline still gets in
    assert admission.admit("unknown")  # an unknown model gets the longest deadline


def test_shed_requests_do_not_count_as_served_time() -> None:
    clock = Clock()
    admission = ThreadAdmission(threads=8, clock=clock)
    started = admission.started()
    clock.now += 0.001
    admission.finished(started, "m", shed=True)
    assert "m" not in admission.served_s
    assert admission.hold_s > 0


def test_waiting_counts_follow_the_queue() -> None:
    admission = ThreadAdmission(threads=1, deadlines_s={"m": 1.0})
    assert admission.admit("m")
    admission.queued()
    assert admission.waiting == 2
    admission.started()
    admission.started()
    admission.started()  # never below zero
    assert admission.waiting == 0


def test_the_model_is_found_in_the_path_or_a_small_body() -> None:
    assert inference_model(b"/v2/models/scorer/versions/2/infer", b"") == "scorer"
    assert inference_model(b"/infer", b'{"model_id": "scorer", "features": {}}') == "scorer"
    assert inference_model(b"/infer", b"\x1f\x8b gzip") == ""
    assert inference_model(b"/infer", b"{not json") == ""
    assert inference_model(b"/infer", b'{"model_id": 3}') == ""
    assert inference_model(b"/infer", b"[1]") == ""
    assert inference_model(b"/readyz", b"") is None
    assert inference_model(b"/metrics", b"") is None


def test_a_body_gets_its_timeout_plus_a_second_per_min_rate_bytes() -> None:
    limit = BodyTimeout(timeout_s=10.0, min_bytes_per_s=1000)
    assert limit.deadline(100.0, 0) == 110.0
    assert limit.deadline(100.0, 5000) == 115.0
    assert BodyTimeout(2.0, 0).deadline(0.0, 10**9) == 2.0
    assert "server.body_timeout_s" in limit.message(12)


def test_a_model_slower_than_most_of_its_deadline_is_admitted_while_nothing_waits() -> None:
    clock = Clock()
    admission = ThreadAdmission(threads=8, deadlines_s={"slow": 1.0}, clock=clock)
    for _ in range(10):
        started = admission.started()
        clock.now += 0.9  # 90 % of its deadline, every time
        admission.finished(started, "slow")
    assert admission.admit("slow")  # nothing waits: admitted
    assert not admission.admit("slow")  # one waits already, 0.9 s each: refused
