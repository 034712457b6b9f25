"""Which file of a version a tabular runtime loads, and why it would refuse it.

The runtimes and ``servinglib validate`` share these checks, so validate reports every
artifact the server would refuse, without loading a model:

- ``sklearn``: ``model.skops`` (no pickle; every type outside skops' trusted defaults and
  :data:`SKLEARN_TRUSTED` must be listed in ``runtime_options.trusted_types``), or
  ``model.joblib`` / ``model.pkl`` / ``model.pickle`` only with ``allow_pickle: true`` and
  the file's ``sha256`` pin;
- ``xgboost``: ``model.json`` or ``model.ubj`` (XGBoost's own formats);
- ``lightgbm``: ``model.txt`` (LightGBM's text format).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from servinglib.errors import ModelLoadError

__all__ = [
    "ARTIFACTS",
    "PICKLED",
    "SKLEARN_TRUSTED",
    "artifact_refusal",
    "find_artifact",
    "untrusted_types",
]

PICKLED = ("model.joblib", "model.pkl", "model.pickle")

# scikit-learn's own classes that hold a fitted model's arrays, which skops (0.16) leaves out
# of its defaults: trees of every forest and boosting model, neighbour search trees and their
# metric, the MLP's optimiser. Classes only, no function: a function named in a file (e.g. a
# FunctionTransformer's) must still be listed in trusted_types.
SKLEARN_TRUSTED = frozenset(
    {
        "sklearn.tree._tree.Tree",
        "sklearn.ensemble._hist_gradient_boosting.predictor.TreePredictor",
        "sklearn.neighbors._kd_tree.KDTree",
        "sklearn.neighbors._ball_tree.BallTree",
        "sklearn.metrics._dist_metrics.EuclideanDistance64",
        "sklearn.metrics._dist_metrics.ManhattanDistance64",
        "sklearn.metrics._dist_metrics.MinkowskiDistance64",
        "sklearn.metrics._dist_metrics.ChebyshevDistance64",
        "sklearn.neural_network._stochastic_optimizers.AdamOptimizer",
        "sklearn.neural_network._stochastic_optimizers.SGDOptimizer",
    }
)
ARTIFACTS: Mapping[str, tuple[str, ...]] = {
    "sklearn": ("model.skops", *PICKLED),
    "xgboost": ("model.json", "model.ubj"),
    "lightgbm": ("model.txt",),
}


def find_artifact(runtime: str, version_dir: Path, options: Mapping[str, Any]) -> Path:
    """The artifact ``runtime`` loads from ``version_dir`` (``runtime_options.file`` or the
    first of :data:`ARTIFACTS` present).

    Raises:
        ModelLoadError: no such file.
    """
    if options.get("file"):
        path = version_dir / str(options["file"])
        if not path.is_file() or not path.resolve().is_relative_to(version_dir.resolve()):
            raise ModelLoadError(
                f"{path} not found (runtime_options.file); it must be a file inside {version_dir}"
            )
        return path
    for name in ARTIFACTS[runtime]:
        if (version_dir / name).is_file():
            return version_dir / name
    raise ModelLoadError(
        f"{version_dir} holds none of {list(ARTIFACTS[runtime])}; runtime: {runtime} serves "
        "one of them (or the file named by runtime_options.file)"
    )


def untrusted_types(artifact: Path) -> list[str]:
    """The types in a ``.skops`` file that skops does not trust by default (nothing runs).

    Raises:
        ModelLoadError: skops is not installed or cannot read the file.
    """
    skops_io = import_skops()
    try:
        return sorted(skops_io.get_untrusted_types(file=artifact))
    except Exception as e:  # skops raises several types on a damaged archive
        raise ModelLoadError(f"skops cannot read {artifact}: {e}") from e


def import_skops() -> Any:
    """``skops.io``, or a ModelLoadError saying how to install it."""
    try:
        import skops.io
    except ImportError as e:
        raise ModelLoadError(
            "runtime: sklearn loads .skops files with skops; install it with "
            "pip install 'servinglib[sklearn]'"
        ) from e
    return skops.io


def artifact_refusal(
    runtime: str,
    version_dir: Path,
    version: str,
    options: Mapping[str, Any],
    *,
    allow_pickle: bool,
    pinned: Collection[str],
) -> str | None:
    """Why ``runtime`` would refuse the artifact of ``version_dir``; None when it would load.

    ``pinned`` are the keys of the model's ``sha256`` pins (``<version>/<file>``).
    """
    try:
        artifact = find_artifact(runtime, version_dir, options)
    except ModelLoadError as e:
        return str(e)
    if runtime != "sklearn":
        return None
    relative = f"{version}/{artifact.relative_to(version_dir).as_posix()}"
    if artifact.suffix != ".skops":
        if not allow_pickle:
            return (
                f"{artifact} is pickle, which runs code when loaded; save the estimator with "
                "skops.io.dump as model.skops, or set allow_pickle: true and pin the file "
                f"(sha256: {{{relative!r}: <its sha256>}}) for this model"
            )
        if relative not in pinned:
            return (
                f"{artifact} is pickle and allow_pickle is set, but the file has no sha256 "
                f"pin; add sha256: {{{relative!r}: <its sha256>}} so that only this file loads"
            )
        return None
    try:
        found = untrusted_types(artifact)
    except ModelLoadError as e:
        return str(e)
    refused = sorted(set(found) - set(options.get("trusted_types") or ()) - SKLEARN_TRUSTED)
    if refused:
        return (
            f"{artifact} holds types skops does not trust by default: {refused}; review "
            "them and list those you trust under runtime_options.trusted_types"
        )
    return None
