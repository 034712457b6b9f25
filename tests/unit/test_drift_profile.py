"""Reference profiles: kinds, bins and shares, saving, loading and validation."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from servinglib.monitoring.drift import Profile, ProfileError, WindowSpec, build_profile


def rows(count: int = 2000) -> list[tuple[dict[str, object], dict[str, object]]]:
    rng = np.random.default_rng(7)
    out = []
    for i in range(count):
        logits = rng.normal(size=3)
        probabilities = np.exp(logits) / np.exp(logits).sum()
        features = {
            "amount": float(rng.lognormal(3, 1)),
            "country": ["fr", "de", "it"][i % 3],
            "comment": "x" * int(rng.integers(1, 200)) + str(i),  # all distinct: text
            "flag": bool(i % 4 == 0),
            "embedding": rng.normal(size=8).tolist(),
            "tokens": [1.0] * int(rng.integers(1, 30)),
        }
        if i % 10 == 0:
            features["amount"] = None
        out.append((features, {"probabilities": probabilities.tolist(), "label": "a"}))
    return out


def test_each_value_shape_gets_its_kind_and_bins() -> None:
    profile = build_profile(rows())
    fields = {(f.role, f.name): f for f in profile.fields}
    kinds = {name: f.kind for (_, name), f in fields.items()}
    assert kinds == {
        "amount": "numeric",
        "country": "categorical",
        "comment": "text",
        "flag": "categorical",
        "embedding": "norm",
        "tokens": "length",
        "probabilities": "top_class",
        "label": "categorical",
    }
    amount = fields[("feature", "amount")]
    assert amount.bins == 10
    assert len(amount.edges) == 9
    assert amount.null_share == pytest.approx(0.1)
    assert amount.reference == pytest.approx([0.1] * 10, abs=0.01)
    assert sorted(fields[("feature", "country")].categories) == ["de", "fr", "it"]
    assert fields[("feature", "country")].reference[-1] == 0  # nothing outside the top-k
    assert set(fields[("output", "probabilities")].categories) <= {"0", "1", "2"}


def test_categories_beyond_the_top_k_share_the_other_bin() -> None:
    profile = build_profile([({"city": f"c{i % 30}"}, None) for i in range(3000)], top_k=20)
    (city,) = profile.fields
    assert city.kind == "categorical"
    assert len(city.categories) == 20
    assert city.reference[-1] == pytest.approx(10 / 30)


def test_save_and_load_round_trip(tmp_path: Path) -> None:
    profile = build_profile(rows(300), WindowSpec(seconds=60, slots=6, requests=500), "unit")
    path = tmp_path / "profile.json"
    profile.save(path)
    assert Profile.load(path) == profile


def test_a_damaged_profile_names_the_file_field_and_fix(tmp_path: Path) -> None:
    path = tmp_path / "profile.json"
    build_profile(rows(300)).save(path)
    document = json.loads(path.read_text())
    document["fields"][0]["reference"] = [1.0]
    path.write_text(json.dumps(document))
    with pytest.raises(ProfileError) as error:
        Profile.load(path)
    message = str(error.value)
    assert str(path) in message
    assert "feature 'amount': 1 reference shares for 10 bins" in message
    assert "servinglib profile" in message


def test_not_json_and_no_rows_are_clear_errors(tmp_path: Path) -> None:
    path = tmp_path / "profile.json"
    path.write_text("{")
    with pytest.raises(ProfileError, match="not a valid profile"):
        Profile.load(path)
    with pytest.raises(ProfileError, match="no rows to profile"):
        build_profile([])


def test_too_many_fields_is_refused() -> None:
    with pytest.raises(ProfileError, match="at most 64 are monitored"):
        build_profile([({f"f{i}": 1.0 for i in range(70)}, None)])


def _live(profile: Profile, values: list[object], name: str = "x") -> dict[str, object]:
    from servinglib.monitoring.drift import VersionMonitor

    monitor = VersionMonitor("m", "1", profile, None)
    for value in values:
        monitor.observe({name: value}, None)
    report = monitor.report()
    json.dumps(report, allow_nan=False)  # the drift endpoint's body is strict JSON
    field: dict[str, object] = next(f for f in report["fields"] if f["name"] == name)
    return field


@pytest.mark.parametrize("value", [0.1, 0.7, 3.7, 1, 0.0, -2.5, 123456.789])  # float32(0.7) < 0.7
def test_a_constant_reference_value_and_the_same_live_value_share_a_bin(
    tmp_path: Path, value: float
) -> None:
    profile = build_profile([({"x": value}, None) for _ in range(500)])
    profile.save(tmp_path / "profile.json")
    profile = Profile.load(tmp_path / "profile.json")
    # the same value, and the same value as a float32 tensor carries it
    for live in (
        [value] * 100,
        [float(np.float32(value))] * 100,
        [np.array([value], np.float32)] * 100,
    ):
        field = _live(profile, live)
        assert field["quality"] == {
            "missing": 0,
            "out_of_range": 0,
            "unseen_category": 0,
            "wrong_type": 0,
        }
        assert field["psi"] < 0.1, (live[0], field)
        assert not field["drifted"]


def test_discrete_values_keep_their_bins_when_rounded() -> None:
    reference = [({"x": float(i % 3)}, None) for i in range(900)]  # 0, 1, 2 a third each
    profile = build_profile(reference)
    assert not set(profile.fields[0].edges) & {0.0, 1.0, 2.0}  # no edge on a value
    field = _live(profile, [float(np.float32(v)) * (1 - 1e-7) for v in (0.0, 1.0, 2.0) * 100])
    assert field["psi"] < 0.05
    assert field["quality"]["out_of_range"] == 0


def test_an_all_missing_reference_column_is_profiled_not_dropped(tmp_path: Path) -> None:
    reference = [({"x": float("nan") if i % 2 else None, "y": float(i)}, None) for i in range(100)]
    profile = build_profile(reference)
    x = next(f for f in profile.fields if f.name == "x")
    assert (x.kind, x.null_share, x.count, x.bins) == ("numeric", 1.0, 0, 1)
    profile.save(tmp_path / "profile.json")
    field = _live(Profile.load(tmp_path / "profile.json"), [None, 1.0, "a"])
    assert field["quality"] == {
        "missing": 1,
        "out_of_range": 0,
        "unseen_category": 0,
        "wrong_type": 1,
    }


def test_profiles_never_hold_nan_or_infinity(tmp_path: Path) -> None:
    reference = [
        (
            {
                "vector": [float("nan"), 1.0] if i % 5 == 0 else [float(i), 1.0],  # NaN norms
                "huge": 1e308 if i % 2 else 1.7e308,  # the mean overflows
                "infinite": float("inf") if i % 3 == 0 else float(i),
            },
            None,
        )
        for i in range(100)
    ]
    profile = build_profile(reference)
    profile.save(tmp_path / "profile.json")  # allow_nan=False: it would raise
    text = (tmp_path / "profile.json").read_text()
    json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} in the profile"))
    fields = {f.name: f for f in profile.fields}
    assert fields["vector"].null_share == pytest.approx(0.2)
    assert fields["huge"].mean is None
    assert fields["infinite"].null_share == pytest.approx(0.34)
    assert Profile.load(tmp_path / "profile.json").problems() == []
    damaged = json.loads(text)
    damaged["fields"][0]["edges"][0] = float("nan")
    (tmp_path / "bad.json").write_text(json.dumps(damaged))  # Python writes NaN here
    with pytest.raises(ProfileError, match="holds NaN or Infinity"):
        Profile.load(tmp_path / "bad.json")
