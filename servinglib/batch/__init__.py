"""Batch prediction: score a whole dataset with the same model, config and self-tests.

The version is loaded and self-tested as a server worker would; each input row becomes the
``features`` of one request, checked by the same rules as ``/infer``; rows are scored with
``predict_batch`` and written as Parquet or JSON Lines parts with a manifest, so a killed job
resumes where it stopped. ``engine="ray"`` runs the same scoring on a Ray cluster::

    from servinglib.batch import BatchJob, predict

    summary = predict(BatchJob("servinglib.yaml", "eta", "rides.parquet", "scores/"))
    print(summary.describe())

Errors: :class:`BatchAbortedError` (a :class:`~servinglib.errors.ServinglibError`) when too
many rows fail or a worker dies; :class:`~servinglib.errors.ModelNotReadyError` when the
version fails its self-tests.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from servinglib.lifecycle.importing import LazyExports

if TYPE_CHECKING:
    from servinglib.batch._job import predict
    from servinglib.batch._spec import BatchAbortedError, BatchJob, BatchSummary

__all__ = ["BatchAbortedError", "BatchJob", "BatchSummary", "predict"]

_HOMES = {
    "BatchAbortedError": "servinglib.batch._spec",
    "BatchJob": "servinglib.batch._spec",
    "BatchSummary": "servinglib.batch._spec",
    "predict": "servinglib.batch._job",
}


def _missing(error: ModuleNotFoundError) -> Exception | None:
    if error.name != "pyarrow":
        return None
    from servinglib.errors import ConfigError

    return ConfigError(
        "batch prediction needs pyarrow; install it with pip install 'servinglib[batch]'"
    )


# Imported on first use: ``servinglib --help`` needs neither pyarrow nor Ray.
_lazy = LazyExports("servinglib.batch", _HOMES, _missing)
__getattr__, __dir__ = _lazy.getattr, _lazy.dir
