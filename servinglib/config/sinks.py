"""``monitoring.prediction_log.sinks``: where else the prediction log streams (Kafka, Parquet).

Each sink has its own sampling, buffer and batching (the same keys as the SQL log) and its
own bounded disk spool, used while the sink is down or slow.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servinglib.errors import ConfigError

__all__ = ["BUFFER_KEYS", "LogSinkConfig", "parse_sinks"]

BUFFER_KEYS = (
    "sample_rate",
    "max_buffer",
    "max_buffer_bytes",
    "max_record_bytes",
    "batch_size",
    "flush_interval_ms",
)
_DEFAULTS: dict[str, dict[str, Any]] = {
    # Kafka: room for about 10 s of a busy worker's answers while the writer waits for a
    # broker that stopped answering (the delivery timeout, then a 2 s metadata check)
    "kafka": {"batch_size": 2000, "flush_interval_ms": 1000, "max_buffer": 50000},
    "parquet": {"batch_size": 50000, "flush_interval_ms": 60000},
}


@dataclass(frozen=True)
class LogSinkConfig:
    """One entry of ``monitoring.prediction_log.sinks``.

    ``target`` is the Kafka topic or the Parquet lake URL; ``options`` the other keys of
    its kind (``bootstrap_servers``, ``linger_ms``...); ``buffer`` the sampling and
    batching keys; ``spool_dir`` is absolute.
    """

    name: str
    kind: str
    target: str
    spool_dir: Path
    spool_max_bytes: int = 1 << 30
    buffer: Mapping[str, Any] = field(default_factory=dict)
    options: Mapping[str, Any] = field(default_factory=dict)


def parse_sinks(
    entries: list[Mapping[str, Any]], root: Path, label: str
) -> tuple[LogSinkConfig, ...]:
    """Sink configs of the schema-validated ``sinks`` list; relative paths against ``root``.

    Raises:
        ConfigError: two sinks share a name (their metrics and spools would mix).
    """
    sinks: list[LogSinkConfig] = []
    for index, entry in enumerate(entries):
        kind = str(entry["type"])
        target = str(entry["topic"] if kind == "kafka" else entry["url"])
        if kind == "parquet" and "://" not in target:
            target = str(root / target)
        name = str(entry.get("name", kind))
        if any(sink.name == name for sink in sinks):
            raise ConfigError(
                f"{label}: monitoring.prediction_log.sinks[{index}]: another sink is named "
                f"{name!r}; give each sink a distinct name: (names its metrics and spool)"
            )
        spool = Path(str(entry.get("spool_dir", f".servinglib-spool/{name}")))
        buffer = {**_DEFAULTS[kind], **{k: entry[k] for k in BUFFER_KEYS if k in entry}}
        used = {"type", "name", "topic", "url", "spool_dir", "spool_max_bytes", *BUFFER_KEYS}
        sinks.append(
            LogSinkConfig(
                name=name,
                kind=kind,
                target=target,
                spool_dir=spool if spool.is_absolute() else root / spool,
                spool_max_bytes=int(entry.get("spool_max_bytes", 1 << 30)),
                buffer=buffer,
                options={k: v for k, v in entry.items() if k not in used},
            )
        )
    return tuple(sinks)
