"""The Open Inference Protocol over gRPC: ``inference.GRPCInferenceService``, as Triton and
KServe publish it, on grpcio's asyncio server in every worker (``server.grpc_port``).

- :mod:`~servinglib.grpc_front.tensors`: request and response messages <-> tensors;
- :mod:`~servinglib.grpc_front.calls`: one inference, through the service like a REST one;
- :mod:`~servinglib.grpc_front.status`: errors as gRPC statuses;
- :mod:`~servinglib.grpc_front.metadata`: metadata, configuration, index, statistics;
- :mod:`~servinglib.grpc_front.servicer`: the RPCs;
- :mod:`~servinglib.grpc_front.server`: the server, its health service and its drain.
"""
