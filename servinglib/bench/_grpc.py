"""gRPC requests for the load: ``ModelInfer`` with raw tensor contents, sent as bytes."""

from __future__ import annotations

from collections.abc import Mapping

import grpc
import numpy as np

from servinglib.bench._payloads import raw_bytes, v2_datatype
from servinglib.grpc_front.proto import inference_pb2 as pb

__all__ = ["GrpcSender", "infer_request_bytes"]

_METHOD = "/inference.GRPCInferenceService/ModelInfer"


def infer_request_bytes(
    model: str, version: str | None, tensors: Mapping[str, np.ndarray], datatypes: Mapping[str, str]
) -> bytes:
    """A serialized ``ModelInferRequest`` (tensors as ``raw_input_contents``)."""
    request = pb.ModelInferRequest(model_name=model, model_version=version or "")
    for name, array in tensors.items():
        request.inputs.add(name=name, datatype=v2_datatype(array), shape=list(array.shape))
        request.raw_input_contents.append(raw_bytes(array))
    data: bytes = request.SerializeToString()
    return data


class GrpcSender:
    """One channel; ``send`` answers 200 for OK and 1000 + the gRPC status code otherwise."""

    def __init__(self, address: str, timeout_s: float) -> None:
        self._channel = grpc.insecure_channel(address)
        self._call = self._channel.unary_unary(_METHOD)
        self._timeout_s = timeout_s

    def send(self, request: object) -> int:
        body: bytes = request.body  # type: ignore[attr-defined]
        try:
            self._call(body, timeout=self._timeout_s)
        except grpc.RpcError as e:
            code = e.code()
            return 1000 + int(code.value[0]) if code is not None else 0
        return 200

    def close(self) -> None:
        self._channel.close()
