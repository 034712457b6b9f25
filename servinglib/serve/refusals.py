"""What gunicorn's HTTP parser refuses, as a status and a plain message (no HTML page).

gunicorn's own ``Worker.handle_error`` answers its parser's exceptions with an HTML page;
the gthread worker answers them in JSON instead, from this table of the same verdicts:
the status gunicorn gives each exception and its message (which names what was wrong).
"""

from __future__ import annotations

import ssl

from gunicorn.http import errors

__all__ = ["refusal"]

_STATUS: tuple[tuple[type[BaseException] | tuple[type[BaseException], ...], str], ...] = (
    (
        (
            errors.InvalidResponseHeader,
            errors.InvalidResponseHeaderName,
            errors.ConfigurationProblem,
        ),
        "500 Internal Server Error",
    ),
    (errors.LimitRequestLine, "414 URI Too Long"),
    (errors.LimitRequestHeaders, "431 Request Header Fields Too Large"),
    (errors.UnsupportedTransferCoding, "501 Not Implemented"),
    (errors.ExpectationFailed, "417 Expectation Failed"),
    ((errors.ForbiddenProxyRequest, ssl.SSLError), "403 Forbidden"),
    (
        (
            errors.InvalidRequestLine,
            errors.InvalidRequestMethod,
            errors.InvalidHTTPVersion,
            errors.InvalidHeader,
            errors.InvalidHeaderName,
            errors.InvalidProxyLine,
            errors.InvalidSchemeHeaders,
            errors.ObsoleteFolding,
            errors.InvalidChunkSize,
            errors.ChunkMissingTerminator,
            errors.InvalidChunkExtension,
            errors.InvalidH2CPreface,
        ),
        "400 Bad Request",
    ),
)
_PREFIX: tuple[tuple[type[BaseException], str], ...] = (
    (errors.LimitRequestHeaders, "Error parsing headers: '{}'"),
    (errors.InvalidProxyLine, "'{}'"),
)
INTERNAL = "internal server error; see the server log"


def refusal(error: BaseException) -> tuple[str, str]:
    """The status line (``"400 Bad Request"``) and message of what gunicorn refused.

    Anything not in gunicorn's table is a server error: ``500`` and :data:`INTERNAL`.
    """
    status = next(
        (s for kinds, s in _STATUS if isinstance(error, kinds)), "500 Internal Server Error"
    )
    if status.startswith("500"):
        return status, INTERNAL
    if isinstance(error, errors.ForbiddenProxyRequest):
        return status, "Request forbidden"
    template = next((t for kind, t in _PREFIX if isinstance(error, kind)), "{}")
    return status, template.format(error) or status.split(" ", 1)[1].lower()
