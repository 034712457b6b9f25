"""``rollout.gates`` drift, metrics and prometheus: what they parse to, and errors naming
the key and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from servinglib.config.rollout_gates import Bound, DriftGate, MetricGate, QueryGate, fill
from servinglib.config.spec import load_config
from servinglib.errors import ConfigError
from tests.unit.test_rollout_policy import config

QUERY = 'sum(rate(x_total{model=\\"{{model}}\\",version=\\"{{ version }}\\"}[1m]))'


def _policy(tmp_path: Path, gates: str, profiles: bool = True) -> Path:
    path = config(tmp_path, f'candidate: "2"\nsteps: [{{weight: 10}}]\ngates: {gates}')
    if profiles:
        for version in ("1", "2"):
            (tmp_path / "models" / "eta" / version / "profile.json").write_text("{}")
    return path


def test_the_new_gates_parse(tmp_path: Path) -> None:
    gates = (
        "{drift: {role: output, fields: [eta_s], max_increase: 0.1}, metrics: ["
        "{name: accepted, counter: offers_accepted, per: offers, max_decrease: 0.02}, "
        "{histogram: basket_eur, max_increase: 3}], prometheus: [{name: upstream, "
        f'url: "http://prometheus:9090/", query: "{QUERY}", max: 0.5}}]}}'
    )
    policy = load_config(_policy(tmp_path, gates), environ={}).models[0].rollout
    assert policy is not None
    assert policy.drift == DriftGate("output", ("eta_s",), Bound("max_increase", 0.1), 100)
    assert policy.metrics == (
        MetricGate("accepted", "offers_accepted", "offers", None, Bound("max_decrease", 0.02)),
        MetricGate("basket_eur", None, "requests", "basket_eur", Bound("max_increase", 3.0)),
    )
    [query] = policy.queries
    assert query == QueryGate(
        "upstream", "http://prometheus:9090", QUERY.replace("\\", ""), Bound("max", 0.5), 5.0
    )
    assert fill(query.query, "eta", "2") == 'sum(rate(x_total{model="eta",version="2"}[1m]))'


def test_a_bound_reads_higher_or_lower_is_better() -> None:
    assert Bound("max_decrease", 0.1).worse(0.39, 0.5)
    assert not Bound("max_decrease", 0.1).worse(0.41, 0.5)
    assert Bound("max_increase", 0.1).worse(0.61, 0.5)
    assert Bound("min", 0.3).worse(0.29, 123.0)
    assert not Bound("max", 0.3).worse(0.29, 0.0)


@pytest.mark.parametrize(
    ("gates", "profiles", "key", "said"),
    [
        ("{drift: {max: 0.2}}", False, "gates.drift", "profile.json is missing"),
        ("{drift: {max: 0.2, max_increase: 0.1}}", True, "gates.drift", "exactly one threshold"),
        ("{drift: {min: 0.2}}", True, "gates.drift", "unknown key 'min'"),
        ("{drift: {role: output}}", True, "gates.drift", "(found none)"),
        ("{drift: {role: inputs, max: 0.2}}", True, "gates.drift.role", "inputs"),
        ("{metrics: [{counter: a, histogram: b, max: 1}]}", True, "metrics[0]", "exactly one"),
        ("{metrics: [{counter: a_total, max: 1}]}", True, "metrics[0].counter", "leave '_total'"),
        (
            "{metrics: [{counter: servinglib_requests, max: 1}]}",
            True,
            "metrics[0].counter",
            "without the servinglib_ prefix",
        ),
        (
            "{metrics: [{histogram: h, max: 1}]}",
            True,
            "metrics[0]",
            "`max_increase`, `max_decrease`",
        ),
        ("{metrics: [{histogram: h, per: x, max_increase: 1}]}", True, "metrics[0].per", "means"),
        ("{metrics: [{counter: a, max: 1}, {counter: a, min: 0}]}", True, "gates.metrics", "twice"),
        (
            '{prometheus: [{name: q, url: "prometheus:9090", query: "up{v=\\"{{version}}\\"}", max: 1}]}',
            True,
            "prometheus[0].url",
            "http://prometheus:9090",
        ),
        (
            '{prometheus: [{name: q, url: "http://p:9090", query: "up", max: 1}]}',
            True,
            "prometheus[0].query",
            "needs {{version}}",
        ),
        (
            '{prometheus: [{name: q, url: "http://p:9090", query: "up{a=\\"{{pod}}{{version}}\\"}", max: 1}]}',
            True,
            "prometheus[0].query",
            "['pod']",
        ),
        (
            '{prometheus: [{url: "http://p:9090", query: "x", max: 1}]}',
            True,
            "prometheus[0]",
            "name",
        ),
    ],
)
def test_a_bad_gate_names_the_key_and_the_fix(
    tmp_path: Path, gates: str, profiles: bool, key: str, said: str
) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(_policy(tmp_path, gates, profiles), environ={})
    assert key in str(info.value), str(info.value)
    assert said in str(info.value), str(info.value)
