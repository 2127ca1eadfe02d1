"""The kserve SDK's gRPC client (``kserve.InferenceGRPCClient``), unchanged, against a URL.
It registers KServe's copy of the v2 protos, which clash with tritonclient's in one process.

    python kserve_client.py HOST:PORT '{"model": "mlp", "input": "INPUT__0", "rows": [[...]]}'
"""

from __future__ import annotations

import asyncio
import json
import sys

import numpy as np
from kserve import InferenceGRPCClient, InferInput, InferRequest


async def main() -> None:
    url, call = sys.argv[1], json.loads(sys.argv[2])
    client = InferenceGRPCClient(url)
    rows = np.array(call["rows"], dtype=np.float32)
    answers = {
        "live": await client.is_server_live(),
        "ready": await client.is_server_ready(),
        "model_ready": await client.is_model_ready(call["model"]),
    }
    for binary in (True, False):  # raw_input_contents, then typed contents
        tensor = InferInput(name=call["input"], shape=list(rows.shape), datatype="FP32")
        tensor.set_data_from_numpy(rows, binary_data=binary)
        response = await client.infer(
            InferRequest(model_name=call["model"], infer_inputs=[tensor], request_id="k-1")
        )
        answers[f"binary={binary}"] = {
            "id": response.id,
            "outputs": {o.name: o.as_numpy().tolist() for o in response.outputs},
        }
    await client.close()
    print(json.dumps(answers))


if __name__ == "__main__":
    asyncio.run(main())
