"""Turn tracing on in a worker, after gunicorn forks, and flush it when the worker stops.

Tracing is on when the ``tracing`` extra is installed and an OTLP endpoint is set
(``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_ENDPOINT``), unless
``OTEL_SDK_DISABLED=true`` or ``OTEL_TRACES_EXPORTER=none``. Everything else follows the
standard ``OTEL_*`` variables, read by the OpenTelemetry SDK itself: the protocol
(``OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL``: ``http/protobuf``, or ``grpc`` with
``opentelemetry-exporter-otlp-proto-grpc`` installed), headers, timeouts, the service name
and resource attributes, the batch span processor's queue and delays. The sampler is
``OTEL_TRACES_SAMPLER`` (``_ARG``); servinglib's default is ``parentbased_traceidratio``
with ratio 0: a request is traced only when its caller (Envoy) sampled it. For the
parent-based samplers servinglib draws the root decision itself, so that an untraced
request costs no OpenTelemetry call (the decision is random, not by trace id: no other
service sees a root's id before servinglib makes it).

Each worker gets its own provider and :class:`BatchSpanProcessor` (its export thread cannot
survive a fork), created in ``post_worker_init``; ``worker_exit`` flushes it.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

from servinglib.errors import ConfigError
from servinglib.serving import tracing

__all__ = ["start_tracing", "stop_tracing", "tracing_wanted"]

log = logging.getLogger("servinglib.serving.tracing")

_ENDPOINTS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
_PROTOCOLS = ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
_DEFAULT_SAMPLER = "parentbased_traceidratio"


class _State:
    provider: Any = None
    exporter: Any = None


def tracing_wanted(environ: dict[str, str] | None = None) -> bool:
    """Whether the environment asks for traces (an OTLP endpoint, nothing disabling them)."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if env.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() == "none":
        return False
    return any(env.get(name) for name in _ENDPOINTS)


def start_tracing() -> bool:
    """Enable tracing in this process when wanted and installed; returns whether it is on.

    A missing extra is logged once and leaves tracing off: the server still serves.
    """
    if not tracing_wanted() or tracing.ACTIVE is not None:
        return tracing.ACTIVE is not None
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased
    except ImportError:
        log.warning(
            "an OTLP endpoint is set but OpenTelemetry is not installed: no traces; "
            "pip install 'servinglib[tracing]'"
        )
        return False
    try:
        exporter = _exporter()
    except ImportError as e:
        log.warning("no traces: %s", e)
        return False
    root_ratio = _root_ratio()
    # parent-based: servinglib samples roots itself, before any OpenTelemetry call; any
    # other sampler is the SDK's, read from OTEL_TRACES_SAMPLER
    sampler = None if root_ratio is None else ParentBased(ALWAYS_ON)
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", "servinglib")})
    provider = TracerProvider(sampler=sampler, resource=_hashed_once(resource))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    _State.provider, _State.exporter = provider, exporter
    tracing.ACTIVE = tracing.Tracing(provider.get_tracer("servinglib"), root_ratio)
    return True


def _hashed_once(resource: Any) -> Any:
    """``resource`` with its hash computed once: the OTLP encoder groups every exported
    span by its resource, and ``Resource.__hash__`` serialises the attributes to JSON each
    time (a fifth of the encoding). Its attributes are immutable, so is its hash."""
    from opentelemetry.sdk.resources import Resource

    class HashedResource(Resource):
        _hash: int | None = None

        def __hash__(self) -> int:
            if self._hash is None:
                self._hash = super().__hash__()
            return self._hash

    return HashedResource(resource.attributes, resource.schema_url)


def _root_ratio() -> float | None:
    """The share of untraced requests that start a trace, for a parent-based sampler
    (servinglib's default: none); None for any other sampler.

    Raises:
        ConfigError: ``OTEL_TRACES_SAMPLER_ARG`` is not a number in [0, 1].
    """
    name = os.environ.get("OTEL_TRACES_SAMPLER", "").strip().lower()
    if name == "":
        return 0.0
    if name == "parentbased_always_on":
        return 1.0
    if name == "parentbased_always_off":
        return 0.0
    if name != "parentbased_traceidratio":
        return None
    arg = os.environ.get("OTEL_TRACES_SAMPLER_ARG", "1.0")
    try:
        ratio = float(arg)
    except ValueError:
        ratio = -1.0
    if not 0.0 <= ratio <= 1.0:
        raise ConfigError(
            f"OTEL_TRACES_SAMPLER_ARG={arg!r}: the share of requests to trace is a number "
            "from 0 to 1 (0.01 traces 1 %)"
        )
    return ratio


def stop_tracing(timeout_s: float = 10.0) -> None:
    """Export the spans still buffered and stop the export thread (graceful shutdown), for
    at most ``timeout_s``.

    The SDK's own shutdown has no bound: with the collector unreachable, its last exports
    retry for up to ``OTEL_EXPORTER_OTLP_TIMEOUT`` each, and a worker held that way past
    gunicorn's graceful timeout is killed before it writes its last log lines. After
    ``timeout_s`` the exporter is stopped (its retries end) and what is left is dropped.
    """
    provider, _State.provider = _State.provider, None
    exporter, _State.exporter = _State.exporter, None
    tracing.ACTIVE = None
    if provider is None:
        return
    done = threading.Event()

    def stop() -> None:
        try:
            provider.force_flush(int(timeout_s * 1000))
            provider.shutdown()
        except Exception:
            log.warning("flushing traces failed", exc_info=True)
        finally:
            done.set()

    threading.Thread(target=stop, name="servinglib-tracing-stop", daemon=True).start()
    if done.wait(timeout_s):
        return
    log.warning(
        "tracing: the spans still buffered were not exported within %.0f s (is the OTLP "
        "collector reachable?); they are dropped",
        timeout_s,
    )
    try:
        exporter.shutdown()  # ends its retries, so the stopping thread finishes soon
    except Exception:
        log.warning("stopping the span exporter failed", exc_info=True)


def _exporter() -> Any:
    protocol = next((os.environ[n] for n in _PROTOCOLS if os.environ.get(n)), "http/protobuf")
    if protocol.strip().lower() == "grpc":
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        except ImportError:
            raise ImportError(
                "OTEL_EXPORTER_OTLP_PROTOCOL=grpc needs opentelemetry-exporter-otlp-proto-grpc; "
                "install it or use http/protobuf"
            ) from None
        return OTLPSpanExporter()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
        OTLPSpanExporter as HttpExporter,
    )

    return HttpExporter()
