"""An XGBoost and a LightGBM version exported by ``servinglib optimize export`` serve under
``runtime: onnx`` beside their native runtime: the written self-tests pass at load (the
server gets ready only then), and tritonclient gets the same answers from both paths."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from servinglib.optimize.measure import MeasureSettings
from servinglib.optimize.tabular import export_tabular
from tests.conftest import LiveServer, launch, stop
from tests.tabular_models import cancer_frame, diabetes_frame, write_lightgbm, write_xgboost

pytestmark = pytest.mark.integration
pytest.importorskip("onnxmltools")

QUICK = MeasureSettings(warmup=1, iterations=5, repeats=1, batch_size=8, min_round_s=0.01)
CONFIG = """\
service: exported
server: {workers: 2}
models:
"""
MODELS = {  # name -> (runtime, repository)
    "diabetes-xgb": ("xgboost", "models/xgb"),
    "diabetes-xgb-onnx": ("onnx", "models/xgb_onnx"),
    "cancer-lgb": ("lightgbm", "models/lgb"),
    "cancer-lgb-onnx": ("onnx", "models/lgb_onnx"),
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    root = tmp_path_factory.mktemp("exported")
    write_xgboost(root / "models/xgb/1")
    write_lightgbm(root / "models/lgb/1")
    for native, runtime in (("xgb", "xgboost"), ("lgb", "lightgbm")):
        onnx = root / f"models/{native}_onnx/1/model.onnx"
        export_tabular(root / f"models/{native}/1", runtime, onnx, measure=QUICK)
        assert (onnx.parent / "test_data.json").is_file()
    entries = "".join(
        f"  - {{name: {name}, runtime: {runtime}, repository: {repo}, default_version: '1'}}\n"
        for name, (runtime, repo) in MODELS.items()
    )
    (root / "servinglib.yaml").write_text(CONFIG + entries)
    live = launch(root / "servinglib.yaml", root, ready_timeout_s=240)
    yield live
    stop(live.process)


def test_exported_versions_self_test_and_answer_as_the_native_runtime(server: LiveServer) -> None:
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(url=server.url.removeprefix("http://"))
    try:
        cases = [
            ("diabetes-xgb", diabetes_frame()[0].iloc[10:42]),
            ("cancer-lgb", cancer_frame()[0].iloc[100:132]),
        ]
        for native, rows in cases:
            answers = {}
            for model in (native, f"{native}-onnx"):
                (tensor,) = client.get_model_metadata(model)["inputs"]
                assert tensor["name"] == "input"
                dtype = np.float32 if tensor["datatype"] == "FP32" else np.float64
                given = httpclient.InferInput("input", list(rows.shape), tensor["datatype"])
                given.set_data_from_numpy(rows.to_numpy(dtype=dtype), binary_data=True)
                answers[model] = client.infer(model, [given])
            outputs = ["predict", "predict_proba"] if native == "cancer-lgb" else ["predict"]
            for name in outputs:
                want = answers[native].as_numpy(name)
                got = answers[f"{native}-onnx"].as_numpy(name)
                assert got.shape == want.shape
                if name == "predict" and native == "cancer-lgb":
                    np.testing.assert_array_equal(got, want)
                else:
                    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    finally:
        client.close()
