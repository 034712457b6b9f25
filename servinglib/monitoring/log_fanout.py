"""Several prediction logs behind the one recorder the service and the shadows call.

Each log keeps its own ``sample_rate``; the draw hashes the request id, so a request's
primary and shadow answers are logged (or not) together, in every sink alike.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from servinglib.config.sinks import LogSinkConfig
from servinglib.config.spec import PredictionLogConfig
from servinglib.monitoring.metrics import ServingMetrics
from servinglib.monitoring.prediction_log import PredictionLogger, open_sink
from servinglib.monitoring.sink_logger import EventSink, SinkLogger
from servinglib.serving.recording import AnsweredPrediction

__all__ = ["PredictionLogs", "open_event_sink", "open_logs"]


def _fraction(request_id: str) -> float:
    digest = hashlib.blake2b(request_id.encode(), digest_size=8).digest()
    return int.from_bytes(digest) / 2**64


class PredictionLogs:
    """Fans records out to ``loggers`` (an ``AnswerRecorder``)."""

    def __init__(self, loggers: Sequence[PredictionLogger]) -> None:
        self.loggers = tuple(loggers)
        self._rates = [logger.sample_rate for logger in self.loggers]
        self._everything = all(rate >= 1.0 for rate in self._rates)  # no draw to make

    def sampled(self) -> bool:
        """True: each log draws per request id in :meth:`record`."""
        return True

    def _takers(self, request_id: str) -> Sequence[PredictionLogger]:
        if self._everything:
            return self.loggers
        draw = _fraction(request_id)
        return [lg for lg, rate in zip(self.loggers, self._rates, strict=True) if draw < rate]

    def record(self, answer: AnsweredPrediction) -> bool:
        """Queue ``answer`` in every log that samples its request id; False when one of
        them dropped it."""
        kept = [logger.record(answer) for logger in self._takers(answer.request_id)]
        return all(kept)

    def close(self) -> None:
        """Drain every log (each flushes, or spools what its sink does not take)."""
        for logger in self.loggers:
            logger.close()


def open_event_sink(
    config: LogSinkConfig, input_schemas: Mapping[str, Mapping[str, Any] | None] | None = None
) -> EventSink:
    """The Kafka or Parquet sink of ``config`` (``input_schemas``: each model's, by name,
    so the lake types its feature columns)."""
    if config.kind == "kafka":
        from servinglib.monitoring.kafka_sink import KafkaSink

        return KafkaSink(config.target, config.options)
    from servinglib.monitoring.parquet_sink import ParquetSink

    return ParquetSink(config.target, config.options, input_schemas)


def open_logs(
    config: PredictionLogConfig,
    service: str,
    metrics: ServingMetrics,
    input_schemas: Mapping[str, Mapping[str, Any] | None] | None = None,
) -> PredictionLogger | PredictionLogs:
    """The one configured log when it keeps every answer (the SQL log alone, as before
    sinks existed, or one sink), else every configured log fanned out."""
    sql = None
    if config.url is not None:
        sql = PredictionLogger(
            config,
            open_sink(config.url),
            on_dropped=metrics.prediction_log_dropped,
            on_written=metrics.prediction_log_written,
            on_truncated=metrics.prediction_log_truncated,
        )
        if not config.sinks:
            return sql
    loggers: list[PredictionLogger] = [] if sql is None else [sql]
    for sink in config.sinks:
        loggers.append(
            SinkLogger(sink, open_event_sink(sink, input_schemas), f"servinglib/{service}", metrics)
        )
    if len(loggers) == 1 and loggers[0].sample_rate >= 1.0:
        return loggers[0]  # one log of every answer (the usual setup): nothing to fan out
    return PredictionLogs(loggers)
