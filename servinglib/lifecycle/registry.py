"""Model versions and their lifecycle: discover, load, self-test, warm up, serve.

Each version of each model moves through one state machine per worker process::

    DISCOVERED → LOADING → SELF_TEST → WARMING → READY
                    ╰──────────┴──────────┴────→ FAILED(reason)

A FAILED version never answers; other versions and models are unaffected. The server is
ready when every model's ``default_version`` is READY.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from servinglib.compose.order import load_order
from servinglib.config.spec import ModelConfig, ServiceConfig
from servinglib.errors import (
    ModelNotFoundError,
    ModelNotReadyError,
    ServinglibError,
    VersionNotFoundError,
    public_reason,
)
from servinglib.lifecycle.artifacts import (
    NAME_PATTERN,
    check_artifacts,
    discover_versions,
    version_directory,
    version_sort_key,
)
from servinglib.lifecycle.importing import import_model_class
from servinglib.lifecycle.load_timeout import LoadFailedError as _LoadFailedError
from servinglib.lifecycle.load_timeout import with_timeout as _with_timeout
from servinglib.lifecycle.selftest import compare_outputs, load_test_data, run_selftests
from servinglib.lifecycle.tracebacks import user_frame
from servinglib.lifecycle.versions import (
    LifecycleListener,
    ReadyVersion,
    VersionRecord,
    VersionState,
)
from servinglib.model import Model, ModelCaller, ModelSettings, SelfTestCase
from servinglib.model_metrics import ModelMetrics
from servinglib.serving.isolation import BatchAnswerError, one_per_input

__all__ = [
    "NAME_PATTERN",
    "LifecycleListener",
    "ModelRegistry",
    "ReadyVersion",
    "VersionRecord",
    "VersionState",
    "discover_versions",
]

log = logging.getLogger("servinglib.lifecycle.registry")


class ModelRegistry:
    """Every configured model version of one worker, with its state.

    Example::

        registry = ModelRegistry(load_config("servinglib.yaml"))
        registry.load_all()
        ready = registry.get("eta")           # the READY default version
        ready.instance.predict({"distance_km": 2.0})
    """

    def __init__(
        self,
        config: ServiceConfig,
        listener: LifecycleListener | None = None,
        metrics: Callable[[str, str], ModelMetrics] | None = None,
    ) -> None:
        self._config = config
        self._listener = listener
        self._metrics = metrics  # (model, version) -> the version's own metrics
        self._lock = threading.Lock()
        self._models: dict[str, ModelConfig] = {m.name: m for m in config.models}
        self._versions: dict[str, dict[str, VersionRecord]] = {}
        self._defaults: dict[str, str] = {}
        # model -> the split a rollout step set (None or absent: the configured one)
        self.traffic_splits: dict[str, Mapping[str, float] | None] = {}
        # URL repositories: the master's store sync status per model (set when serving).
        self.store_status: Callable[[], Mapping[str, Any]] | None = None
        for model in config.models:
            records = {}
            for version in discover_versions(model):
                records[version] = VersionRecord(
                    model.name, version, version_directory(model.repository, model.name, version)
                )
            self._versions[model.name] = records

    @property
    def config(self) -> ServiceConfig:
        """The configuration this registry was built from."""
        return self._config

    def model_names(self) -> list[str]:
        """Configured model names, in config order."""
        return list(self._models)

    def model_config(self, model: str) -> ModelConfig:
        """Configuration of ``model``; raises ModelNotFoundError."""
        try:
            return self._models[model]
        except KeyError:
            raise ModelNotFoundError(model, self.model_names()) from None

    def records(self, model: str) -> list[VersionRecord]:
        """Every version of ``model``, whatever its state."""
        self.model_config(model)
        return list(self._versions[model].values())

    def default_version(self, model: str) -> str:
        """The version answering requests that name none (config, or a promotion)."""
        return self._defaults.get(model) or self.model_config(model).default_version

    def record(self, model: str, version: str | None = None) -> VersionRecord:
        """The record of one version (default version when ``version`` is None)."""
        self.model_config(model)
        if version is None:
            # A promotion followed by an unload of the old default may land between reading
            # the default and reading the versions: read the default again (lock-free).
            for _ in range(3):
                found = self._versions[model].get(self.default_version(model))
                if found is not None:
                    return found
            default = self.default_version(model)
            if default not in self._versions[model]:  # configured, but not here (yet)
                raise ModelNotReadyError(
                    model,
                    default,
                    "not loaded",
                    "the default version is not in this worker yet: its files are not in "
                    "the repository or model cache (a store that has not answered, or a "
                    "download in progress); /models shows the sync state",
                )
            version = default
        try:
            return self._versions[model][version]
        except KeyError:
            raise VersionNotFoundError(model, version, list(self._versions[model])) from None

    def add_version(
        self, model: str, version: str, caller: ModelCaller | None = None
    ) -> VersionRecord:
        """Discover and load a version that was not loaded at start (admin ``load``).

        Loading runs in the calling thread; the default version keeps serving meanwhile and
        is untouched whatever the outcome (``caller``: see :meth:`load_version`).
        """
        config = self.model_config(model)
        path = version_directory(config.repository, model, version)
        if not path.is_dir():
            raise VersionNotFoundError(model, version, list(self._versions[model]))
        with self._lock:
            existing = self._versions[model].get(version)
            if existing is not None and existing.state is not VersionState.FAILED:
                return existing
            record = VersionRecord(model, version, path)
            versions = dict(self._versions[model])
            versions[version] = record
            self._versions[model] = dict(
                sorted(versions.items(), key=lambda kv: version_sort_key(kv[0]))
            )
        return self.load_version(config, record, caller)

    def set_default(self, model: str, version: str) -> None:
        """Point unversioned requests at ``version`` (admin ``promote``/``rollback``).

        Raises:
            ModelNotReadyError: the version is not READY here; the default is unchanged.
        """
        record = self.get(model, version)
        with self._lock:
            self._defaults[model] = record.version
        log.info("model %r: default version is now %r", model, version)

    def remove_version(self, model: str, version: str) -> None:
        """Stop serving a version (admin ``unload``); the default version cannot be removed."""
        if version == self.default_version(model):
            raise ModelNotReadyError(model, version, "the default version", "promote another first")
        with self._lock:
            versions = dict(self._versions[model])
            if versions.pop(version, None) is None:
                return
            self._versions[model] = versions
        # A worker freezes what it loaded at start out of the garbage collector's sight
        # (servinglib.serve.hooks.post_worker_init); hand it back, so that the collector
        # can free this version's reference cycles once its last request is done.
        gc.unfreeze()
        log.info("model %r: version %r unloaded", model, version)

    def get(self, model: str, version: str | None = None) -> ReadyVersion:
        """The READY version that should answer; raises if there is none.

        Raises:
            ModelNotFoundError, VersionNotFoundError: no such model or version.
            ModelNotReadyError: the version exists but is not READY (its state and reason).
        """
        record = self.record(model, version)
        ready = record.ready
        if record.state is not VersionState.READY or ready is None:
            raise ModelNotReadyError(
                model, record.version, record.state.value, public_reason(record.reason)
            )
        return ready

    def is_ready(self) -> bool:
        """True when every model's default version is READY."""
        for name in self._models:
            record = self._versions[name].get(self.default_version(name))
            if record is None or record.state is not VersionState.READY:
                return False
        return True

    def load_all(self, caller: ModelCaller | None = None) -> None:
        """Load every discovered version of every model; failures only mark that version.

        Composed models load last, each after the models it calls, so their self-tests run
        through members that are already READY (``caller``: see :meth:`load_version`).
        """
        for model in load_order(list(self._models.values())):
            if model.default_version not in self._versions[model.name]:
                log.error(
                    "model %r: default_version %r has no directory in %s",
                    model.name,
                    model.default_version,
                    model.repository,
                )
            for record in self._versions[model.name].values():
                self.load_version(model, record, caller)

    def load_version(
        self, model: ModelConfig, record: VersionRecord, caller: ModelCaller | None = None
    ) -> VersionRecord:
        """Drive one version through its lifecycle to READY or FAILED; ``caller`` is what
        it calls other models with (``ModelSettings.caller``: composed models need one)."""
        self._set_state(record, VersionState.DISCOVERED)
        try:
            self._set_state(record, VersionState.LOADING)
            check_artifacts(model, record.version, record.path)
            abandoned = threading.Event()
            copies = _with_timeout(
                lambda: self._load_and_test(model, record, abandoned, caller),
                model.load_timeout_s,
                f"loading and self-testing took longer than "
                f"load_timeout_s={model.load_timeout_s:g}",
                abandoned,
            )
            instance = copies[0]
        except Exception as e:
            record.reason = str(e) if isinstance(e, ServinglibError) else f"{type(e).__name__}: {e}"
            tracebacks = record.report.tracebacks()  # of self-tests whose predict raised
            log.error(
                "model %r version %r FAILED: %s%s",
                record.model,
                record.version,
                record.reason,
                "\n" + tracebacks if tracebacks else "",
                # The user's traceback: an unexpected error, or one load() raised.
                exc_info=not isinstance(e, ServinglibError) or e.__cause__ is not None,
            )
            record.instance = None
            record.copies = []
            record.ready = None
            self._set_state(record, VersionState.FAILED)
            return record
        record.instance = instance
        record.copies = copies
        record.reason = ""
        record.ready = ReadyVersion(
            record.model, record.version, record.path, instance, tuple(copies)
        )
        self._set_state(record, VersionState.READY)
        log.info(
            "model %r version %r READY (load %.3fs, self-test %.3fs, %d cases)",
            record.model,
            record.version,
            record.load_s,
            record.selftest_s,
            len(record.report.cases),
        )
        return record

    def _load_and_test(
        self,
        model: ModelConfig,
        record: VersionRecord,
        abandoned: threading.Event,
        caller: ModelCaller | None,
    ) -> list[Model]:
        instance = self._load_instance(model, record, caller)
        if not abandoned.is_set():  # a load that timed out must not move the FAILED state
            self._set_state(record, VersionState.SELF_TEST)
        cases = self._self_test(model, record, instance)
        if not abandoned.is_set():
            self._set_state(record, VersionState.WARMING)
        self._warm_up(record, instance, cases)
        copies = [instance]
        for _ in range((model.instances or 1) - 1):  # Triton's instance_group count
            copy = self._load_instance(model, record, caller)
            self._warm_up(record, copy, cases)
            copies.append(copy)
        return copies

    def _load_instance(
        self, model: ModelConfig, record: VersionRecord, caller: ModelCaller | None
    ) -> Model:
        cls = import_model_class(model.class_ref, self._config.root, self._config.python_path)
        started = time.perf_counter()
        instance = cls()
        instance.configure(
            ModelSettings(
                name=model.name,
                version=record.version,
                workers=self._config.server.workers,
                runtime_options=model.runtime_options,
                inputs=model.inputs,
                outputs=model.outputs,
                caller=caller,
                composition=model.composition,
                metrics=self._metrics and self._metrics(model.name, record.version),
            )
        )
        try:
            instance.load(record.path)
        except Exception as e:
            where = user_frame(e)
            raise _LoadFailedError(
                f"load() raised {type(e).__name__}: {e}" + (f" at {where}" if where else "")
            ) from e
        finally:
            record.load_s = time.perf_counter() - started
            if self._listener:
                self._listener.version_loaded(record.model, record.version, record.load_s)
        return instance

    def _self_test(
        self, model: ModelConfig, record: VersionRecord, instance: Model
    ) -> list[SelfTestCase]:
        cases = load_test_data(record.path) + list(instance.self_test_cases())
        if not cases:
            if model.require_self_tests:
                raise _LoadFailedError(
                    f"no self-test cases: add {record.path / 'test_data.json'} or set "
                    "require_self_tests: false for this model"
                )
            return cases
        started = time.perf_counter()
        record.report = run_selftests(instance, cases)
        record.selftest_s = time.perf_counter() - started
        if self._listener:
            self._listener.version_self_tested(
                record.model, record.version, record.selftest_s, record.report.passed
            )
        if not record.report.passed:
            raise _LoadFailedError(record.report.failure_summary())
        return cases

    @staticmethod
    def _warm_up(record: VersionRecord, instance: Model, cases: Sequence[SelfTestCase]) -> None:
        """Exercise the batch path with the self-test inputs; it must agree with predict()."""
        if not cases:
            return
        try:
            outputs = one_per_input(
                instance.predict_batch([instance.prepare(case.input) for case in cases]), cases
            )
        except BatchAnswerError as e:
            raise _LoadFailedError(str(e)) from None
        for case, output in zip(cases, outputs, strict=True):
            problems = compare_outputs(case.expected, output, case.tolerance)
            if problems:
                raise _LoadFailedError(
                    f"predict_batch disagrees with the expected output of self-test "
                    f"{case.name!r}: {problems[0]}"
                )
        record.example_output = outputs[0]

    def _set_state(self, record: VersionRecord, state: VersionState) -> None:
        with self._lock:
            record.state = state
        if self._listener:
            self._listener.version_state(record.model, record.version, state)
