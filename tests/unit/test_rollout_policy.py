"""``rollout:`` in servinglib.yaml: what it parses to, and the errors that name the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from servinglib.config.rollout_policy import ErrorGate, LatencyGate, RolloutStep
from servinglib.config.spec import load_config
from servinglib.errors import ConfigError

HEAD = """service: s
admin: {enabled: true}
models:
  - name: eta
    class: models.eta:EtaModel
    repository: models/eta
    default_version: "1"
"""


def config(tmp_path: Path, rollout: str, head: str = HEAD) -> Path:
    for version in ("1", "2"):
        (tmp_path / "models" / "eta" / version).mkdir(parents=True, exist_ok=True)
    path = tmp_path / "servinglib.yaml"
    path.write_text(
        head + "    rollout:\n" + "".join(f"      {line}\n" for line in rollout.splitlines())
    )
    return path


def test_a_policy_parses_with_its_defaults(tmp_path: Path) -> None:
    path = config(
        tmp_path, 'candidate: "2"\nsteps: [{weight: 10}, {weight: 50, min_requests: 500}]'
    )
    policy = load_config(path, environ={}).models[0].rollout
    assert policy is not None
    assert policy.steps == (
        RolloutStep(10.0, False, 200, 30.0),
        RolloutStep(50.0, False, 500, 30.0),
    )
    assert policy.error_rate == ErrorGate(max_increase=0.0)
    assert policy.latency == LatencyGate(0.95, 1.2)
    assert policy.shadow_agreement is None
    assert policy.alpha == 0.01
    assert policy.state_dir == (tmp_path / ".servinglib" / "rollouts").resolve()


def test_absolute_gates_and_a_shadow_step(tmp_path: Path) -> None:
    head = HEAD + '    shadow: [{version: "2"}]\n'
    text = (
        'candidate: "2"\nsteps: [{shadow: true, min_seconds: 60}, {weight: 20}]\n'
        "gates: {error_rate: {max: 0.02}, latency: {quantile: 0.99, max_ratio: 1.5}, "
        "shadow_agreement: {min: 0.97}}"
    )
    policy = load_config(config(tmp_path, text, head), environ={}).models[0].rollout
    assert policy is not None
    assert policy.steps[0] == RolloutStep(0.0, True, 200, 60.0)
    assert policy.error_rate == ErrorGate(max=0.02)
    assert policy.latency == LatencyGate(0.99, 1.5)
    assert policy.shadow_agreement == 0.97


@pytest.mark.parametrize(
    ("rollout", "head", "key", "said"),
    [
        (
            'candidate: "2"\nsteps: [{weight: 10}]',
            HEAD.replace("admin: {enabled: true}\n", ""),
            "models[0].rollout",
            "set `admin: {enabled: true}`",
        ),
        ('candidate: "1"\nsteps: [{weight: 10}]', HEAD, "rollout.candidate", "already the default"),
        ('candidate: "7"\nsteps: [{weight: 10}]', HEAD, "rollout.candidate", "has no directory"),
        ('candidate: "2"\nsteps: [{shadow: true}]', HEAD, "rollout.steps[0]", "`shadow:` list"),
        (
            'candidate: "2"\nsteps: [{min_seconds: 5}]',
            HEAD,
            "rollout.steps[0]",
            "needs `weight: N`",
        ),
        (
            'candidate: "2"\nsteps: [{weight: 5, shadow: true}]',
            HEAD,
            "rollout.steps[0]",
            "not both",
        ),
        (
            'candidate: "2"\nsteps: [{weight: 5}]\ngates: {error_rate: {max: 0.1, max_increase: 0.1}}',
            HEAD,
            "gates.error_rate",
            "one of `max`",
        ),
        (
            'candidate: "2"\nsteps: [{weight: 5}]\ngates: {shadow_agreement: {min: 0.9}}',
            HEAD,
            "gates.shadow_agreement",
            "`shadow:` list",
        ),
        ('candidate: "2"\nsteps: [{weight: 150}]', HEAD, "steps[0].weight", "150"),
        ('candidate: "2"\nsteps: []', HEAD, "rollout.steps", "[]"),
        (
            'candidate: "2"\nsteps: [{weight: 5}]\nstate_dir: ../../elsewhere',
            HEAD,
            "rollout.state_dir",
            "outside",
        ),
    ],
)
def test_a_bad_policy_names_the_key_and_the_fix(
    tmp_path: Path, rollout: str, head: str, key: str, said: str
) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(config(tmp_path, rollout, head), environ={})
    assert key in str(info.value), str(info.value)
    assert said in str(info.value), str(info.value)
