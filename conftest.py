"""Fixtures for every test of the repository (tests/ and the examples)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from servinglib.monitoring.logs import flush_logs

# Services kept for the whole run, each inside the one pytest process that starts it (moto's
# request log, the OTLP receiver's spans, Kafka, Chromium), or shared by every process
# (PostgreSQL's one database: mark those tests ``services``).
SESSION_SERVICES = frozenset({"s3_store", "kafka_broker", "otlp_receiver", "chromium"})


@pytest.fixture(autouse=True)
def _log_lines_written_inside_the_test() -> Iterator[None]:
    """The log writer batches lines for a few ms: write a test's lines while it is captured."""
    yield
    flush_logs()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under ``pytest -n N --dist loadgroup`` (bin/test), send each file whole to one worker.

    A file's module-scoped servers then start once, and every file that uses a session
    service runs on the same worker, so each service starts once per run.
    """
    if not config.pluginmanager.hasplugin("xdist"):
        return
    uses_services: set[str] = set()
    for item in items:
        if SESSION_SERVICES.intersection(item.fixturenames) or item.get_closest_marker("services"):
            uses_services.add(str(item.path))
    for item in items:
        group = "services" if str(item.path) in uses_services else str(item.path)
        item.add_marker(pytest.mark.xdist_group(group))
