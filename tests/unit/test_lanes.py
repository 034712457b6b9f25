"""servinglib.serving.lanes: a model's lane routes, checks inputs and learns how quick its calls are."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from servinglib.config.spec import load_config
from servinglib.errors import VersionNotFoundError
from servinglib.lifecycle.registry import ModelRegistry
from servinglib.serving.lanes import QUICK_S, Lane


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def registry(service_config: Path) -> ModelRegistry:
    registry = ModelRegistry(load_config(service_config, environ={}))
    registry.load_all()
    return registry


def test_a_lane_learns_whether_its_model_is_quick(registry: ModelRegistry) -> None:
    clock = Clock()
    lane = Lane(registry, registry.model_config("scorer"), clock=clock)
    ready = lane.route(None, None)

    class Costly:
        def __init__(self, model: Any) -> None:
            self.model, self.cost_s = model, 0.0

        def predict(self, payload: Any) -> Any:
            clock.now += self.cost_s
            return self.model.predict(payload)

    costly = Costly(ready.instance)

    def call(cost_s: float) -> Any:
        costly.cost_s = cost_s
        return lane.timed(costly, ready.instance.prepare({"x": 1.0}))  # type: ignore[arg-type]

    assert not lane.quick()  # unmeasured: runs on a thread
    assert call(QUICK_S / 20) == {"score": 3.0}
    for _ in range(100):
        call(QUICK_S / 20)
    assert lane.quick()
    call(0.05)  # one slow call sends it back to the threads
    assert not lane.quick()


def test_a_version_the_model_lacks_is_refused_before_the_body_is_read(
    registry: ModelRegistry,
) -> None:
    lane = Lane(registry, registry.model_config("scorer"))
    with pytest.raises(VersionNotFoundError, match="available versions: 1, 2, 3, 4"):
        lane.require_version("9")
    lane.require_version("3")  # FAILED, but it exists: routing says why it cannot answer


def test_exactly_the_declared_inputs_still_have_their_datatypes_checked(tmp_path: Path) -> None:
    import numpy as np

    from servinglib.errors import InvalidInputError

    (tmp_path / "m" / "1").mkdir(parents=True)
    (tmp_path / "model.py").write_text(
        "import servinglib\n"
        "class Doubler(servinglib.Model):\n"
        "    inputs = (servinglib.TensorSpec('x', 'FP32', (-1,)),)\n"
        "    outputs = (servinglib.TensorSpec('y', 'FP32', (-1,)),)\n"
        "    def load(self, path):\n"
        "        pass\n"
        "    def predict(self, features):\n"
        "        return {'y': features['x'] * 2}\n"
    )
    (tmp_path / "servinglib.yaml").write_text(
        "service: s\nmodels:\n  - name: m\n    class: model.py:Doubler\n    repository: m\n"
        "    default_version: '1'\n    require_self_tests: false\n"
    )
    config = load_config(tmp_path / "servinglib.yaml", environ={})
    registry = ModelRegistry(config)
    registry.load_all()
    lane = Lane(registry, config.models[0], None, None, Clock())
    ready = registry.get("m")
    lane.check_tensors(ready, {"x": np.ones(3, dtype=np.float32)})
    with pytest.raises(InvalidInputError, match="has datatype INT64; the model declares FP32"):
        lane.check_tensors(ready, {"x": np.ones(3, dtype=np.int64)})
