"""The admin client names the problem when another server answers on the admin port."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from servinglib.errors import ServinglibError
from servinglib.serve.admin_client import AdminClient


class _EnvoyAdminLike(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"<html>envoy admin</html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def other_server() -> Iterator[int]:
    server = HTTPServer(("127.0.0.1", 0), _EnvoyAdminLike)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield int(server.server_address[1])
    server.shutdown()
    server.server_close()


def test_non_json_answer_names_admin_port(other_server: int) -> None:
    client = AdminClient(other_server, "token")
    with pytest.raises(ServinglibError, match=r"check admin\.port in servinglib\.yaml"):
        client.status()
