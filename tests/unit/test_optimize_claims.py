"""Speed claims only with evidence; throughput rounds of a minimum duration; p95 spread checked."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("onnxruntime")

sys.path.insert(0, str(Path(__file__).parent))
from optimize_models import regressor_rows, write_regressor

from servinglib.optimize.cli import main
from servinglib.optimize.compare import NO_DIFFERENCE, speed_claim
from servinglib.optimize.measure import MeasureSettings, measure_throughput


def test_a_speed_up_is_claimed_only_when_every_round_says_so() -> None:
    fp32 = [2.0, 2.1, 2.0, 1.9, 2.05]
    claim = speed_claim("p50", fp32, [1.0, 1.05, 0.98, 1.0, 1.01])
    assert claim.verdict == "faster"
    assert claim.ratio == pytest.approx(2.0)  # median over median
    assert 1.0 < claim.low <= claim.ratio <= claim.high
    assert claim.describe().startswith("p50 2.00x faster (rounds ")
    slower = speed_claim("p95", [1.0] * 5, [1.2, 1.21, 1.19, 1.2, 1.22])
    assert slower.verdict == "slower"
    assert slower.describe().startswith("p95 1.20x slower")


def test_the_reason_names_the_technique_measured() -> None:
    fp32, faster = [2.0, 2.1, 2.0, 1.9, 2.05], [1.0, 1.05, 0.98, 1.0, 1.01]
    assert speed_claim("p50", fp32, faster).why.startswith("INT8 faster in 5 of 5 rounds")
    pruned = speed_claim("p50", fp32, faster, technique="pruned")
    assert pruned.why.startswith("pruned faster in 5 of 5 rounds"), pruned.why


@pytest.mark.parametrize(
    ("fp32", "int8", "why"),
    [
        ([2.0, 2.0, 2.0], [1.0, 1.0, 1.0], "too few"),  # 3 rounds: nothing is distinguishable
        ([1.0, 1.01, 0.99, 1.0, 1.0], [0.99, 1.0, 0.98, 0.99, 0.99], "less than 3% apart"),
        # p95 rounds of a busy machine: INT8 "wins" every round by less than the spread
        ([2.45, 5.49, 3.0, 4.2, 2.6], [2.0, 4.6, 2.5, 3.5, 2.1], "busy machine"),
    ],
)
def test_no_claim_without_evidence(fp32: list[float], int8: list[float], why: str) -> None:
    claim = speed_claim("p95", fp32, int8)
    assert claim.verdict == NO_DIFFERENCE
    assert not claim.claimed
    assert why in claim.why
    assert claim.describe().startswith(f"p95: {NO_DIFFERENCE} (")


class FakeSession:
    def __init__(self, clock: list[float], cost: float) -> None:
        self.clock, self.cost, self.calls = clock, cost, 0

    def run(self, feed: Any) -> list[np.ndarray]:
        self.clock[0] += self.cost
        self.calls += 1
        return [np.zeros(1)]


def test_throughput_rounds_last_at_least_the_minimum_duration() -> None:
    clock = [0.0]
    # binary fractions of a second, so the sums are exact
    fast, slow = FakeSession(clock, 2.0**-13), FakeSession(clock, 2.0**-11)
    settings = MeasureSettings(warmup=0, iterations=10, repeats=3, batch_size=4, min_round_s=2**-7)
    stats = measure_throughput(
        {"fast": fast, "slow": slow},  # type: ignore[dict-item]
        {"x": np.zeros((4, 2))},
        settings,
        clock=lambda: clock[0],
    )
    # 2**-7 s of the faster model per round: 64 batches, not iterations // 10 = 1
    assert fast.calls == 1 + 3 * 64
    assert stats["fast"].samples_per_s == pytest.approx(4 * 2**13)
    assert stats["slow"].samples_per_s == pytest.approx(4 * 2**11)


def test_the_cli_prints_no_speed_up_it_cannot_support(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_regressor(tmp_path / "eta.onnx")
    np.savez(tmp_path / "valid.npz", x=regressor_rows(16, 1))
    code = main(
        ["run", str(tmp_path / "eta.onnx"), "--validation", str(tmp_path / "valid.npz"),
         "--method", "dynamic", "--repeats", "3", "--iterations", "5", "--warmup", "1",
         "--batch-size", "4", "--min-round-s", "0", "--no-progress",
         "--out", str(tmp_path / "o" / "eta.onnx")]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    speed = [line for line in out.splitlines() if line.startswith("speed: ")]
    assert [line.split(":")[1].strip() for line in speed] == ["p50", "p95", "throughput"]
    assert all(NO_DIFFERENCE in line and "too few" in line for line in speed)
    assert "x faster" not in out
    assert "speed-up" not in out
