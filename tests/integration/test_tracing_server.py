"""Traces under a real gunicorn with 2 workers, exported over OTLP/HTTP to a real receiver."""

from __future__ import annotations

import bisect
import json
import math
import random
import shutil
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import requests
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from servinglib.monitoring.metric_specs import REQUEST_BUCKETS
from tests.conftest import LiveServer, free_port, launch, stop
from tests.otlp_receiver import OtlpReceiver, Span

pytestmark = pytest.mark.integration

FIXTURE = Path(__file__).parent.parent / "fixtures" / "tracing"
SERVER_KIND = 2  # SpanKind SERVER in OTLP
OPENMETRICS = "application/openmetrics-text; version=1.0.0"
BOUNDS = (*REQUEST_BUCKETS, math.inf)


def traceparent(sampled: bool = True) -> tuple[str, str, str]:
    """A new W3C traceparent header value, with its trace id and parent span id."""
    trace_id, span_id = f"{random.getrandbits(128):032x}", f"{random.getrandbits(64):016x}"
    return f"00-{trace_id}-{span_id}-{'01' if sampled else '00'}", trace_id, span_id


def serve(directory: Path, receiver: OtlpReceiver, service: str, **env: str) -> LiveServer:
    shutil.copytree(FIXTURE, directory / "service")
    return launch(
        directory / "service" / "servinglib.yaml",
        directory,
        "--workers",
        "2",
        env={
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": receiver.endpoint,
            "OTEL_SERVICE_NAME": service,
            "OTEL_BSP_SCHEDULE_DELAY": "100",
            **env,
        },
    )


@pytest.fixture(scope="module")
def grpc_port() -> int:
    return free_port()


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, otlp_receiver: OtlpReceiver, grpc_port: int
) -> Iterator[LiveServer]:
    directory = tmp_path_factory.mktemp("tracing")
    live = serve(directory, otlp_receiver, "tracing-main", SERVINGLIB_GRPC_PORT=str(grpc_port))
    yield live
    stop(live.process)


def infer(url: str, model: str, features: dict[str, Any], header: str | None) -> requests.Response:
    headers = {"traceparent": header} if header else {}
    body = {"model_id": model, "features": features}
    return requests.post(f"{url}/infer", json=body, headers=headers, timeout=30)


def of_trace(spans: list[Span], trace_id: str) -> dict[str, list[Span]]:
    by_name: dict[str, list[Span]] = {}
    for span in spans:
        if span.trace_id == trace_id:
            by_name.setdefault(span.name, []).append(span)
    return by_name


def test_a_traced_infer_request_is_a_child_of_its_traceparent(
    server: LiveServer, otlp_receiver: OtlpReceiver
) -> None:
    header, trace_id, parent = traceparent()
    response = infer(server.url, "scorer", {"x": 2.0}, header)
    assert response.status_code == 200, response.text
    spans = otlp_receiver.wait_for(
        "tracing-main", lambda s: {"encode", "POST /infer"} <= set(of_trace(s, trace_id))
    )
    trace = of_trace(spans, trace_id)
    (root,) = trace["POST /infer"]
    assert root.parent_span_id == parent
    assert root.kind == SERVER_KIND
    assert root.attributes["servinglib.model"] == "scorer"
    assert root.attributes["servinglib.version"] == "1"
    assert root.attributes["servinglib.protocol"] == "infer"
    assert root.attributes["http.response.status_code"] == 200
    assert root.attributes["servinglib.request_id"] == response.headers["x-request-id"]
    for child in ("parse", "admit", "predict", "encode"):
        assert [s.parent_span_id for s in trace[child]] == [root.span_id], child
    # the access log line of the request carries the trace id
    log = server.wait_for_log(f'"trace_id": "{trace_id}"')
    lines = [json.loads(line) for line in log.splitlines() if trace_id in line]
    assert any(line.get("request_id") == response.headers["x-request-id"] for line in lines)


def test_b3_headers_from_envoy_are_followed(
    server: LiveServer, otlp_receiver: OtlpReceiver
) -> None:
    trace_id, parent = f"{random.getrandbits(128):032x}", f"{random.getrandbits(64):016x}"
    headers = {"x-b3-traceid": trace_id, "x-b3-spanid": parent, "x-b3-sampled": "1"}
    body = {"model_id": "scorer", "features": {"x": 1.0}}
    response = requests.post(f"{server.url}/infer", json=body, headers=headers, timeout=30)
    assert response.status_code == 200
    spans = otlp_receiver.wait_for("tracing-main", lambda s: "POST /infer" in of_trace(s, trace_id))
    assert [s.parent_span_id for s in of_trace(spans, trace_id)["POST /infer"]] == [parent]


