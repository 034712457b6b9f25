"""Small edits of files a team may have changed by hand, keeping their comments and keys.

Each edit changes only the lines it must, then parses the result and checks that the data is
exactly the old data plus the addition. When that check fails (the file was restructured),
the edit returns None and the caller tells the user what to add by hand, except for
servinglib.yaml, which is rewritten from its parsed data as a last resort.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Sequence
from typing import Any

import yaml

__all__ = [
    "append_model_entry",
    "append_to_csv_annotation",
    "append_to_flow_list",
    "append_to_json_list",
    "ensure_requirements",
]


def append_model_entry(config_text: str, entry: str) -> tuple[str, bool]:
    """Append ``entry`` (a ``- name: ...`` YAML item at column 0) to ``models:``.

    Returns:
        The new text, and True when it is the old text plus the entry (comments kept), False
        when the file had to be rewritten from its parsed data (comments lost).

    Raises:
        ValueError: ``config_text`` is not a mapping or ``models`` is not a list.
    """
    data = yaml.safe_load(config_text)
    if not isinstance(data, dict):
        raise ValueError("the top level is not a mapping")
    models = data.get("models") or []
    if not isinstance(models, list):
        raise ValueError("`models` is not a list")
    expected = copy.deepcopy(data)
    expected["models"] = [*models, *yaml.safe_load(entry)]
    candidate = _insert_into_block_sequence(config_text, "models", entry)
    if candidate is not None and _parses_to(candidate, expected):
        return candidate, True
    return yaml.safe_dump(expected, sort_keys=False, default_flow_style=False), False


def _insert_into_block_sequence(text: str, key: str, entry: str) -> str | None:
    lines = text.splitlines(keepends=True)
    start = next(
        (i for i, line in enumerate(lines) if re.match(rf"^{re.escape(key)}:\s*(#.*)?$", line)),
        None,
    )
    if start is None:
        return None
    last, item_indent = start, None
    for i in range(start + 1, len(lines)):
        stripped = lines[i].strip()
        if not stripped:
            continue
        indent = len(lines[i]) - len(lines[i].lstrip(" "))
        if stripped.startswith("#"):
            if indent > 0:
                last = i  # an indented comment belongs to the block
            continue
        if indent == 0 and not stripped.startswith("-"):
            break  # the next top-level key
        if stripped.startswith("-") and item_indent is None:
            item_indent = indent
        last = i
    pad = " " * (2 if item_indent is None else item_indent)
    block = "".join(pad + line if line.strip() else line for line in entry.splitlines(True))
    if not block.endswith("\n"):
        block += "\n"
    if not lines[last].endswith("\n"):
        lines[last] += "\n"
    lines.insert(last + 1, block)
    return "".join(lines)


def append_to_flow_list(text: str, key_path: Sequence[str], value: str) -> str | None:
    """Append ``value`` to a one-line flow list such as ``model: [a, b]`` at ``key_path``."""
    data = yaml.safe_load(text)
    current = _dig(data, key_path)
    if not isinstance(current, list):
        return None
    expected = copy.deepcopy(data)
    _dig(expected, key_path).append(value)
    pattern = re.compile(rf"^(\s*{re.escape(key_path[-1])}:\s*\[)([^\]\n]*)(\].*)$", re.MULTILINE)
    matches = list(pattern.finditer(text))
    if len(matches) != 1:
        return None
    match = matches[0]
    inner = match.group(2).strip()
    candidate = (
        text[: match.start()]
        + match.group(1)
        + (f"{inner}, {value}" if inner else value)
        + match.group(3)
        + text[match.end() :]
    )
    return candidate if _parses_to(candidate, expected) else None


def append_to_csv_annotation(text: str, annotation: str, value: str) -> str | None:
    """Append ``value`` to every comma-separated ``annotation: "a,b"`` of a YAML stream."""
    pattern = re.compile(rf'^(\s*{re.escape(annotation)}:\s*)"([^"\n]*)"', re.MULTILINE)
    if not pattern.search(text):
        return None

    def extend(old: str) -> str:
        return f"{old},{value}" if old else value

    candidate = pattern.sub(lambda m: f'{m.group(1)}"{extend(m.group(2))}"', text)
    expected = [_replace_key(doc, annotation, extend) for doc in yaml.safe_load_all(text)]
    return candidate if list(yaml.safe_load_all(candidate)) == expected else None


def append_to_json_list(text: str, key: str, value: str) -> str | None:
    """Append ``value`` to the list under ``key`` of a JSON object, keeping other keys."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get(key), list):
        return None
    data[key].append(value)
    return json.dumps(data, indent=2) + "\n"


def ensure_requirements(text: str, requirements: Sequence[tuple[str, str]]) -> str:
    """Append each ``(name, line)`` whose distribution ``name`` no line installs yet."""
    present = set()
    for line in text.splitlines():
        match = re.match(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)", line)
        if match and not line.lstrip().startswith(("#", "-")):
            present.add(_normalize(match.group(1)))
    missing = [line for name, line in requirements if _normalize(name) not in present]
    if not missing:
        return text
    prefix = text if not text or text.endswith("\n") else text + "\n"
    return prefix + "".join(line + "\n" for line in missing)


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _parses_to(text: str, expected: Any) -> bool:
    try:
        return bool(yaml.safe_load(text) == expected)
    except yaml.YAMLError:
        return False


def _dig(data: Any, key_path: Sequence[str]) -> Any:
    for key in key_path:
        if not isinstance(data, dict) or key not in data:
            return None
        data = data[key]
    return data


def _replace_key(data: Any, key: str, change: Any) -> Any:
    if isinstance(data, dict):
        return {
            k: change(v) if k == key and isinstance(v, str) else _replace_key(v, key, change)
            for k, v in data.items()
        }
    if isinstance(data, list):
        return [_replace_key(item, key, change) for item in data]
    return data
