"""servinglib's public surface, as one JSON document, and what changed since the snapshot.

The surface is what docs/explanation/compatibility.md promises to keep within a major
version: the names users import (``servinglib`` and ``servinglib.testing``, with their
signatures), the keys of ``servinglib.yaml``, the metric names and labels, and the command
line (every subcommand and flag). ``release/api-surface.json`` holds it as of the last
release; a test fails when the surface differs from it and no news fragment in
``changes/`` names each difference.

    python release/api_surface.py            # print the current surface
    python release/api_surface.py --write    # rewrite the snapshot (when releasing)
    python release/api_surface.py --check    # list unannounced differences, exit 1 if any
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import re
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SNAPSHOT = ROOT / "release" / "api-surface.json"
CHANGES = ROOT / "changes"
PUBLIC_MODULES = ("servinglib", "servinglib.testing")


def _signature(obj: Any) -> str:
    try:
        return str(inspect.signature(obj))
    except (TypeError, ValueError):
        return ""


def python_names() -> dict[str, str]:
    """``module.name`` (and ``module.Class.method``) -> its kind and signature."""
    surface: dict[str, str] = {}
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            obj = getattr(module, name)
            key = f"{module_name}.{name}"
            if inspect.isclass(obj):
                bases = ", ".join(b.__name__ for b in obj.__bases__)
                surface[key] = f"class({bases})"
                for attr, member in vars(obj).items():
                    if attr.startswith("_") and attr != "__init__":
                        continue
                    if callable(member) or isinstance(member, (staticmethod, classmethod)):
                        surface[f"{key}.{attr}"] = "def" + _signature(getattr(obj, attr))
            elif callable(obj):
                surface[key] = "def" + _signature(obj)
            else:
                surface[key] = type(obj).__name__
    return surface


def _schema_keys(node: Mapping[str, Any], defs: Mapping[str, Any], path: str) -> Iterator[str]:
    if "$ref" in node:
        node = defs[node["$ref"].rsplit("/", 1)[-1]]
    for alternative in node.get("oneOf", []) + node.get("anyOf", []) + node.get("allOf", []):
        yield from _schema_keys(alternative, defs, path)
    for key, child in node.get("properties", {}).items():
        child_path = f"{path}.{key}" if path else key
        yield child_path
        yield from _schema_keys(child, defs, child_path)
    items = node.get("items")
    if isinstance(items, Mapping):
        yield from _schema_keys(items, defs, path + "[]")
    extra = node.get("additionalProperties")
    if isinstance(extra, Mapping):
        yield from _schema_keys(extra, defs, path + ".*")


def config_keys() -> list[str]:
    """Every key ``servinglib.yaml`` accepts, as dotted paths (``models[].deadline_ms``)."""
    schema = json.loads((ROOT / "servinglib" / "schema" / "servinglib.schema.json").read_text())
    defs = {**schema.get("$defs", {}), **schema.get("definitions", {})}
    return sorted(set(_schema_keys(schema, defs, "")))


def metrics() -> dict[str, str]:
    """Metric name -> kind and labels."""
    from servinglib.monitoring.metric_specs import METRIC_SPECS

    return {spec.name: f"{spec.kind}{list(spec.labels)}" for spec in METRIC_SPECS}


def _flags(parser: argparse.ArgumentParser, prefix: str) -> Iterator[str]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield f"{prefix} {name}"
                yield from _flags(sub, f"{prefix} {name}")
        elif isinstance(action, argparse._HelpAction):
            continue
        elif action.option_strings:
            yield f"{prefix} {' '.join(sorted(action.option_strings))}"
        elif action.dest != "help":
            yield f"{prefix} <{action.dest}>"


def command_line() -> list[str]:
    """Every subcommand, flag and positional argument of ``servinglib``."""
    from servinglib.cli.main import _parser

    return sorted(set(_flags(_parser(), "servinglib")))


def surface() -> dict[str, Any]:
    """The whole public surface."""
    return {
        "python": python_names(),
        "config": config_keys(),
        "metrics": metrics(),
        "cli": command_line(),
    }


def differences(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """One line per entry added, removed or changed: ``python: added servinglib.X``."""
    lines: list[str] = []
    for part in sorted(set(old) | set(new)):
        before, after = old.get(part, {}), new.get(part, {})
        if isinstance(before, list) or isinstance(after, list):
            before = dict.fromkeys(before or [], "")
            after = dict.fromkeys(after or [], "")
        for key in sorted(set(before) | set(after)):
            if key not in after:
                lines.append(f"{part}: removed {key}")
            elif key not in before:
                lines.append(f"{part}: added {key}")
            elif before[key] != after[key]:
                lines.append(f"{part}: changed {key} ({before[key]} -> {after[key]})")
    return lines


def _entry(line: str) -> str:
    """The name a fragment must mention for a difference line."""
    return re.sub(r"^\w+: (added|removed|changed) ", "", line).split(" (", 1)[0].strip()


def unannounced(lines: list[str], changes_dir: Path = CHANGES) -> list[str]:
    """The differences that no news fragment in ``changes_dir`` names (in backquotes)."""
    texts = " ".join(
        p.read_text(encoding="utf-8")
        for p in sorted(changes_dir.glob("*.md"))
        if p.is_file() and p.name != "README.md"
    )
    return [line for line in lines if f"`{_entry(line)}`" not in texts]


def main(argv: list[str] | None = None) -> int:
    """Print, write or check the surface; returns the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--write", action="store_true", help="rewrite release/api-surface.json")
    group.add_argument("--check", action="store_true", help="list unannounced differences")
    args = parser.parse_args(argv)
    current = surface()
    if args.write:
        SNAPSHOT.write_text(json.dumps(current, indent=1, sort_keys=True) + "\n")
        print(f"wrote {SNAPSHOT.relative_to(ROOT)}")
        return 0
    if args.check:
        missing = unannounced(differences(json.loads(SNAPSHOT.read_text()), current))
        for line in missing:
            print(line)
        return 1 if missing else 0
    json.dump(current, sys.stdout, indent=1, sort_keys=True)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
