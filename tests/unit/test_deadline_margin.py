"""The server's deadline under Envoy: Envoy's expected timeout less the configured margin."""

from __future__ import annotations

import pytest

from servinglib.config.spec import ServerConfig
from servinglib.http._payload import envoy_timeout_ms


@pytest.mark.parametrize(
    ("raw", "margin", "expected"),
    [
        (None, 50, None),
        ("1000", 0, 1000.0),
        ("1000", 50, 950.0),
        ("30", 50, 1.0),  # the margin is spent: refuse at once rather than wait
        ("0", 50, None),  # Envoy sends 0 for a route without a timeout
        ("soon", 50, None),
    ],
)
def test_margin_is_taken_off_envoys_timeout(
    raw: str | None, margin: float, expected: float | None
) -> None:
    assert envoy_timeout_ms(raw, margin) == expected


def test_default_margin() -> None:
    assert ServerConfig().deadline_margin_ms == 50
