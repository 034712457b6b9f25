"""Exclusions that work: Gemm renames, unknown names, what stayed float, Gather in the fallback."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from optimize_models import write_gemm_mlp, write_recommender

from servinglib.optimize.errors import OptimizeError
from servinglib.optimize.graph import count_ops
from servinglib.optimize.measure import MeasureSettings
from servinglib.optimize.quantize import QuantizeOptions, quantize_model
from servinglib.optimize.samples import input_specs, load_samples
from servinglib.optimize.search import SearchSettings, search_candidates
from servinglib.optimize.sensitivity import rank_sensitive_nodes
from servinglib.optimize.weights import weight_share

QUICK = MeasureSettings(warmup=1, iterations=5, repeats=2, batch_size=4, min_round_s=0.0)


def logits(path: Path, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    result: np.ndarray = session.run(None, {"x": x})[0]
    return result


@pytest.fixture
def gemm_mlp(tmp_path: Path) -> Path:
    path = tmp_path / "gemm.onnx"
    write_gemm_mlp(path)
    return path


@pytest.mark.parametrize("method", ["dynamic", "dynamic-per-token"])
def test_an_excluded_gemm_stays_float_through_the_quantizers_rename(
    gemm_mlp: Path, tmp_path: Path, method: str
) -> None:
    x = np.random.default_rng(1).normal(size=(16, 8)).astype(np.float32)
    full, kept = tmp_path / "full.onnx", tmp_path / "kept.onnx"
    quantize_model(gemm_mlp, full, QuantizeOptions(method=method))
    result = quantize_model(gemm_mlp, kept, QuantizeOptions(method=method, exclude_nodes=("fc1",)))
    integer = "MatMulInteger" if method == "dynamic" else "MatMulIntegerToFloat"
    assert count_ops(full)[integer] == 2
    assert count_ops(kept)[integer] == 1  # fc1 (renamed fc1_MatMul by ONNX Runtime) is float
    assert result.float_nodes == ("fc1",)
    assert result.options.exclude_nodes == ("fc1",)
    assert result.options.describe(float_nodes=len(result.float_nodes)).endswith(
        "1 node(s) excluded"
    )
    assert not np.array_equal(logits(full, x), logits(kept, x))  # the exclusion did something
    share = weight_share(kept)
    assert share.float_op_types == {"MatMul": 1}
    assert 0 < share.quantized_fraction < 1


def test_an_unknown_node_name_is_refused(gemm_mlp: Path, tmp_path: Path) -> None:
    with pytest.raises(OptimizeError, match=r"names \['fc3'\], which no node .* fc1, fc2"):
        quantize_model(
            gemm_mlp, tmp_path / "q.onnx", QuantizeOptions(method="dynamic", exclude_nodes=("fc3",))
        )
    assert not (tmp_path / "q.onnx").exists()


def test_the_fallback_ranks_the_embedding_gather_and_leaves_it_float(tmp_path: Path) -> None:
    model = tmp_path / "recommender.onnx"
    write_recommender(model)
    ids = np.random.default_rng(2).integers(0, 19, size=(24, 4)).astype(np.int64)
    np.savez(tmp_path / "valid.npz", ids=ids)
    samples = load_samples(tmp_path / "valid.npz", input_specs(model))
    ranked = rank_sensitive_nodes(model, samples.feeds, QuantizeOptions(method="dynamic"))
    assert ranked[0].name == "embed"
    assert {n.op_type for n in ranked} == {"Gather", "MatMul"}
    result = search_candidates(
        model,
        tmp_path,
        samples,
        None,
        SearchSettings(metric="relative-error", max_loss=0.3, measure=QUICK),
    )
    assert not any(c.accepted for c in result.candidates[:3]), result.explain()
    assert result.chosen is not None, result.explain()
    assert result.chosen.options.exclude_nodes == ("embed",)
    assert result.chosen.name.endswith("1 node(s) excluded")
    assert result.chosen.weights is not None
    assert result.chosen.weights.float_op_types == {"Gather": 1}
    # the retry is real: leaving the table float removes most of the loss
    assert result.chosen.metric is not None
    base = result.candidates[0].metric
    assert base is not None
    assert result.chosen.metric.loss < base.loss / 5


def test_per_token_nodes_are_named(gemm_mlp: Path, tmp_path: Path) -> None:
    import onnx

    quantize_model(gemm_mlp, tmp_path / "q.onnx", QuantizeOptions(method="dynamic-per-token"))
    nodes = onnx.load(str(tmp_path / "q.onnx")).graph.node
    assert all(node.name for node in nodes), [n.op_type for n in nodes if not n.name]
    names = [n.name for n in nodes if n.op_type == "MatMulIntegerToFloat"]
    assert names == ["fc1_MatMul_per_token_matmul", "fc2_MatMul_per_token_matmul"]
