"""servinglib.serving.routing: weighted, sticky version choice."""

from __future__ import annotations

from collections import Counter

from servinglib.serving.routing import TrafficSplit


def test_split_over_distinct_keys_matches_the_weights() -> None:
    split = TrafficSplit("eta", {"2": 90, "3": 10})
    counts = Counter(split.choose(f"user-{i}") for i in range(2000))
    assert set(counts) == {"2", "3"}
    assert abs(counts["3"] / 2000 - 0.10) <= 0.03


def test_repeated_keys_always_get_the_same_version() -> None:
    split = TrafficSplit("eta", {"2": 50, "3": 50})
    first = {key: split.choose(key) for key in (f"k{i}" for i in range(200))}
    for _ in range(5):
        assert all(split.choose(key) == version for key, version in first.items())


def test_assignment_depends_on_the_model() -> None:
    a = TrafficSplit("a", {"1": 50, "2": 50})
    b = TrafficSplit("b", {"1": 50, "2": 50})
    assert any(a.choose(f"k{i}") != b.choose(f"k{i}") for i in range(50))


def test_no_key_draws_at_random_and_zero_weights_get_nothing() -> None:
    draws = iter([0.05, 0.49, 0.95])
    split = TrafficSplit("eta", {"1": 0, "2": 10, "3": 10}, rng=lambda: next(draws))
    assert split.versions == ["2", "3"]
    assert [split.choose(None) for _ in range(3)] == ["2", "2", "3"]
