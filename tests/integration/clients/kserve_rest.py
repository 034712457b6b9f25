"""Drives a server with KServe's own Python SDK (``kserve``); prints one JSON report.

Run by ``tests/integration/test_client_conformance.py`` with the interpreter of a separate
virtualenv holding ``kserve`` (its pins clash with the test environment's). Usage::

    python kserve_rest.py http://127.0.0.1:8080
"""

import asyncio
import json
import sys

import httpx
import numpy as np
from kserve import InferenceRESTClient, InferInput, InferRequest, RESTConfig
from kserve.protocol.rest.v2_datamodels import ModelMetadataResponse, ServerMetadataResponse


async def main(base: str) -> dict:
    report = {}
    client = InferenceRESTClient(RESTConfig(protocol="v2", retries=0, timeout=30))
    try:
        report["is_server_live"] = await client.is_server_live(base)
        report["is_server_ready"] = await client.is_server_ready(base)
        report["is_model_ready(echo)"] = await client.is_model_ready(base, "echo")
        report["is_model_ready(ghost)"] = await client.is_model_ready(base, "ghost")
        async with httpx.AsyncClient() as http:  # the SDK's REST client has no metadata call
            server = ServerMetadataResponse.model_validate((await http.get(f"{base}/v2")).json())
            model = ModelMetadataResponse.model_validate(
                (await http.get(f"{base}/v2/models/echo")).json()
            )
        report["server_metadata.name"] = server.name
        report["model_metadata"] = {"name": model.name, "versions": model.versions}
        values = np.arange(6, dtype=np.float32).reshape(2, 3)
        for binary in (False, True):
            x = InferInput("x", list(values.shape), "FP32")
            x.set_data_from_numpy(values, binary_data=binary)
            words = InferInput("w", [2], "BYTES")
            words.set_data_from_numpy(np.array([b"alpha", b"beta"], dtype=np.object_), binary)
            request = InferRequest("echo", [x, words], request_id=f"kserve-{binary}")
            response = await client.infer(base, request, model_name="echo")
            outputs = {o.name: o for o in response.outputs}
            report[f"infer(binary={binary})"] = {
                "id": response.id,
                "x": outputs["x"].as_numpy().tolist(),
                "w": [v.decode() if isinstance(v, bytes) else v for v in outputs["w"].as_numpy()],
            }
        try:
            await client.infer(base, {"inputs": []}, model_name="ghost")
        except httpx.HTTPStatusError as e:
            report["infer(ghost)"] = {"status": e.response.status_code, "message": str(e)}
    finally:
        await client.close()
    return report


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1]))))
