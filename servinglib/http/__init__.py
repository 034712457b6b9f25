"""The HTTP layer: the only code that imports Flask."""

from servinglib.http.app import create_app, create_asgi_app

__all__ = ["create_app", "create_asgi_app"]
