"""Is a TCP port free? Asked before gunicorn binds, so a taken port gets a clear message."""

from __future__ import annotations

import errno
import socket

__all__ = ["port_is_free"]


def port_is_free(host: str, port: int) -> bool:
    """True when nothing listens on ``host:port`` (binds and releases it at once).

    Binds as gunicorn does (``SO_REUSEADDR``), so a port held only by connections in
    TIME_WAIT counts as free. A host that is not an address of this machine raises.

    Example::

        if not port_is_free("127.0.0.1", 8080):
            print("port 8080 is taken")
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as e:
            if e.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
    return True
