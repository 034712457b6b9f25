"""The Kafka sink: one message per prediction (``pip install 'servinglib[kafka]'``).

The producer is idempotent with ``acks=all``; a batch counts as written once every message
is acknowledged within ``delivery_timeout_ms``. Otherwise the batch goes to the spool and is
sent again later, so a message may arrive twice: consumers deduplicate on the event ``id``
(at-least-once delivery). Keys are request ids, so one request's primary and shadow
answers land in the same partition.

librdkafka's own log lines (a refused connection, every reconnect while the cluster is
down) go to the ``servinglib.prediction_log.librdkafka`` logger, so they are the server's
JSON lines, and at most one every 30 s, which says how many it held back; without it they
are printed raw on stderr, several a second during an outage.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from servinglib.errors import ConfigError
from servinglib.monitoring.prediction_events import encode, event_of

if TYPE_CHECKING:
    from servinglib.serving.recording import AnsweredPrediction

__all__ = ["KafkaSink", "producer_settings"]

_POLL_S = 0.05
_ACK_POLL_S = 0.1  # how often a writer waiting for acknowledgements looks for errors
_LIBRDKAFKA_LINE_EVERY_S = 30.0


class _OnePer(logging.Filter):
    """Passes one record per ``seconds``; the next one passed says how many were held."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self._seconds = seconds
        self._next = 0.0
        self._held = 0

    def filter(self, record: logging.LogRecord) -> bool:
        now = time.monotonic()
        if now < self._next:
            self._held += 1
            return False
        self._next = now + self._seconds
        if self._held:
            args = record.args if isinstance(record.args, tuple) else ()
            record.msg = f"{record.msg} (%d more librdkafka lines in the last %.0f s not shown)"
            record.args = (*args, self._held, self._seconds)
            self._held = 0
        return True


_LIBRDKAFKA_LOG = logging.getLogger("servinglib.prediction_log.librdkafka")
_LIBRDKAFKA_LOG.addFilter(_OnePer(_LIBRDKAFKA_LINE_EVERY_S))


def producer_settings(options: Mapping[str, Any]) -> dict[str, Any]:
    """librdkafka settings of a sink entry: its defaults, then ``producer``, then the
    settings the delivery guarantee needs (idempotence, ``acks=all``)."""
    return {
        "bootstrap.servers": options["bootstrap_servers"],
        "linger.ms": options.get("linger_ms", 20),
        "batch.size": options.get("batch_bytes", 1 << 20),
        "compression.type": options.get("compression", "lz4"),
        "message.timeout.ms": options.get("delivery_timeout_ms", 5000),
        "delivery.report.only.error": True,  # no Python callback per delivered message
        "reconnect.backoff.max.ms": 1000,  # back within a second of the cluster's return
        **options.get("producer", {}),
        "enable.idempotence": True,
        "acks": "all",
    }


