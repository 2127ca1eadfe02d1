"""Payload capture against the emulator: a model whose config asks for it (the
``data_capture`` parameter) has its requests and answers written to S3 in SageMaker's Data
Capture layout, the payloads byte-equal to what was sent and answered; the management API
turns it on without a redeploy, and refuses a setting that does not parse."""

from __future__ import annotations

import base64
import json
import re

import numpy as np

from tests import builders

CONFIG = b"""
platform: "onnxruntime_onnx"
max_batch_size: 8
parameters { key: "data_capture" value { string_value: "{\\"sampling_percentage\\": 100}" } }
"""
ROWS = {"inputs": [{"name": "INPUT__0", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]}


def captured(stack, model: str) -> list[tuple[str, dict]]:
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
