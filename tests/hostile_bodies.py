"""Hypothesis strategies for hostile inference requests: /infer envelopes, Open Inference
JSON bodies, binary bodies with their header, shapes and datatypes.

Each strategy draws a :class:`Hostile` request (path, body bytes, headers). The bodies are
serialized by hand so they can hold what a JSON library would never write: NaN and
Infinity literals, integers of hundreds of digits, lone surrogate escapes, invalid UTF-8,
deep nesting, and shapes that disagree with their data.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from servinglib.wire.datatypes import DATATYPES

__all__ = ["Hostile", "binary_requests", "index_requests", "infer_requests", "v2_requests"]

# The fixture service's models (tests/fixtures/service) and names that are not served.
FIXTURE_MODELS = ("echo", "scorer", "ghost", "scorer/versions/1", "scorer/versions/3")


@dataclass(frozen=True)
class Hostile:
    """One request to send: ``POST path`` with ``body`` and ``headers``."""

    path: str
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)


class Raw:
    """A JSON fragment written as is (NaN, 400-digit integers, bad escapes)."""

    def __init__(self, text: bytes) -> None:
        self.text = text


def dumps(value: Any) -> bytes:
    """JSON text of ``value``; :class:`Raw` fragments are written verbatim."""
    if isinstance(value, Raw):
        return value.text
    if isinstance(value, dict):
        items = (dumps(str(k)) + b":" + dumps(v) for k, v in value.items())
        return b"{" + b",".join(items) + b"}"
    if isinstance(value, list | tuple):
        return b"[" + b",".join(dumps(v) for v in value) + b"]"
    return json.dumps(value).encode()


_RAW_FRAGMENTS = [
    b"NaN",
    b"Infinity",
    b"-Infinity",
    b"1e400",
    b"9" * 400,
    b"-" + b"9" * 30,
    b'"\\ud800"',
    b'"\\udfff\\ud800"',
    b'"\xed\xa0\x80"',  # an encoded surrogate: invalid UTF-8
    b'"\xff\xfe"',
    b'"\xc0\xaf"',  # an overlong encoding
    b"[" * 200 + b"]" * 200,
    b"{" * 3,
    b"tru",
    b"01",
    b"1.",
    b"\x00",
]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
    st.sampled_from(_RAW_FRAGMENTS).map(Raw),
)

json_values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)

datatypes = st.one_of(
    st.sampled_from(list(DATATYPES)),
    st.sampled_from(["fp32", "FLOAT", "", "STRING", "INT128"]),
    st.just({"type": "FP32"}),
    st.just(["FP32"]),
    st.integers(),
    st.none(),
)

dimensions = st.one_of(
    st.integers(min_value=0, max_value=4),
    st.sampled_from([0, 2**20, 2**31, 2**63, 10**20, -1, -(2**63)]),
    st.sampled_from([1.0, 2.5, True, "3", None]).map(lambda d: d),
)
shapes = st.one_of(
    st.lists(dimensions, max_size=4),
    st.lists(st.just(1), min_size=30, max_size=40),
    st.sampled_from([None, "2", {"0": 1}, 3]),
)

element_values = st.one_of(
    st.integers(min_value=-(2**64), max_value=2**64),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.text(max_size=6),
    st.none(),
    st.sampled_from(_RAW_FRAGMENTS[:11]).map(Raw),
)

tensors = st.fixed_dictionaries(
    {},
    optional={
        "name": st.one_of(
            st.sampled_from(["x", "a", "input_ids"]), st.text(max_size=6), st.integers()
        ),
        "shape": shapes,
        "datatype": datatypes,
        "data": st.one_of(
            st.lists(element_values, max_size=6),
            st.lists(st.lists(element_values, max_size=3), max_size=3),
            element_values,
        ),
        "parameters": st.one_of(
            st.dictionaries(
                st.sampled_from(["binary_data_size", "binary_data", "priority", "x"]),
                st.one_of(
                    st.integers(min_value=-5, max_value=2**40), st.booleans(), st.text(max_size=3)
                ),
                max_size=2,
            ),
            st.sampled_from([None, [], "p"]),
        ),
    },
)

request_ids = st.one_of(
    st.text(max_size=20),
    st.just("x" * 50_000),
    st.sampled_from(["line\nbreak", "nul\x00", "", "ok-42"]),
    st.integers(),
    st.none(),
    st.just(["id"]),
)

v2_documents = st.fixed_dictionaries(
    {"inputs": st.one_of(st.lists(tensors, min_size=1, max_size=3), json_values)},
    optional={
        "id": request_ids,
        "parameters": st.one_of(
            st.dictionaries(st.text(max_size=5), json_values, max_size=2), json_values
        ),
        "outputs": st.one_of(
            st.lists(
                st.fixed_dictionaries(
                    {"name": st.one_of(st.sampled_from(["x", "y", "score"]), st.integers())},
                    optional={
                        "parameters": st.dictionaries(
                            st.sampled_from(["binary_data", "classification"]),
                            st.one_of(st.booleans(), st.integers()),
                            max_size=1,
                        )
                    },
                ),
                max_size=2,
            ),
            json_values,
        ),
    },
)

content_types = st.sampled_from(
    [
        "application/json",
        "application/json; charset=utf-8",
        "text/plain",
        "application/x-www-form-urlencoded",
        "",
    ]
)


@st.composite
def v2_requests(draw: st.DrawFn, models: tuple[str, ...] = FIXTURE_MODELS) -> Hostile:
    """A hostile Open Inference JSON request: structure, shapes, datatypes, data, ids."""
    body = dumps(draw(v2_documents)) if draw(st.integers(0, 9)) else draw(st.binary(max_size=64))
    content_type = draw(content_types)
    headers = {"Content-Type": content_type} if content_type else {}
    return Hostile(f"/v2/models/{draw(st.sampled_from(models))}/infer", body, headers)


@st.composite
def binary_requests(draw: st.DrawFn, models: tuple[str, ...] = FIXTURE_MODELS) -> Hostile:
    """A hostile binary-extension request: a JSON header, raw tensor bytes, and an
    Inference-Header-Content-Length that may lie."""
    inputs = []
    chunks = []
    for _ in range(draw(st.integers(1, 3))):
        datatype = draw(datatypes)
        shape = draw(shapes)
        raw = draw(
            st.one_of(
                st.binary(max_size=48),
                st.sampled_from(
                    [
                        struct.pack("<ff", float("nan"), 1.0),
                        struct.pack("<d", float("inf")),
                        struct.pack("<I", 2**31) + b"ab",  # a BYTES length prefix past the end
                        struct.pack("<H", 0x7FC0),  # BF16 NaN
                    ]
                ),
            )
        )
        declared = draw(st.one_of(st.just(len(raw)), st.integers(-3, 100), st.just("4")))
        inputs.append(
            {
                "name": draw(st.sampled_from(["x", "a", "b"])),
                "shape": shape,
                "datatype": datatype,
                "parameters": {"binary_data_size": declared},
            }
        )
        chunks.append(raw)
    document: dict[str, Any] = {"inputs": inputs}
    if draw(st.booleans()):
        document["id"] = draw(request_ids)
    header = dumps(document)
    body = header + b"".join(chunks)
    length = draw(
        st.one_of(
            st.just(str(len(header))),
            st.integers(-10, len(body) + 10).map(str),
            st.sampled_from(["", "abc", "1e3", str(2**64), "+12", "0x10"]),
        )
    )
    headers = {"Inference-Header-Content-Length": length}
    content_type = draw(st.sampled_from(["application/octet-stream", "application/json", ""]))
    if content_type:
        headers["Content-Type"] = content_type
    return Hostile(f"/v2/models/{draw(st.sampled_from(models))}/infer", body, headers)


infer_documents = st.fixed_dictionaries(
    {},
    optional={
        "model_id": json_values,
        "version": st.one_of(st.sampled_from(["1", "2", "3", "4", "../1", "9" * 300]), json_values),
        "features": st.one_of(
            st.fixed_dictionaries({"x": element_values}),
            st.dictionaries(st.text(max_size=6), json_values, max_size=4),
            json_values,
        ),
        "priority": st.one_of(st.integers(-2, 2**70), json_values),
        "extra": json_values,
    },
)


@st.composite
def infer_requests(draw: st.DrawFn, models: tuple[str, ...] = FIXTURE_MODELS) -> Hostile:
    """A hostile /infer request: envelopes, features of every JSON shape, broken JSON."""
    if draw(st.integers(0, 9)):
        document = draw(infer_documents)
        if draw(st.integers(0, 3)):  # mostly a served model, so the features reach it
            document["model_id"] = draw(st.sampled_from(models)).split("/")[0]
        body = dumps(document)
    else:
        body = draw(st.binary(max_size=64))
    content_type = draw(content_types)
    headers = {"Content-Type": content_type} if content_type else {}
    return Hostile("/infer", body, headers)


@st.composite
def index_requests(draw: st.DrawFn) -> Hostile:
    """A hostile repository index request (its body is optional JSON)."""
    body = dumps(draw(json_values)) if draw(st.integers(0, 4)) else draw(st.binary(max_size=32))
    content_type = draw(content_types)
    headers = {"Content-Type": content_type} if content_type else {}
    return Hostile("/v2/repository/index", body, headers)
