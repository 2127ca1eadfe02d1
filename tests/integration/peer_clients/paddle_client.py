"""A Paddle Serving pipeline call as its PipelineClient packs it (string mode: each value is
the array's repr, name and method left empty, logid and clientip set), through stubs
generated from the descriptor Paddle Serving's own wheel carries (compiled into STUBS_DIR).

    python paddle_client.py HOST:PORT '{"feed": {"x": [[...]]}, "name": ""}' STUBS_DIR
"""

from __future__ import annotations

import json
import socket
import sys

import grpc
import numpy as np

sys.path.insert(0, sys.argv[3])

from paddle_serving_server.pipeline.proto import (
    pipeline_service_pb2,
    pipeline_service_pb2_grpc,
)


def main() -> None:
    url, call = sys.argv[1], json.loads(sys.argv[2])
    request = pipeline_service_pb2.Request(logid=0, clientip=socket.gethostbyname("localhost"))
    request.name = call.get("name", "")
    for key, value in call["feed"].items():
        request.key.append(key)
        # PipelineClient sends str values as they are, arrays as their repr
        text = value if isinstance(value, str) else np.array(value, dtype=np.float32).__repr__()
        request.value.append(text)
    with grpc.insecure_channel(url) as channel:
        response = pipeline_service_pb2_grpc.PipelineServiceStub(channel).inference(request)
    print(
        json.dumps(
            {
                "err_no": response.err_no,
                "err_msg": response.err_msg,
                "key": list(response.key),
                "value": list(response.value),
            }
        )
    )


if __name__ == "__main__":
    main()
