"""Building the command line must not import prometheus_client.

``servinglib serve`` builds the whole parser before it points prometheus_client at the
per-server multiprocess directory (``serve/hooks.py``). A command module that imported
prometheus_client at import time would fix the client in single-process mode and every
worker's ``/metrics`` would read empty, with no error anywhere.
"""

from __future__ import annotations

import subprocess
import sys


def test_the_parser_the_launcher_and_every_command_module_leave_prometheus_client_unimported() -> (
    None
):
    script = (
        "import importlib, pkgutil, sys\n"
        "import servinglib.cli as cli\n"
        "from servinglib.cli.main import _parser\n"
        "_parser()\n"
        "import servinglib.serve.launcher\n"
        "for module in pkgutil.iter_modules(cli.__path__):\n"
        "    importlib.import_module(f'servinglib.cli.{module.name}')\n"
        "loaded = sorted(name for name in sys.modules if name.startswith('prometheus_client'))\n"
        "print(','.join(loaded))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120
    )
    assert result.stdout.strip() == "", (
        "importing the CLI loaded prometheus_client before serve could configure its "
        f"multiprocess directory: {result.stdout.strip()}; import it inside the command instead"
    )
