"""servinglib.serve.ready: the line the master prints once every worker has loaded."""

from __future__ import annotations

from servinglib.serve.ready import format_ready


def test_ready_line_counts_models_and_ready_versions() -> None:
    text = format_ready(
        "http://127.0.0.1:8080",
        2,
        {
            "breast-cancer": {"default": "2", "ready": ["1", "2"], "failed": []},
            "scorer": {"default": "2", "ready": ["1", "2"], "failed": ["3", "4"]},
        },
    )
    assert text.splitlines() == [
        "ready: 2 models, 4 versions on http://127.0.0.1:8080 (2 workers)",
        "  breast-cancer  READY 1, 2 (default 2)",
        "  scorer         READY 1, 2 (default 2); FAILED 3, 4 (see the log above)",
    ]


def test_a_failed_default_version_is_not_called_ready() -> None:
    text = format_ready(
        "http://127.0.0.1:8080", 1, {"eta": {"default": "1", "ready": [], "failed": ["1"]}}
    )
    first = text.splitlines()[0]
    assert first.startswith("NOT READY (default version FAILED: eta): 1 models, 0 versions")
    assert "ready:" not in text
