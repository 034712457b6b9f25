"""The one exception tree of servinglib.

Every error servinglib raises on purpose derives from :class:`ServinglibError`, so a caller
(the CLI, the HTTP layer, a team's own code) can catch the base once::

    ServinglibError
    ├── ConfigError               servinglib.yaml or a referenced file is wrong
    │   ├── SelfTestDataError     a test_data.json file is malformed
    │   ├── CompositionError      a pipeline:/ensemble: entry is wrong (compose.checks)
    │   └── InputFileError        a batch/profile input file is unreadable (tabular.reader)
    ├── ModelLoadError            a model class could not be imported, built or loaded
    ├── LoadFailedError           why a version FAILED in its lifecycle (lifecycle.load_timeout)
    ├── ModelNotFoundError        the request names a model that is not configured
    ├── VersionNotFoundError      the request names a version the model does not have
    ├── ModelNotReadyError        the version exists but is not READY (loading or FAILED)
    ├── InvalidInputError         the request body or features are invalid
    │   ├── UnsupportedRequestError   a feature of a protocol we do not serve
    │   └── ContentCodingError    a body that cannot be decoded (wire.content_coding)
    ├── OverloadedError           a bounded queue is full: shed, retry later
    ├── DeadlineExceededError     the request's deadline passed before it could be answered
    ├── PredictionError           the model raised while answering a request
    │   └── NonFiniteOutputError  its answer holds NaN or Infinity, which JSON cannot carry
    ├── StepOutputError           a composed step answered what the next cannot read
    ├── CombineError              an ensemble's answers cannot be combined (compose.combiners)
    ├── ProfileError              a drift profile cannot be built or read (monitoring.drift)
    ├── BatchAbortedError         a batch-predict job stopped (batch)
    ├── StoreError                a URL repository's store cannot be listed or read
    │                             (lifecycle.store)
    └── OptimizeError             servinglib optimize cannot go on (optimize.errors)
        └── ExportVerificationError   the exported graph does not answer as the model does

The errors of one tool or tier live beside it and derive from this tree; a test checks that
every ``ServinglibError`` subclass in the package is drawn here.

HTTP status codes live only in ``servinglib.http``; this module knows nothing about HTTP.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Sequence

__all__ = [
    "ConfigError",
    "DeadlineExceededError",
    "InvalidInputError",
    "ModelLoadError",
    "ModelNotFoundError",
    "ModelNotReadyError",
    "NonFiniteOutputError",
    "OverloadedError",
    "PredictionError",
    "SelfTestDataError",
    "ServinglibError",
    "UnsupportedRequestError",
    "VersionNotFoundError",
    "public_reason",
]


class ServinglibError(Exception):
    """Base of every error servinglib raises on purpose."""


class ConfigError(ServinglibError):
    """A configuration file, or something it refers to, is invalid.

    Args:
        message: what is wrong and how to fix it.
        source: the file the value came from.
        key_path: where in that file, e.g. ``models[0].default_version``.
    """

    def __init__(self, message: str, *, source: str = "", key_path: str = "") -> None:
        self.source = source
        self.key_path = key_path
        where = ": ".join(part for part in (source, key_path) if part)
        super().__init__(f"{where}: {message}" if where else message)


class SelfTestDataError(ConfigError):
    """A ``test_data.json`` file is malformed."""


class ModelLoadError(ServinglibError):
    """A model version could not be imported, instantiated or loaded."""


class ModelNotFoundError(ServinglibError):
    """The requested model is not configured."""

    def __init__(self, model: str, available: Sequence[str]) -> None:
        self.model = model
        self.available = list(available)
        super().__init__(
            f"unknown model {model!r}; available models: {', '.join(self.available) or 'none'}"
        )


class VersionNotFoundError(ServinglibError):
    """The requested version does not exist for this model."""

    def __init__(self, model: str, version: str, available: Sequence[str]) -> None:
        self.model = model
        self.version = version
        self.available = list(available)
        super().__init__(
            f"model {model!r} has no version {version!r}; "
            f"available versions: {', '.join(self.available) or 'none'}"
        )


class ModelNotReadyError(ServinglibError):
    """The version exists but cannot answer: it is still loading, or it FAILED."""

    def __init__(self, model: str, version: str, state: str, reason: str = "") -> None:
        self.model = model
        self.version = version
        self.state = state
        self.reason = reason
        detail = f" ({reason})" if reason else ""
        super().__init__(f"model {model!r} version {version!r} is {state}{detail}")


class InvalidInputError(ServinglibError):
    """The request is malformed or its features fail validation."""

    def __init__(self, message: str, *, field: str = "") -> None:
        self.field = field
        super().__init__(message)


class UnsupportedRequestError(InvalidInputError):
    """The request asks for a protocol feature servinglib does not implement."""


class OverloadedError(ServinglibError):
    """A bounded queue is full; the request was refused at once (load shedding)."""


class DeadlineExceededError(ServinglibError):
    """The request's deadline passed before it could be answered."""


class PredictionError(ServinglibError):
    """The model raised while answering; ``error_id`` ties the response to the log line."""

    def __init__(self, model: str, version: str, error_id: str) -> None:
        self.model = model
        self.version = version
        self.error_id = error_id
        super().__init__(
            f"model {model!r} version {version!r} failed to answer; "
            f"see the server log for error id {error_id}"
        )

    @classmethod
    def logged(cls, model: str, version: str, what: str, cause: BaseException) -> PredictionError:
        """Log ``cause`` with a new error id and return the error that names the id.

        ``what`` completes "model M version V ..." in the log line, e.g. "raised while
        predicting". The client sees only the id; the traceback stays in the log.
        """
        error_id = uuid.uuid4().hex[:12]
        logging.getLogger("servinglib.serving.service").error(
            "model %r version %r %s (error id %s)", model, version, what, error_id, exc_info=cause
        )
        return cls(model, version, error_id)


class NonFiniteOutputError(PredictionError):
    """The model answered with NaN or Infinity, which a JSON answer cannot carry.

    The model's fault, not the client's: a 500 that says so (the metric outcome is
    ``nonfinite_output``). Binary Open Inference outputs carry such values as they are.
    """

    def __init__(self, model: str, version: str, error_id: str) -> None:
        super().__init__(model, version, error_id)
        self.args = (
            f"model {model!r} version {version!r} answered NaN or Infinity, which JSON cannot "
            "carry (a fault of the model, not of the request; error id "
            f"{error_id}); Open Inference clients can ask for binary outputs to receive them",
        )


# An absolute file path of two or more segments (POSIX or Windows), e.g. in an OSError.
_ABSOLUTE_PATH = re.compile(r"(?<![\w.~])(?:[A-Za-z]:)?(?:[/\\][^\s'\"/\\:,()\[\]]+){2,}")
PUBLIC_REASON_LENGTH = 200


def public_reason(reason: str) -> str:
    """What of a failure reason may leave the server: absolute paths cut to ``.../`` and
    their last part, the first line only, at most 200 characters. The log and the admin
    API keep the full reason.

    Example::

        public_reason("load() raised FileNotFoundError: No such file: '/srv/m/1/w.npz'")
        # "load() raised FileNotFoundError: No such file: '.../w.npz'"
    """
    first_line = reason.strip().split("\n", 1)[0]
    short = _ABSOLUTE_PATH.sub(lambda m: ".../" + re.split(r"[/\\]", m.group(0))[-1], first_line)
    if len(short) > PUBLIC_REASON_LENGTH:
        short = short[: PUBLIC_REASON_LENGTH - 3] + "..."
    return short
