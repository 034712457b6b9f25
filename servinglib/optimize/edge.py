"""Edge target: ORT-format models, a reduced-operator config, profile budgets, a bundle.

Each candidate ONNX model is converted to the ORT format (``.ort``, what a minimal ONNX
Runtime build loads) by ONNX Runtime's own ``convert_onnx_models_to_ort`` tool, which also
writes ``required_operators.config``: the operator list a minimal build is compiled with
(``build.sh --minimal_build --include_ops_by_config required_operators.config``). The
``.ort`` model must answer as the ``.onnx`` one does on the validation inputs (the max abs
difference is reported).

Latency is measured by the bundle's own script (:mod:`.edge_infer`) on an *emulated* host:
a child process pinned to one CPU (affinity), its address space capped at the profile's
memory, ONNX Runtime with one intra-op thread. The device's core is slower than this one;
the profile states by how much (``slowdown``), and its p50 budget is checked against the
measured p50 times that factor. The bundle's script, run on the device, is the real figure.

The chosen model is the smallest candidate within the profile; when none is, every
candidate is listed with its size and scaled p50.

Example::

    outcome = edge_target([Path("model.onnx")], PROFILES["rpi5"], Path("edge"), valid)
    print(outcome.chosen, outcome.failures)
"""

from __future__ import annotations

import contextlib
import gc
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from servinglib.optimize._deps import require
from servinglib.optimize._messages import first_line
from servinglib.optimize._session import open_session
from servinglib.optimize.errors import OptimizeError

__all__ = [
    "PROFILES",
    "EdgeCandidate",
    "EdgeOutcome",
    "EdgeProfile",
    "convert_to_ort",
    "edge_target",
]


@dataclass(frozen=True)
class EdgeProfile:
    """A target device: budgets, the emulated host's memory cap, the core slowdown factor."""

    name: str
    max_size_mb: float
    max_p50_ms: float
    memory_mb: int
    slowdown: float
    why: str


PROFILES = {
    "rpi5": EdgeProfile(
        "rpi5",
        max_size_mb=5.0,
        max_p50_ms=15.0,
        memory_mb=2048,
        slowdown=3.0,
        why="one Cortex-A76 core at 2.4 GHz runs ONNX Runtime's FP32 CPU kernels about 3x "
        "slower than one x86-64 server core (an estimate: run the bundle's infer.py there)",
    ),
    "rpi4": EdgeProfile(
        "rpi4",
        max_size_mb=5.0,
        max_p50_ms=30.0,
        memory_mb=2048,
        slowdown=6.0,
        why="one Cortex-A72 core at 1.8 GHz: about 6x slower than one x86-64 server core "
        "(an estimate: run the bundle's infer.py there)",
    ),
}


@dataclass(frozen=True)
class EdgeCandidate:
    """One model converted and measured: ORT size, emulated p50, scaled p50, parity."""

    source: Path
    ort_path: Path
    size_mb: float
    p50_ms: float
    p95_ms: float
    scaled_p50_ms: float
    max_abs_diff: float
    failures: tuple[str, ...]

    def describe(self) -> str:
        """One line with the figures and what failed."""
        verdict = "; ".join(self.failures) if self.failures else "within the profile"
        shown = "/".join(self.source.parts[-2:])
        return (
            f"{shown}: {self.size_mb:.3f} MB, p50 {self.p50_ms:.3f} ms here, "
            f"x{self.scaled_p50_ms / max(self.p50_ms, 1e-12):g} = {self.scaled_p50_ms:.2f} ms "
            f"on the device, |ort - onnx| {self.max_abs_diff:.3g}: {verdict}"
        )


@dataclass(frozen=True)
class EdgeOutcome:
    """Every candidate, the chosen one and its bundle directory (None when none fits)."""

    profile: EdgeProfile
    candidates: tuple[EdgeCandidate, ...]
    chosen: EdgeCandidate | None
    bundle: Path | None
    failures: tuple[str, ...]


