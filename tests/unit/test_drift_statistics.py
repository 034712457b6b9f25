"""PSI and Jensen-Shannon distance against hand-computed values."""

from __future__ import annotations

import math

import pytest

from servinglib.monitoring.drift import js_distance, psi


def test_identical_distributions_score_about_zero() -> None:
    assert psi([0.25] * 4, [1000] * 4) == pytest.approx(0.0, abs=1e-9)
    assert js_distance([0.25] * 4, [1000] * 4) == pytest.approx(0.0, abs=1e-6)


def test_psi_matches_the_formula_with_its_pseudo_count() -> None:
    counts = [700, 300]
    live = [(c + 0.5) / 1001 for c in counts]
    expected = sum((a - e) * math.log(a / e) for a, e in zip(live, [0.5, 0.5], strict=True))
    assert psi([0.5, 0.5], counts) == pytest.approx(expected)
    assert 0.15 < expected < 0.17


def test_js_distance_is_bounded_and_grows_with_the_shift() -> None:
    small = js_distance([0.5, 0.5], [550, 450])
    large = js_distance([0.5, 0.5], [990, 10])
    disjoint = js_distance([1.0, 0.0], [0, 1000])
    assert small is not None
    assert large is not None
    assert disjoint is not None
    assert 0 < small < large < disjoint <= 1


def test_no_live_data_gives_no_score() -> None:
    assert psi([0.5, 0.5], [0, 0]) is None
    assert js_distance([0.5, 0.5], [0, 0]) is None


def test_an_empty_reference_bin_gives_a_large_finite_score() -> None:
    score = psi([1.0, 0.0], [500, 500])
    assert score is not None
    assert math.isfinite(score)
    assert score > 2
