"""Answers are validated before anything is rendered, and every error says how to fix it."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest
from servinglib_generator import ModelSpec, SpecError, build_model_spec, build_service_spec
from servinglib_generator.cli import main
from servinglib_generator.prompts import SERVICE_PROMPTS, Prompt
from servinglib_generator.source import compatible_range, default_servinglib_source

from tests.generator._repos import REPO_ROOT

MINIMAL = {"team": "eta", "model": "eta", "servinglib": str(REPO_ROOT)}


def problems(answers: dict[str, str]) -> str:
    with pytest.raises(SpecError) as caught:
        build_service_spec({**MINIMAL, **answers})
    return str(caught.value)


def test_defaults_fill_everything_but_team_and_model() -> None:
    spec = build_service_spec(MINIMAL)
    assert spec.service == "eta-service"
    assert spec.model == ModelSpec("eta", "python")
    assert spec.owners == ("@eta",)
    assert spec.image == "ghcr.io/eta/eta-service:0.1.0"
    assert (spec.scaling.min_replicas, spec.scaling.replicas, spec.scaling.max_replicas) == (
        2,
        2,
        10,
    )
    assert spec.servinglib.requirement_line() == f"servinglib[tracing] @ {REPO_ROOT.as_uri()}"


@pytest.mark.parametrize("key", ["team", "model"])
def test_team_and_model_are_required(key: str) -> None:
    answers = {k: v for k, v in MINIMAL.items() if k != key}
    with pytest.raises(SpecError, match=rf"{key}: missing; pass {key}=VALUE"):
        build_service_spec(answers)


@pytest.mark.parametrize(
    ("key", "value", "suggestion"),
    [
        ("team", "Eta_Team", "'eta-team'"),
        ("team", "1eta", "'eta'"),
        ("model", "eta.v2", "'eta-v2'"),
        ("model", "eta-", "'eta'"),
        ("service", "ETA service", "'eta-service'"),
        ("service", "s" * 51, "at most 50"),
    ],
)
def test_names_must_be_lower_case_dns_labels(key: str, value: str, suggestion: str) -> None:
    message = problems({key: value})
    assert message.startswith(f"{key}: {value!r}")
    assert suggestion in message


def test_every_problem_is_reported_at_once() -> None:
    message = problems({"team": "Eta", "runtime": "tensorflow", "workers": "two"})
    assert message.startswith("3 problems:")
    assert "runtime: 'tensorflow' is not a runtime; choose one of python, onnx, torch" in message
    assert "workers: 'two' is not a whole number" in message


def test_unknown_keys_get_a_suggestion() -> None:
    assert "teams: unknown key; did you mean 'team'?" in problems({"teams": "eta"})


def test_limits_must_cover_requests() -> None:
    assert "cpu_limit: '500m' is below cpu_request '1'" in problems({"cpu_limit": "500m"})
    assert "memory_limit: '512Mi' is below memory_request '1Gi'" in problems(
        {"memory_limit": "512Mi"}
    )
    # a larger request raises the default limit with it
    spec = build_service_spec({**MINIMAL, "cpu_request": "4", "memory_request": "8Gi"})
    assert (spec.resources.cpu_limit, spec.resources.memory_limit) == ("4", "8Gi")


@pytest.mark.parametrize(
    ("key", "value"),
    [("cpu_request", "1 core"), ("cpu_request", "0"), ("memory_request", "1GB")],
)
def test_quantities_use_kubernetes_units(key: str, value: str) -> None:
    assert f"{key}: {value!r} is not a" in problems({key: value})


def test_replicas_stay_within_the_autoscaler_bounds() -> None:
    assert "max_replicas: 2 is out of range; use a number from 3 to 1000" in problems(
        {"min_replicas": "3", "max_replicas": "2"}
    )
    assert "replicas: 9 is out of range; use a number from 2 to 5" in problems(
        {"max_replicas": "5", "replicas": "9"}
    )
    spec = build_service_spec({**MINIMAL, "min_replicas": "12"})
    assert (spec.scaling.replicas, spec.scaling.max_replicas) == (12, 12)


def test_owners_are_github_handles_or_emails() -> None:
    spec = build_service_spec({**MINIMAL, "owners": "@eta-org/ml, ml@eta.example"})
    assert spec.owners == ("@eta-org/ml", "ml@eta.example")
    assert "owners: 'eta team' is not an owner" in problems({"owners": "eta team"})


def test_servinglib_source_is_a_checkout_a_wheel_or_a_requirement(tmp_path: Path) -> None:
    wheel = tmp_path / "servinglib-0.1.0-py3-none-any.whl"
    wheel.write_bytes(b"")
    assert build_service_spec(
        {**MINIMAL, "servinglib": str(wheel)}
    ).servinglib.requirement_line() == ("./wheels/servinglib-0.1.0-py3-none-any.whl[tracing]")
    pinned = build_service_spec({**MINIMAL, "servinglib": "servinglib==0.1.0"})
    assert pinned.servinglib.requirement_line() == "servinglib[tracing]==0.1.0"
    # the extras given are kept, an index URL is left alone
    indexed = "--index-url https://servinglib.example/simple servinglib[grpc]>=0.2,<0.3"
    assert build_service_spec({**MINIMAL, "servinglib": indexed}).servinglib.requirement_line() == (
        "--index-url https://servinglib.example/simple\nservinglib[grpc,tracing]>=0.2,<0.3"
    )
    assert "does not exist" in problems({"servinglib": str(tmp_path / "missing.whl")})
    assert "is not a servinglib checkout" in problems({"servinglib": str(tmp_path)})
    assert "neither a path nor a servinglib requirement" in problems({"servinglib": "flask"})


def test_add_model_answers() -> None:
    assert build_model_spec({"model": "fraud-v2", "runtime": "torch"}) == ModelSpec(
        "fraud-v2", "torch"
    )
    assert ModelSpec("fraud-v2").class_name == "FraudV2Model"
    assert ModelSpec("fraud-v2").ident == "fraud_v2"
    with pytest.raises(SpecError, match="model: 'Fraud' is not a DNS-safe name"):
        build_model_spec({"model": "Fraud"})


def test_interactive_answers_are_asked_again_until_valid() -> None:
    replies = iter(["Bad_Team", "eta", "eta", ""])  # then the default for every other key
    asked: list[tuple[str, str | None, str | None]] = []

    def ask(prompt: Prompt, default: str | None, error: str | None) -> str:
        asked.append((prompt.key, default, error))
        return next(replies, "")

    spec = build_service_spec({"servinglib": str(REPO_ROOT)}, ask)
    assert spec.team == "eta"
    assert asked[0] == ("team", None, None)
    assert asked[1][0] == "team"
    assert "'Bad_Team' is not a DNS-safe name" in str(asked[1][2])
    assert ("service", "eta-service", None) in asked
    assert [key for key, _, _ in asked[2:]] == [
        p.key for p in SERVICE_PROMPTS if p.key not in ("team", "servinglib")
    ]


def test_the_cli_validates_before_writing_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["--no-input", "--output-dir", str(tmp_path / "out"), "team=Eta", "model=eta"])
    assert code == 2
    assert "team: 'Eta' is not a DNS-safe name" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_the_cli_refuses_malformed_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--no-input", "team", "model=a", "model=b"]) == 2
    err = capsys.readouterr().err
    assert "'team': expected KEY=VALUE" in err
    assert "model: given twice" in err


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ("0.2.0", "servinglib>=0.2,<0.3"),
        ("0.2.7", "servinglib>=0.2,<0.3"),
        ("1.4.0", "servinglib>=1.4,<2"),
        ("0.3.0rc1", "servinglib>=0.3.0rc1,<0.4"),
        ("0.3.0.dev5+g1a2b3c4", "servinglib>=0.3.0.dev5,<0.4"),
        ("not-a-version", "servinglib"),
    ],
)
def test_the_default_is_the_range_compatible_with_the_installed_version(
    version: str, expected: str
) -> None:
    assert compatible_range(version) == expected


def test_the_default_answer_follows_the_installed_servinglib() -> None:
    installed = importlib.metadata.version("servinglib")
    assert default_servinglib_source() == compatible_range(installed)
    spec = build_service_spec({"team": "eta", "model": "eta"})
    assert spec.servinglib.kind == "requirement"
    assert spec.servinglib.requirement_line() == compatible_range(installed).replace(
        "servinglib", "servinglib[tracing]", 1
    )


def test_prediction_sinks_are_checked_answers() -> None:
    spec = build_service_spec({**MINIMAL, "prediction_sinks": "kafka,parquet"})
    assert spec.sinks.kinds == ("kafka", "parquet")
    assert (spec.sinks.kafka_topic, spec.sinks.lake_url) == (
        "eta-service-predictions",
        "s3://eta-predictions/eta-service",
    )
    assert build_service_spec(MINIMAL).sinks.kinds == ()
    found = problems(
        {
            "prediction_sinks": "kafka,redis",
            "kafka_bootstrap_servers": "kafka:99999",
            "kafka_topic": "bad topic",
            "lake_url": "ftp://bucket/x",
        }
    )
    assert "prediction_sinks: 'kafka,redis' is not a list of sinks; use none, kafka" in found
    assert "kafka_bootstrap_servers: 'kafka:99999' is not host:port" in found
    assert "kafka_topic: 'bad topic' is not a Kafka topic name" in found
    assert "lake_url: 'ftp://bucket/x' is not a bucket URL; use s3://BUCKET/PREFIX" in found
