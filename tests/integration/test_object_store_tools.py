"""Object storage with the tools around the server: ``servinglib publish`` into a real S3 API
(moto server), an example model served from the bucket as from its folder, and ``servinglib
profile`` on a URL repository. Reached through boto3/s3fs; servinglib's I/O is not patched."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from servinglib.cli.main import main
from servinglib.config.spec import load_config
from servinglib.lifecycle.store import PUBLISHING_MARKER, list_store
from tests.conftest import FIXTURES, REPO_ROOT
from tests.object_store import S3Store

pytestmark = pytest.mark.integration

DIGITS = REPO_ROOT / "examples" / "digits-classifier"


@dataclass(frozen=True)
class Run:
    """What one ``servinglib`` command did."""

    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def cli(s3_store: S3Store, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> Any:
    """``cli(*ARGS)``: ``servinglib ARGS`` with the AWS chain pointing at the test store."""
    for key, value in s3_store.env.items():
        monkeypatch.setenv(key, value)

    def run(*args: str) -> Run:
        capsys.readouterr()
        code = main(list(args))
        out = capsys.readouterr()
        return Run(code, out.out, out.err)

    return run


def test_publish_stages_copies_in_whole_and_refuses_to_change_a_version(
    tmp_path: Path, s3_store: S3Store, cli: Any
) -> None:
    shutil.copytree(FIXTURES / "drift", tmp_path / "svc")
    config = tmp_path / "svc" / "servinglib.yaml"
    s3_store.client.create_bucket(Bucket="publish")
    first = cli("publish", "--config", str(config), "--to", "s3://publish/svc")
    assert first.returncode == 0, first.stderr
    assert first.stdout.count("published ") == 3, first.stdout
    assert "s3://publish/svc/risk/1  digest " in first.stdout
    keys = {
        o["Key"] for o in s3_store.client.list_objects_v2(Bucket="publish")["Contents"]
    }  # the staging prefixes and the markers are gone
    assert keys == {f"svc/risk/{v}/test_data.json" for v in ("1", "2", "3")}

    again = cli("publish", "--config", str(config), "--to", "s3://publish/svc")
    assert again.returncode == 0, again.stderr
    assert again.stdout.count("unchanged ") == 3, again.stdout
    (tmp_path / "svc" / "models" / "risk" / "2" / "extra.json").write_text("{}")
    changed = cli("publish", "--config", str(config), "--to", "s3://publish/svc")
    assert changed.returncode == 2
    assert "s3://publish/svc/risk/2 already holds other content" in changed.stderr
    assert "new version name" in changed.stderr

    # A version whose marker stands (a publish in progress, or one killed) is not listed.
    s3_store.client.put_object(Bucket="publish", Key=f"svc/risk/3/{PUBLISHING_MARKER}", Body=b"")
    served = tmp_path / "svc" / "served.yaml"
    served.write_text(
        config.read_text().replace("repository: models/risk", "repository: s3://publish/svc/risk")
    )
    listing = list_store(load_config(served).models[0])
    assert sorted(listing.versions) == ["1", "2"]


def test_an_example_model_answers_from_s3_as_from_its_folder(
    tmp_path: Path, s3_store: S3Store, start_server: Any
) -> None:
    shutil.copytree(DIGITS / "models", tmp_path / "models")
    s3_store.client.create_bucket(Bucket="examples")
    uploaded = []
    for path in sorted((DIGITS / "models" / "digits").rglob("*")):
        if path.is_file():
            key = f"digits-classifier/digits/{path.relative_to(DIGITS / 'models' / 'digits')}"
            s3_store.client.put_object(Bucket="examples", Key=key, Body=path.read_bytes())
            uploaded.append(key)
    document = yaml.safe_load((DIGITS / "servinglib.yaml").read_text())
    (local,) = document["models"]
    remote = {**local, "name": "digits-s3", "repository": "s3://examples/digits-classifier/digits"}
    document["models"] = [local, remote]
    document["model_cache"] = {"dir": "cache"}
    config = tmp_path / "servinglib.yaml"
    config.write_text(yaml.safe_dump(document))
    start = len(s3_store.log.lines)
    server = start_server(config, "--workers", "2", env=s3_store.env)
    keys = [f"/examples/{key}" for key in uploaded]
    gets = s3_store.log.gets(start)
    assert {k: gets[k] for k in keys} == dict.fromkeys(keys, 1), gets  # once per server

    request = json.loads((DIGITS / "request.json").read_text())
    answers = {}
    for model in ("digits", "digits-s3"):
        for version in ("1", "2"):
            body = {**request, "model_id": model, "version": version}
            answer = requests.post(f"{server.url}/infer", json=body, timeout=10)
            assert answer.status_code == 200, answer.text
            answers[model, version] = answer.json()["output"]
    assert answers["digits", "1"] == answers["digits-s3", "1"]
    assert answers["digits", "2"] == answers["digits-s3", "2"]
    cached = next((tmp_path / "cache").iterdir())
    assert (cached / "2" / "model.onnx").read_bytes() == (
        DIGITS / "models" / "digits" / "2" / "model.onnx"
    ).read_bytes()


def test_profile_syncs_a_url_repository_first(tmp_path: Path, s3_store: S3Store, cli: Any) -> None:
    shutil.copytree(FIXTURES / "drift", tmp_path / "svc")
    s3_store.client.create_bucket(Bucket="profiled")
    published = cli(
        "publish",
        "--config",
        str(tmp_path / "svc" / "servinglib.yaml"),
        "--to",
        "s3://profiled",
    )
    assert published.returncode == 0, published.stderr
    config = tmp_path / "svc" / "servinglib.yaml"
    config.write_text(
        config.read_text().replace("repository: models/risk", "repository: s3://profiled/risk")
        + "model_cache: {dir: cache}\n"
    )
    shutil.rmtree(tmp_path / "svc" / "models" / "risk" / "1")  # only the store has it
    data = tmp_path / "train.csv"
    data.write_text("a,city\n" + "".join(f"{i / 10},{'xy'[i % 2]}\n" for i in range(40)))
    common = ["profile", "--config", str(config), "--model", "risk", "--data", str(data)]
    with_outputs = cli(*common, "--version", "1", "--no-progress")
    assert with_outputs.returncode == 0, with_outputs.stderr
    assert "profile of 4 field(s) written to" in with_outputs.stdout
    assert "s3://profiled/risk" in with_outputs.stderr  # where the profile is not
    features_only = cli(*common, "--version", "2", "--no-outputs", "--no-progress")
    assert features_only.returncode == 0, features_only.stderr
    cached = next((tmp_path / "svc" / "cache").iterdir())
    fields = json.loads((cached / "1" / "profile.json").read_text())["fields"]
    assert {f["name"] for f in fields} == {"a", "city", "score", "segment"}
    assert {f["role"] for f in fields if f["name"] == "score"} == {"output"}
    assert (cached / "2" / "profile.json").is_file()
