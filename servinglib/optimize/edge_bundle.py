"""The edge bundle: what to copy to the device, and what servinglib serves for parity.

::

    bundle/
      model.ort                  the ORT-format model (minimal ONNX Runtime builds load it)
      required_operators.config  operators for build.sh --minimal_build --include_ops_by_config
      infer.py                   warm-up + benchmark loop, prints size and p50 as JSON
      sample.npz                 inputs the script runs on
      requirements.txt           onnxruntime and numpy (aarch64 wheels exist on PyPI)
      models/model/1/model.onnx  the same model as ONNX, and servinglib.yaml serving it
      servinglib.yaml            `servinglib serve` with runtime: onnx, to compare answers
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from servinglib.optimize.errors import OptimizeError

if TYPE_CHECKING:
    from servinglib.optimize.edge import EdgeCandidate, EdgeProfile

__all__ = ["REQUIREMENTS", "refuse_foreign_directory", "write_bundle"]

REQUIREMENTS = """\
# ONNX Runtime publishes manylinux aarch64 wheels (Raspberry Pi OS 64-bit, Ubuntu arm64).
onnxruntime>=1.17; platform_machine == "aarch64" or platform_machine == "x86_64"
numpy>=1.24
"""

SERVING_CONFIG = """\
# Serves the bundle's model.onnx with runtime: onnx, to check its answers against the device's.
service: edge-{profile}
models:
  - name: model
    runtime: onnx
    repository: models/model
    runtime_options: {{intra_op_threads: 1}}
"""


def refuse_foreign_directory(out: Path) -> None:
    """Refuse an ``out`` that holds files but is not an earlier bundle (it would be replaced).

    Raises:
        OptimizeError: ``out`` is a file, or a non-empty directory without a bundle in it.
    """
    if out.is_file() or (out.is_dir() and any(out.iterdir()) and not (out / "infer.py").is_file()):
        raise OptimizeError(
            f"--out {out} holds files that are not an edge bundle; the bundle replaces its "
            "directory: name a new or empty directory"
        )


def write_bundle(
    chosen: EdgeCandidate, profile: EdgeProfile, out: Path, sample: Path, script: Path
) -> Path:
    """Write the bundle of ``chosen`` into ``out``, staged next to it and renamed in place.

    An earlier bundle in ``out`` is replaced; an interrupted run leaves ``out`` as it was.
    """
    refuse_foreign_directory(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        _write(chosen, profile, staging, sample, script)
        if out.exists():
            shutil.rmtree(out)
        os.replace(staging, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out


def _write(
    chosen: EdgeCandidate, profile: EdgeProfile, out: Path, sample: Path, script: Path
) -> None:
    shutil.copyfile(chosen.ort_path, out / "model.ort")
    shutil.copyfile(
        chosen.ort_path.with_name("required_operators.config"), out / "required_operators.config"
    )
    shutil.copyfile(script, out / "infer.py")
    shutil.copyfile(sample, out / "sample.npz")
    (out / "requirements.txt").write_text(REQUIREMENTS, encoding="utf-8")
    version = out / "models" / "model" / "1"
    version.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(chosen.source, version / "model.onnx")
    (out / "servinglib.yaml").write_text(
        SERVING_CONFIG.format(profile=profile.name), encoding="utf-8"
    )
