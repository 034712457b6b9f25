"""servinglib.lifecycle.artifacts and the registry's hygiene: containment, pickle refusal, pins, timeouts."""

from __future__ import annotations

import bz2
import gzip
import hashlib
import io
import json
import lzma
import os
import pickle
import time
import zlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servinglib.config.spec import load_config
from servinglib.errors import ModelLoadError, VersionNotFoundError
from servinglib.lifecycle.artifacts import find_pickles, verify_sha256, version_directory
from servinglib.lifecycle.registry import ModelRegistry, VersionState

TRAVERSAL_PIECES = st.sampled_from(
    [
        "..",
        ".",
        "/",
        "\\",
        "%2e",
        "%2f",
        "~",
        "\x00",
        "a",
        "1",
        "etc",
        "passwd",
        "-",
        "_",
        " ",
        "..%2f",
        "//",
    ]
)
NAMES = st.one_of(st.text(max_size=40), st.lists(TRAVERSAL_PIECES, max_size=8).map("".join))


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("repo")
    (root / "repository" / "1").mkdir(parents=True)
    (root / "outside").mkdir()
    (root / "repository" / "escape").symlink_to(root / "outside")
    return root / "repository"


@settings(
    max_examples=10_000,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(name=NAMES)
def test_no_version_name_escapes_the_repository(repository: Path, name: str) -> None:
    try:
        path = version_directory(repository, "m", name)
    except VersionNotFoundError:
        return
    assert path.parent == repository.resolve()


def test_links_out_of_the_repository_are_refused(repository: Path) -> None:
    with pytest.raises(VersionNotFoundError):
        version_directory(repository, "m", "escape")
    assert version_directory(repository, "m", "1") == (repository / "1").resolve()


def test_pickles_are_found_by_suffix_and_by_content(tmp_path: Path) -> None:
    (tmp_path / "weights.npz").write_bytes(b"PK\x03\x04 not a pickle")
    (tmp_path / "model.joblib").write_bytes(b"whatever")
    (tmp_path / "innocent.bin").write_bytes(pickle.dumps({"a": 1}))
    assert [p.name for p in find_pickles(tmp_path)] == ["innocent.bin", "model.joblib"]


def test_sha256_pins(tmp_path: Path) -> None:
    (tmp_path / "model.onnx").write_bytes(b"graph")
    good = hashlib.sha256(b"graph").hexdigest()
    verify_sha256(tmp_path, {"model.onnx": good})
    with pytest.raises(ModelLoadError, match="restore the right file or update the pin"):
        verify_sha256(tmp_path, {"model.onnx": "0" * 64})
    with pytest.raises(ModelLoadError, match="not found"):
        verify_sha256(tmp_path, {"../model.onnx": good})


MODEL = """
import time
from pathlib import Path
import servinglib

class Slow(servinglib.Model):
    def load(self, path: Path) -> None:
        time.sleep(float((path / "sleep.txt").read_text()))

    def predict(self, features):
        return {"ok": True}
"""


def service(tmp_path: Path, extra: str = "") -> Path:
    (tmp_path / "slow.py").write_text(MODEL)
    for version, sleep in (("1", "0"), ("2", "5")):
        directory = tmp_path / "repo" / version
        directory.mkdir(parents=True)
        (directory / "sleep.txt").write_text(sleep)
        (directory / "test_data.json").write_text(
            json.dumps({"cases": [{"input": {}, "expected": {"ok": True}}]})
        )
    config = tmp_path / "servinglib.yaml"
    config.write_text(
        "service: s\nmodels:\n  - name: slow\n    class: slow.py:Slow\n    repository: repo\n"
        f"    default_version: '1'\n    load_timeout_s: 0.3\n{extra}"
    )
    return config


def test_a_hanging_load_fails_only_its_version(tmp_path: Path) -> None:
    registry = ModelRegistry(load_config(service(tmp_path), environ={}))
    started = time.monotonic()
    registry.load_all()
    assert time.monotonic() - started < 3
    assert registry.record("slow", "1").state is VersionState.READY
    hung = registry.record("slow", "2")
    assert hung.state is VersionState.FAILED
    assert "load_timeout_s=0.3" in hung.reason
    time.sleep(0.1)
    assert hung.state is VersionState.FAILED


def test_pickle_needs_allow_pickle_and_pins_are_checked(tmp_path: Path) -> None:
    config = service(tmp_path)
    (tmp_path / "repo" / "1" / "extra.pkl").write_bytes(pickle.dumps([1]))
    registry = ModelRegistry(load_config(config, environ={}))
    registry.load_all()
    assert "extra.pkl is pickle data" in registry.record("slow", "1").reason
    config.write_text(
        config.read_text() + "    allow_pickle: true\n"
        f"    sha256: {{'1/sleep.txt': '{'0' * 64}'}}\n"
    )
    registry = ModelRegistry(load_config(config, environ={}))
    registry.load_all()
    assert "pins" in registry.record("slow", "1").reason
    pin = hashlib.sha256(b"0").hexdigest()
    config.write_text(config.read_text().replace("0" * 64, pin))
    registry = ModelRegistry(load_config(config, environ={}))
    registry.load_all()
    assert registry.record("slow", "1").state is VersionState.READY


def _npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=True)
    return buffer.getvalue()


