"""Input data for Triton's ``perf_analyzer``, from a version's self-test cases.

``perf_analyzer`` fills tensors with random values by default; a model whose inputs have
bounds (pixels from 0 to 16) refuses them with 400 and the run stops. The self-test cases
are inputs the version is known to answer, so they make valid load::

    servinglib perf-data --model digits > digits.json
    perf_analyzer -m digits -u localhost:8080 -i http -b 4 --input-data digits.json

For a model with ``batching:`` (``max_batch_size`` > 0 in its Triton config) each row of a
case is one entry, shaped without the batch dimension, as ``perf_analyzer`` expects.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from servinglib.config.spec import load_config
from servinglib.errors import ConfigError
from servinglib.lifecycle.selftest import TEST_DATA_FILE, load_test_data

__all__ = ["perf_analyzer_data"]


def _tensor(value: Any) -> dict[str, Any]:
    array = np.asarray(value)
    if array.ndim == 0:
        array = array.reshape(1)
    return {"content": array.reshape(-1).tolist(), "shape": list(array.shape)}


def perf_analyzer_data(
    config_path: str | os.PathLike[str], model: str, version: str | None = None
) -> dict[str, Any]:
    """``{"data": [...]}`` for ``perf_analyzer --input-data``, one entry per case (or row).

    Raises:
        ConfigError: unknown model, or a version without ``test_data.json`` cases of named
            inputs.
    """
    config = load_config(config_path)
    entry = next((m for m in config.models if m.name == model), None)
    if entry is None:
        names = [m.name for m in config.models]
        raise ConfigError(f"no model {model!r} in {config_path}; models: {names}")
    version = version or entry.default_version
    path = entry.repository / version
    cases = load_test_data(path)
    if not cases:
        raise ConfigError(
            f"model {model!r} version {version!r} has no cases in {path / TEST_DATA_FILE}; "
            "add some, or run perf_analyzer with --input-data zero"
        )
    data: list[dict[str, Any]] = []
    for case in cases:
        if not isinstance(case.input, Mapping) or not case.input:
            raise ConfigError(
                f"{path / TEST_DATA_FILE}: case {case.name!r} has no named inputs; "
                "perf_analyzer needs one value per input tensor"
            )
        arrays = {str(name): np.asarray(value) for name, value in case.input.items()}
        rows = min((len(a) for a in arrays.values() if a.ndim), default=0)
        if entry.batching is None or not rows or any(a.ndim == 0 for a in arrays.values()):
            data.append({name: _tensor(a) for name, a in arrays.items()})
            continue
        data.extend({name: _tensor(a[i]) for name, a in arrays.items()} for i in range(rows))
    return {"data": data}
