"""Composed models under a real gunicorn, over /infer and Open Inference v2."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
import requests

from benchmarks.composition_service import composition_service
from tests.conftest import LiveServer, launch, stop
from tests.integration.test_shadow_traffic_server import total, wait_for_metric
from tests.triton_rules import loader_problems

pytestmark = pytest.mark.integration

VALUES = [1.0, 2.0, 3.0, 4.0]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    directory = tmp_path_factory.mktemp("composition")
    live = launch(composition_service(directory / "service"), directory)
    yield live
    stop(live.process)


def infer(url: str, model: str, features: dict[str, Any], **extra: Any) -> requests.Response:
    body = {"model_id": model, "features": features, **extra}
    return requests.post(f"{url}/infer", json=body, timeout=30)


def infer_v2(url: str, model: str, version: str, values: list[float]) -> requests.Response:
    body = {"inputs": [{"name": "values", "datatype": "FP32", "shape": [4], "data": values}]}
    return requests.post(f"{url}/v2/models/{model}/versions/{version}/infer", json=body, timeout=30)


def v2_outputs(response: requests.Response) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    return {o["name"]: o["data"] for o in response.json()["outputs"]}


def test_pipeline_steps_batch_across_concurrent_requests_on_both_protocols(
    server: LiveServer,
) -> None:
    before_sum = total(server.url, "servinglib_batch_size_sum", model="linear")
    before_count = total(server.url, "servinglib_batch_size_count", model="linear")

    def one(i: int) -> tuple[float, float]:
        values = [float(i % 7), 1.0, 0.0, 2.0]  # y = [i % 7, 3]
        if i % 2:
            output = infer(server.url, "classify", {"values": values}, version="1").json()
            return output["output"]["score"], max(i % 7, 3)
        answer = v2_outputs(infer_v2(server.url, "classify", "1", values))
        return answer["score"][0], max(i % 7, 3)

    with ThreadPoolExecutor(max_workers=16) as pool:
        answers = list(pool.map(one, range(320)))
    assert all(got == want for got, want in answers)
    batched = total(server.url, "servinglib_batch_size_sum", model="linear") - before_sum
    batches = total(server.url, "servinglib_batch_size_count", model="linear") - before_count
    assert batched == 320
    assert batches < batched  # batches of more than one formed across pipeline requests
    for step in ("scale", "project", "decide"):
        assert (
            total(server.url, "servinglib_step_duration_seconds_count", model="classify", step=step)
            >= 320
        )


def test_ensemble_member_failure_under_each_policy(server: LiveServer) -> None:
    failed = infer(server.url, "vote-fail", {"fail": True})
    assert failed.status_code == 500
    assert "model 'flaky' version '1' failed to answer" in failed.json()["error"]
    assert infer(server.url, "vote-fail", {}).json()["output"] == {"score": 3.5}
    rest = infer(server.url, "vote-rest", {"fail": True})
    assert rest.status_code == 200
    assert rest.json()["output"] == {"score": 2.0}  # mean of const 1 and const 3
    body = {"inputs": [{"name": "fail", "datatype": "BOOL", "shape": [1], "data": [True]}]}
    v2 = requests.post(f"{server.url}/v2/models/vote-rest/infer", json=body, timeout=30)
    assert v2_outputs(v2)["score"] == [2.0]
    v2_fail = requests.post(f"{server.url}/v2/models/vote-fail/infer", json=body, timeout=30)
    assert v2_fail.status_code == 500
    errors = total(server.url, "servinglib_step_errors_total", model="vote-rest")
    assert errors == 2
    # a member that answers what the combiner cannot average fails like one that raised
    garbled = infer(server.url, "vote-rest", {"garble": True})
    assert garbled.status_code == 200, garbled.text
    assert garbled.json()["output"] == {"score": 2.0}
    assert infer(server.url, "vote-fail", {"garble": True}).status_code == 500


def test_a_pipeline_canary_splits_by_routing_key(server: LiveServer) -> None:
    answered: Counter[str] = Counter()
    for key in range(40):
        response = requests.post(
            f"{server.url}/infer",
            json={"model_id": "classify", "features": {"values": VALUES}},
            headers={"x-routing-key": f"user-{key}"},
            timeout=30,
        )
        body = response.json()
        assert body["output"]["score"] == {"1": 6.0, "2": 12.0}[body["version"]]
        answered[body["version"]] += 1
    assert set(answered) == {"1", "2"}


def test_a_pipeline_shadow_runs_the_new_pipeline_beside_the_current_one(
    server: LiveServer,
) -> None:
    for _ in range(5):
        response = infer(server.url, "classify-shadowed", {"values": VALUES})
        assert response.json()["version"] == "1"
        assert response.json()["output"]["score"] == 6.0
    labels = {"model": "classify-shadowed"}
    compared = wait_for_metric(server.url, "servinglib_shadow_comparisons_total", 5, **labels)
    assert compared == 5
    assert total(server.url, "servinglib_shadow_agreements_total", **labels) == 0  # 12 != 6
    assert (
        total(
            server.url,
            "servinglib_step_duration_seconds_count",
            model="classify-shadowed",
            version="2",
            step="scale",
        )
        >= 5
    )


def test_a_member_self_test_failure_fails_the_composed_version(server: LiveServer) -> None:
    index = requests.post(f"{server.url}/v2/repository/index", json={}, timeout=30).json()
    entry = next(e for e in index if e["name"] == "vote-fail" and e["version"] == "2")
    assert entry["state"] == "FAILED"
    assert "step 'const:9' cannot run: model 'const' version '9' is FAILED" in entry["reason"]
    assert (
        requests.get(f"{server.url}/v2/models/vote-fail/versions/2/ready", timeout=30).status_code
        == 400
    )


def test_triton_client_reads_the_ensemble_and_infers_through_it(server: LiveServer) -> None:
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(url=server.url.removeprefix("http://"))
    try:
        config = client.get_model_config("classify")
        assert config["platform"] == "ensemble"
        steps = config["ensemble_scheduling"]["step"]
        assert [s["model_name"] for s in steps] == ["prep", "linear", "head"]
        assert steps[1] == {
            "model_name": "linear",
            "model_version": 1,
            "input_map": {"x": "scale.x"},
            "output_map": {"y": "project.y"},
        }
        assert steps[2]["output_map"] == {"label": "label", "score": "score"}
        assert loader_problems(config) == []  # Triton's loader would load it
        for model in ("prep", "linear", "head", "const", "flaky"):
            assert loader_problems(client.get_model_config(model)) == [], model
        # every step has a configuration, the ensemble's combiner too (perf_analyzer reads them)
        ensemble = client.get_model_config("vote-rest")
        for step in ensemble["ensemble_scheduling"]["step"]:
            version = str(step["model_version"]) if step["model_version"] > 0 else ""
            assert (
                client.get_model_config(step["model_name"], version)["name"] == step["model_name"]
            )
        combiner = client.get_model_config("vote-rest_combiner")
        assert combiner["parameters"]["servinglib_combiner"] == {"string_value": "weighted_mean"}
        assert loader_problems(combiner) == []
        metadata = client.get_model_metadata("classify")
        assert metadata["platform"] == "ensemble"
        assert [i["name"] for i in metadata["inputs"]] == ["values"]
        assert [o["name"] for o in metadata["outputs"]] == ["label", "score"]
        values = httpclient.InferInput("values", [4], "FP32")
        values.set_data_from_numpy(np.array(VALUES, dtype=np.float32), binary_data=True)
        result = client.infer("classify", [values], model_version="2")
        assert result.as_numpy("score").tolist() == [12.0]
        assert result.as_numpy("label").tolist() == [1]
    finally:
        client.close()