def _npz(**arrays: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    return buffer.getvalue()


PAYLOAD = {"weights": [1.0, 2.0], "call": os.system}  # os.system: a GLOBAL opcode


@pytest.mark.parametrize(
    ("name", "data"),
    [
        *[(f"protocol{p}.bin", pickle.dumps(PAYLOAD, protocol=p)) for p in range(6)],
        ("protocol0-plain.dat", pickle.dumps([1, 2, "x"], protocol=0)),
        ("model.pkl.gz.bin", gzip.compress(pickle.dumps(PAYLOAD, protocol=0), mtime=0)),
        ("weights.bz", bz2.compress(pickle.dumps(PAYLOAD, protocol=1))),
        ("weights.xz", lzma.compress(pickle.dumps(PAYLOAD))),
        ("weights.lzma", lzma.compress(pickle.dumps(PAYLOAD), format=lzma.FORMAT_ALONE)),
        ("weights.z", zlib.compress(pickle.dumps(PAYLOAD, protocol=1))),
        ("objects.npy", _npy(np.array([1, "a", None], dtype=object))),
        ("objects.npz", _npz(a=np.arange(3), o=np.array([{}], dtype=object))),
        ("large.bin", pickle.dumps([os.system, *[b"x" * 100] * 12_000], protocol=0)),
    ],
)
def test_pickles_are_found_by_content_whatever_their_name(
    tmp_path: Path, name: str, data: bytes
) -> None:
    (tmp_path / name).write_bytes(data)
    assert [p.name for p in find_pickles(tmp_path)] == [name]


def test_joblib_dumps_are_pickles_compressed_or_not(tmp_path: Path) -> None:
    joblib = pytest.importorskip("joblib")
    for compress in (0, 3, ("gzip", 3), ("bz2", 3), ("xz", 3), ("lzma", 3)):
        path = tmp_path / f"model-{compress}.out"
        joblib.dump({"w": np.arange(10.0)}, path, compress=compress)
    assert len(find_pickles(tmp_path)) == 6


def test_safe_files_are_not_taken_for_pickles(tmp_path: Path) -> None:
    (tmp_path / "weights.npz").write_bytes(_npz(w=np.arange(10.0), names=np.array(["a", "b"])))
    (tmp_path / "weights.npy").write_bytes(_npy(np.ones((3, 3), dtype=np.float32)))
    (tmp_path / "config.json").write_text('{"a": [1, 2]}')
    (tmp_path / "notes.txt").write_text("hello (lots of text) looks like opcodes.\n")
    (tmp_path / "offset.txt").write_text("0.5")  # POP, STOP: parses, but pops nothing
    (tmp_path / "data.gz").write_bytes(gzip.compress(b"plain text, not a pickle"))
    (tmp_path / "broken.npz").write_bytes(b"PK\x03\x04 not a zip")
    assert find_pickles(tmp_path) == []
