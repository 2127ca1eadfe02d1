"""Payload capture against the emulator: a model whose config asks for it (the
``data_capture`` parameter) has its requests and answers written to S3 in SageMaker's Data
Capture layout, the payloads byte-equal to what was sent and answered; the management API
turns it on without a redeploy, and refuses a setting that does not parse."""

from __future__ import annotations

import base64
import json
import re

import httpx
import numpy as np
import tritonclient.grpc as grpcclient
from google.protobuf.message import DecodeError
from tritonclient.grpc import service_pb2

from lambdaserve.protocol.grpc.protos import tensorflow_serving_pb2 as tfs
from lambdaserve.protocol.grpc.protos import torchserve_inference_pb2 as ts
from lambdaserve.serving.capture.capture_offers import GRPC
from tests import builders
from tests.integration import test_grpc_peers
from tests.integration.grpc_support import lambdaserve_serve
from tests.integration.test_grpc_peers import needs, peer
from tests.support import wait_until

torchserve_stubs = test_grpc_peers.torchserve_stubs  # the fixture: TorchServe's own protos

CONFIG = b"""
platform: "onnxruntime_onnx"
max_batch_size: 8
parameters { key: "data_capture" value { string_value: "{\\"sampling_percentage\\": 100}" } }
"""
ROWS = {"inputs": [{"name": "INPUT__0", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]}


def captured(stack, model: str, *, flush: bool = True) -> list[tuple[str, dict]]:
    if flush:  # this process's capture; another process's (serve) writes on its own
        stack.process.data_capture.flush()
    listed = stack.clients.s3.list_objects_v2(
        Bucket=stack.settings.bucket, Prefix=f"captures/{model}/"
    )
    records = []
    for entry in listed.get("Contents", []):
        body = stack.clients.s3.get_object(Bucket=stack.settings.bucket, Key=entry["Key"])
        for line in body["Body"].read().decode().splitlines():
            records.append((entry["Key"], json.loads(line)))
    return records


def test_a_capturing_models_exchanges_land_in_s3_in_sagemakers_layout(stack):
    # Given a model whose config.pbtxt asks for every request to be captured
    stack.put("models/mlp/config.pbtxt", CONFIG)
    stack.put("models/mlp/1/model.onnx", builders.onnx_mlp(4, 3))
    stack.wait_state("mlp", 1, "READY")
    # When a JSON request and a binary-tensor request are answered
    body = json.dumps(ROWS).encode()
    answer = stack.inference.post("/v2/models/mlp/infer", content=body)
    binary, header = builders.binary_v2_request(np.ones((1, 4), np.float32))
    answered_binary = stack.inference.post(
        "/v2/models/mlp/infer",
        content=binary,
        headers={"Inference-Header-Content-Length": header},
    )
    records = captured(stack, "mlp")
    # Then both exchanges are in S3 under <prefix>/<model>/<version>/yyyy/mm/dd/hh/
    assert answer.status_code == 200 and answered_binary.status_code == 200
    assert len(records) == 2, records
    for key, _ in records:
        assert re.fullmatch(r"captures/mlp/1/\d{4}/\d{2}/\d{2}/\d{2}/[^/]+\.jsonl", key), key
    by_encoding = {r["captureData"]["endpointInput"]["encoding"]: r for _, r in records}
    as_json, as_binary = by_encoding["JSON"], by_encoding["BASE64"]
    # with the payloads byte-equal to what was sent and answered
    assert as_json["captureData"]["endpointInput"]["data"].encode() == body
    assert as_json["captureData"]["endpointOutput"]["data"].encode() == answer.content
    assert as_json["captureData"]["endpointOutput"]["observedContentType"] == "application/json"
    assert base64.b64decode(as_binary["captureData"]["endpointInput"]["data"]) == binary
    assert as_binary["eventVersion"] == "0" and as_binary["eventMetadata"]["eventId"]


def test_the_management_api_turns_capture_on_and_refuses_a_bad_setting(stack):
    # Given a model that captures nothing
    stack.put("models/quiet/1/model.onnx", builders.onnx_mlp(4, 3))
    stack.wait_state("quiet", 1, "READY")
    stack.inference.post("/v2/models/quiet/infer", json=ROWS)
    assert captured(stack, "quiet") == []
    # When capture is turned on through the management API (outputs only)
    setting = json.dumps({"capture": ["output"]})
    turned = stack.api.put(
        "/models/quiet", json={"parameters": {"data_capture": {"string_value": setting}}}
    )
    refused = stack.api.put(
        "/models/quiet",
        json={"parameters": {"data_capture": {"string_value": '{"sampling_percentage": 200}'}}},
    )
    stack.process.server().resolver.forget("quiet")  # the catalog view, read again now
    stack.inference.post("/v2/models/quiet/infer", json=ROWS)
    # Then the next answer is captured, without its input; the bad setting is a 400
    assert turned.status_code == 200, turned.text
    assert refused.status_code == 400 and "sampling_percentage" in refused.text
    [(_, record)] = captured(stack, "quiet")
    assert set(record["captureData"]) == {"endpointOutput"}


def test_every_door_of_the_function_and_the_queue_captures_byte_equal(stack):
    # Given a model whose config captures every request (v2 itself: the test above)
    stack.put("models/doors/config.pbtxt", CONFIG)
    stack.put("models/doors/1/model.onnx", builders.onnx_mlp(4, 3))
    stack.wait_state("doors", 1, "READY")
    # When it is asked through TorchServe's, TF Serving's, generate's and Paddle Serving's
    # doors, and a queued request
    torchserve_body = b"[[1.0, 2.0, 3.0, 4.0]]"
    torchserve = stack.inference.post(
        "/predictions/doors", content=torchserve_body, headers={"content-type": "application/json"}
    )
    tf_body = b'{"instances": [[4.0, 3.0, 2.0, 1.0]]}'
    tf = stack.inference.post("/v1/models/doors:predict", content=tf_body)
    generate_body = b'{"INPUT__0": [1.0, 1.0, 2.0, 2.0]}'
    generate = stack.inference.post("/v2/models/doors/generate", content=generate_body)
    paddle_body = b'{"key": ["INPUT__0"], "value": ["[[2.0, 2.0, 1.0, 1.0]]"]}'
    paddle = stack.inference.post("/doors/prediction", content=paddle_body)
    queued = stack.inference.post(
        "/v2/models/doors/infer", json=ROWS, headers={"Prefer": "respond-async"}
    )
    assert torchserve.status_code == 200 and tf.status_code == 200, (torchserve.text, tf.text)
    assert generate.status_code == 200 and paddle.status_code == 200, (generate, paddle.text)
    assert paddle.json()["err_no"] == 0, paddle.text
    assert queued.status_code == 202, queued.text
    status_url = queued.json()["status_url"]
    result = wait_until(lambda: (r := stack.inference.get(status_url)).status_code != 202 and r, 30)
    records = wait_until(lambda: len(found := captured(stack, "doors")) >= 5 and found, 20)
    # Then each exchange is in S3, its input and output byte-equal to what crossed the door
    pairs = {
        (
            r["captureData"]["endpointInput"]["data"].encode(),
            r["captureData"]["endpointOutput"]["data"].encode(),
        )
        for _, r in records
    }
    assert (torchserve_body, torchserve.content) in pairs
    assert (tf_body, tf.content) in pairs
    assert (generate_body, generate.content) in pairs  # generate, through the batcher too
    assert (paddle_body, paddle.content) in pairs  # Paddle Serving's pipeline HTTP API
    assert result.status_code == 200, result.text
    doors = (torchserve_body, tf_body, generate_body, paddle_body)
    [queued_pair] = [p for p in pairs if p[0] not in doors]
    assert json.loads(queued_pair[0]) == ROWS  # the v2 document the queue carried
    assert json.loads(queued_pair[1])["outputs"] == result.json()["outputs"]


def parsed(kind, message: bytes):
    """``message`` as a ``kind``, or None where it is another door's message."""
    try:
        return kind.FromString(message)
    except DecodeError:
        return None


def test_serve_captures_grpc_messages_and_reports_its_counts_on_metrics(stack, torchserve_stubs):
    # Given a capturing model, and `lambdaserve serve` with its gRPC port
    stack.put("models/grpcd/config.pbtxt", CONFIG)
    stack.put("models/grpcd/1/model.onnx", builders.onnx_mlp(4, 3))
    stack.wait_state("grpcd", 1, "READY")
    rows = np.arange(4, dtype=np.float32).reshape(1, 4)
    with lambdaserve_serve() as served:
        # When tritonclient.grpc infers, unchanged
        tensor = grpcclient.InferInput("INPUT__0", [1, 4], "FP32")
        tensor.set_data_from_numpy(rows)
        answer = served.client().infer("grpcd", [tensor])
        # and TF Serving's and TorchServe's own gRPC clients ask it too
        needs("tensorflow_serving")
        tf_input = {"INPUT__0": {"data": rows.tolist(), "dtype": "float32"}}
        [tf_answer] = peer(
            "tfserving_client.py",
            served.grpc_url,
            [{"rpc": "predict", "model": "grpcd", "inputs": tf_input}],
        )
        ts_body = base64.b64encode(json.dumps(rows.tolist()).encode()).decode()
        [ts_answer] = peer(
            "torchserve_client.py",
            served.grpc_url,
            [{"rpc": "Predictions", "model": "grpcd", "input": {"data": ts_body}}],
            str(torchserve_stubs),
        )
        assert tf_answer["ok"] and ts_answer["ok"], (tf_answer, ts_answer)
        # Then the request and response messages land in S3 (base64, as they travel)
        records = wait_until(
            lambda: len(found := captured(stack, "grpcd", flush=False)) >= 3 and found, 20
        )
        metrics = httpx.get(f"http://127.0.0.1:{served.http}/metrics").text
    assert {r["captureData"]["endpointInput"]["observedContentType"] for _, r in records} == {GRPC}
    sent_messages = [
        base64.b64decode(r["captureData"]["endpointInput"]["data"]) for _, r in records
    ]
    tf_sent = [parsed(tfs.PredictRequest, m) for m in sent_messages]
    assert any(m and m.model_spec.name == "grpcd" and "INPUT__0" in m.inputs for m in tf_sent)
    ts_sent = [parsed(ts.PredictionsRequest, m) for m in sent_messages]
    assert any(m and m.model_name == "grpcd" and "data" in m.input for m in ts_sent)
    [record] = [
        r
        for (_, r), m in zip(records, sent_messages, strict=True)
        if (infer := parsed(service_pb2.ModelInferRequest, m)) and infer.raw_input_contents
    ]
    sent = service_pb2.ModelInferRequest.FromString(
        base64.b64decode(record["captureData"]["endpointInput"]["data"])
    )
    answered = service_pb2.ModelInferResponse.FromString(
        base64.b64decode(record["captureData"]["endpointOutput"]["data"])
    )
    assert sent.model_name == "grpcd" and sent.raw_input_contents[0] == rows.tobytes()
    assert answered.raw_output_contents[0] == answer.as_numpy("OUTPUT__0").tobytes()
    assert record["captureData"]["endpointInput"]["observedContentType"] == GRPC
    # and /metrics counts what was captured, dropped and failed
    assert 'lambdaserve_data_capture_records_total{outcome="captured"} 3.0' in metrics
    assert 'lambdaserve_data_capture_records_total{outcome="dropped"} 0.0' in metrics
