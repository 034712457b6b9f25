"""Finding where a request ends from its bytes (gthread's main thread reads whole requests)."""

from __future__ import annotations

import pytest

from servinglib.serve.request_framing import RequestFraming, head_end

HEAD = b"POST /infer?x=1 HTTP/1.1\r\nHost: x\r\n"


def test_head_end_waits_for_the_blank_line() -> None:
    assert head_end(HEAD) == -1
    assert head_end(HEAD + b"\r\n") == len(HEAD) + 2
    assert head_end(b"GET / HTTP/1.1\nHost: x\n\n") == len(b"GET / HTTP/1.1\nHost: x\n\n")


def test_a_content_length_body_is_complete_once_every_byte_arrived() -> None:
    head = HEAD + b"Content-Length: 5\r\n\r\n"
    framing = RequestFraming.of_head(head)
    assert (framing.path, framing.length, framing.has_body) == (b"/infer", 5, True)
    assert not framing.complete(head + b"abcd")
    assert framing.complete(head + b"abcde")
    assert framing.body_bytes(head + b"abc") == 3


def test_no_body_is_complete_with_its_head() -> None:
    head = b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n"
    framing = RequestFraming.of_head(head)
    assert not framing.has_body
    assert framing.complete(head)


def test_chunks_are_followed_as_they_arrive_up_to_the_last_one_and_its_trailers() -> None:
    head = HEAD + b"Transfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n"
    framing = RequestFraming.of_head(head)
    assert framing.chunked
    assert framing.expects_continue
    buffer = bytearray(head)
    for piece in (
        b"4;ext=1\r\nab",
        b"cd\r\n",
        b"10\r\n" + b"x" * 16 + b"\r\n",
        b"0\r\n",
        b"T: 1\r\n",
    ):
        buffer += piece
        assert not framing.complete(buffer)
    buffer += b"\r\n"
    assert framing.complete(buffer)


@pytest.mark.parametrize(
    "head",
    [
        HEAD + b"Content-Length: 5\r\nContent-Length: 6\r\n\r\n",
        HEAD + b"Content-Length: -1\r\n\r\n",
        HEAD + b"Transfer-Encoding: gzip, chunked\r\n\r\n",
        HEAD + b"Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
    ],
)
def test_an_unusual_framing_is_left_to_gunicorn_at_once(head: bytes) -> None:
    framing = RequestFraming.of_head(head)
    assert framing.undecided
    assert framing.complete(head)  # handed over as it is: gunicorn's parser refuses it


def test_a_bad_chunk_is_left_to_gunicorn() -> None:
    head = HEAD + b"Transfer-Encoding: chunked\r\n\r\n"
    framing = RequestFraming.of_head(head)
    assert framing.complete(head + b"zz\r\n")
    framing = RequestFraming.of_head(head)
    assert framing.complete(head + b"2\r\nabXY")  # data not followed by its line end


def test_100_continue_is_ignored_for_http_1_0() -> None:
    head = b"POST /infer HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n"
    assert not RequestFraming.of_head(head).expects_continue


def test_an_answered_100_continue_is_renamed_in_place() -> None:
    head = bytearray(HEAD + b"EXPECT: 100-continue\r\nContent-Length: 3\r\n\r\nab")
    framing = RequestFraming.of_head(head)
    assert framing.expects_continue
    framing.answer_continue(head)
    assert b"X-100c: 100-continue\r\n" in head
    assert not framing.expects_continue
    assert not framing.complete(head)
    assert framing.complete(head + b"c")
