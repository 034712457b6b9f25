"""The asyncio worker's answers leave in one write: head and body together."""

from __future__ import annotations

from servinglib.serve.one_write import OneWriteTransport


class RecordingTransport:
    """A transport that keeps what it was asked to send."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.sent.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed


HEAD = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n"


def test_the_head_waits_for_the_body_and_both_leave_in_one_write() -> None:
    transport = RecordingTransport()
    one = OneWriteTransport(transport)
    one.write(HEAD)
    assert transport.sent == []
    one.write(b"{}")
    assert transport.sent == [HEAD + b"{}"]


def test_an_interim_100_continue_is_sent_at_once() -> None:
    transport = RecordingTransport()
    one = OneWriteTransport(transport)
    one.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    assert transport.sent == [b"HTTP/1.1 100 Continue\r\n\r\n"]
    one.write(HEAD)
    one.write(b"{}")
    assert transport.sent[1:] == [HEAD + b"{}"]


def test_later_body_pieces_pass_through_even_when_they_look_like_a_head() -> None:
    transport = RecordingTransport()
    one = OneWriteTransport(transport)
    one.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
    one.write(b"5\r\nHTTP/\r\n")
    one.write(b"HTTP/1.1 200 looks like a head\r\n")
    assert len(transport.sent) == 2
    assert transport.sent[1] == b"HTTP/1.1 200 looks like a head\r\n"


def test_closing_sends_a_held_head_first() -> None:
    transport = RecordingTransport()
    one = OneWriteTransport(transport)
    one.write(HEAD)
    one.close()
    assert transport.sent == [HEAD]
    assert transport.closed
    assert one.is_closing()
