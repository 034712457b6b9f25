"""In-place edits add a model while keeping what a team wrote, or give up without damage."""

from __future__ import annotations

import json

import yaml
from servinglib_generator._edits import (
    append_model_entry,
    append_to_csv_annotation,
    append_to_flow_list,
    append_to_json_list,
    ensure_requirements,
)

ENTRY = "- name: fraud\n  runtime: onnx  # new\n  repository: models/fraud\n"

CONFIG = """\
# hand-written header
service: eta-service
server:
  workers: 4   # tuned by hand
models:
  - name: eta
    class: models/eta/model.py:EtaModel  # ours
    repository: models/eta
# a comment at column 0 between the list and the next key
monitoring: {}
"""


def test_a_model_is_appended_with_every_comment_kept() -> None:
    text, kept = append_model_entry(CONFIG, ENTRY)
    assert kept
    assert text.startswith(CONFIG.split("# a comment", maxsplit=1)[0])
    assert "  - name: fraud\n    runtime: onnx  # new\n    repository: models/fraud\n" in text
    assert text.endswith(
        "# a comment at column 0 between the list and the next key\nmonitoring: {}\n"
    )
    data = yaml.safe_load(text)
    assert [m["name"] for m in data["models"]] == ["eta", "fraud"]
    assert data["server"] == {"workers": 4}


def test_a_list_at_column_zero_and_an_empty_list_work_too() -> None:
    text, kept = append_model_entry("service: s\nmodels:\n- name: eta\n  repository: r\n", ENTRY)
    assert kept
    assert text.endswith(
        "- name: eta\n  repository: r\n- name: fraud\n  runtime: onnx  # new\n"
        "  repository: models/fraud\n"
    )
    text, kept = append_model_entry("service: s\nmodels:\n  # none yet\n", ENTRY)
    assert kept
    assert yaml.safe_load(text)["models"][0]["name"] == "fraud"


def test_a_flow_style_list_is_rewritten_from_its_data() -> None:
    text, kept = append_model_entry("service: s\nmodels: [{name: eta, repository: r}]\n", ENTRY)
    assert not kept
    assert yaml.safe_load(text) == {
        "service": "s",
        "models": [
            {"name": "eta", "repository": "r"},
            {"name": "fraud", "runtime": "onnx", "repository": "models/fraud"},
        ],
    }


WORKFLOW = """\
jobs:
  models:
    strategy:
      matrix:
        # one entry per model
        model: [eta]   # keep me
"""


def test_the_ci_matrix_gains_the_model_in_place() -> None:
    text = append_to_flow_list(WORKFLOW, ("jobs", "models", "strategy", "matrix", "model"), "fraud")
    assert text == WORKFLOW.replace("[eta]", "[eta, fraud]")


def test_a_restructured_matrix_is_left_alone() -> None:
    block_style = WORKFLOW.replace("model: [eta]   # keep me", "model:\n          - eta")
    path = ("jobs", "models", "strategy", "matrix", "model")
    assert append_to_flow_list(block_style, path, "fraud") is None
    assert append_to_flow_list("jobs: {}\n", path, "fraud") is None


def test_the_models_annotation_gains_the_model() -> None:
    manifest = 'metadata:\n  annotations:\n    servinglib.dev/models: "eta"\n    other: "x"\n'
    text = append_to_csv_annotation(manifest, "servinglib.dev/models", "fraud")
    assert text == manifest.replace('"eta"', '"eta,fraud"')
    empty = manifest.replace('"eta"', '""')
    assert append_to_csv_annotation(empty, "servinglib.dev/models", "eta") == manifest
    assert append_to_csv_annotation("kind: Service\n", "servinglib.dev/models", "x") is None


def test_tfvars_keep_other_keys() -> None:
    text = append_to_json_list('{"models": ["eta"], "image": "x"}', "models", "fraud")
    assert text is not None
    assert json.loads(text) == {"models": ["eta", "fraud"], "image": "x"}
    assert append_to_json_list('{"models": "eta"}', "models", "fraud") is None
    assert append_to_json_list("not json", "models", "fraud") is None


def test_requirements_are_added_once() -> None:
    base = "# servinglib\nservinglib @ file:///srv/servinglib\nonnxruntime>=1.18\n"
    assert ensure_requirements(base, [("onnxruntime", "onnxruntime>=1.17")]) == base
    assert ensure_requirements(base, [("torch", "torch==2.13.0")]) == base + "torch==2.13.0\n"
    assert ensure_requirements("Torch==2.13.0", [("torch", "torch==2.13.0")]) == "Torch==2.13.0"
