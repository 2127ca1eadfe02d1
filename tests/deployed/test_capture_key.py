"""A data_capture kms_key_id as deployed: the functions' roles may encrypt with the model
bucket's key (ModelBucketKmsKeyArn) alone, so a capture naming it serves and one naming another
key is refused at publish, saying which key to name (on AWS its writes would be denied)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from lambdaserve.local.http_api_event import http_api_event
from tests import builders
from tests.deployed.stack import DeployedStack, deployed

pytestmark = pytest.mark.deployed
KEY = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"


def capturing(key: str) -> bytes:
    setting = json.dumps(json.dumps({"sampling_percentage": 100, "kms_key_id": key}))
    return f'parameters {{ key: "data_capture" value {{ string_value: {setting} }} }}'.encode()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DeployedStack]:
    # Given the stack deployed with its model bucket under a KMS key
    with deployed(tmp_path_factory.mktemp("kms"), {"ModelBucketKmsKeyArn": KEY}) as running:
        yield running


def describe(stack: DeployedStack, model: str) -> dict[str, object]:
    answer = stack.invoke("ManageApiFunction", http_api_event("GET", f"/models/{model}", b""))
    assert answer["statusCode"] == 200, answer
    [described] = json.loads(answer["body"])
    return dict(described)


def capture_under_the_buckets_key(stack: DeployedStack) -> None:
    files = {"config.pbtxt": capturing(KEY), "1/model.onnx": builders.onnx_mlp(4, 3)}
    stack.publish("kept", files)
    assert describe(stack, "kept")["configError"] in (None, "")


def test_a_capture_under_the_buckets_key_serves(stack: DeployedStack):
    # When a model captures under the bucket's key
    # Then it is READY, its config taken whole
    capture_under_the_buckets_key(stack)


def test_a_capture_under_another_key_is_refused_naming_the_bucket_key(stack: DeployedStack):
    # When a model names a key no role may use
    files = {"config.pbtxt": capturing("alias/captures"), "1/model.onnx": builders.onnx_mlp(4, 3)}
    with pytest.raises(Exception) as refused:
        stack.publish("elsewhere", files)
    # Then the refusal names the key to use
    said = str(refused.value) + json.dumps(describe(stack, "elsewhere"))
    assert "only with the model bucket's key" in said and KEY in said, said
