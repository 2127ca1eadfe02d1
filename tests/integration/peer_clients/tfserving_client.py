"""TF Serving's own client: tensorflow-serving-api's stubs and TensorFlow's tensor helpers
(tf.make_tensor_proto / tf.make_ndarray), unchanged, against a gRPC URL.

    python tfserving_client.py HOST:PORT '[{"rpc": "predict", ...}, ...]'

Calls run one after another; where any has "at" (seconds), each runs at that offset on
its own thread (requests that must meet in the server's queue).
"""

from __future__ import annotations

import json
import sys
from typing import Any

import grpc
import numpy as np
import tensorflow as tf
import timed_calls  # beside this script
from tensorflow_serving.apis import (
    classification_pb2,
    get_model_metadata_pb2,
    get_model_status_pb2,
    inference_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
    regression_pb2,
)


def spec(target: Any, call: dict[str, Any]) -> None:
    target.name = call["model"]
    if "version" in call:
        target.version.value = call["version"]
    if "label" in call:
        target.version_label = call["label"]
    if "signature" in call:
        target.signature_name = call["signature"]


def tensor(value: dict[str, Any], typed: bool) -> Any:
    if value["dtype"] == "bfloat16":
        return tf.make_tensor_proto(np.array(value["data"], np.float32), dtype=tf.bfloat16)
    if value["dtype"] == "object":
        strings = [[v.encode() for v in row] for row in value["data"]]
        return tf.make_tensor_proto(np.array(strings, dtype=object))
    array = np.array(value["data"], dtype=value["dtype"])
    if not typed:
        return tf.make_tensor_proto(array)
    proto = tf.make_tensor_proto(array)
    proto.ClearField("tensor_content")
    getattr(proto, {"float32": "float_val", "int64": "int64_val"}[value["dtype"]]).extend(
        array.reshape(-1).tolist()
    )
    return proto


def examples(target: Any, call: dict[str, Any]) -> None:
    """Float features, one dict per example, as tf.Examples in the Input."""
    for features in call.get("examples", []):
        example = target.example_list.examples.add()
        for name, value in features.items():
            example.features.feature[name].float_list.value.extend([value])


def run(channel: grpc.Channel, call: dict[str, Any]) -> dict[str, Any]:
    prediction = prediction_service_pb2_grpc.PredictionServiceStub(channel)
    if call["rpc"] == "predict":
        request = predict_pb2.PredictRequest()
        spec(request.model_spec, call)
        for name, value in call["inputs"].items():
            request.inputs[name].CopyFrom(tensor(value, call.get("typed", False)))
        request.output_filter.extend(call.get("output_filter", []))
        response = prediction.Predict(request, timeout=30)
        outputs = {}
        dtypes = {}
        for name, proto in response.outputs.items():
            array = tf.make_ndarray(proto)
            dtypes[name] = tf.dtypes.as_dtype(proto.dtype).name
            if array.dtype == object:
                outputs[name] = [v.decode() for v in array.reshape(-1)]
            else:
                outputs[name] = (
                    array.astype(np.float64).tolist()
                    if dtypes[name] == "bfloat16"
                    else array.tolist()
                )
        return {"outputs": outputs, "dtypes": dtypes, "version": response.model_spec.version.value}
    if call["rpc"] == "classify":
        request = classification_pb2.ClassificationRequest()
        spec(request.model_spec, call)
        examples(request.input, call)
        response = prediction.Classify(request, timeout=30)
        return {
            "results": [
                [[c.label, c.score] for c in r.classes] for r in response.result.classifications
            ],
            "signature": response.model_spec.signature_name,
        }
    if call["rpc"] == "regress":
        request = regression_pb2.RegressionRequest()
        spec(request.model_spec, call)
        examples(request.input, call)
        response = prediction.Regress(request, timeout=30)
        return {
            "results": [r.value for r in response.result.regressions],
            "signature": response.model_spec.signature_name,
        }
    if call["rpc"] == "multi":  # TF Serving's _TestMultiInference, tasks from the call
        request = inference_pb2.MultiInferenceRequest()
        for signature, method in call["tasks"]:
            task = request.tasks.add(method_name=f"tensorflow/serving/{method}")
            task.model_spec.name, task.model_spec.signature_name = call["model"], signature
        examples(request.input, call)
        response = prediction.MultiInference(request, timeout=30)
        return {
            "results": [
                [r.regression_result.regressions[0].value]
                if r.HasField("regression_result")
                else [c.score for c in r.classification_result.classifications[0].classes]
                for r in response.results
            ],
            "signatures": [r.model_spec.signature_name for r in response.results],
        }
    if call["rpc"] == "metadata":
        request = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
        spec(request.model_spec, call)
        response = prediction.GetModelMetadata(request, timeout=30)
        signatures = get_model_metadata_pb2.SignatureDefMap()
        response.metadata["signature_def"].Unpack(signatures)
        signature = signatures.signature_def["serving_default"]
        return {
            "inputs": {
                k: [tf.dtypes.as_dtype(v.dtype).name, [d.size for d in v.tensor_shape.dim]]
                for k, v in signature.inputs.items()
            },
            "outputs": sorted(signature.outputs),
            "method": signature.method_name,
            "version": response.model_spec.version.value,
        }
    if call["rpc"] == "status":
        request = get_model_status_pb2.GetModelStatusRequest()
        spec(request.model_spec, call)
        response = model_service_pb2_grpc.ModelServiceStub(channel).GetModelStatus(request)
        return {
            "versions": [
                [s.version, get_model_status_pb2.ModelVersionStatus.State.Name(s.state)]
                for s in response.model_version_status
            ]
        }
    raise ValueError(call["rpc"])


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
