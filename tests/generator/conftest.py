"""Fixtures of the generator tests: repositories rendered once per session."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.generator._repos import needs_runtime, render


@pytest.fixture(scope="session")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """``rendered(runtime)``: a repository rendered once per session; treat it as read-only."""
    output = tmp_path_factory.mktemp("rendered")
    cache: dict[str, Path] = {}

    def get(runtime: str) -> Path:
        needs_runtime(runtime)
        if runtime not in cache:
            cache[runtime] = render(output, runtime, service=f"eta-{runtime}")
        return cache[runtime]

    return get
