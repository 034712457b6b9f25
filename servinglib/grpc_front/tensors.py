"""Open Inference tensors over gRPC: a ``ModelInferRequest`` in, a ``ModelInferResponse`` out.

A request decodes into the same :class:`~servinglib.wire.v2.InferRequest` as a v2 REST
body, through the same checks (:mod:`servinglib.wire.tensor_checks`,
:mod:`servinglib.wire.v2_binary`): a tensor is refused with the same message whichever
transport carried it. Each input comes either as ``raw_input_contents`` (one entry per
input, in order: little-endian, row-major, BYTES elements length-prefixed) or as typed
``contents`` (the repeated field of its datatype), never both in one request. Answers are
always raw, as Triton sends them.

Example::

    decoded = decode_infer(request, max_elements=16 << 20)
    response = encode_infer(prediction.model, prediction.version, outputs, decoded)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from servinglib.errors import InvalidInputError, UnsupportedRequestError
from servinglib.grpc_front.proto import inference_pb2 as pb
from servinglib.wire.datatypes import datatype_of, numpy_dtype
from servinglib.wire.tensor_checks import check_datatype, check_finite, check_shape
from servinglib.wire.v2 import MAX_ID_LENGTH, InferRequest, RequestedOutput
from servinglib.wire.v2_binary import binary_tensor, input_label, read_tensors
from servinglib.wire.v2_response import tensor_bytes

__all__ = ["decode_infer", "encode_infer", "parameters"]

# The typed field of each datatype, and the range its values must fall in (integers).
_CONTENTS: dict[str, tuple[str, tuple[int, int] | None]] = {
    "BOOL": ("bool_contents", None),
    "INT8": ("int_contents", (-(2**7), 2**7 - 1)),
    "INT16": ("int_contents", (-(2**15), 2**15 - 1)),
    "INT32": ("int_contents", None),
    "INT64": ("int64_contents", None),
    "UINT8": ("uint_contents", (0, 2**8 - 1)),
    "UINT16": ("uint_contents", (0, 2**16 - 1)),
    "UINT32": ("uint_contents", None),
    "UINT64": ("uint64_contents", None),
    "FP32": ("fp32_contents", None),
    "FP64": ("fp64_contents", None),
    "BYTES": ("bytes_contents", None),
}
_EMPTY: Mapping[str, Any] = {}


def parameters(raw: Any, where: str) -> Mapping[str, Any]:
    """A ``map<string, InferParameter>`` as a dict of Python scalars.

    Raises:
        InvalidInputError: a parameter holds no value.
    """
    if not raw:
        return _EMPTY
    out: dict[str, Any] = {}
    for key, value in raw.items():
        choice = value.WhichOneof("parameter_choice")
        if choice is None:
            raise InvalidInputError(f"{where}.parameters[{key!r}] holds no value; set one")
        out[key] = getattr(value, choice)
    return out


def decode_infer(request: Any, *, max_elements: int) -> InferRequest:
    """The tensors of a ``ModelInferRequest``, checked as a v2 REST body's are.

    Raises:
        InvalidInputError: naming the input and what is wrong with it.
    """
    inputs = request.inputs
    if not inputs:
        raise InvalidInputError("`inputs` must hold at least one tensor")
    raw = request.raw_input_contents
    if raw and len(raw) != len(inputs):
        raise InvalidInputError(
            f"raw_input_contents has {len(raw)} entries for {len(inputs)} inputs; send one "
            "per input, in the order of `inputs`"
        )
    arrays: dict[str, np.ndarray] = {}
    for i, tensor in enumerate(inputs):
        name = tensor.name
        if not name:
            raise InvalidInputError(f"inputs[{i}].name must be a non-empty string")
        if name in arrays:
            raise InvalidInputError(f"inputs[{i}]: input {name!r} appears twice")
        where = input_label(i, name)
        shape = check_shape(list(tensor.shape), where, max_elements)
        datatype = check_datatype(tensor.datatype, where)
        parameters(tensor.parameters, input_label(i))
        has_contents = tensor.HasField("contents")
        if raw:
            if has_contents:
                raise InvalidInputError(
                    f"{where} has typed contents and the request raw_input_contents; send "
                    "every input one way"
                )
            spec = binary_tensor(i, name, shape, datatype, offset=0, size=len(raw[i]))
            arrays.update(read_tensors(raw[i], 0, [spec]))
        else:
            arrays[name] = _typed(tensor.contents, shape, datatype, where)
    request_id = request.id
    if len(request_id) > MAX_ID_LENGTH or not request_id.isprintable():
        raise InvalidInputError(
            f"`id` must be at most {MAX_ID_LENGTH} printable characters (no control characters)"
        )
    outputs = None
    if request.outputs:
        outputs = tuple(_requested(i, out) for i, out in enumerate(request.outputs))
    params = parameters(request.parameters, "request")
    return InferRequest(request_id or None, arrays, outputs, True, params)


def _requested(i: int, output: Any) -> RequestedOutput:
    if not output.name:
        raise InvalidInputError(f"outputs[{i}].name must be a non-empty string")
    if "classification" in parameters(output.parameters, f"outputs[{i}]"):
        raise UnsupportedRequestError(
            f"outputs[{i}]: the classification extension is not supported; return class "
            "labels from predict() instead"
        )
    return RequestedOutput(output.name, True)


def _typed(contents: Any, shape: tuple[int, ...], datatype: str, where: str) -> np.ndarray:
    """A tensor sent as typed ``contents``."""
    field_range = _CONTENTS.get(datatype)
    if field_range is None:  # FP16 and BF16 have no typed field
        raise InvalidInputError(
            f"{where}: {datatype} has no typed contents field; send it in raw_input_contents"
        )
    field, bounds = field_range
    sent = [f.name for f, _ in contents.ListFields()]
    if any(other != field for other in sent):
        wrong = next(other for other in sent if other != field)
        raise InvalidInputError(
            f"{where}: {datatype} data belongs in contents.{field}, not contents.{wrong}"
        )
    values = getattr(contents, field)
    count = math.prod(shape)
    if len(values) != count:
        raise InvalidInputError(
            f"{where}: {len(values)} values for shape {list(shape)} ({count} expected)"
        )
    if datatype == "BYTES":
        array = np.empty(count, dtype=object)
        array[:] = list(values)
        return array.reshape(shape)
    if bounds is not None and count:
        flat = np.asarray(values, dtype=np.int64)
        if int(flat.min()) < bounds[0] or int(flat.max()) > bounds[1]:
            raise InvalidInputError(f"{where}: value out of range for {datatype}")
    array = np.asarray(values, dtype=numpy_dtype(datatype)).reshape(shape)
    check_finite(array, where)
    return array


def encode_infer(
    model: str, version: str, outputs: Mapping[str, Any], decoded: InferRequest
) -> Any:
    """The ``ModelInferResponse`` carrying ``outputs`` raw, as the request asked for them.

    Raises:
        InvalidInputError: a requested output does not exist.
        TypeError: an output is not tensor-like.
    """
    if decoded.outputs is None:
        names: list[str] = list(outputs)
    else:
        missing = [r.name for r in decoded.outputs if r.name not in outputs]
        if missing:
            raise InvalidInputError(
                f"model {model!r} has no output(s) {missing}; its outputs are {sorted(outputs)}"
            )
        names = [r.name for r in decoded.outputs]
    response = pb.ModelInferResponse(model_name=model, model_version=version)
    if decoded.id is not None:
        response.id = decoded.id
    raw = response.raw_output_contents
    for name in names:
        array = np.asarray(outputs[name])
        if array.ndim == 0:
            array = array.reshape(1)
        datatype = datatype_of(array)
        response.outputs.add(name=name, datatype=datatype, shape=array.shape)
        raw.append(tensor_bytes(array, datatype))
    return response
