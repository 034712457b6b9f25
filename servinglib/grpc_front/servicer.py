"""``inference.GRPCInferenceService``, served by :mod:`~servinglib.grpc_front.rpc`.

Every RPC answers from the worker's :class:`~servinglib.serving.service.InferenceService`; an error
becomes its gRPC status through :func:`~servinglib.grpc_front.status.grpc_status`, the same
mapping as REST's. ``ModelStreamInfer`` answers independent requests on one stream: each is
started as it arrives and answered in the order it came (no decoupled models).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeAlias

import grpc

from servinglib.grpc_front import metadata
from servinglib.grpc_front.calls import Answer, InferCalls
from servinglib.grpc_front.proto import inference_pb2 as pb
from servinglib.grpc_front.status import grpc_status
from servinglib.http.asgi import SHED_PAUSE_S
from servinglib.monitoring.metrics import ServingMetrics
from servinglib.serving.service import run_followups

__all__ = ["InferenceServicer"]

Context: TypeAlias = Any  # grpc.aio.ServicerContext (grpcio ships no type hints)

# Requests of one stream being answered at once; the next ones wait to be read (flow control).
STREAM_WINDOW = 64


class InferenceServicer:
    """The Open Inference RPCs of one worker.

    ``compress_min_bytes``: answers at least this large are sent gzip-compressed (when the
    client accepts gzip, which every gRPC client does).
    """

    def __init__(
        self,
        calls: InferCalls,
        metrics: ServingMetrics,
        readiness: Callable[[], bool],
        liveness: Callable[[], bool],
        compress_min_bytes: int,
    ) -> None:
        self._calls = calls
        self._service = calls.service
        self._metrics = metrics
        self._readiness = readiness
        self._liveness = liveness
        self._compress_min_bytes = compress_min_bytes

    async def ServerLive(self, request: Any, context: Context) -> Any:
        """Live until the watchdog retires the worker."""
        return pb.ServerLiveResponse(live=bool(self._liveness()))

    async def ServerReady(self, request: Any, context: Context) -> Any:
        """Ready when every model's default version is READY."""
        return pb.ServerReadyResponse(ready=bool(self._readiness()))

    async def ServerMetadata(self, request: Any, context: Context) -> Any:
        """Name, version, extensions."""
        return metadata.server_metadata()

    async def ModelReady(self, request: Any, context: Context) -> Any:
        """Whether a model version is READY (NOT_FOUND for an unknown one)."""
        return await _answer(context, metadata.model_ready, self._service, request)

    async def ModelMetadata(self, request: Any, context: Context) -> Any:
        """A model's versions, platform and tensors."""
        return await _answer(context, metadata.model_metadata, self._service, request)

    async def ModelConfig(self, request: Any, context: Context) -> Any:
        """Triton's model configuration."""
        return await _answer(context, metadata.model_config, self._service, request)

    async def RepositoryIndex(self, request: Any, context: Context) -> Any:
        """Every model version and its state."""
        return await _answer(context, metadata.repository_index, self._service, request)

    async def ModelStatistics(self, request: Any, context: Context) -> Any:
        """Request counts and times per model version, over every worker."""
        return await _answer(
            context, metadata.model_statistics, self._service, self._metrics, request
        )

    async def ModelInfer(self, request: Any, context: Context) -> Any:
        """One inference."""
        answer = await self._calls.infer(
            request, context.invocation_metadata() or (), context.time_remaining()
        )
        status = answer.status
        if status is not None:
            if status.shed:  # as REST: a client retrying at once is not refused at once
                await asyncio.sleep(SHED_PAUSE_S)
            await context.abort(status.code, status.message, _trailers(answer) + status.trailers)
        context.set_trailing_metadata(_trailers(answer))
        if answer.followups:  # shadow copies, once the answer is on its way
            asyncio.get_running_loop().call_soon(run_followups, answer.followups)
        if answer.response.ByteSize() >= self._compress_min_bytes:
            context.set_compression(grpc.Compression.Gzip)
        return answer.response

    async def ModelStreamInfer(
        self, request_iterator: AsyncIterator[Any], context: Context
    ) -> AsyncIterator[Any]:
        """Independent requests on one stream, answered in order; an error answers its
        request with ``error_message`` and the stream goes on."""
        metadata_pairs = tuple(context.invocation_metadata() or ())
        pending: asyncio.Queue[asyncio.Task[Answer] | None] = asyncio.Queue(STREAM_WINDOW)

        async def read() -> None:
            try:
                async for request in request_iterator:
                    task = asyncio.ensure_future(
                        self._calls.infer(request, metadata_pairs, context.time_remaining())
                    )
                    await pending.put(task)
            finally:
                await pending.put(None)

        reader = asyncio.ensure_future(read())
        try:
            while (task := await pending.get()) is not None:
                answer = await task
                if answer.status is not None:
                    yield pb.ModelStreamInferResponse(error_message=answer.status.message)
                    continue
                if answer.followups:
                    asyncio.get_running_loop().call_soon(run_followups, answer.followups)
                yield pb.ModelStreamInferResponse(infer_response=answer.response)
        finally:
            reader.cancel()


def _trailers(answer: Answer) -> tuple[tuple[str, str], ...]:
    trailers = [("x-request-id", answer.request_id)]
    if answer.version:
        trailers.append(("x-servinglib-model-version", answer.version))
    return tuple(trailers)


async def _answer(context: Context, build: Callable[..., Any], *args: Any) -> Any:
    """``build(*args)``, or the status of what it raised."""
    try:
        return build(*args)
    except Exception as e:
        status = grpc_status(e)
        await context.abort(status.code, status.message)
