"""Print CHANGELOG.md's section for one version (the GitHub release's notes).

python release/changelog_section.py 0.2.0
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

CHANGELOG = Path(__file__).resolve().parent.parent / "CHANGELOG.md"


def section(version: str, text: str) -> str:
    """The body of ``## [version]`` up to the next ``## [``; raises KeyError when absent."""
    match = re.search(rf"^## \[{re.escape(version)}\][^\n]*\n(.*?)(?=^## \[|\Z)", text, re.M | re.S)
    if match is None:
        raise KeyError(version)
    return match.group(1).strip() + "\n"


def main(argv: list[str]) -> int:
    """Print the section of ``argv[0]``; exit 1 naming the version when there is none."""
    if len(argv) != 1:
        print("usage: changelog_section.py VERSION", file=sys.stderr)
        return 2
    try:
        sys.stdout.write(section(argv[0], CHANGELOG.read_text(encoding="utf-8")))
    except KeyError:
        print(f"error: CHANGELOG.md has no section for {argv[0]}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
