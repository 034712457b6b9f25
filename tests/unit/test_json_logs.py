"""JSON logs: written off the request thread, none lost, in order per thread."""

from __future__ import annotations

import ast
import json
import logging
import sys

import pytest

from servinglib.monitoring.logs import JsonFormatter, TextFormatter


def test_log_lines_from_many_threads_are_all_written_in_order_per_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Lines are written by a background thread; flush_logs() waits for every queued line."""
    import io
    import threading

    from servinglib.monitoring.logs import configure_logging, flush_logs

    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    configure_logging("info")
    log = logging.getLogger("servinglib.test")

    def emit(thread: int) -> None:
        for i in range(250):
            log.info("line", extra={"emitter": thread, "i": i})

    threads = [threading.Thread(target=emit, args=(t,)) for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    flush_logs()
    entries = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert len(entries) == 2000
    for t in range(8):
        assert [e["i"] for e in entries if e["emitter"] == t] == list(range(250))


class _Terminal:
    """A stderr that says it is a terminal and keeps what is written."""

    def __init__(self) -> None:
        import io

        self.buffer = io.StringIO()

    def isatty(self) -> bool:
        return True

    def write(self, text: str) -> int:
        return self.buffer.write(text)

    def flush(self) -> None:
        pass


@pytest.mark.parametrize("log_format", ["text", "auto"])
def test_text_format_is_one_readable_line_and_the_default_on_a_terminal(
    monkeypatch: pytest.MonkeyPatch, log_format: str
) -> None:
    from servinglib.monitoring.logs import configure_logging, flush_logs

    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    configure_logging("info", log_format)
    log = logging.getLogger("servinglib.lifecycle.registry")
    log.info("model %r version %r READY", "eta", "1", extra={"model": "eta"})
    try:
        raise KeyError("base_s")
    except KeyError:
        log.exception("load failed")
    flush_logs()
    lines = terminal.buffer.getvalue().splitlines()
    assert lines[0].endswith(" info    registry   model 'eta' version '1' READY  model=eta")
    assert lines[1].endswith(" error   registry   load failed")
    assert lines[2] == "Traceback (most recent call last):"
    assert lines[-1] == "KeyError: 'base_s'"


def test_auto_is_json_when_stderr_is_not_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from servinglib.monitoring.logs import configure_logging, flush_logs

    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    configure_logging("info", "auto")
    logging.getLogger("servinglib.test").info("hello")
    flush_logs()
    assert json.loads(stream.getvalue())["message"] == "hello"


def test_other_libraries_warnings_are_json_lines_and_their_info_is_quiet(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import io

    from servinglib.monitoring.logs import configure_logging, flush_logs

    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    configure_logging("info", "json")
    exporter = logging.getLogger("opentelemetry.exporter.otlp.proto.http.trace_exporter")
    exporter.info("not shown")
    exporter.warning("Transient error %s encountered while exporting span batch", "Conflict")
    logging.getLogger("urllib3.connectionpool").warning("Connection pool is full")
    configure_logging("info", "json")  # again (each worker does): still one line each
    logging.getLogger("botocore.credentials").error("no credentials")
    flush_logs()
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [(line["level"], line["message"]) for line in lines] == [
        ("warning", "Transient error Conflict encountered while exporting span batch"),
        ("warning", "Connection pool is full"),
        ("error", "no credentials"),
    ]


def _record_of_a_chained_error() -> logging.LogRecord:
    try:
        try:
            features: dict[str, float] = {}
            print(features["missing"])
        except KeyError as e:
            raise ValueError("predict failed") from e
    except ValueError:
        return logging.LogRecord("t", logging.ERROR, __file__, 1, "boom", (), sys.exc_info())
    raise AssertionError("unreachable")


@pytest.mark.parametrize("formatter", [JsonFormatter(), TextFormatter()])
def test_tracebacks_are_formatted_without_parsing_source(
    formatter: logging.Formatter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Python 3.11 places ``^^^`` markers by parsing with ``ast``, which is not thread-safe
    before 3.11.8 (a worker building its routes on the main thread could get SystemError)."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("formatting a traceback parsed source with ast")

    record = _record_of_a_chained_error()
    with monkeypatch.context() as patched:
        patched.setattr(ast, "parse", refuse)
        text = formatter.format(record)
    assert "KeyError: 'missing'" in text
    assert "direct cause" in text
    assert "ValueError: predict failed" in text
    assert "^^^" not in text
