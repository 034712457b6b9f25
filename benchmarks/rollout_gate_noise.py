"""False-fail rate and power of the drift, model-metric and query-free gates, per step.

Each trial is one step of 200 candidate requests (and as many baseline ones), tested at
its 4 looks (50, 100, 150, 200 requests) at alpha / 4 by the real gate functions
(servinglib.delivery.custom_gates), as the controller does. "identical" counts how often
a candidate drawn from the baseline's own distribution fails (false rollbacks); the other
rows how often a worse one is caught. Results are in docs/explanation/progressive-delivery.md.

    python benchmarks/rollout_gate_noise.py --trials 2000
"""

from __future__ import annotations

import argparse
import math
import random
from collections.abc import Callable

from servinglib.config.rollout_gates import Bound, DriftGate, MetricGate
from servinglib.delivery.custom_gates import drift_gate, metric_gate
from servinglib.delivery.evidence import Counts

ALPHA = 0.01
LOOKS = (50, 100, 150, 200)
BOUNDS = (10.0, 20.0, 25.0, 30.0, 35.0, 40.0, 50.0, 80.0, math.inf)
Draw = Callable[[random.Random], float]


def _share(rng: random.Random, n: int, p: float) -> int:
    return sum(rng.random() < p for _ in range(n))


def counter_trial(rng: random.Random, p_b: float, p_c: float) -> bool:
    gate = MetricGate("a", "ok", "requests", None, Bound("max_decrease", 0.02))
    hits_b = hits_c = seen = 0
    for look in LOOKS:
        hits_b += _share(rng, look - seen, p_b)
        hits_c += _share(rng, look - seen, p_c)
        seen = look
        base = Counts(requests=look, metrics={"ok_total": hits_b})
        cand = Counts(requests=look, metrics={"ok_total": hits_c})
        if metric_gate(gate, ALPHA / 4, base, cand, look >= 200).verdict == "fail":
            return True
    return False


def _observe(metrics: dict[str, float], value: float) -> None:
    for bound in BOUNDS:
        if value <= bound:
            key = f"h_bucket:{bound}"
            metrics[key] = metrics.get(key, 0.0) + 1
    metrics["h_count"] = metrics.get("h_count", 0.0) + 1
    metrics["h_sum"] = metrics.get("h_sum", 0.0) + value


def histogram_trial(rng: random.Random, shift: float) -> bool:
    gate = MetricGate("h", None, "requests", "h", Bound("max_decrease", 1.0))
    base_m: dict[str, float] = {}
    cand_m: dict[str, float] = {}
    seen = 0
    for look in LOOKS:
        for _ in range(look - seen):
            _observe(base_m, rng.lognormvariate(math.log(28), 0.3))
            _observe(cand_m, rng.lognormvariate(math.log(28), 0.3) + shift)
        seen = look
        base, cand = Counts(requests=look, metrics=base_m), Counts(requests=look, metrics=cand_m)
        if metric_gate(gate, ALPHA / 4, base, cand, look >= 200).verdict == "fail":
            return True
    return False


def drift_trial(rng: random.Random, power: float) -> bool:
    gate = DriftGate("output", (), Bound("max_increase", 0.1), 100)
    reference = [0.1] * 10
    live_b, live_c = [0] * 10, [0] * 10
    seen = 0
    for look in LOOKS:
        for _ in range(look - seen):
            live_b[min(9, int(rng.random() * 10))] += 1
            live_c[min(9, int(rng.random() ** power * 10))] += 1
        seen = look
        readings = {
            side: {"score": {"role": "output", "reference": reference, "live": list(live)}}
            for side, live in (("baseline", live_b), ("candidate", live_c))
        }
        if drift_gate(gate, ALPHA / 4, readings).verdict == "fail":
            return True
    return False


SCENARIOS: dict[str, Callable[[random.Random], bool]] = {
    "counter share: identical (60 %)": lambda r: counter_trial(r, 0.6, 0.6),
    "counter share: 60 % -> 55 %": lambda r: counter_trial(r, 0.6, 0.55),
    "counter share: 60 % -> 45 %": lambda r: counter_trial(r, 0.6, 0.45),
    "histogram mean: identical": lambda r: histogram_trial(r, 0.0),
    "histogram mean: -2 (limit -1)": lambda r: histogram_trial(r, -2.0),
    "histogram mean: -4 (limit -1)": lambda r: histogram_trial(r, -4.0),
    "drift: identical (uniform)": lambda r: drift_trial(r, 1.0),
    "drift: u^1.5 (PSI 0.14, limit 0.1)": lambda r: drift_trial(r, 1.5),
    "drift: u^3 (PSI 0.87)": lambda r: drift_trial(r, 3.0),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trials", type=int, default=2000, help="seeded trials per scenario")
    args = parser.parse_args()
    print(f"| Scenario | Failed a step ({args.trials} seeded trials, alpha {ALPHA}) |")
    print("|---|---|")
    for name, trial in SCENARIOS.items():
        failed = sum(trial(random.Random(seed)) for seed in range(args.trials))
        print(f"| {name} | {failed}/{args.trials} ({failed / args.trials:.1%}) |")


if __name__ == "__main__":
    main()
