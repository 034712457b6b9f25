"""gunicorn's parser refusals keep gunicorn's status, worded without its HTML page."""

from __future__ import annotations

import pytest
from gunicorn.http import errors

from servinglib.serve.refusals import INTERNAL, refusal


@pytest.mark.parametrize(
    ("error", "status", "message"),
    [
        (
            errors.InvalidRequestLine("GET /\x01"),
            "400 Bad Request",
            "Invalid HTTP request line: 'GET /\\x01'",
        ),
        (errors.InvalidRequestMethod("G<T"), "400 Bad Request", "Invalid HTTP method: 'G<T'"),
        (
            errors.LimitRequestLine(9000, 4094),
            "414 URI Too Long",
            "Request Line is too large (9000 > 4094)",
        ),
        (
            errors.LimitRequestHeaders("more than 100 headers"),
            "431 Request Header Fields Too Large",
            "Error parsing headers: 'more than 100 headers'",
        ),
        (
            errors.UnsupportedTransferCoding("gzip"),
            "501 Not Implemented",
            "Unsupported transfer coding: 'gzip'",
        ),
        (errors.ForbiddenProxyRequest("10.0.0.1"), "403 Forbidden", "Request forbidden"),
        (errors.InvalidChunkSize("zz"), "400 Bad Request", "Invalid chunk size: 'zz'"),
        (errors.ConfigurationProblem("no"), "500 Internal Server Error", INTERNAL),
        (RuntimeError("a bug"), "500 Internal Server Error", INTERNAL),
    ],
)
def test_each_refusal_keeps_gunicorns_status_and_words_its_message(
    error: BaseException, status: str, message: str
) -> None:
    assert refusal(error) == (status, message)
