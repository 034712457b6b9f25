"""servinglib's inference.proto speaks Triton's wire format: every field it declares has the
number and type of the same field in the descriptors tritonclient ships, and every RPC has
Triton's path and streaming arity."""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf.descriptor import Descriptor

from servinglib.grpc_front.proto import inference_pb2 as ours

triton = pytest.importorskip("tritonclient.grpc.service_pb2")
triton_config = pytest.importorskip("tritonclient.grpc.model_config_pb2")


def _messages(descriptor: Descriptor, prefix: str = "") -> dict[str, Descriptor]:
    found = {prefix + descriptor.name: descriptor}
    for nested in descriptor.nested_types:
        found.update(_messages(nested, prefix + descriptor.name + "."))
    return found


def _theirs(name: str) -> Descriptor:
    for module in (triton, triton_config):
        found: Any = module
        try:
            for part in name.split("."):
                found = getattr(found, part)
        except AttributeError:
            continue
        return found.DESCRIPTOR  # type: ignore[no-any-return]
    raise AssertionError(f"tritonclient has no message {name}")


def test_every_field_matches_tritons_number_type_and_label() -> None:
    checked = 0
    for top in ours.DESCRIPTOR.message_types_by_name.values():
        for name, descriptor in _messages(top).items():
            if descriptor.GetOptions().map_entry:
                continue
            reference = _theirs(name)
            for field in descriptor.fields:
                other = reference.fields_by_name.get(field.name)
                assert other is not None, f"{name}.{field.name} is not in Triton's proto"
                assert (field.number, field.type, field.is_repeated) == (
                    other.number,
                    other.type,
                    other.is_repeated,
                ), f"{name}.{field.name}"
                if field.message_type is not None:
                    assert field.message_type.full_name == other.message_type.full_name
                checked += 1
    assert checked > 120


def test_enums_match_tritons() -> None:
    for enum in ours.DESCRIPTOR.enum_types_by_name.values():
        reference = triton_config.DESCRIPTOR.enum_types_by_name[enum.name]
        assert {v.name: v.number for v in enum.values} == {
            v.name: v.number for v in reference.values if v.name in enum.values_by_name
        }


def test_every_rpc_has_tritons_path_and_arity() -> None:
    service = ours.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    reference = triton.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    assert service.full_name == "inference.GRPCInferenceService"
    for method in service.methods:
        other = reference.methods_by_name[method.name]
        assert method.input_type.full_name == other.input_type.full_name
        assert method.output_type.full_name == other.output_type.full_name
        assert (method.client_streaming, method.server_streaming) == (
            other.client_streaming,
            other.server_streaming,
        )


def test_messages_round_trip_through_tritons_classes() -> None:
    request = ours.ModelInferRequest(model_name="m", id="7", raw_input_contents=[b"\x01"])
    request.inputs.add(name="x", datatype="UINT8", shape=[1]).parameters["k"].double_param = 0.5
    theirs = triton.ModelInferRequest.FromString(request.SerializeToString())
    assert theirs.inputs[0].parameters["k"].double_param == 0.5
    assert ours.ModelInferRequest.FromString(theirs.SerializeToString()) == request
