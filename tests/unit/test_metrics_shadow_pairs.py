"""Configured shadow pairs have a dropped-copies series from the start, at 0."""

from __future__ import annotations

import shutil
from pathlib import Path

from servinglib.config.spec import load_config
from servinglib.monitoring.metrics import ServingMetrics

FIXTURE = Path(__file__).parent.parent / "fixtures" / "service"


def test_dropped_counter_starts_at_zero_for_each_configured_pair(tmp_path: Path) -> None:
    text = (FIXTURE / "servinglib.yaml").read_text()
    text = text.replace(
        'default_version: "2"',
        'default_version: "2"\n    traffic: {"2": 90, "4": 10}\n    shadow:\n      - version: "1"',
        1,
    )
    (tmp_path / "servinglib.yaml").write_text(text)
    shutil.copytree(FIXTURE / "models", tmp_path / "models")
    metrics = ServingMetrics()
    metrics.declare_shadow_pairs(load_config(tmp_path / "servinglib.yaml", environ={}))
    body = metrics.render()[0].decode()
    series = sorted(
        line for line in body.splitlines() if line.startswith("servinglib_shadow_dropped_total{")
    )
    assert series == [
        'servinglib_shadow_dropped_total{model="scorer",primary_version="2",shadow_version="1"} 0.0',
        'servinglib_shadow_dropped_total{model="scorer",primary_version="4",shadow_version="1"} 0.0',
    ]
