"""A loaded tabular model (``runtime: sklearn|xgboost|lightgbm``) converted to an ONNX graph.

scikit-learn estimators and pipelines go through ``skl2onnx``, XGBoost and LightGBM boosters
through ``onnxmltools`` (``pip install 'servinglib[tabular-onnx]'``). The graph is then
given the tabular runtime's own interface, so clients and self-tests see the same names:
outputs ``predict`` (``[rows]``) and, for classifiers, ``predict_proba``
(``[rows, classes]``); the input is the v2 matrix (``input``, ``[rows, features]``), or one
``[rows, 1]`` column per feature when ``inputs:`` declares them (categorical pipelines).
"""

from __future__ import annotations

import warnings
from typing import Any

from servinglib.optimize._deps import require
from servinglib.optimize._messages import first_line
from servinglib.optimize.errors import OptimizeError

__all__ = ["ML_OPSET", "OPSET", "convert_tabular"]

OPSET = 15  # the newest opset onnxmltools' tree converters write; ONNX Runtime >= 1.10 runs it
ML_OPSET = 3  # ai.onnx.ml 3: tree ensembles with double thresholds (skl2onnx, FP64 inputs)
_OUTPUTS = {"label": "predict", "probabilities": "predict_proba", "variable": "predict"}
_HINT = "pip install 'servinglib[tabular-onnx]'"


def convert_tabular(model: Any) -> Any:
    """The ``onnx.ModelProto`` of a loaded ``SklearnModel``, ``XGBoostModel`` or
    ``LightGBMModel``, with the runtime's input and output names.

    Raises:
        OptimizeError: the converter is missing or cannot convert this model.
    """
    platform = model.platform
    name = model.settings.name
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # converters warn about their own internals
            if platform == "sklearn":
                proto = _sklearn(model)
            elif platform == "xgboost":
                proto = _xgboost(model)
            elif platform == "lightgbm":
                proto = _lightgbm(model)
            else:
                raise OptimizeError(f"model {name!r}: runtime {platform!r} is not tabular")
    except OptimizeError:
        raise
    except Exception as e:  # the converters raise anything on an unsupported model
        raise OptimizeError(
            f"converting model {name!r} ({platform}) to ONNX failed: {type(e).__name__}: "
            f"{first_line(e)}; the converter does not support this model (see the "
            f"{'skl2onnx' if platform == 'sklearn' else 'onnxmltools'} list of supported "
            "estimators and objectives); keep serving it with its native runtime"
        ) from e
    return _tabular_interface(proto, model)


def _sklearn(model: Any) -> Any:
    skl2onnx = require("skl2onnx", f"exporting a scikit-learn model ({_HINT})")
    types = require("skl2onnx.common.data_types", "exporting a scikit-learn model")
    layout = model.layout
    if layout.tensor is not None:
        initial = [(layout.tensor, types.DoubleTensorType([None, len(layout.names)]))]
    else:
        initial = [
            (
                feature,
                types.StringTensorType([None, 1])
                if feature in layout.categorical
                else types.DoubleTensorType([None, 1]),
            )
            for feature in layout.names
        ]
    estimator = model.estimator
    options = {id(estimator): {"zipmap": False}} if model.classes else None
    return skl2onnx.convert_sklearn(
        estimator,
        initial_types=initial,
        options=options,
        target_opset={"": OPSET, "ai.onnx.ml": ML_OPSET},
    )


def _float_input(model: Any) -> list[tuple[str, Any]]:
    types = require("onnxmltools.convert.common.data_types", f"exporting a tree model ({_HINT})")
    return [
        (model.layout.tensor or "input", types.FloatTensorType([None, len(model.layout.names)]))
    ]


def _xgboost(model: Any) -> Any:
    onnxmltools = require("onnxmltools", f"exporting an XGBoost model ({_HINT})")
    booster = model.booster.copy()
    booster.feature_names = None  # the converter reads features as f0, f1, ...
    booster.feature_types = None
    return onnxmltools.convert_xgboost(
        booster, initial_types=_float_input(model), target_opset=OPSET
    )


def _lightgbm(model: Any) -> Any:
    onnxmltools = require("onnxmltools", f"exporting a LightGBM model ({_HINT})")
    return onnxmltools.convert_lightgbm(
        model.booster, initial_types=_float_input(model), target_opset=OPSET, zipmap=False
    )


def _tabular_interface(proto: Any, model: Any) -> Any:
    """Rename the converter's outputs to ``predict``/``predict_proba`` (a regressor's
    ``[rows, 1]`` flattened to ``[rows]``), batch axes dynamic, the outputs the runtime serves."""
    onnx = require("onnx", "exporting a tabular model")
    helper = onnx.helper
    graph = proto.graph
    if not any(opset.domain in ("", "ai.onnx") for opset in proto.opset_import):
        proto.opset_import.append(helper.make_opsetid("", OPSET))
    kept = set(model._outputs)
    new_outputs = []
    for output in list(graph.output):
        target = _OUTPUTS.get(output.name)
        if target is None or target not in kept:
            continue
        elem = output.type.tensor_type.elem_type
        if target == "predict":
            shape_name = f"{output.name}_flat_shape"
            graph.initializer.append(
                helper.make_tensor(shape_name, onnx.TensorProto.INT64, [1], [-1])
            )
            graph.node.append(helper.make_node("Reshape", [output.name, shape_name], [target]))
            new_outputs.append(helper.make_tensor_value_info(target, elem, ["batch"]))
        else:
            graph.node.append(helper.make_node("Identity", [output.name], [target]))
            new_outputs.append(
                helper.make_tensor_value_info(target, elem, ["batch", len(model.classes)])
            )
    missing = kept - {value.name for value in new_outputs}
    if missing:
        found = [value.name for value in graph.output]
        raise OptimizeError(
            f"the ONNX graph of model {model.settings.name!r} has outputs {found}; none gives "
            f"{sorted(missing)}"
        )
    del graph.output[:]
    graph.output.extend(new_outputs)
    for value in graph.input:  # any number of rows
        dims = value.type.tensor_type.shape.dim
        if dims:
            dims[0].ClearField("dim_value")
            dims[0].dim_param = "batch"
    try:
        onnx.checker.check_model(proto, full_check=True)
    except Exception as e:
        raise OptimizeError(f"onnx.checker rejects the converted model: {first_line(e)}") from e
    return proto
