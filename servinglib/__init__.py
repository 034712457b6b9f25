"""servinglib: serve machine-learning models in production.

Teams write :class:`Model` subclasses with ``load()`` and ``predict()``; servinglib serves
every version behind gunicorn with self-tests, metrics and the Open Inference protocol::

    import servinglib

    class EtaModel(servinglib.Model):
        def load(self, path):
            self.base = float((path / "base.txt").read_text())

        def predict(self, features):
            return {"eta_s": self.base + 60.0 * features["distance_km"]}
"""

from servinglib.errors import (
    ConfigError,
    DeadlineExceededError,
    InvalidInputError,
    ModelLoadError,
    ModelNotFoundError,
    ModelNotReadyError,
    NonFiniteOutputError,
    OverloadedError,
    PredictionError,
    SelfTestDataError,
    ServinglibError,
    UnsupportedRequestError,
    VersionNotFoundError,
)
from servinglib.model import Model, SelfTestCase, TensorSpec, Tolerance

__all__ = [
    "ConfigError",
    "DeadlineExceededError",
    "InvalidInputError",
    "Model",
    "ModelLoadError",
    "ModelNotFoundError",
    "ModelNotReadyError",
    "NonFiniteOutputError",
    "OverloadedError",
    "PredictionError",
    "SelfTestCase",
    "SelfTestDataError",
    "ServinglibError",
    "TensorSpec",
    "Tolerance",
    "UnsupportedRequestError",
    "VersionNotFoundError",
]