def test_open_inference_requests_are_traced(
    server: LiveServer, otlp_receiver: OtlpReceiver
) -> None:
    header, trace_id, parent = traceparent()
    body = {"inputs": [{"name": "values", "datatype": "FP64", "shape": [2], "data": [1, 2]}]}
    response = requests.post(
        f"{server.url}/v2/models/doubler/infer",
        json=body,
        headers={"traceparent": header},
        timeout=30,
    )
    path = "POST /v2/models/doubler/infer"
    spans = otlp_receiver.wait_for("tracing-main", lambda s: path in of_trace(s, trace_id))
    (root,) = of_trace(spans, trace_id)[path]
    assert root.parent_span_id == parent
    assert root.attributes["servinglib.protocol"] == "v2"
    assert root.attributes["http.response.status_code"] == response.status_code


def test_grpc_metadata_carries_the_trace_context(
    server: LiveServer, otlp_receiver: OtlpReceiver, grpc_port: int
) -> None:
    import grpc
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    header, trace_id, parent = traceparent()
    request = service_pb2.ModelInferRequest(model_name="scorer")
    request.inputs.add(name="x", datatype="FP64", shape=[1]).contents.fp64_contents.append(2.0)
    with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        stub.ModelInfer(request, metadata=[("traceparent", header)], timeout=30)
    path = "/inference.GRPCInferenceService/ModelInfer"
    spans = otlp_receiver.wait_for("tracing-main", lambda s: path in of_trace(s, trace_id))
    (root,) = of_trace(spans, trace_id)[path]
    assert root.parent_span_id == parent
    assert root.attributes["servinglib.protocol"] == "grpc"
    assert root.attributes["http.response.status_code"] == 200
    assert {"admit", "predict"} <= set(of_trace(spans, trace_id))


def latency_exemplars(url: str) -> dict[tuple[str, str, str], tuple[str, float, float]]:
    """``(model, protocol, le) -> (trace id, value, time)`` of the exemplars of one
    OpenMetrics scrape of ``url`` (a new connection: any worker may answer)."""
    headers = {"Accept": OPENMETRICS, "Connection": "close"}
    response = requests.get(f"{url}/metrics", headers=headers, timeout=10)
    assert response.headers["Content-Type"].startswith("application/openmetrics-text")
    found = {}
    for family in text_string_to_metric_families(response.text):  # type: ignore[no-untyped-call]
        for sample in family.samples:
            exemplar = sample.exemplar
            if exemplar is None:
                continue
            assert sample.name == "servinglib_request_duration_seconds_bucket"
            le = sample.labels["le"]
            assert BOUNDS[bisect.bisect_left(BOUNDS, exemplar.value)] == float(le)  # its bucket
            key = (sample.labels["model"], sample.labels["protocol"], le)
            found[key] = (exemplar.labels["trace_id"], exemplar.value, exemplar.timestamp)
    return found


def whoami(url: str, protocol: str) -> tuple[int, str]:
    """A traced request to ``whoami`` on a new connection: the answering pid, the trace id."""
    header, trace_id, _ = traceparent()
    headers = {"traceparent": header, "Connection": "close"}
    if protocol == "infer":
        body: dict[str, Any] = {"model_id": "whoami", "features": {"values": [1]}}
        response = requests.post(f"{url}/infer", json=body, headers=headers, timeout=30)
        assert response.status_code == 200, response.text
        return response.json()["output"]["pid"][0], trace_id
    body = {"inputs": [{"name": "values", "datatype": "FP64", "shape": [1], "data": [1]}]}
    response = requests.post(
        f"{url}/v2/models/whoami/infer", json=body, headers=headers, timeout=30
    )
    assert response.status_code == 200, response.text
    return int(response.json()["outputs"][0]["data"][0]), trace_id


def test_an_openmetrics_scrape_has_sampled_trace_ids_as_exemplars_of_every_worker(
    server: LiveServer, otlp_receiver: OtlpReceiver
) -> None:
    newest: dict[str, tuple[int, str]] = {}
    for _ in range(100):  # until the newest /infer and v2 requests went to different workers
        newest = {protocol: whoami(server.url, protocol) for protocol in ("infer", "v2")}
        if newest["infer"][0] != newest["v2"][0]:
            break
    assert newest["infer"][0] != newest["v2"][0], "every request went to one worker"
    wanted = {protocol: trace_id for protocol, (_, trace_id) in newest.items()}

    def newest_exemplars() -> tuple[dict[str, str], set[str]]:
        exemplars = latency_exemplars(server.url)
        latest: dict[str, tuple[float, str]] = {}
        for (model, protocol, _), (trace_id, _, at) in exemplars.items():
            if model == "whoami" and (protocol not in latest or latest[protocol][0] < at):
                latest[protocol] = (at, trace_id)
        return {p: t for p, (_, t) in latest.items()}, {t for t, _, _ in exemplars.values()}

    deadline = time.monotonic() + 30
    seen, every = newest_exemplars()
    while seen != wanted and time.monotonic() < deadline:
        time.sleep(0.1)
        seen, every = newest_exemplars()
    # one scrape, answered by one worker, shows both: the other's came through its file
    assert seen == wanted
    # every exemplar is the trace id of a request whose trace reached the collector
    spans = otlp_receiver.wait_for(
        "tracing-main", lambda s: every <= {x.trace_id for x in s if x.kind == SERVER_KIND}
    )
    assert every <= {x.trace_id for x in spans if x.kind == SERVER_KIND}
    # the Prometheus text format is what it was: no exemplars
    plain = requests.get(f"{server.url}/metrics", timeout=10)
    assert plain.headers["Content-Type"].startswith("text/plain")
    assert "servinglib_request_duration_seconds_bucket" in plain.text
    assert " # {" not in plain.text


