"""TorchServe's gRPC clients' calls, through stubs generated from the protos TorchServe ships
(inside its wheel's model-server.jar; compiled by the test's set-up into STUBS_DIR).

    python torchserve_client.py HOST:PORT '[{"rpc": "Predictions", ...}, ...]' STUBS_DIR

Calls run one after another; where any has "at" (seconds), each runs at that offset on
its own thread (requests that must meet in the server's queue).
"""

from __future__ import annotations

import base64
import json
import sys
from typing import Any

import grpc

sys.path.insert(0, sys.argv[3])  # the stubs compiled from TorchServe's own protos

import inference_pb2
import inference_pb2_grpc
import management_pb2
import management_pb2_grpc
import timed_calls  # beside this script
from google.protobuf import empty_pb2


def run(channel: grpc.Channel, call: dict[str, Any]) -> dict[str, Any]:  # noqa: PLR0911
    inference = inference_pb2_grpc.InferenceAPIsServiceStub(channel)
    management = management_pb2_grpc.ManagementAPIsServiceStub(channel)
    rpc = call["rpc"]
    if rpc == "Ping":
        return {"health": json.loads(inference.Ping(empty_pb2.Empty()).health)}
    if rpc in ("Predictions", "StreamPredictions", "StreamPredictions2"):
        request = inference_pb2.PredictionsRequest(
            model_name=call["model"],
            model_version=call.get("version", ""),
            input={k: base64.b64decode(v) for k, v in call["input"].items()},
        )
        if rpc == "Predictions":
            answers = [inference.Predictions(request, timeout=30)]
        elif rpc == "StreamPredictions":
            answers = list(inference.StreamPredictions(request, timeout=30))
        else:
            answers = list(inference.StreamPredictions2(iter([request, request]), timeout=30))
        return {"predictions": [base64.b64encode(a.prediction).decode() for a in answers]}
    if rpc == "DescribeModel":
        request = management_pb2.DescribeModelRequest(model_name=call["model"])
        return {"msg": json.loads(management.DescribeModel(request).msg)}
    if rpc == "ListModels":
        request = management_pb2.ListModelsRequest(limit=call.get("limit", 0))
        return {"msg": json.loads(management.ListModels(request).msg)}
    if rpc == "SetDefault":
        request = management_pb2.SetDefaultRequest(
            model_name=call["model"], model_version=call["version"]
        )
        return {"msg": json.loads(management.SetDefault(request).msg)}
    if rpc == "RegisterModel":
        request = management_pb2.RegisterModelRequest(url=call["url"])
        return {"msg": json.loads(management.RegisterModel(request).msg)}
    if rpc == "ScaleWorker":
        request = management_pb2.ScaleWorkerRequest(model_name=call["model"], min_worker=2)
        return {"msg": json.loads(management.ScaleWorker(request).msg)}
    raise ValueError(rpc)


def answered(channel: grpc.Channel, call: dict[str, Any]) -> dict[str, Any]:
    try:
        return {"ok": True, **run(channel, call)}
    except grpc.RpcError as error:
        return {"ok": False, "code": error.code().name, "details": error.details()}


def main() -> None:
    url, calls = sys.argv[1], json.loads(sys.argv[2])
    with grpc.insecure_channel(url) as channel:
        said = timed_calls.answers(calls, lambda call: answered(channel, call))
    print(json.dumps(said))


if __name__ == "__main__":
    main()
