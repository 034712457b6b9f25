"""Fuzzing the codec in process: every hostile body decodes or is refused with a 400 error.

The same strategies drive tests/integration/test_fuzz_traffic.py against live servers.
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import HealthCheck, given, settings

from servinglib.errors import InvalidInputError
from servinglib.wire.strict_json import parse_json
from servinglib.wire.tensor_checks import MAX_ELEMENTS
from servinglib.wire.v2 import decode_request
from tests.hostile_bodies import Hostile, binary_requests, infer_requests, v2_requests

FUZZ = settings(
    max_examples=1000,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def decode(request: Hostile) -> None:
    raw_length = request.headers.get("Inference-Header-Content-Length")
    try:
        length = None if raw_length is None else int(raw_length)
    except ValueError:
        return  # the HTTP layer refuses it before the codec (tested there)
    try:
        decoded = decode_request(request.body, length)
    except InvalidInputError:
        return
    for array in decoded.inputs.values():
        assert array.size <= MAX_ELEMENTS
        if array.dtype.kind == "f":
            assert np.isfinite(array).all()


@FUZZ
@given(v2_requests())
def test_hostile_v2_json_bodies_decode_or_are_refused(request: Hostile) -> None:
    decode(request)


@FUZZ
@given(binary_requests())
def test_hostile_binary_bodies_decode_or_are_refused(request: Hostile) -> None:
    decode(request)


@FUZZ
@given(infer_requests())
def test_hostile_infer_bodies_parse_or_are_refused(request: Hostile) -> None:
    try:
        document = parse_json(request.body, 64)
    except InvalidInputError:
        return
    stack = [document]
    while stack:  # what a model would see: finite numbers, strings that are valid UTF-8
        value = stack.pop()
        if isinstance(value, dict):
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
        elif isinstance(value, float):
            assert math.isfinite(value)
        elif isinstance(value, str):
            value.encode("utf-8")  # raises on a lone surrogate