def test_every_request_of_a_batch_is_linked_to_its_batch_span(
    server: LiveServer, otlp_receiver: OtlpReceiver
) -> None:
    full: tuple[str, dict[str, Any]] | None = None
    # 32 requests at once over 2 workers: a small batch holds its worker 0.5 s, so the
    # requests behind it fill the next batch; rounds go on until one is full (or 60 s)
    deadline = time.monotonic() + 60
    while full is None and time.monotonic() < deadline:
        sent = [traceparent() for _ in range(32)]
        with ThreadPoolExecutor(32) as pool:
            answers = list(
                pool.map(lambda h: infer(server.url, "summer", {"values": [1, 2]}, h[0]), sent)
            )
        assert all(a.status_code == 200 for a in answers)
        batched = [(h[1], a.json()) for h, a in zip(sent, answers, strict=True)]
        full = next(((t, out) for t, out in batched if out["output"]["batch"] == 8), None)
    assert full is not None, "no batch of 8 formed in 60 s of rounds of 32 concurrent requests"
    trace_id = full[0]

    def linked(spans: list[Span]) -> Span | None:
        predict = of_trace(spans, trace_id).get("predict", [])
        if not predict:
            return None
        batch_span = predict[0].links[0][1]
        return next((s for s in spans if s.span_id == batch_span), None)

    def complete(spans: list[Span]) -> bool:  # the batch and all its requests' spans arrived
        batch = linked(spans)
        if batch is None:
            return False
        traces = [of_trace(spans, trace) for trace, _ in batch.links]
        return all({"POST /infer", "queue", "predict"} <= set(t) for t in traces)

    spans = otlp_receiver.wait_for("tracing-main", complete)
    batch = linked(spans)
    assert batch is not None
    assert batch.name == "predict_batch"
    assert batch.attributes["servinglib.batch_size"] == 8
    assert len(batch.links) == 8
    servers = {s.span_id: s for s in spans if s.name == "POST /infer"}
    for link_trace, link_span in batch.links:  # every request of the batch ...
        assert servers[link_span].trace_id == link_trace
        trace = of_trace(spans, link_trace)
        (queue,) = trace["queue"]  # ... waited in the queue under its own span
        (predict,) = trace["predict"]  # ... and was predicted in this batch
        assert queue.parent_span_id == predict.parent_span_id == link_span
        assert predict.links == ((batch.trace_id, batch.span_id),)
        assert queue.end_ns <= predict.start_ns + 1000


def test_a_pipeline_request_is_one_trace_with_every_step(
    server: LiveServer, otlp_receiver: OtlpReceiver
) -> None:
    header, trace_id, _ = traceparent()
    response = infer(server.url, "twice", {"values": [1, 2]}, header)
    assert response.status_code == 200, response.text
    assert response.json()["output"] == {"x": [4, 8]}
    spans = otlp_receiver.wait_for(
        "tracing-main",
        lambda s: {"POST /infer", "step first", "step second"} <= set(of_trace(s, trace_id)),
    )
    trace = of_trace(spans, trace_id)
    (root,) = trace["POST /infer"]
    steps = trace["step first"] + trace["step second"]
    assert [s.attributes["servinglib.step"] for s in steps] == ["first", "second"]
    # the steps hang under the pipeline's own model call, inside the request's trace
    ids = {s.span_id: s for s in spans if s.trace_id == trace_id}
    for step in steps:
        parent = step
        while parent.parent_span_id in ids:
            parent = ids[parent.parent_span_id]
        assert parent is root
        assert step.attributes["servinglib.model"] == "twice"
    step_ids = {s.span_id for s in steps}
    # each step's own model call is a child of its step span
    calls = [s for s in spans if s.trace_id == trace_id and s.parent_span_id in step_ids]
    assert {ids[c.parent_span_id].name for c in calls if c.name == "predict"} == {
        "step first",
        "step second",
    }


