"""False-decision rates of a rollout policy, measured on seeded simulated traffic.

Runs the real controller and gates (servinglib.delivery.simulation) on N seeds per
scenario and prints, per scenario, how often the candidate was rolled back and after how
many candidate requests. Results are in docs/benchmarks.md and
docs/explanation/progressive-delivery.md.

    python benchmarks/rollout_false_decisions.py --runs 300
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from servinglib.config.rollout_policy import RolloutPolicy, RolloutStep
from servinglib.delivery.simulation import Behaviour, simulate

BASELINE = Behaviour(error_rate=0.002, median_s=0.02, sigma=0.3)
SCENARIOS = {
    "identical": BASELINE,
    "latency x1.1": Behaviour(error_rate=0.002, median_s=0.022, sigma=0.3),
    "errors 0.2% -> 1%": Behaviour(error_rate=0.01, median_s=0.02, sigma=0.3),
    "latency x1.3": Behaviour(error_rate=0.002, median_s=0.026, sigma=0.3),
    "errors 0.2% -> 5%": Behaviour(error_rate=0.05, median_s=0.02, sigma=0.3),
    "latency x1.5": Behaviour(error_rate=0.002, median_s=0.03, sigma=0.3),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=300, help="seeds per scenario")
    args = parser.parse_args()
    steps = (
        RolloutStep(10.0, False, 200, 0.0),
        RolloutStep(25.0, False, 200, 0.0),
        RolloutStep(50.0, False, 200, 0.0),
    )
    print(
        f"policy: steps 10/25/50 %, min_requests 200, alpha 0.01, latency max_ratio 1.2; {args.runs} seeds"
    )
    print("| candidate | rolled back | candidate requests at rollback (median) | s |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory() as scratch:
        for name, candidate in SCENARIOS.items():
            started = time.perf_counter()
            rolled, samples = 0, []
            for seed in range(args.runs):
                policy = RolloutPolicy("2", steps, Path(scratch) / f"{name}-{seed}")
                outcome = simulate(policy, BASELINE, candidate, seed)
                if outcome.status == "rolled_back":
                    rolled += 1
                    samples.append(max(g["samples"] for g in outcome.state.gates))
            median = statistics.median(samples) if samples else "-"
            elapsed = time.perf_counter() - started
            print(
                f"| {name} | {rolled}/{args.runs} ({rolled / args.runs:.1%}) | {median} | {elapsed:.0f} |"
            )


if __name__ == "__main__":
    main()
