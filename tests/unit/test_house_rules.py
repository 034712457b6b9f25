"""The house rules of the package layout, checked on the source tree.

Modules stay small, the package root holds only the public contract, every module sits in
a layer of the import-linter contract, and HTTP status codes are chosen only by the front
ends (``http/``, ``serve/``, and the gRPC status mapping built on ``describe()``).
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "servinglib"
MAX_LINES = 400
GENERATED = ("servinglib/grpc_front/proto/",)  # grpcio-tools output, regenerated, not edited
ROOT_MODULES = {"__init__", "__main__", "errors", "model", "testing"}
STATUS_CHOOSERS = ("servinglib/http/", "servinglib/serve/", "servinglib/grpc_front/status.py")


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def _name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_no_module_exceeds_the_line_cap() -> None:
    too_long = {
        str(p.relative_to(ROOT)): n
        for p in _modules()
        if not str(p.relative_to(ROOT)).startswith(GENERATED)
        and (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert not too_long, f"split these modules (cap {MAX_LINES} lines): {too_long}"


def test_the_package_root_holds_only_the_public_contract() -> None:
    root = {p.stem for p in PACKAGE.glob("*.py")}
    assert root <= ROOT_MODULES, f"move {sorted(root - ROOT_MODULES)} into a tier package"
    assert len(root) <= 6


def _layers() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = config["tool"]["importlinter"]["contracts"]
    layered = next(c for c in contracts if c["type"] == "layers")
    return [name.strip() for layer in layered["layers"] for name in layer.split("|")]


def test_every_module_sits_in_a_layer() -> None:
    layers = _layers()
    unplaced = [
        name
        for name in map(_name, _modules())
        if name != "servinglib"
        and not any(name == layer or name.startswith(layer + ".") for layer in layers)
        and not any(layer.startswith(name + ".") for layer in layers)  # a split package
    ]
    assert not unplaced, f"place these in the layers contract of pyproject.toml: {unplaced}"


def _status_literals(tree: ast.AST) -> list[int]:
    """Line numbers where an int 400-599 is used as an HTTP status."""
    found: list[int] = []

    def status(node: ast.AST) -> bool:
        return (
            isinstance(node, ast.Constant) and type(node.value) is int and 400 <= node.value < 600
        )

    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            callee = (
                node.func.attr
                if isinstance(node.func, ast.Attribute)
                else getattr(node.func, "id", "")
            )
            if callee.endswith(("Error", "Exception")):
                found += [a.lineno for a in node.args if status(a)]
            found += [
                k.value.lineno
                for k in node.keywords
                if k.arg in ("status", "code") and status(k.value)
            ]
        elif isinstance(node, ast.Dict):
            found += [k.lineno for k in node.keys if k is not None and status(k)]
    return found


@pytest.mark.parametrize(
    "path",
    [p for p in _modules() if not str(p.relative_to(ROOT)).startswith(STATUS_CHOOSERS + GENERATED)],
    ids=lambda p: str(p.relative_to(PACKAGE)),
)
def test_no_http_status_is_chosen_outside_the_front_ends(path: Path) -> None:
    lines = _status_literals(ast.parse(path.read_text(encoding="utf-8")))
    assert not lines, (
        f"{path.relative_to(ROOT)} lines {lines}: raise a servinglib error saying what is "
        "wrong; servinglib.http.errors.describe chooses the status"
    )


def test_every_servinglib_error_is_drawn_in_the_error_tree() -> None:
    import servinglib.errors

    drawn = servinglib.errors.__doc__ or ""
    undrawn = []
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and node.name.endswith("Error"):
                bases = {getattr(b, "id", getattr(b, "attr", "")) for b in node.bases}
                if (
                    bases
                    & {
                        "ServinglibError",
                        "ConfigError",
                        "InvalidInputError",
                        "ModelLoadError",
                        "PredictionError",
                        "OptimizeError",
                    }
                    and node.name not in drawn
                ):
                    undrawn.append(f"{path.relative_to(ROOT)}:{node.name}")
    assert not undrawn, f"draw these in the tree of servinglib/errors.py: {undrawn}"
