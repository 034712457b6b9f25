"""``servinglib doctor``: check the environment and say what to fix.

Each check gives one :class:`Finding`: ``ok``, ``warn`` (works, but not as intended) or
``fix`` (something a command will fail on), with the command that fixes it::

    for finding in run_doctor(Path("servinglib.yaml")):
        print(finding.line())
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from servinglib.config.spec import ServiceConfig, load_config
from servinglib.errors import ServinglibError
from servinglib.serve.ports import port_is_free
from servinglib.serve.versions import GUNICORN_MINIMUM, check_gunicorn, version_tuple

__all__ = ["EXTRAS", "Finding", "run_doctor"]

# extra -> the modules it installs (what `pip install 'servinglib[extra]'` brings)
EXTRAS: dict[str, tuple[str, ...]] = {
    "onnx": ("onnxruntime", "onnx"),
    "torch": ("torch",),
    "optimize": ("onnxruntime", "onnx", "matplotlib", "tqdm"),
    "generator": ("cookiecutter",),
    "postgres": ("psycopg",),
    "batch": ("pyarrow", "tqdm"),
    "ray": ("ray", "pyarrow", "tqdm"),
    "drift": ("pyarrow", "matplotlib", "tqdm"),
    "grpc": ("grpc", "grpc_health"),
    "sklearn": ("sklearn", "skops", "pandas"),
    "xgboost": ("xgboost",),
    "lightgbm": ("lightgbm",),
    "tabular-onnx": ("skl2onnx", "onnxmltools", "onnx", "onnxruntime"),
    "store": ("fsspec", "s3fs"),
    "kafka": ("confluent_kafka",),
    "parquet": ("pyarrow", "fsspec"),
    "tracing": ("opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http"),
    "prune": ("torch_pruning",),
    "rollout": ("matplotlib",),
}
MINIMUM_PYTHON = (3, 11)
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


@dataclass(frozen=True)
class Finding:
    """One check: ``status`` is ``ok``, ``warn`` or ``fix``; ``fix`` says what to do."""

    status: str
    what: str
    detail: str
    fix: str = ""

    def line(self) -> str:
        """``ok    python       3.11.9`` or ``fix   ...\\n      -> the fix``."""
        text = f"{self.status:<5} {self.what:<18} {self.detail}"
        return text + (f"\n      -> {self.fix}" if self.fix else "")


def run_doctor(
    config_path: Path | None, extras: Mapping[str, tuple[str, ...]] = EXTRAS
) -> list[Finding]:
    """Every check, in order; ``config_path`` (when it exists) adds ports and log paths."""
    findings = [_python()]
    findings += list(_floors())
    findings += list(_extras(extras))
    findings.append(_torch())
    findings.append(_onnxruntime())
    config, finding = _config(config_path)
    findings.append(finding)
    findings += list(_ports(config))
    findings.append(_prediction_log(config))
    return findings


def _python() -> Finding:
    version = ".".join(str(part) for part in sys.version_info[:3])
    if sys.version_info[:2] < MINIMUM_PYTHON:
        return Finding("fix", "python", version, "servinglib needs Python >= 3.11")
    return Finding("ok", "python", f"{version} ({sys.executable})")


_FLOOR = re.compile(r"^([A-Za-z0-9_.-]+)>=([0-9][0-9.]*)$")


def _floors() -> Iterator[Finding]:
    """gunicorn, then each other core requirement, at or above its floor.

    An older gunicorn lacks settings servinglib passes: ``serve`` would exit with
    ``No configuration setting for: ...``.
    """
    try:
        gunicorn = importlib.metadata.version("gunicorn")
    except importlib.metadata.PackageNotFoundError:
        gunicorn = "0"
    try:
        check_gunicorn(gunicorn)
        yield Finding("ok", "gunicorn", gunicorn)
    except ServinglibError:
        yield Finding(
            "fix",
            "gunicorn",
            f"{gunicorn} is older than the {GUNICORN_MINIMUM} servinglib needs",
            f"pip install 'gunicorn>={GUNICORN_MINIMUM}'",
        )
    try:
        requirements = importlib.metadata.requires("servinglib") or []
    except importlib.metadata.PackageNotFoundError:
        return  # a source checkout that was never installed: nothing declared to check
    for requirement in requirements:
        match = _FLOOR.match(requirement.replace(" ", ""))
        if match is None:  # extras (``; extra == ...``) and requirements without a floor
            continue
        name, floor = match.groups()
        if name == "gunicorn":
            continue  # checked above, against the floor of this code
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            yield Finding("fix", name, "not installed", f"pip install '{name}>={floor}'")
            continue
        if version_tuple(installed) < version_tuple(floor):
            yield Finding(
                "fix",
                name,
                f"{installed} is older than the {floor} servinglib needs",
                f"pip install '{name}>={floor}'",
            )


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a dotted name whose parent package is missing
        return False


def _extras(extras: Mapping[str, tuple[str, ...]]) -> Iterator[Finding]:
    for extra, modules in extras.items():
        missing = [module for module in modules if not _installed(module)]
        if not missing:
            yield Finding("ok", f"extra {extra}", "installed")
        else:
            yield Finding(
                "warn",
                f"extra {extra}",
                f"not installed (missing {', '.join(missing)})",
                f"pip install 'servinglib[{extra}]'" + _torch_hint(extra),
            )


def _torch_hint(extra: str) -> str:
    return f"  (CPU build: pip install torch --index-url {CPU_INDEX})" if extra == "torch" else ""


def _torch() -> Finding:
    if not _installed("torch"):
        return Finding("ok", "torch build", "torch not installed (needed for runtime: torch)")
    import torch

    cuda = torch.version.cuda
    if cuda is None:
        return Finding("ok", "torch build", f"{torch.__version__} CPU")
    if torch.cuda.is_available():
        return Finding("ok", "torch build", f"{torch.__version__} CUDA {cuda}, GPU available")
    return Finding(
        "warn",
        "torch build",
        f"{torch.__version__} CUDA {cuda}, but no GPU here: gigabytes of CUDA libraries unused",
        f"pip install --force-reinstall torch=={torch.__version__.split('+')[0]} "
        f"--index-url {CPU_INDEX}",
    )


def _onnxruntime() -> Finding:
    if not _installed("onnxruntime"):
        return Finding("ok", "onnxruntime", "not installed (needed for runtime: onnx)")
    import onnxruntime

    providers = ", ".join(onnxruntime.get_available_providers())
    return Finding("ok", "onnxruntime", f"{onnxruntime.__version__}: {providers}")


def _config(config_path: Path | None) -> tuple[ServiceConfig | None, Finding]:
    if config_path is None or not config_path.exists():
        return None, Finding(
            "ok", "config", f"{config_path} not found: checks of ports and paths use defaults"
        )
    try:
        config = load_config(config_path)
    except ServinglibError as e:
        return None, Finding("fix", "config", str(e), f"servinglib validate --config {config_path}")
    return config, Finding("ok", "config", f"{config_path} ({len(config.models)} model(s))")


def _ports(config: ServiceConfig | None) -> Iterator[Finding]:
    host = config.server.host if config else "127.0.0.1"
    port = int(os.environ.get("SERVINGLIB_PORT", config.server.port if config else 8080))
    ports = [("server port", port, "pass --port N or set SERVINGLIB_PORT")]
    if config is not None and config.admin.enabled:
        ports.append(("admin port", config.admin.port, "change admin.port in the config"))
    for what, number, fix in ports:
        if port_is_free(host, number):
            yield Finding("ok", what, f"{host}:{number} is free")
        else:
            yield Finding("fix", what, f"{host}:{number} is taken by another process", fix)


def _prediction_log(config: ServiceConfig | None) -> Finding:
    log = config.prediction_log if config else None
    if log is None:
        return Finding("ok", "prediction log", "not configured")
    if log.url is None:
        return Finding("ok", "prediction log", f"{len(log.sinks)} sink(s), no SQL log")
    if not log.url.startswith("sqlite:///"):
        return Finding("ok", "prediction log", f"{log.url.split('://')[0]} (not checked here)")
    directory = Path(log.url.removeprefix("sqlite:///")).parent
    existing = directory
    while not existing.exists():  # the server creates what is missing below it
        existing = existing.parent
    if not os.access(existing, os.W_OK | os.X_OK):
        return Finding(
            "fix",
            "prediction log",
            f"cannot write in {existing} (for {directory})",
            "make the directory writable or change monitoring.prediction_log.url",
        )
    return Finding("ok", "prediction log", f"{directory} is writable")
