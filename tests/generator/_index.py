"""A package index on 127.0.0.1 that serves this checkout's wheel, as an internal index would.

servinglib is not on PyPI: a generated repository that depends on a version range gets it
from this index (PEP 503 "simple" pages), every other package from the usual index.
"""

from __future__ import annotations

import functools
import html
import http.server
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from servinglib_generator.source import build_wheel, compatible_range

from tests.generator._repos import REPO_ROOT


@dataclass(frozen=True)
class LocalIndex:
    """``url``: the index's simple/ URL; ``requirement``: the range the wheel satisfies."""

    url: str
    wheel: Path
    requirement: str


@contextmanager
def local_index(directory: Path) -> Iterator[LocalIndex]:
    """Build the wheel, lay out ``simple/servinglib/`` and serve it until the block ends."""
    wheel = build_wheel(REPO_ROOT, directory / "simple" / "servinglib")
    version = wheel.name.split("-")[1]
    links = f'<a href="{html.escape(wheel.name)}">{html.escape(wheel.name)}</a>'
    (directory / "simple" / "servinglib" / "index.html").write_text(
        f"<!DOCTYPE html><html><body>{links}</body></html>\n"
    )
    (directory / "simple" / "index.html").write_text(
        '<!DOCTYPE html><html><body><a href="servinglib/">servinglib</a></body></html>\n'
    )
    handler = functools.partial(_QuietHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        port = server.server_address[1]
        yield LocalIndex(f"http://127.0.0.1:{port}/simple", wheel, compatible_range(version))
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        """Keep pip's requests out of the test output."""
