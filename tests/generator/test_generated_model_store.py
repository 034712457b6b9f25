"""The generated repository's model bucket: Terraform that lets serving only read and CI
write, a CI job that publishes, and the repository's own publish test (moto server mode)."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import hcl2
import yaml

from tests.generator._repos import REPO_ROOT, run
from tests.generator.test_generated_files import hcl

Rendered = Callable[[str], Path]


def _blocks(parsed: dict[str, list[Any]], kind: str) -> dict[str, dict[str, Any]]:
    """``resource`` or ``data`` blocks of model_store.tf by ``type.name``."""
    return {
        f"{type_}.{name}": body
        for block in parsed.get(kind, [])
        for type_, named in block.items()
        for name, body in named.items()
    }


def _statements(document: dict[str, Any]) -> dict[str, tuple[set[str], list[str]]]:
    return {s["sid"]: (set(s["actions"]), s["resources"]) for s in document["statement"]}


def test_model_bucket_is_private_versioned_encrypted_and_read_only_for_serving(
    rendered: Rendered,
) -> None:
    repo = rendered("python")
    text = (repo / "terraform" / "model_store.tf").read_text()
    store = {k: v for k, v in hcl(repo).items() if k in ("resource", "data")}
    resources = _blocks(store, "resource")
    assert hcl2.loads(text)  # the file alone parses too
    bucket = "aws_s3_bucket.models[0]"
    versioning = resources["aws_s3_bucket_versioning.models"]
    assert versioning["versioning_configuration"][0]["status"] == "Enabled"
    blocked = resources["aws_s3_bucket_public_access_block.models"]
    flags = ("block_public_acls", "block_public_policy", "ignore_public_acls")
    assert all(blocked[f] is True for f in (*flags, "restrict_public_buckets"))
    encryption = resources["aws_s3_bucket_server_side_encryption_configuration.models"]
    default = encryption["rule"][0]["apply_server_side_encryption_by_default"][0]
    assert default["sse_algorithm"] == "aws:kms"
    for name in ("versioning", "public_access_block", "server_side_encryption_configuration"):
        assert resources[f"aws_s3_bucket_{name}.models"]["bucket"] == f"${{{bucket}.id}}"

    documents = _blocks(store, "data")
    read = _statements(documents["aws_iam_policy_document.model_read"])
    assert read == {
        "ListModelVersions": ({"s3:ListBucket"}, [f"${{{bucket}.arn}}"]),
        "ReadModelFiles": ({"s3:GetObject"}, [f"${{{bucket}.arn}}/*"]),
    }
    publish = _statements(documents["aws_iam_policy_document.model_publish"])
    assert publish["PublishModelVersions"][0] == {"s3:GetObject", "s3:PutObject", "s3:DeleteObject"}
    assert all("*" not in a for actions, _ in publish.values() for a in actions)
    policies = (
        resources["aws_iam_role_policy.model_read"],
        resources["aws_iam_role_policy.model_publish"],
    )
    assert [p["role"] for p in policies] == [
        "${var.model_serving_role}",
        "${var.model_publisher_role}",
    ]
    assert policies[0]["policy"] == "${data.aws_iam_policy_document.model_read[0].json}"
    assert policies[1]["policy"] == "${data.aws_iam_policy_document.model_publish[0].json}"
    terraform = shutil.which("terraform")
    if terraform:  # formatting needs no provider; validate would download the AWS provider
        run([terraform, "fmt", "-check", "-diff", repo / "terraform"])


def test_ci_publishes_after_every_check_on_main_with_oidc(rendered: Rendered) -> None:
    repo = rendered("python")
    jobs = yaml.safe_load((repo / ".github/workflows/ci.yml").read_text())["jobs"]
    job = jobs["publish"]
    assert set(job["needs"]) == {"service", "models"}
    assert "refs/heads/main" in job["if"]
    assert job["permissions"]["id-token"] == "write"
    (command,) = [s["run"] for s in job["steps"] if "servinglib publish" in s.get("run", "")]
    assert command == 'servinglib publish --to "s3://${{ vars.MODEL_BUCKET }}/eta-python"'


def test_the_generated_publish_test_serves_from_the_bucket(
    rendered: Rendered, tmp_path: Path
) -> None:
    repo = shutil.copytree(rendered("python"), tmp_path / "repo")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["PYTHONPATH"] = str(REPO_ROOT)  # servinglib of this checkout, as the repo installs it
    result = run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_publish.py"],
        cwd=repo,
        env=env,
    )
    assert "1 passed" in result.stdout, result.stdout
    assert not list(repo.glob(".publish-test-*.yaml"))  # the test leaves the repo as it was
