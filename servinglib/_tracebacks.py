"""Point at the user's code in an exception: the frame to show in one line, the full text."""

from __future__ import annotations

import traceback
from pathlib import Path

__all__ = ["format_exception", "user_frame"]

_PACKAGE_DIR = Path(__file__).resolve().parent


def user_frame(error: BaseException) -> str:
    """``path/model.py:14: return w["base_s"] + ...``: the deepest frame outside servinglib.

    Empty when every frame is servinglib's own (or the exception carries no traceback).

    Example::

        try:
            model.predict(features)
        except Exception as e:
            print(f"predict raised {e!r} at {user_frame(e)}")
    """
    frames = traceback.extract_tb(error.__traceback__)
    for frame in reversed(frames):
        path = Path(frame.filename)
        if frame.filename.startswith("<") or path.resolve().is_relative_to(_PACKAGE_DIR):
            continue
        shown = _relative(path)
        source = (frame.line or "").strip()
        return f"{shown}:{frame.lineno}" + (f": {source}" if source else "")
    return ""


def format_exception(error: BaseException) -> str:
    """The full traceback of ``error``, as Python prints it."""
    return "".join(traceback.format_exception(error)).rstrip()


def _relative(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)
