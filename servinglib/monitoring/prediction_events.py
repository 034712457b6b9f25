"""The streamed prediction record: schema ``servinglib.prediction`` version 1.

One CloudEvents 1.0 event (JSON, structured mode) per answered request, primary or shadow.
Kafka messages carry it as their value; the Parquet lake stores :func:`lake_row` of it. The
reference is ``docs/reference/prediction-events.md``; a change that renames or retypes a
field bumps :data:`SCHEMA_VERSION` (and the ``type``).
"""

from __future__ import annotations

import datetime
import json
import time
from typing import TYPE_CHECKING, Any

import orjson

from servinglib.wire.jsonbytes import to_plain

if TYPE_CHECKING:
    from servinglib.serving.recording import AnsweredPrediction

__all__ = [
    "EVENT_TYPE",
    "LAKE_SCHEMA_VERSION",
    "SCHEMA_VERSION",
    "encode",
    "event_of",
    "json_text",
    "lake_row",
    "rfc3339",
]

SCHEMA_VERSION = 1
EVENT_TYPE = f"io.servinglib.prediction.v{SCHEMA_VERSION}"
LAKE_SCHEMA_VERSION = 2  # 2: features as typed ``feature_<name>`` columns


_second: list[tuple[int, str]] = [(-1, "")]  # the last second, as a format of its microseconds


def rfc3339(seconds: float) -> str:
    """``seconds`` since the epoch as RFC 3339 UTC with microseconds (``...T...Z``)."""
    whole = int(seconds)
    cached = _second[0]
    if cached[0] != whole:  # formatting a datetime costs more than the rest of the event
        cached = (whole, time.strftime("%Y-%m-%dT%H:%M:%S.%%06dZ", time.gmtime(whole)))
        _second[0] = cached
    return cached[1] % ((seconds - whole) * 1e6)  # %d truncates: never 1000000


def event_of(record: AnsweredPrediction, source: str) -> dict[str, Any]:
    """The CloudEvent of ``record``; ``id`` (request id / model / version) is the dedup key.

    A traced answer carries the CloudEvents distributed-tracing extension: ``traceparent``
    (W3C, the answer's span), beside ``trace_id`` in ``data``.
    """
    event: dict[str, Any] = {
        "specversion": "1.0",
        "type": EVENT_TYPE,
        "source": source,
        "id": f"{record.request_id}/{record.model}/{record.version}",
        "time": rfc3339(record.logged_at),
        "datacontenttype": "application/json",
        "schemaversion": SCHEMA_VERSION,
        "data": {
            "request_id": record.request_id,
            "trace_id": record.trace_id,
            "model": record.model,
            "version": record.version,
            "shadow_of": record.shadow_of,
            "inputs": record.features,  # NumPy arrays stay as they are: orjson writes them
            "outputs": record.output,
            "latency_ms": record.latency_ms,
            "logged_at": record.logged_at,
        },
    }
    if record.trace_id is not None and record.span_id is not None:
        event["traceparent"] = record.traceparent
    return event


_OPTIONS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS


def encode(event: dict[str, Any]) -> bytes:
    """JSON bytes of ``event`` (orjson: NaN and Infinity are written as ``null``)."""
    try:  # string keys and JSON or NumPy values: a quarter faster without the fallbacks
        return orjson.dumps(event, option=orjson.OPT_SERIALIZE_NUMPY)
    except orjson.JSONEncodeError:
        pass
    try:  # other keys, or values written as their str()
        return orjson.dumps(event, default=str, option=_OPTIONS)
    except orjson.JSONEncodeError:  # beyond orjson (integers over 64 bits...): the slow way
        return json.dumps(to_plain(event), default=str).encode()


def json_text(value: Any) -> str:
    """JSON text of a logged value (as :func:`encode` writes it)."""
    return encode(value).decode()


def lake_row(event: dict[str, Any]) -> dict[str, Any]:
    """The Parquet row of ``event``: flat columns, outputs as JSON text; ``inputs`` is still
    the features themselves (the sink splits them into columns and JSON, per file)."""
    data = event["data"]
    return {
        "id": event["id"],
        "type": event["type"],
        "source": event["source"],
        "time": datetime.datetime.fromtimestamp(data["logged_at"], datetime.UTC),
        "request_id": data["request_id"],
        "trace_id": data["trace_id"],
        "model": data["model"],
        "version": data["version"],
        "shadow_of": data["shadow_of"],
        "inputs": data["inputs"],
        "outputs": json_text(data["outputs"]),
        "latency_ms": float(data["latency_ms"]),
        "logged_at": float(data["logged_at"]),
        "schema_version": LAKE_SCHEMA_VERSION,
    }
