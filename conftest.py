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


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under ``pytest -n N --dist loadgroup`` (bin/test), send each file whole to one worker.

    A file's module-scoped servers then start once, and every file that uses a session
    service runs on the same worker, so each service starts once per run. The long groups
    are handed out first (bin/test turns off xdist's own order, by test count): the
    services, then files that start servers, then the rest, with the many short unit-test
    files last to even out the end of the run.
    """
    if not config.pluginmanager.hasplugin("xdist"):
        return
    uses_services: set[str] = set()
    starts_servers: set[str] = set()
    for item in items:
        fixtures = getattr(item, "fixturenames", ())  # doctest items have none
        if SESSION_SERVICES.intersection(fixtures) or item.get_closest_marker("services"):
            uses_services.add(str(item.path))
        if item.get_closest_marker("integration"):
            starts_servers.add(str(item.path))

    def rank(item: pytest.Item) -> int:
        path = str(item.path)
        if path in uses_services:
            return 0
        if path in starts_servers:
            return 1
        return 3 if "unit" in item.path.parts else 2

    loadgroup = getattr(config.option, "loadgroup", False)  # xdist sets it in its workers
    for item in items:
        group = "services" if str(item.path) in uses_services else item.nodeid.split("::")[0]
        item.add_marker(pytest.mark.xdist_group(group))
        if loadgroup and hasattr(item, "_id"):
            # xdist (3.8) tells the group by an "@group" suffix it writes to item._nodeid;
            # pytest 9 keeps the node id in item._id instead, so write it there.
            from _pytest.nodeid import coerce_node_id

            item._id = coerce_node_id(f"{item.nodeid}@{group}")
    items.sort(key=rank)  # stable: a file's tests keep their order
