"""Drives a server's gRPC port with KServe's own SDK (``InferenceGRPCClient``); prints one
JSON report.

Run by ``tests/integration/test_grpc_clients.py`` with the interpreter of KServe's virtualenv
(see ``kserve_rest.py``). Usage::

    python kserve_grpc.py 127.0.0.1:8001
"""

import asyncio
import json
import sys

import grpc
import numpy as np
from kserve import InferenceGRPCClient, InferInput, InferRequest


async def main(address: str) -> dict:
    report = {}
    client = InferenceGRPCClient(address, timeout=30, retries=2)
    try:
        report["is_server_live"] = await client.is_server_live()
        report["is_server_ready"] = await client.is_server_ready()
        report["is_model_ready(echo)"] = await client.is_model_ready("echo")
        values = np.arange(6, dtype=np.float32).reshape(2, 3)
        for raw in (False, True):
            x = InferInput("x", list(values.shape), "FP32")
            x.set_data_from_numpy(values, binary_data=raw)
            words = InferInput("w", [2], "BYTES")
            words.set_data_from_numpy(np.array([b"alpha", b"beta"], dtype=np.object_), raw)
            request = InferRequest("echo", [x, words], request_id=f"kserve-{raw}")
            response = await client.infer(request)
            outputs = {o.name: o for o in response.outputs}
            report[f"infer(raw={raw})"] = {
                "id": response.id,
                "x": outputs["x"].as_numpy().tolist(),
                "w": [v.decode() if isinstance(v, bytes) else v for v in outputs["w"].as_numpy()],
            }
        try:
            ghost = InferInput("x", [1], "FP32")
            ghost.set_data_from_numpy(np.zeros(1, np.float32))
            await client.infer(InferRequest("ghost", [ghost]))
        except grpc.RpcError as e:
            report["infer(ghost)"] = {"code": e.code().name, "message": e.details()}
    finally:
        await client.close()
    return report


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1]))))
