"""Point at the user's code in an exception: the frame to show in one line, the full text.

The full text leaves out the ``^^^^`` markers under each line. Python 3.11 finds where to
put them by parsing the line with :mod:`ast`, and before 3.11.8 two threads building ASTs
at once can make either raise ``SystemError`` (CPython gh-106905). Tracebacks are
formatted on the log writer's thread while a worker builds its routes with ``ast`` on the
main one, so the markers could cost a worker its start.
"""

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
    """The full traceback of ``error`` as Python prints it, without the ``^^^^`` markers."""
    report = _without_markers(traceback.TracebackException.from_exception(error))
    return "".join(report.format()).rstrip()


def _without_markers(root: traceback.TracebackException) -> traceback.TracebackException:
    """Drop the column ranges that make :mod:`traceback` place markers (it parses with ``ast``)."""
    seen: set[int] = set()
    pending = [root]
    while pending:
        exception = pending.pop()
        if id(exception) in seen:
            continue
        seen.add(id(exception))
        for frame in exception.stack:
            frame.colno = frame.end_colno = None
        pending.extend(e for e in (exception.__cause__, exception.__context__) if e is not None)
        pending.extend(getattr(exception, "exceptions", None) or ())
    return root


def _relative(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)
