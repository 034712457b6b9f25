"""How an Open Inference body is framed: JSON, or a JSON header followed by binary tensors.

Triton's rule, followed here: the ``Inference-Header-Content-Length`` header alone decides.
Present, the body is that many bytes of JSON followed by binary tensor data; absent, the
whole body is JSON. ``Content-Type`` is not consulted: aiohttp (``tritonclient.http.aio``)
labels JSON bodies ``application/octet-stream``, other clients send none at all.
"""

from __future__ import annotations

from servinglib.errors import InvalidInputError

__all__ = ["HEADER_LENGTH", "json_header_length"]

HEADER_LENGTH = "Inference-Header-Content-Length"


def json_header_length(raw: str | None) -> int | None:
    """The JSON header's length in bytes from the header's value, or None for all-JSON.

    Raises:
        InvalidInputError: the value is not a non-negative integer.
    """
    if raw is None:
        return None
    try:
        length = int(raw)
    except ValueError:
        raise InvalidInputError(f"{HEADER_LENGTH} must be an integer, got {raw!r}") from None
    if length < 0:
        raise InvalidInputError(f"{HEADER_LENGTH} must be >= 0, got {length}")
    return length
