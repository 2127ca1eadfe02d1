"""TorchServe's management calls where lambdaserve's answer differs: each a clear answer,
never a 404/405 that leaves a migrating script guessing."""

from __future__ import annotations

from tests import builders


def test_registration_from_a_url_is_refused_saying_how_to_publish(stack):
    response = stack.api.post("/models?url=https://example.com/densenet.mar&initial_workers=1")
    assert response.status_code == 400
    assert "not supported" in response.json()["message"]
    assert (
        "aws s3 cp densenet.mar s3://<ModelBucketName>/models/densenet.mar"
        in (response.json()["message"])
    )
    other = stack.api.post("/models?url=https://example.com/model")
    assert "s3://<ModelBucketName>/models/<name>/1/model.onnx" in other.json()["error"]


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
    assert response.status_code == 200 and response.json()["status"] == 'Model "m" unregistered'
    assert response.json()["detail"].startswith("version 2:")
    assert stack.wait_state("m", 2, "UNAVAILABLE").startswith("removed")
    assert stack.state("m", 1)[0] == "READY"


def test_options_on_the_root_describes_each_api(stack):
    for client, title in ((stack.api, "management"), (stack.inference, "inference")):
        response = client.options("/")
        assert response.status_code == 200
        document = response.json()
        assert document["openapi"].startswith("3.") and title in document["info"]["title"]


def test_a_version_label_names_the_version_to_set_default_or_delete(stack):
    # Given version 1 labelled "1.0", as TorchServe names a .mar's version
    stack.put("models/m/config.pbtxt", b"version_policy: { all { } }")
    for version in (1, 2):
        stack.put(f"models/m/{version}/model.onnx", builders.onnx_mlp(seed=version))
        stack.wait_state("m", version, "READY")
    assert stack.api.put("/models/m/labels/1.0", json={"version": 1}).status_code == 200
    # Then set-default and delete take the label; an unknown one is a 404 naming it
    assert stack.api.put("/models/m/1.0/set-default").status_code == 200
    assert [e["isDefault"] for e in stack.api.get("/models/m").json()] == [True, False]
    for call in (stack.api.put, stack.api.delete):
        path = "/models/m/0.0/set-default" if call is stack.api.put else "/models/m/0.0"
        response = call(path)
        assert response.status_code == 404 and "'0.0'" in response.json()["error"]
    assert stack.api.put("/models/nope/1.0/set-default").status_code == 404
    assert stack.api.delete("/models/m/1.0").json() == {
        "status": 'Model "m" unregistered',  # TorchServe's answer, 200
        "detail": "version 1: 1 objects removed; the catalog follows through repository events",
        "deletedObjects": 1,
    }
    assert stack.wait_state("m", 1, "UNAVAILABLE").startswith("removed")


def test_scaling_an_unknown_model_or_version_is_a_404_and_a_version_is_refused_too(stack):
    stack.put("models/m/1/model.onnx", builders.onnx_mlp())
    stack.wait_state("m", 1, "READY")
    assert stack.api.put("/models/nope?min_worker=1").status_code == 404
    assert stack.api.put("/models/m/7?min_worker=1").status_code == 404
    response = stack.api.put("/models/m/1?min_worker=1&synchronous=true")
    assert response.status_code == 400
    assert "no workers to scale" in response.json()["error"]