def convert_to_ort(source: Path, directory: Path) -> tuple[Path, Path]:
    """``source`` as ``directory/<stem>.ort`` and the ``required_operators.config`` it needs.

    Raises:
        OptimizeError: ONNX Runtime's converter fails.
    """
    tool = require("onnxruntime.tools.convert_onnx_models_to_ort", "converting to the ORT format")
    directory.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="servinglib-ort-") as tmp:
        staged, out = Path(tmp) / f"{source.stem}.onnx", Path(tmp) / "out"
        shutil.copyfile(source, staged)
        try:
            # the tool prints progress and leaves a file of its own unclosed: both kept quiet
            with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
                warnings.simplefilter("ignore", ResourceWarning)
                tool.convert_onnx_models_to_ort(
                    staged, out, optimization_styles=[tool.OptimizationStyle.Fixed]
                )
                gc.collect()  # its unclosed file is reclaimed here, inside the filter
        except Exception as e:
            raise OptimizeError(
                f"ORT-format conversion of {source.name} failed: {first_line(e)}"
            ) from e
        produced, configs = out / f"{source.stem}.ort", sorted(out.glob("*.config"))
        if not produced.is_file() or not configs:
            raise OptimizeError(f"ORT-format conversion of {source.name} wrote no .ort model")
        ort_path, config_path = directory / produced.name, directory / "required_operators.config"
        shutil.move(produced, ort_path)
        shutil.move(configs[0], config_path)
    return ort_path, config_path


def emulated_run(
    script: Path, model: Path, sample: Path, profile: EdgeProfile, iterations: int = 200
) -> dict[str, float]:
    """Run the bundle script on one CPU with the profile's memory cap; its JSON figures.

    Raises:
        OptimizeError: the script fails (e.g. above the memory cap).
    """
    import resource

    cpu = min(os.sched_getaffinity(0))
    limit = profile.memory_mb * 2**20

    def constrain() -> None:  # in the child, before exec
        os.sched_setaffinity(0, {cpu})
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    command = [sys.executable, str(script), "--model", str(model), "--sample", str(sample)]
    command += ["--threads", "1", "--iterations", str(iterations)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        command, capture_output=True, text=True, check=False, preexec_fn=constrain, env=env
    )
    if done.returncode != 0:
        tail = " ".join(done.stderr.strip().splitlines()[-2:])
        raise OptimizeError(
            f"the edge script failed on the emulated {profile.name} host "
            f"(1 CPU, {profile.memory_mb} MB): {tail}"
        )
    figures: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def _parity(onnx_path: Path, ort_path: Path, valid: Mapping[str, np.ndarray]) -> float:
    feed = dict(valid)
    expected = open_session(onnx_path).raw.run(None, feed)
    got = open_session(ort_path).raw.run(None, feed)
    return max(
        float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)), initial=0.0))
        for a, b in zip(expected, got, strict=True)
    )


def edge_target(
    sources: Sequence[Path],
    profile: EdgeProfile,
    out: Path,
    valid: Mapping[str, np.ndarray],
    *,
    iterations: int = 200,
    atol: float = 1e-4,
) -> EdgeOutcome:
    """Convert and measure every source; bundle the smallest within the profile into ``out``."""
    from servinglib.optimize.edge_bundle import refuse_foreign_directory, write_bundle

    refuse_foreign_directory(out)  # before any work, not after it
    found = []
    with tempfile.TemporaryDirectory(prefix="servinglib-edge-") as tmp:
        work = Path(tmp)
        sample = work / "sample.npz"
        np.savez(sample, allow_pickle=False, **{n: a[:8] for n, a in valid.items()})
        script = Path(__file__).with_name("edge_infer.py")
        for index, source in enumerate(sources):
            ort_path, _ = convert_to_ort(source, work / str(index))
            figures = emulated_run(script, ort_path, sample, profile, iterations)
            size = ort_path.stat().st_size / 1e6
            scaled = figures["p50_ms"] * profile.slowdown
            diff = _parity(source, ort_path, valid)
            failures = []
            if size > profile.max_size_mb:
                failures.append(f"size {size:.3f} MB > {profile.max_size_mb:g} MB")
            if scaled > profile.max_p50_ms:
                failures.append(f"p50 {scaled:.2f} ms > {profile.max_p50_ms:g} ms")
            if diff > atol:
                failures.append(f"ORT format differs from ONNX by {diff:.3g} > {atol:g}")
            found.append(
                EdgeCandidate(
                    source,
                    ort_path,
                    size,
                    figures["p50_ms"],
                    figures["p95_ms"],
                    scaled,
                    diff,
                    tuple(failures),
                )
            )
        fitting = [c for c in found if not c.failures]
        chosen = min(fitting, key=lambda c: (c.size_mb, c.scaled_p50_ms)) if fitting else None
        if chosen is None:
            failures = [f"no candidate fits the {profile.name} profile:"]
            failures += [f"  {c.describe()}" for c in found]
            return EdgeOutcome(profile, tuple(found), None, None, tuple(failures))
        bundle = write_bundle(chosen, profile, out, sample, script)
        chosen = _moved(chosen, bundle)
    return EdgeOutcome(profile, tuple(found), chosen, bundle, ())


def _moved(candidate: EdgeCandidate, bundle: Path) -> EdgeCandidate:
    from dataclasses import replace

    return replace(candidate, ort_path=bundle / "model.ort")
