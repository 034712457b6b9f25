"""A real S3 API on 127.0.0.1 for the tests: moto in server mode, with its request log.

Started once per pytest session (:func:`s3_store`); the tests reach it through boto3 and
s3fs exactly as a deployment reaches S3, configured by the standard ``AWS_*`` variables.
"""

from __future__ import annotations

import logging
import re
import socket
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

FAKE_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",  # moto accepts any key
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_MAX_ATTEMPTS": "2",
    "AWS_EC2_METADATA_DISABLED": "true",
}
_REQUEST = re.compile(r'"(GET|PUT|HEAD|POST|DELETE) (\S+) HTTP')
_COLOUR = re.compile(r"\x1b\[[0-9;]*m")  # werkzeug colours non-200 lines


class RequestLog(logging.Handler):
    """Every request line the moto server logs (werkzeug's access log)."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[tuple[str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        match = _REQUEST.search(_COLOUR.sub("", record.getMessage()))
        if match:
            self.lines.append((match.group(1), match.group(2)))

    def gets(self, start: int = 0) -> Counter[str]:
        """Object GETs (not listings) since line ``start``, by path."""
        return Counter(p for m, p in self.lines[start:] if m == "GET" and "?" not in p)


@dataclass
class S3Store:
    """The running moto server and a boto3 client on it."""

    endpoint: str
    client: Any
    log: RequestLog
    env: dict[str, str] = field(default_factory=dict)

    def put_tree(self, bucket: str, prefix: str, files: dict[str, bytes]) -> None:
        """Upload ``files`` (relative name → bytes) under ``prefix``."""
        for name, body in files.items():
            self.client.put_object(Bucket=bucket, Key=f"{prefix}/{name}", Body=body)


@pytest.fixture(scope="session")
def s3_store() -> Iterator[S3Store]:
    """moto's S3 API on a free loopback port for the whole session."""
    boto3 = pytest.importorskip("boto3")
    server_module = pytest.importorskip("moto.server")
    log = RequestLog()
    werkzeug = logging.getLogger("werkzeug")
    werkzeug.addHandler(log)
    werkzeug.setLevel(logging.INFO)
    server = server_module.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=True)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    env = {**FAKE_CREDENTIALS, "AWS_ENDPOINT_URL": endpoint}
    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    yield S3Store(endpoint, client, log, env)
    server.stop()
    werkzeug.removeHandler(log)


class StallingProxy:
    """A TCP relay to the store that stops relaying a response after ``stall_after`` bytes
    of it: a download that hangs half-way, for as long as the test wants."""

    def __init__(self, target_port: int, stall_after: int) -> None:
        self._target = target_port
        self._stall_after = stall_after
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self.stalled = threading.Event()
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self._target))
            self._sockets += [client, upstream]
            threading.Thread(target=self._pipe, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, True), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket, response: bool) -> None:
        relayed = 0
        try:
            while chunk := source.recv(65536):
                if response and relayed + len(chunk) > self._stall_after:
                    sink.sendall(chunk[: max(0, self._stall_after - relayed)])
                    self.stalled.set()
                    self._closed.wait()  # hold the connection open, send nothing more
                    return
                sink.sendall(chunk)
                relayed += len(chunk)
        except OSError:
            return

    def close(self) -> None:
        """Stop relaying and listening."""
        self._closed.set()
        self._listener.close()
        for connection in self._sockets:
            connection.close()
