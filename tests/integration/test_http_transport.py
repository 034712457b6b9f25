"""Raw-socket HTTP against both worker classes: chunked bodies, transfer codings, slashes,
statuses and headers. Every answer is JSON; none is a 5xx."""

from __future__ import annotations

import json
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import LiveServer, launch, stop

pytestmark = pytest.mark.integration

FIXTURE = Path(__file__).parent.parent / "fixtures" / "service"
LIMIT = 64 * 1024
V2 = b'{"inputs":[{"name":"x","shape":[1],"datatype":"FP64","data":[1.0]}]}'
INFER = b'{"model_id":"scorer","features":{"x":1}}'


@pytest.fixture(scope="module", params=["gthread", "asyncio"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveServer]:
    """The fixture service with a 64 KiB body limit, under one worker class."""
    directory = tmp_path_factory.mktemp(request.param)
    shutil.copytree(FIXTURE / "models", directory / "models")
    text = (FIXTURE / "servinglib.yaml").read_text()
    text = text.replace("  threads: 4\n", f"  threads: 4\n  max_request_body_bytes: {LIMIT}\n")
    (directory / "servinglib.yaml").write_text(text)
    live = launch(
        directory / "servinglib.yaml", directory, "--workers", "1", "--worker", request.param
    )
    yield live
    stop(live.process)


def exchange(server: LiveServer, raw: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send ``raw`` on a new connection; the status, headers (lower-case) and body."""
    port = int(server.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(raw)
        data = read_head(sock)
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0"))
        while len(body) < length:
            chunk = sock.recv(65536)
            assert chunk, "connection closed inside the body"
            body += chunk
    return int(lines[0].split()[1]), headers, body


def read_head(sock: socket.socket, data: bytes = b"") -> bytes:
    """What the socket sends (after ``data``) up to the end of a response head, at least."""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed without an answer: {data!r}"
        data += chunk
    return data


def post(path: str, body: bytes, *headers: str) -> bytes:
    head = "".join(f"{h}\r\n" for h in headers)
    return (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{head}\r\n".encode()
        + body
    )


def chunked(body: bytes, pieces: int = 3) -> bytes:
    step = max(1, len(body) // pieces)
    out = b""
    for start in range(0, len(body), step):
        part = body[start : start + step]
        out += b"%x\r\n%s\r\n" % (len(part), part)
    return out + b"0\r\n\r\n"


def assert_json(
    status: int, headers: dict[str, str], body: bytes, expected: int
) -> dict[str, object]:
    assert status == expected, body
    assert headers["content-type"].startswith("application/json"), headers
    document: dict[str, object] = json.loads(body)
    assert "error" in document or expected == 200
    return document


def test_chunked_bodies_are_read_on_both_protocols(server: LiveServer) -> None:
    te = "Transfer-Encoding: chunked"
    status, headers, body = exchange(server, post("/v2/models/echo/infer", chunked(V2), te))
    assert assert_json(status, headers, body, 200)["outputs"]
    status, headers, body = exchange(server, post("/infer", chunked(INFER), te))
    assert assert_json(status, headers, body, 200)["output"] == {"score": 3.0}


@pytest.mark.parametrize("path", ["/infer", "/v2/models/echo/infer", "/v2/repository/index"])
def test_a_malformed_chunked_body_is_a_json_400(server: LiveServer, path: str) -> None:
    raw = post(path, b"zz\r\nabc\r\n0\r\n\r\n", "Transfer-Encoding: chunked")
    assert_json(*exchange(server, raw), 400)


@pytest.mark.parametrize("path", ["/infer", "/v2/models/echo/infer"])
def test_the_body_limit_holds_while_a_chunked_body_is_read(server: LiveServer, path: str) -> None:
    raw = post(path, chunked(b" " * (LIMIT + 10), pieces=8), "Transfer-Encoding: chunked")
    error = assert_json(*exchange(server, raw), 413)["error"]
    assert str(LIMIT) in str(error)


@pytest.mark.parametrize("coding", ["gzip, chunked", "deflate", "chunked, chunked"])
@pytest.mark.parametrize("path", ["/infer", "/v2/models/echo/infer", "/v2/repository/index"])
def test_unknown_transfer_codings_are_refused_with_json(
    server: LiveServer, path: str, coding: str
) -> None:
    raw = post(path, chunked(INFER), f"Transfer-Encoding: {coding}")
    status, headers, body = exchange(server, raw)
    assert status in (400, 501), body  # the HTTP parser or servinglib refuses it
    assert_json(status, headers, body, status)


@pytest.mark.parametrize("path", ["//readyz", "/v2//models//scorer", "/v2//models/scorer/ready"])
def test_no_redirect_a_json_404(server: LiveServer, path: str) -> None:
    raw = f"GET {path} HTTP/1.1\r\nHost: attacker.example\r\nConnection: close\r\n\r\n".encode()
    status, headers, body = exchange(server, raw)
    assert status in (200, 404), body  # a server may read "//readyz" as "/readyz"
    assert "location" not in headers
    assert headers["content-type"].startswith("application/json")


def test_a_malformed_request_line_is_answered_in_json(server: LiveServer) -> None:
    for raw in (b"GET /\x01 HTTP/1.1\r\n\r\n", b"POST /infer HTTP/1.1\r\nBad Header\r\n\r\n"):
        status, headers, body = exchange(server, raw)
        assert_json(status, headers, body, 400)


def test_statuses_are_json_and_the_server_header_is_one_policy(server: LiveServer) -> None:
    raw = b"PUT /infer HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
    status, headers, body = exchange(server, raw)
    assert_json(status, headers, body, 405)
    assert headers["server"] == "gunicorn"
    status, headers, _ = exchange(server, b"GET /livez HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status == 200
    assert headers["server"] == "gunicorn"


def test_invalid_utf8_is_refused(server: LiveServer) -> None:
    bodies = {
        "/infer": INFER.replace(b"scorer", b"\xed\xa0\x80"),  # an encoded surrogate
        "/v2/models/echo/infer": V2.replace(b'"x"', b'"\xed\xa0\x80"'),
    }
    for path, body in bodies.items():
        raw = post(path, body, f"Content-Length: {len(body)}")
        error = assert_json(*exchange(server, raw), 400)["error"]
        assert "UTF-8" in str(error), error


@pytest.mark.parametrize("path", ["/infer", "/v2/models/echo/infer", "/v2/repository/index"])
def test_expect_100_continue_gets_the_interim_answer_then_the_whole_answer(
    server: LiveServer, path: str
) -> None:
    """curl sends ``Expect: 100-continue`` for bodies over 1 KiB and waits for the 100."""
    body = INFER if path == "/infer" else V2
    port = int(server.url.rsplit(":", 1)[1])
    head = post(path, b"", "Expect: 100-continue", f"Content-Length: {len(body)}")
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(head)
        data = read_head(sock)
        interim, _, rest = data.partition(b"\r\n\r\n")
        assert interim.startswith(b"HTTP/1.1 100 "), data
        sock.sendall(body)
        data = read_head(sock, rest)
    assert data.startswith(b"HTTP/1.1 200 "), data


def _sized(path: str, body: bytes) -> bytes:
    return post(path, body, f"Content-Length: {len(body)}", "Connection: close")


def test_an_unknown_path_names_the_routes_in_json(server: LiveServer) -> None:
    status, headers, body = exchange(server, _sized("/predict", INFER))
    error = str(assert_json(status, headers, body, 404)["error"])
    assert "POST /infer" in error
    assert "POST /v2/models/{model}/infer" in error
    assert "/openapi.json" in error


def test_a_body_of_the_other_protocol_gets_a_hint(server: LiveServer) -> None:
    status, headers, body = exchange(server, _sized("/infer", V2))
    error = str(assert_json(status, headers, body, 400)["error"])
    assert error.startswith("this looks like an Open Inference (v2) request (it has `inputs`")
    assert "send it to POST /v2/models/{model}/infer" in error
    status, headers, body = exchange(server, _sized("/v2/models/scorer/infer", INFER))
    error = str(assert_json(status, headers, body, 400)["error"])
    assert "this looks like an /infer request (it has `model_id` or `features`)" in error
