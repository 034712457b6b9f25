"""Where an HTTP/1.1 request ends, learnt from its bytes as they arrive (gthread's main thread).

The gthread worker's main thread reads a whole request (head and body) before it hands the
connection to a thread, so a thread never waits for a slow client. It does not parse the
request: it only finds its end, from ``Content-Length`` or the chunked framing, and leaves
anything unusual (both framings, an invalid length, a bad chunk) to gunicorn's parser on
the thread, which refuses it properly.

Example::

    framing = RequestFraming.of_head(head_bytes)   # once the blank line has arrived
    framing.complete(buffer)                       # True once the body is all there
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["RequestFraming", "head_end"]

_MAX_CHUNK_LINE = 4096  # a chunk-size line (with extensions) longer than this is left to gunicorn


def head_end(buffer: bytes | bytearray) -> int:
    """The offset just past the head's blank line, or -1 while it has not arrived."""
    end = buffer.find(b"\r\n\r\n")
    if end >= 0:
        return end + 4
    end = buffer.find(b"\n\n")  # bare LF line ends, which gunicorn tolerates
    return end + 2 if end >= 0 else -1


@dataclass
class RequestFraming:
    """One request's framing: where its head ends and how its body is delimited.

    ``length``: the declared body length (None: chunked, or a framing left to gunicorn).
    ``undecided``: the head is unusual; hand the request over as it is.
    """

    head_size: int
    path: bytes
    length: int | None = 0
    chunked: bool = False
    expects_continue: bool = False
    undecided: bool = False
    _scanned: int = field(default=0, repr=False)  # chunked: the offset of the next chunk line
    _done: bool = field(default=False, repr=False)

    @classmethod
    def of_head(cls, buffer: bytes | bytearray) -> RequestFraming:
        """The framing of the request whose head starts ``buffer`` (the head is complete)."""
        size = head_end(buffer)
        lines = bytes(buffer[:size]).split(b"\n")
        parts = lines[0].split(b" ")
        path = parts[1].split(b"?", 1)[0] if len(parts) == 3 else b""
        framing = cls(size, path, _scanned=size)
        lengths: list[bytes] = []
        codings: list[bytes] = []
        for line in lines[1:]:
            name, colon, value = line.partition(b":")
            if not colon:
                continue
            key = name.strip().lower()
            if key == b"content-length":
                lengths.append(value.strip())
            elif key == b"transfer-encoding":
                codings.append(value.strip().lower())
            elif key == b"expect" and value.strip().lower() == b"100-continue":
                framing.expects_continue = parts[-1].strip() == b"HTTP/1.1"
        if codings:
            framing.chunked = codings == [b"chunked"] and not lengths
            framing.undecided = not framing.chunked
            framing.length = None
        elif len(lengths) > 1 or (lengths and not lengths[0].isdigit()):
            framing.undecided, framing.length = True, None
        elif lengths:
            framing.length = int(lengths[0])
        return framing

    def answer_continue(self, buffer: bytearray) -> None:
        """Mark ``Expect: 100-continue`` answered: the field is renamed ``X-100c`` in place
        (same length, so every offset holds), and gunicorn's parser sends no second 100."""
        lowered = bytes(buffer[: self.head_size]).lower()
        start = lowered.find(b"\nexpect:")
        while start >= 0:
            buffer[start + 1 : start + 7] = b"X-100c"
            start = lowered.find(b"\nexpect:", start + 1)
        self.expects_continue = False

    @property
    def has_body(self) -> bool:
        """Whether body bytes follow the head (a length over 0, or chunks)."""
        return self.chunked or bool(self.length)

    def body_bytes(self, buffer: bytes | bytearray) -> int:
        """How many body bytes of ``buffer`` arrived (framing included)."""
        return max(0, len(buffer) - self.head_size)

    def complete(self, buffer: bytes | bytearray) -> bool:
        """Whether the whole request is in ``buffer`` (or its framing must go to gunicorn)."""
        if self.undecided or self._done:
            return True
        if not self.chunked:
            return len(buffer) >= self.head_size + (self.length or 0)
        self._done = self._scan_chunks(buffer)
        return self._done

    def _scan_chunks(self, buffer: bytes | bytearray) -> bool:
        """Follow the chunks from where the last call stopped; True at the end or on an error."""
        while True:
            line_end = buffer.find(b"\n", self._scanned, self._scanned + _MAX_CHUNK_LINE)
            if line_end < 0:
                return len(buffer) - self._scanned > _MAX_CHUNK_LINE  # a line too long: give up
            size_text = bytes(buffer[self._scanned : line_end]).split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                return True  # not a chunk: gunicorn answers 400
            if size == 0:  # the last chunk, then trailers up to a blank line
                return self._trailers_end(buffer, line_end + 1)
            after = line_end + 1 + size
            if len(buffer) < after + 2:
                return False
            crlf_end = buffer.find(b"\n", after, after + 2)
            if crlf_end < 0:
                return True  # the chunk's data is not followed by its line end
            self._scanned = crlf_end + 1

    @staticmethod
    def _trailers_end(buffer: bytes | bytearray, start: int) -> bool:
        position = start
        while True:
            line_end = buffer.find(b"\n", position)
            if line_end < 0:
                return False
            if buffer[position:line_end].strip() == b"":
                return True
            position = line_end + 1
