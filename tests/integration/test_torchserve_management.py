"""TorchServe's management calls where lambdaserve's answer differs: each a clear answer,
never a 404/405 that leaves a migrating script guessing."""

from __future__ import annotations

from tests import builders


def test_registration_from_a_url_is_refused_saying_how_to_publish(stack):
    response = stack.api.post("/models?url=https://example.com/densenet.mar&initial_workers=1")
    assert response.status_code == 400
    assert "publish by upload" in response.json()["error"].lower()
    assert "s3://<ModelBucketName>/models/<name>/1/model.onnx" in response.json()["error"]


def test_scaling_workers_names_the_equivalent(stack):
    stack.put("models/m/1/model.onnx", builders.onnx_mlp())
    stack.wait_state("m", 1, "READY")
    response = stack.api.put("/models/m?min_worker=2&max_worker=4&synchronous=true")
    assert response.status_code == 400
    error = response.json()["error"]
    assert "max_worker, min_worker, synchronous" in error and "provisioned concurrency" in error


def test_unregistering_a_model_deletes_its_default_version(stack):
    # Given two versions serving under policy all, 2 the default
    stack.put("models/m/config.pbtxt", b"version_policy: { all { } }")
    for version in (1, 2):
        stack.put(f"models/m/{version}/model.onnx", builders.onnx_mlp(seed=version))
        stack.wait_state("m", version, "READY")
    # When TorchServe's unregister call arrives
    response = stack.api.delete("/models/m")
    # Then the default version is retired and the other keeps serving
    assert response.status_code == 202 and "version 2" in response.json()["status"]
    assert stack.wait_state("m", 2, "UNAVAILABLE").startswith("removed")
    assert stack.state("m", 1)[0] == "READY"


def test_options_on_the_root_describes_each_api(stack):
    for client, title in ((stack.api, "management"), (stack.inference, "inference")):
        response = client.options("/")
        assert response.status_code == 200
        document = response.json()
        assert document["openapi"].startswith("3.") and title in document["info"]["title"]
