"""What ``servinglib optimize run`` prints: the result, speed claims, metrics, INT8 share."""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["print_outcome", "print_verified"]


def print_outcome(outcome: Any) -> None:
    """Print an :class:`~servinglib.optimize.pipeline.OptimizeOutcome` for a person.

    Speed lines come from the report's claims: a speed-up only where the rounds separate.
    """
    document = outcome.report.to_dict()
    if outcome.model is not None:
        change, accuracy = document["change"], document["accuracy"]
        losses = ", ".join(
            (f"{o['output']} " if len(accuracy["outputs"]) > 1 else "")
            + f"{o['metric']} loss {o['loss']:.4g}"
            for o in accuracy["outputs"]
        )
        print(
            f"wrote {outcome.model} ({document['chosen']}): "
            f"size {-change['size_reduction_pct']:+.1f} %, {losses}"
        )
        for claim in outcome.report.claims():
            print(f"speed: {claim.describe()}")
    for output in document["accuracy"]["outputs"]:
        print(f"metric {output['metric']} on {output['output']}: {output['why']}")
    quantization = document["quantization"]
    if quantization is not None:
        floats = ", ".join(f"{op} ({n})" for op, n in quantization["float_op_types"].items())
        print(
            f"quantized: {quantization['weights_int8_share']:.0%} of weights INT8"
            + (f"; left float: {floats}" if floats else "")
        )
    tolerance = document["selftest_tolerance"]
    if tolerance is not None:
        print(
            f"self-test: test_data.json cases with FP32 expectations need "
            f'"tolerance": {{"atol": {tolerance["atol"]:g}}}'
        )
    if document["chosen"]:
        print(f"chosen {document['chosen']}: {document['choice_reason']}")
    for warning in document["warnings"]:
        print(f"warning: {warning}", file=sys.stderr)
    print(f"report: {outcome.files.markdown} (+ .json, .png)")


def print_verified(
    wrote: str, against: str, checked: Any, max_diff: float, reference: str | None = None
) -> None:
    """What ``optimize export`` verified: the file, the inputs checked and the largest gap
    to ``reference`` (``against`` unless given)."""
    print(f"wrote {wrote}; verified against {against} on:")
    for item in checked:
        print(f"  {item}")
    print(f"max |ONNX Runtime - {reference or against}| = {max_diff:.3g}")
