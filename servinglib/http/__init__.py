"""The HTTP layer: the only code that imports Flask."""

from servinglib.http.app import create_app, create_app_from_config

__all__ = ["create_app", "create_app_from_config"]
