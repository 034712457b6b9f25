"""Answers about the prediction log's sinks: which ones, the Kafka cluster and topic, the
Parquet lake's bucket URL. Each parser returns the value or raises FieldError naming the fix."""

from __future__ import annotations

import re

from servinglib_generator._validators import FieldError

__all__ = [
    "SINK_KINDS",
    "lake_bucket",
    "parse_bootstrap_servers",
    "parse_lake_url",
    "parse_sinks",
    "parse_topic",
]

SINK_KINDS = ("kafka", "parquet")
_HOST_PORT = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?:(\d{1,5})$")
_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_LAKE = re.compile(r"^(s3|gs)://([a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(/[A-Za-z0-9._=/-]*)?$")


def parse_sinks(raw: str) -> tuple[str, ...]:
    """``none``, or sink kinds, comma-separated, in the order given."""
    if raw == "none":
        return ()
    kinds = tuple(part.strip() for part in raw.split(","))
    unknown = [kind for kind in kinds if kind not in SINK_KINDS]
    if unknown or not kinds or len(set(kinds)) != len(kinds):
        raise FieldError(
            f"{raw!r} is not a list of sinks; use none, kafka, parquet or kafka,parquet"
        )
    return kinds


def parse_bootstrap_servers(raw: str) -> str:
    """``host:port`` pairs, comma-separated."""
    for pair in raw.split(","):
        match = _HOST_PORT.match(pair.strip())
        if match is None or not 0 < int(match.group(2)) < 65536:
            raise FieldError(
                f"{pair.strip()!r} is not host:port; use e.g. 'kafka-0:9092,kafka-1:9092'"
            )
    return ",".join(pair.strip() for pair in raw.split(","))


def parse_topic(raw: str) -> str:
    """A Kafka topic name."""
    if not _TOPIC.match(raw) or raw in (".", ".."):
        raise FieldError(
            f"{raw!r} is not a Kafka topic name; use 1 to 249 letters, digits, '.', '_' or '-'"
        )
    return raw


def parse_lake_url(raw: str) -> str:
    """An ``s3://`` or ``gs://`` bucket URL with an optional prefix (no trailing slash)."""
    url = raw.rstrip("/")
    if not _LAKE.match(url):
        raise FieldError(
            f"{raw!r} is not a bucket URL; use s3://BUCKET/PREFIX or gs://BUCKET/PREFIX "
            "(bucket: 3 to 63 lower-case letters, digits, '.' or '-')"
        )
    return url


def lake_bucket(url: str) -> str:
    """The S3 bucket of a lake URL ("" for a non-S3 lake: Terraform creates no bucket)."""
    return url.removeprefix("s3://").split("/")[0] if url.startswith("s3://") else ""