def test_a_shadow_copy_is_a_linked_span_after_the_answer(
    server: LiveServer, otlp_receiver: OtlpReceiver
) -> None:
    header, trace_id, _ = traceparent()
    response = infer(server.url, "scorer", {"x": 3.0}, header)
    assert response.json()["output"] == {"y": 3.0}
    spans = otlp_receiver.wait_for(
        "tracing-main", lambda s: {"shadow 2", "POST /infer"} <= set(of_trace(s, trace_id))
    )
    trace = of_trace(spans, trace_id)
    (root,) = trace["POST /infer"]
    (shadow,) = trace["shadow 2"]
    assert shadow.links == ((trace_id, root.span_id),)
    assert shadow.parent_span_id == root.span_id
    assert shadow.start_ns >= root.end_ns  # after the answer
    assert shadow.attributes["servinglib.outcome"] == "ok"


def test_sampling_off_exports_nothing_and_sigterm_flushes_buffered_spans(
    tmp_path: Path, otlp_receiver: OtlpReceiver
) -> None:
    # batches are exported only every 10 minutes: what arrives is what the exit flushed
    live = serve(tmp_path, otlp_receiver, "tracing-flush", OTEL_BSP_SCHEDULE_DELAY="600000")
    try:
        unsampled, unsampled_id, _ = traceparent(sampled=False)
        sampled, sampled_id, _ = traceparent()
        for header in (None, unsampled, sampled):  # default: only what the caller sampled
            assert infer(live.url, "scorer", {"x": 1.0}, header).status_code == 200
        assert otlp_receiver.spans("tracing-flush") == []  # still buffered in the worker
    finally:
        stop(live.process)
    assert live.process.returncode == 0
    spans = otlp_receiver.spans("tracing-flush")
    assert {s.trace_id for s in spans if s.kind == SERVER_KIND} == {sampled_id}
    assert {"POST /infer", "parse", "admit", "predict", "encode"} <= {s.name for s in spans}
    assert unsampled_id not in {s.trace_id for s in spans}


def test_the_error_line_of_a_failing_model_carries_the_trace_id(
    server: LiveServer, otlp_receiver: OtlpReceiver
) -> None:
    header, trace_id, _ = traceparent()
    response = infer(server.url, "scorer", {"x": "not a number"}, header)  # predict raises
    assert response.status_code == 500
    log = server.wait_for_log("raised while predicting")
    lines = [json.loads(line) for line in log.splitlines() if trace_id in line]
    errors = [line for line in lines if line["logger"] == "servinglib.serving.service"]
    assert len(errors) == 1
    assert errors[0]["trace_id"] == trace_id
    assert "raised while predicting" in errors[0]["message"]
    spans = otlp_receiver.wait_for("tracing-main", lambda s: "POST /infer" in of_trace(s, trace_id))
    (root,) = of_trace(spans, trace_id)["POST /infer"]
    assert root.attributes["http.response.status_code"] == 500


def test_an_unreachable_collector_holds_a_stopping_worker_10_s_at_most(
    tmp_path: Path, otlp_receiver: OtlpReceiver
) -> None:
    """The SDK's shutdown retries each last export for its timeout: three batches held the
    workers until gunicorn's graceful timeout (30 s) killed them, before their last log
    lines. servinglib bounds it: 10 s, then the spans left are dropped, and said so."""
    nobody = f"http://127.0.0.1:{free_port()}/v1/traces"  # nothing listens there
    live = serve(
        tmp_path,
        otlp_receiver,
        "tracing-unreachable",
        OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=nobody,  # instead of the receiver's
        OTEL_EXPORTER_OTLP_TIMEOUT="10",
        OTEL_TRACES_SAMPLER="parentbased_traceidratio",
        OTEL_TRACES_SAMPLER_ARG="1.0",
        OTEL_BSP_SCHEDULE_DELAY="600000",  # everything waits for the exit's flush
    )
    try:
        with requests.Session() as session:
            for _ in range(600):  # about 3,000 spans: a full queue, four export batches
                body = {"model_id": "scorer", "features": {"x": 1.0}}
                assert session.post(f"{live.url}/infer", json=body, timeout=30).ok
        started = time.monotonic()
        live.process.terminate()
        live.process.wait(timeout=60)
        took = time.monotonic() - started
    finally:
        stop(live.process)
    print(f"figures: the master exited {took:.1f} s after SIGTERM")
    assert took < 25, f"{took:.1f} s: a worker waited for the collector past the 10 s bound"
    log = live.log()
    assert "were not exported within 10 s (is the OTLP collector reachable?)" in log
    assert log.count('"logger": "servinglib.access"') == 600 + log.count('"path": "/readyz"')
