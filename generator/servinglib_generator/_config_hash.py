"""The Envoy config hash on the Deployment's pod template, so a changed config rolls the pods.

Terraform computes it with ``sha256()``; the plain manifests get the same value written at
generation time. After editing ``envoy/envoy.yaml``, refresh it with ``sha256sum``.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from servinglib_generator.errors import GeneratorError

__all__ = ["ANNOTATION", "stamp_envoy_config_hash"]

ANNOTATION = "servinglib.dev/envoy-config-sha256"
_DEPLOYMENT = Path("k8s/deployment.yaml")
_ENVOY = Path("envoy/envoy.yaml")


def stamp_envoy_config_hash(repo: Path) -> str:
    """Write the sha256 of ``envoy/envoy.yaml`` into the Deployment's annotation; return it.

    Raises:
        GeneratorError: the rendered Deployment has no empty annotation to fill (a template bug).
    """
    digest = hashlib.sha256((repo / _ENVOY).read_bytes()).hexdigest()
    deployment = repo / _DEPLOYMENT
    text = deployment.read_text(encoding="utf-8")
    empty = f'{ANNOTATION}: ""'
    if text.count(empty) != 1:
        raise GeneratorError(f"{deployment} must hold exactly one `{empty}` line to fill")
    deployment.write_text(text.replace(empty, f'{ANNOTATION}: "{digest}"'), encoding="utf-8")
    return digest
