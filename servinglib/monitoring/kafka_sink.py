"""The Kafka sink: one message per prediction (``pip install 'servinglib[kafka]'``).

The producer is idempotent with ``acks=all``; a batch counts as written once every message
is acknowledged within ``delivery_timeout_ms``. Otherwise the batch goes to the spool and is
sent again later, so a message may arrive twice: consumers deduplicate on the event ``id``
(at-least-once delivery). Keys are request ids, so one request's primary and shadow
answers land in the same partition.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from servinglib.errors import ConfigError
from servinglib.monitoring.prediction_events import encode

__all__ = ["KafkaSink", "producer_settings"]

_POLL_S = 0.05


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
        **options.get("producer", {}),
        "enable.idempotence": True,
        "acks": "all",
    }


class KafkaSink:
    """Produces events to ``topic`` and waits for their acknowledgement."""

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
        self._suspect = False  # the last batch failed: check the cluster answers first

    def _connect(self) -> Any:
        if self._producer is None:
            self._producer = self._kafka.Producer(self._settings)
        return self._producer

    def write(self, events: Sequence[dict[str, Any]]) -> None:
        """Produce ``events`` and wait until all are acknowledged.

        Raises:
            KafkaException: the cluster is unreachable, or some message was not acknowledged.
        """
        producer = self._connect()
        if self._suspect:  # fail in a second or two instead of a whole delivery timeout
            producer.list_topics(self._topic, timeout=min(2.0, self._timeout_s))
        errors: list[Any] = []

        def delivered(error: Any, _message: Any) -> None:
            if error is not None:
                errors.append(error)

        for event in events:
            value, key = encode(event), event["data"]["request_id"].encode()
            while True:
                try:
                    producer.produce(self._topic, value=value, key=key, on_delivery=delivered)
                    break
                except BufferError:  # librdkafka's local queue is full: let it drain
                    producer.poll(_POLL_S)
        left = producer.flush(self._timeout_s + 1)
        if left or errors:
            # A new producer (a new producer id) next time: after timed-out messages the
            # old one would bump its epoch, which some brokers answer PRODUCER_FENCED.
            self._suspect = True
            producer.purge()
            producer.flush(0)
            self._producer = None
            first = errors[0] if errors else "delivery timed out"
            raise self._kafka.KafkaException(
                f"topic {self._topic}: {left or len(errors)} of {len(events)} messages not "
                f"acknowledged ({first})"
            )
        self._suspect = False

    def close(self) -> None:
        """Flush what is in flight and drop the producer."""
        if self._producer is not None:
            self._producer.flush(self._timeout_s)
            self._producer = None
