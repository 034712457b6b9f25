"""servinglib optimize prune --structure heads: whole attention heads of a BERT-style model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from servinglib.cli.main import main
from servinglib.optimize._session import open_session

torch = pytest.importorskip("torch")
pytest.importorskip("torch_pruning")
pytest.importorskip("transformers")

pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::UserWarning"),
]

# A BERT built from a config (no download): 2 layers of 8 heads of 16, mean-pooled.
MODEL_FILE = """
import torch
from transformers import BertConfig, BertModel

class TinyEncoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        config = BertConfig(
            vocab_size=300, hidden_size=128, num_hidden_layers=2, num_attention_heads=8,
            intermediate_size=128, max_position_embeddings=32, attn_implementation="eager",
        )
        self.bert = BertModel(config, add_pooling_layer=False)

    def forward(self, input_ids, attention_mask):
        tokens = self.bert(input_ids=input_ids, attention_mask=attention_mask)[0]
        mask = attention_mask.unsqueeze(-1).to(tokens.dtype)
        return (tokens * mask).sum(1) / mask.sum(1)
"""


def _encoder(root: Path) -> Any:
    namespace: dict[str, Any] = {}
    exec((root / "tiny_bert.py").read_text(), namespace)  # the class the CLI imports
    return namespace["TinyEncoder"]().eval()


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The module file and train/validation token ids (random, unlabelled)."""
    path = tmp_path_factory.mktemp("heads")
    (path / "tiny_bert.py").write_text(MODEL_FILE, encoding="utf-8")
    rng = np.random.default_rng(0)
    for name, rows in (("train", 128), ("valid", 64)):
        ids = rng.integers(1, 300, size=(rows, 12), dtype=np.int64)
        mask = np.ones_like(ids)
        mask[rows // 2 :, 9:] = 0  # half the rows padded
        np.savez(path / f"{name}.npz", input_ids=ids * mask, attention_mask=mask)
    return path


def test_the_weakest_heads_go_and_the_answers_stay(root: Path) -> None:
    from servinglib.optimize.heads import attention_blocks, prune_heads

    model = _encoder(root)
    valid = np.load(root / "valid.npz")
    feed = (torch.from_numpy(valid["input_ids"]), torch.from_numpy(valid["attention_mask"]))
    # heads 1, 3, 5, 7 of every layer silenced: no query, key or value weight left
    for block in attention_blocks(model):
        a = block.attention
        with torch.no_grad():
            for layer in (a.query, a.key, a.value):
                for head in (1, 3, 5, 7):
                    layer.weight[head * 16 : (head + 1) * 16] = 0
                    layer.bias[head * 16 : (head + 1) * 16] = 0
    with torch.no_grad():
        before = model(*feed)
    params = sum(p.numel() for p in model.parameters())
    assert prune_heads(model, 0.5) == 8  # 4 of 8 heads in each of 2 layers
    blocks = attention_blocks(model)
    assert [b.heads for b in blocks] == [4, 4]
    assert blocks[0].attention.query.weight.shape == (64, 128)
    assert blocks[0].output.weight.shape == (128, 64)
    # every removed head was silent, so nothing the model says has changed
    with torch.no_grad():
        after = model(*feed)
    assert float((after - before).abs().max()) < 1e-5
    # q, k, v (rows + bias) and the output's columns of 8 heads of 16 over 128 inputs
    assert params - sum(p.numel() for p in model.parameters()) == 2 * (4 * 64 * 128 + 3 * 64)


def test_prune_heads_command_shrinks_exports_and_stays_within_budget(
    root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "pruned" / "model.onnx"
    code = main(
        [
            "optimize",
            "prune",
            f"{root / 'tiny_bert.py'}:TinyEncoder",
            "--structure",
            "heads",
            "--train",
            str(root / "train.npz"),
            "--validation",
            str(root / "valid.npz"),
            "--ratios",
            "0.5",
            "--epochs",
            "2",
            "--metric",
            "cosine",
            "--max-accuracy-loss",
            "0.02",
            "--output-names",
            "embedding",
            "--allow-trace-warnings",
            "--repeats",
            "3",
            "--iterations",
            "20",
            "--out",
            str(out),
            "--no-progress",
        ]
    )
    printed = capsys.readouterr()
    assert code == 0, printed.out + printed.err
    assert "50% of heads removed" in printed.out
    report = json.loads((tmp_path / "pruned" / "prune-report.json").read_text())
    assert report["settings"]["structure"] == "heads"
    base, pruned = report["candidates"]
    # half the heads: q, k, v and the attention output lose half their weights, the
    # embeddings and feed-forward layers stay whole
    removed = base["params"] - pruned["params"]
    assert removed == 2 * (4 * 64 * 128 + 3 * 64), removed
    assert pruned["macs"] < base["macs"]
    assert pruned["size_mb"] < base["size_mb"]
    assert report["metric"] == "cosine"
    assert pruned["loss"] <= 0.02
    # the written ONNX model answers (padded rows too) with the reported cosine to the torch
    # original
    valid = np.load(root / "valid.npz")
    feed = {k: valid[k] for k in ("input_ids", "attention_mask")}
    got = open_session(out).raw.run(None, feed)[0]
    with torch.no_grad():
        want = _encoder(root)(*(torch.from_numpy(v) for v in feed.values())).numpy()
    cosine = np.sum(got * want, 1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)
    assert float(cosine.mean()) == pytest.approx(pruned["metric_value"], abs=1e-4)


def test_heads_on_a_model_without_attention_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "mlp.py").write_text(
        "import torch\n\ndef mlp():\n    return torch.nn.Sequential(torch.nn.Linear(4, 3))\n"
    )
    np.savez(tmp_path / "x.npz", x=np.ones((4, 4), np.float32))
    code = main(
        [
            "optimize",
            "prune",
            f"{tmp_path / 'mlp.py'}:mlp",
            "--structure",
            "heads",
            "--train",
            str(tmp_path / "x.npz"),
            "--validation",
            str(tmp_path / "x.npz"),
            "--out",
            str(tmp_path / "out.onnx"),
            "--no-progress",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert "Sequential has no BERT-style attention" in err
    assert "--structure channels" in err
    assert not (tmp_path / "out.onnx").exists()
