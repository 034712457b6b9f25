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