class KafkaSink:
    """Produces events to ``topic`` and waits for their acknowledgement.

    A producer is used only while its connection holds. Any error it reports (connection
    lost, brokers down, fatal) discards it, and a batch that was in flight meanwhile counts
    as failed even if acknowledged: after a cut librdkafka may bump the idempotent
    producer's epoch locally and restart its sequence numbers, and batches of a producer
    that lived through a cut were seen acknowledged yet partly missing on the test broker
    (Tansu). The next batch gets a new producer (a new producer id). That also
    covers librdkafka's fatal errors (e.g. ``OUT_OF_ORDER_SEQUENCE_NUMBER``), after which
    the producer refuses every message for good and must be recreated.
    """

    def __init__(self, topic: str, options: Mapping[str, Any]) -> None:
        try:
            import confluent_kafka
        except ImportError as e:
            raise ConfigError(
                "a kafka prediction sink needs confluent-kafka: pip install 'servinglib[kafka]'"
            ) from e
        self._kafka = confluent_kafka
        self._topic = topic
        self._settings = producer_settings(options)
        self._timeout_s = self._settings["message.timeout.ms"] / 1000
        self._producer: Any = None
        self._fatal: Any = None  # the producer's fatal error, once it has one
        self._disrupted: Any = None  # the first error the producer reported
        self._suspect = False  # the last batch failed: check the cluster answers first
        self._errors: list[Any] = []  # delivery errors of the batch being written

    def _on_error(self, error: Any) -> None:
        if error.fatal():
            self._fatal = error
        if self._disrupted is None:
            self._disrupted = error

    def _on_delivery(self, error: Any, _message: Any) -> None:
        """The producer's delivery callback: only failures reach it
        (``delivery.report.only.error``), and one callback serves every message."""
        if error is not None:
            self._errors.append(error)

    def _connect(self) -> Any:
        if self._producer is not None:
            self._producer.poll(0)  # serves the errors it reported while idle
            if self._disrupted is not None:
                self._discard()
        if self._producer is None:
            self._fatal = self._disrupted = None
            self._producer = self._kafka.Producer(
                {
                    **self._settings,
                    "error_cb": self._on_error,
                    "on_delivery": self._on_delivery,
                    "logger": _LIBRDKAFKA_LOG,  # served by poll() and flush()
                }
            )
        return self._producer

    def _discard(self) -> None:
        """Drop the producer and what it still holds (those events are sent again)."""
        producer, self._producer = self._producer, None
        self._suspect = True
        if producer is not None:
            with contextlib.suppress(Exception):
                producer.purge()
                producer.flush(0)

    def write_answers(self, answers: Sequence[AnsweredPrediction], source: str) -> None:
        """Produce the event of each of ``answers`` and wait until all are acknowledged.

        Each answer is turned into its event, encoded and produced in one pass, while its
        features are still in the CPU's caches: about a third less CPU than a pass per step
        over a batch of 2,000 (the events are the same bytes as :meth:`write` sends).

        Raises:
            KafkaException: as :meth:`write`.
        """
        self._deliver(len(answers), lambda producer: self._queue_answers(producer, answers, source))

    def write(self, events: Sequence[dict[str, Any]]) -> None:
        """Produce ``events`` (replayed from the spool) and wait until all are acknowledged.

        Raises:
            KafkaException: the cluster is unreachable, the producer failed fatally, or
                some message was not acknowledged.
        """
        self._deliver(len(events), lambda producer: self._queue_events(producer, events))

    def _deliver(self, count: int, queue: Callable[[Any], None]) -> None:
        """Queue ``count`` messages with ``queue(producer)``, wait for all, raise unless
        every one was acknowledged by a producer that kept its link."""
        errors: list[Any] = []
        self._errors = errors
        try:
            producer = self._connect()
            if self._suspect:  # fail in a second or two instead of a whole delivery timeout
                producer.list_topics(self._topic, timeout=min(2.0, self._timeout_s))
            queue(producer)
            left = self._acknowledged(producer)
        except Exception:
            self._discard()
            raise
        if left or errors or self._disrupted is not None:
            first = self._fatal or (errors[0] if errors else self._disrupted)
            self._discard()
            if not (left or errors):  # acknowledged, but by a producer that lost its link
                raise self._kafka.KafkaException(
                    f"topic {self._topic}: the producer failed ({first}) while {count} "
                    "messages were in flight; they are sent again by a new producer"
                )
            raise self._kafka.KafkaException(
                f"topic {self._topic}: {left or len(errors)} of {count} messages not "
                f"acknowledged ({first or 'delivery timed out'})"
            )
        self._suspect = False

    def _acknowledged(self, producer: Any) -> int:
        """Wait for the acknowledgement of everything queued; the number left unanswered.

        Waits at most the delivery timeout, and no longer once the producer reported an
        error (its batch counts as failed anyway): while the writer waits here, a busy
        server's answers fill the memory buffer.
        """
        deadline = time.monotonic() + self._timeout_s + 1
        left: int = producer.flush(_ACK_POLL_S)
        while left and self._disrupted is None and time.monotonic() < deadline:
            left = producer.flush(_ACK_POLL_S)
        return left

    def _queue_answers(
        self, producer: Any, answers: Sequence[AnsweredPrediction], source: str
    ) -> None:
        topic, produce = self._topic, producer.produce
        for answer in answers:
            value = encode(event_of(answer, source))
            try:
                produce(topic, value, answer.request_id)
            except BufferError:  # librdkafka's local queue is full: let it drain
                self._produce_when_room(producer, value, answer.request_id)

    def _queue_events(self, producer: Any, events: Sequence[dict[str, Any]]) -> None:
        topic, produce = self._topic, producer.produce
        for event in events:
            value, key = encode(event), event["data"]["request_id"]
            try:
                produce(topic, value, key)
            except BufferError:
                self._produce_when_room(producer, value, key)

    def _produce_when_room(self, producer: Any, value: bytes, key: str) -> None:
        """Produce once librdkafka's local queue has room (unless the producer failed)."""
        while True:
            producer.poll(_POLL_S)
            if self._fatal is not None:
                raise self._kafka.KafkaException(self._fatal) from None
            try:
                producer.produce(self._topic, value, key)
                return
            except BufferError:
                continue

    def close(self) -> None:
        """Flush what is in flight and drop the producer."""
        if self._producer is not None:
            with contextlib.suppress(Exception):
                self._producer.flush(self._timeout_s)
            self._producer = None
