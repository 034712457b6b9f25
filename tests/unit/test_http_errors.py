"""servinglib.http.errors.describe: one answer per error, whatever the transport."""

from __future__ import annotations

import json
import logging

import pytest
from werkzeug.exceptions import MethodNotAllowed

from servinglib.errors import (
    DeadlineExceededError,
    InvalidInputError,
    ModelNotFoundError,
    ModelNotReadyError,
    OverloadedError,
    PredictionError,
)
from servinglib.http.errors import HttpError, describe, too_large
from servinglib.http.flask_glue import from_werkzeug


@pytest.mark.parametrize(
    ("error", "status", "outcome", "headers"),
    [
        (InvalidInputError("features.x: bad"), 400, "invalid_input", ()),
        (ModelNotFoundError("ghost", ["eta"]), 404, "not_found", ()),
        (
            ModelNotReadyError("eta", "3", "FAILED", "load() raised"),
            503,
            "not_ready",
            (("Retry-After", "5"),),
        ),
        (OverloadedError("queue full"), 503, "shed", (("Retry-After", "1"),)),
        (DeadlineExceededError("late"), 504, "deadline_exceeded", ()),
        (PredictionError("eta", "2", "abc123"), 500, "model_error", ()),
        (too_large(2048), 413, "too_large", ()),
        (HttpError(405, "no", (("Allow", "POST"),)), 405, "invalid_input", (("Allow", "POST"),)),
    ],
)
def test_each_error_has_one_status_outcome_and_json_body(
    error: Exception, status: int, outcome: str, headers: tuple[tuple[str, str], ...]
) -> None:
    described = describe(error)
    assert (described.status, described.outcome, described.headers) == (status, outcome, headers)
    assert json.loads(described.body) == {"error": str(error)}


def test_the_version_asked_to_answer_is_kept_for_metrics() -> None:
    assert describe(PredictionError("eta", "2", "abc123")).version == "2"
    assert describe(ModelNotReadyError("eta", "3", "FAILED", "x")).version == "3"
    assert describe(InvalidInputError("bad")).version == ""


def test_flask_http_errors_keep_their_headers() -> None:
    described = describe(from_werkzeug(MethodNotAllowed(valid_methods=["POST"]), 1024))
    assert described.status == 405
    assert ("Allow", "POST") in described.headers


def test_an_unexpected_error_is_logged_under_the_id_the_answer_names(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.ERROR, logger="servinglib.http"):
        described = describe(RuntimeError("secret detail"))
    assert (described.status, described.outcome) == (500, "server_error")
    message = json.loads(described.body)["error"]
    assert "secret" not in message
    error_id = message.rsplit(" ", 1)[1]
    assert any(error_id in record.getMessage() for record in caplog.records)
