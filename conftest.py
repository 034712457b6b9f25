"""Fixtures for every test of the repository (tests/ and the examples)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from servinglib.monitoring.logs import flush_logs


@pytest.fixture(autouse=True)
def _log_lines_written_inside_the_test() -> Iterator[None]:
    """The log writer batches lines for a few ms: write a test's lines while it is captured."""
    yield
    flush_logs()
