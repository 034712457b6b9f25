"""The typed sections of a validated ``servinglib.yaml``: frozen dataclasses, one per block.

:func:`servinglib.config.spec.load_config` builds them; every default lives here once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servinglib.compose.spec import Composition
from servinglib.config.rollout_policy import RolloutPolicy
from servinglib.config.sinks import LogSinkConfig
from servinglib.config.storage import ModelCacheConfig, ModelSyncConfig
from servinglib.model import TensorSpec

__all__ = [
    "AdminConfig",
    "BatchPolicy",
    "ComparatorConfig",
    "ModelConfig",
    "PredictionLogConfig",
    "ServerConfig",
    "ServiceConfig",
    "ShadowConfig",
    "ShadowExecutorConfig",
]


@dataclass(frozen=True)
class ServerConfig:
    """HTTP server settings (``server:`` in servinglib.yaml)."""

    host: str = "127.0.0.1"
    port: int = 8080
    workers: int = 2
    worker: str = "asyncio"
    threads: int = 8
    timeout_s: int = 30
    keepalive_s: int = 75
    graceful_timeout_s: int = 30
    watchdog_margin_s: float = 5.0
    max_requests: int = 0
    max_requests_jitter: int = 0
    max_rss_mb: int = 0
    header_timeout_s: float = 10.0
    body_timeout_s: float = 10.0
    body_min_bytes_per_s: int = 1024
    max_connections: int = 1000
    max_request_body_bytes: int = 8 * 1024 * 1024
    max_json_depth: int = 64
    max_tensor_elements: int = 16 * 1024 * 1024
    max_header_bytes: int = 8190
    max_headers: int = 100
    log_level: str = "info"
    log_format: str = "auto"
    deadline_margin_ms: int = 50
    compress_min_bytes: int = 65536
    grpc_port: int = 0  # 0: no gRPC listener (servinglib.grpc_front)
    status_page: bool = True  # GET /status and /status.json on the public port


@dataclass(frozen=True)
class BatchPolicy:
    """Triton's dynamic-batching knobs (``batching:`` in servinglib.yaml)."""

    max_batch_size: int = 32
    preferred_batch_sizes: tuple[int, ...] = ()
    max_queue_delay_us: int = 2000
    max_queue_size: int = 256
    priority_levels: int = 1
    default_priority: int = 0
    preserve_ordering: bool = False


@dataclass(frozen=True)
class ComparatorConfig:
    """How a shadow answer is compared with the primary's (``comparator:``)."""

    kind: str = "numeric"
    atol: float = 1e-6
    rtol: float = 1e-4
    min_similarity: float = 0.99
    field: str | None = None
    function: str | None = None


@dataclass(frozen=True)
class ShadowConfig:
    """One entry of a model's ``shadow:`` list."""

    version: str
    sample_rate: float = 1.0
    timeout_ms: int = 1000
    comparator: ComparatorConfig = field(default_factory=ComparatorConfig)


@dataclass(frozen=True)
class ShadowExecutorConfig:
    """Bounds of the per-worker shadow executor (``shadow_executor:``)."""

    max_concurrency: int = 2
    max_queue: int = 64
    isolation: str = "thread"
    max_cpu_share: float | None = None


@dataclass(frozen=True)
class PredictionLogConfig:
    """``monitoring.prediction_log``; ``url`` has a resolved SQLite path (None: sinks only)."""

    url: str | None
    sample_rate: float = 1.0
    max_buffer: int = 10000
    max_buffer_bytes: int = 64 << 20
    max_record_bytes: int = 64 << 10
    batch_size: int = 200
    flush_interval_ms: int = 500
    sinks: tuple[LogSinkConfig, ...] = ()

    def read_url(self) -> str | None:
        """Where ``drift report`` and ``profile --from-log`` read: ``url``, else the lake."""
        lakes = [sink.target for sink in self.sinks if sink.kind == "parquet"]
        return self.url or next(iter(lakes), None)


@dataclass(frozen=True)
class AdminConfig:
    """``admin:``: the loopback-only, token-protected admin API (off by default)."""

    enabled: bool = False
    port: int = 9901
    token_env: str = "SERVINGLIB_ADMIN_TOKEN"  # noqa: S105 (the name of a variable, not a secret)


@dataclass(frozen=True)
class ModelConfig:
    """One entry of ``models:``; paths are already resolved and contained."""

    name: str
    class_ref: str
    repository: Path
    default_version: str
    runtime: str | None = None
    runtime_options: Mapping[str, Any] = field(default_factory=dict)
    inputs: tuple[TensorSpec, ...] = ()
    outputs: tuple[TensorSpec, ...] = ()
    versions: tuple[str, ...] | None = None
    input_schema: Mapping[str, Any] | None = None
    require_self_tests: bool = True
    traffic: Mapping[str, float] | None = None
    routing_header: str = "x-routing-key"
    routing_feature: str | None = None
    shadows: tuple[ShadowConfig, ...] = ()
    batching: BatchPolicy | None = None
    instances: int | None = None
    deadline_ms: int = 10000
    load_timeout_s: float = 600.0
    allow_pickle: bool = False
    sha256: Mapping[str, str] = field(default_factory=dict)
    optimize_budgets: Mapping[str, Any] | None = None
    composition: Composition | None = None
    rollout: RolloutPolicy | None = None
    key_path: str = ""
    repository_url: str | None = None  # a store URL; ``repository`` is then its local cache
    model_sync: ModelSyncConfig | None = None


@dataclass(frozen=True)
class ServiceConfig:
    """A whole validated ``servinglib.yaml``."""

    service: str
    source: Path
    models: tuple[ModelConfig, ...]
    server: ServerConfig = field(default_factory=ServerConfig)
    team: str = ""
    python_path: tuple[Path, ...] = ()
    shadow_executor: ShadowExecutorConfig = field(default_factory=ShadowExecutorConfig)
    prediction_log: PredictionLogConfig | None = None
    admin: AdminConfig = field(default_factory=AdminConfig)
    model_cache: ModelCacheConfig = field(
        default_factory=lambda: ModelCacheConfig(Path.home() / ".cache/servinglib/models")
    )

    @property
    def root(self) -> Path:
        """Directory of the config file; every relative path is resolved against it."""
        return self.source.parent
