"""A real Prometheus (Debian's ``prometheus`` binary) on a free port, scraping given targets."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import requests
import yaml

from tests.conftest import free_port, stop


class PrometheusServer:
    """``prometheus`` scraping ``targets`` (``host:port``) every second; stop with :meth:`close`.

    Raises:
        RuntimeError: the binary is missing or did not become ready.
    """

    def __init__(self, directory: Path, targets: list[str]) -> None:
        binary = shutil.which("prometheus")
        if binary is None:
            raise RuntimeError("needs Debian's prometheus package (.ci/run installs it)")
        directory.mkdir(parents=True, exist_ok=True)
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "scrape_configs": [
                {"job_name": "servinglib", "static_configs": [{"targets": targets}]}
            ],
        }
        (directory / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._log = (directory / "prometheus.log").open("wb")
        self.process = subprocess.Popen(
            [
                binary,
                f"--config.file={directory / 'prometheus.yml'}",
                f"--storage.tsdb.path={directory / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                if requests.get(f"{self.url}/-/ready", timeout=2).ok:
                    break
            except requests.RequestException:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.close()
                log = (directory / "prometheus.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"prometheus did not become ready:\n{log}")
            time.sleep(0.1)

    def close(self) -> None:
        """Stop the server."""
        stop(self.process)
        self._log.close()
