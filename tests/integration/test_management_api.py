"""Every management route over HTTP, including the errors."""

from __future__ import annotations

import pytest
import tritonclient.http

from tests import builders
from tests.support import wait_until


@pytest.fixture
def published(stack):
    """Model m with versions 1..3 READY under policy all."""
    stack.put("models/m/config.pbtxt", b"version_policy: { all { } }")
    for version in (1, 2, 3):
        stack.put(f"models/m/{version}/model.onnx", builders.onnx_mlp(seed=version))
    for version in (1, 2, 3):
        stack.wait_state("m", version, "READY")
    return stack


def test_list_models_pages_with_next_page_token(stack):
    names = [f"model{i}" for i in range(5)]
    for name in names:
        stack.put(f"models/{name}/1/model.onnx", builders.onnx_mlp())
    wait_until(lambda: len(stack.index(ready=True)) == 5)
    seen, token, pages = [], None, 0
    while True:
        params = {"limit": 2} | ({"next_page_token": token} if token else {})
        body = stack.api.get("/models", params=params).json()
        seen += [m["modelName"] for m in body["models"]]
        assert all(m["modelUrl"].startswith("s3://") for m in body["models"])
        pages += 1
        token = body.get("nextPageToken")
        if not token:
            break
    assert seen == names
    assert pages == 3


def test_list_models_takes_torchserve_paging_an_empty_limit_and_integer_offsets(stack):
    names = [f"model{i}" for i in range(3)]
    for name in names:
        stack.put(f"models/{name}/1/model.onnx", builders.onnx_mlp())
    wait_until(lambda: len(stack.index(ready=True)) == 3)

    def page(query: str) -> tuple[list[str], str | None]:
        response = stack.api.get(f"/models?{query}")
        assert response.status_code == 200, response.text
        body = response.json()
        return [m["modelName"] for m in body["models"]], body.get("nextPageToken")

    assert page("limit=&next_page_token=") == (names, None)
    assert page("limit=1&next_page_token=1") == (["model1"], "2")
    assert page("limit=1&next_page_token=-1") == (["model0"], "1")
    assert page("next_page_token=12") == ([], None)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"limit": "x"}, "limit"),
        ({"next_page_token": "bogus"}, "next_page_token"),
    ],
)
def test_list_models_rejects_bad_paging(stack, params, message):
    response = stack.api.get("/models", params=params)
    assert response.status_code == 400
    assert message in response.json()["error"]


def test_an_out_of_range_limit_is_clamped_as_torchserve_does(stack):
    stack.put("models/m/1/model.onnx", builders.onnx_mlp())
    stack.wait_state("m", 1, "READY")
    for limit in (0, -5, 5000):
        response = stack.api.get("/models", params={"limit": limit})
        assert response.status_code == 200
        assert [m["modelName"] for m in response.json()["models"]] == ["m"]


def test_describe_all_versions_and_one_version(published):
    entries = published.api.get("/models/m").json()
    assert [e["modelVersion"] for e in entries] == ["1", "2", "3"]
    assert [e["isDefault"] for e in entries] == [False, False, True]
    assert published.api.get("/models/m/all").json() == entries
    [one] = published.api.get("/models/m/2").json()
    assert one["modelVersion"] == "2" and one["versionPolicy"] == {"all": {}}
    # TorchServe's describe fields sit beside ours
    assert {"modelName", "modelUrl", "engine", "minWorkers", "maxWorkers", "batchSize"} <= set(one)
    assert one["engine"] == "OnnxRuntime"
    # a TorchServe script reads readiness from workers: one READY entry while it serves
    assert [w["status"] for w in one["workers"]] == ["READY"]


@pytest.mark.parametrize(
    ("path", "status", "message"),
    [
        ("/models/nope", 404, "not in the catalog"),
        ("/models/m/9", 404, "has no version 9"),
        ("/models/m/v1", 404, "no version label 'v1'"),
        ("/models/m/-1", 400, "a version is a positive integer"),
        ("/models/-bad", 400, "invalid model name"),
    ],
)
def test_describe_errors(published, path, status, message):
    response = published.api.get(path)
    assert response.status_code == status
    assert message in response.json()["error"]


def test_set_default_moves_the_default(published):
    response = published.api.put("/models/m/1/set-default")
    assert response.status_code == 200, response.text
    defaults = [e["modelVersion"] for e in published.api.get("/models/m").json() if e["isDefault"]]
    assert defaults == ["1"]


def test_set_default_refuses_a_version_that_does_not_serve(published):
    published.api.put("/models/m", json={"version_policy": {"latest": {"num_versions": 1}}})
    published.wait_state("m", 1, "UNAVAILABLE")
    response = published.api.put("/models/m/1/set-default")
    assert response.status_code == 409
    assert "only a READY version can be the default" in response.json()["error"]
    assert published.api.put("/models/m/7/set-default").status_code == 404


def test_put_model_changes_the_version_policy(published):
    response = published.api.put(
        "/models/m", json={"version_policy": {"specific": {"versions": [1, 3]}}}
    )
    assert response.status_code == 200, response.text
    assert response.json()["version_policy"] == {"specific": {"versions": [1, 3]}}
    assert published.state("m", 2)[0] == "UNAVAILABLE"
    assert published.state("m", 1)[0] == published.state("m", 3)[0] == "READY"


def test_put_model_sets_batching(published):
    response = published.api.put(
        "/models/m",
        json={"max_batch_size": 8, "dynamic_batching": {"max_queue_delay_microseconds": 500}},
    )
    assert response.status_code == 200, response.text
    [entry] = published.api.get("/models/m/3").json()
    assert (entry["batchSize"], entry["maxBatchDelay"]) == (8, 0.5)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{not json", "not valid JSON"),
        (b"[1, 2]", "must be a JSON object"),
        (b"", "empty"),
        (b"{}", "at least one model-config field"),
        (b'{"no_such_field": 1}', "no_such_field"),
        (b'{"version_policy": {"latest": {"num_versions": 0}}}', "num_versions >= 1"),
    ],
)
def test_put_model_rejects_bad_bodies(published, body, message):
    response = published.api.put("/models/m", content=body)
    assert response.status_code == 400
    assert message in response.json()["error"]


def test_put_unknown_model_is_404(stack):
    response = stack.api.put("/models/ghost", json={"max_batch_size": 2})
    assert response.status_code == 404


def test_delete_version_removes_its_objects_and_the_catalog_follows(published):
    published.put("models/m/2/labels.txt", b"a\nb\n")
    response = published.api.delete("/models/m/2")
    assert response.status_code == 200 and response.json()["status"] == 'Model "m" unregistered'
    assert response.json()["deletedObjects"] == 2
    assert published.wait_state("m", 2, "UNAVAILABLE").startswith("removed")
    assert published.services.repository.version_objects("m", 2) == []
    assert published.api.delete("/models/m/99").status_code == 404


def test_repository_index_and_ready_filter(published):
    published.put("models/bad/1/model.onnx", b"junk" * 10)
    published.wait_state("bad", 1, "UNAVAILABLE")
    everything = published.index()
    assert {(e["name"], e["version"]) for e in everything} == {
        ("m", "1"),
        ("m", "2"),
        ("m", "3"),
        ("bad", "1"),
    }
    ready = published.index(ready=True)
    assert {e["name"] for e in ready} == {"m"}
    assert published.api.post("/v2/repository/index", json={"ready": "yes"}).status_code == 400


def test_unload_stops_serving_and_load_restores(published):
    assert published.api.post("/v2/repository/models/m/unload").status_code == 200
    assert published.state("m", 3) == ("UNAVAILABLE", "unloaded: load the model to serve it again")
    assert published.index(ready=True) == []
    assert published.api.post("/v2/repository/models/m/load").status_code == 200
    assert published.state("m", 3) == ("READY", "")


def test_load_with_a_config_parameter_applies_it(published):
    body = {"parameters": {"config": '{"version_policy": {"latest": {"num_versions": 2}}}'}}
    assert published.api.post("/v2/repository/models/m/load", json=body).status_code == 200
    assert published.state("m", 1)[0] == "UNAVAILABLE"
    bad = published.api.post("/v2/repository/models/m/load", json={"parameters": {"config": "{"}})
    assert bad.status_code == 400
    assert bad.json()["error"].startswith("failed to load 'm': ")  # what Triton's clients match


def test_load_refuses_tritons_file_override_rather_than_ignoring_it(published):
    # Given Triton's load with files in the request (file:<path> parameters, base64)
    body = {"parameters": {"config": "{}", "file:1/model.onnx": "YQ=="}}
    response = published.api.post("/v2/repository/models/m/load", json=body)
    # Then it is refused saying how models are published, and nothing changed
    assert response.status_code == 400
    error = response.json()["error"]
    assert "failed to load 'm'" in error and "'file:1/model.onnx'" in error
    assert "uploading" in error
    assert published.state("m", 3) == ("READY", "")


def test_load_unknown_model_is_404_and_unknown_route_is_json(stack):
    unknown = stack.api.post("/v2/repository/models/ghost/load")
    assert unknown.status_code == 404
    assert unknown.json()["error"].startswith("failed to load 'ghost': ")  # Triton's words
    response = stack.api.get("/no/such/route")
    assert response.status_code == 404
    assert "error" in response.json()


def test_the_repository_extension_answers_on_the_inference_url(published):
    # Given tritonclient pointed at the inference URL only, as Triton's clients are
    url = str(published.inference.base_url).removeprefix("http://").rstrip("/")
    with tritonclient.http.InferenceServerClient(url) as client:
        assert {e["version"] for e in client.get_model_repository_index()} == {"1", "2", "3"}
        assert client.is_model_ready("m")
        # When it unloads the model, readiness on the same server follows at once
        client.unload_model("m")
        assert not client.is_model_ready("m")
        client.load_model("m")
        assert client.is_model_ready("m")


def test_a_load_that_serves_nothing_is_a_400_with_the_reason(stack):
    stack.put("models/junk/1/model.onnx", b"not a model")
    stack.wait_state("junk", 1, "UNAVAILABLE")
    response = stack.inference.post("/v2/repository/models/junk/load")
    assert response.status_code == 400
    assert "failed to load 'junk': version 1:" in response.json()["error"]


def test_describing_a_model_with_a_config_and_no_versions_says_where_they_go(stack):
    # Given a config uploaded before any version
    stack.put("models/early/config.pbtxt", b"max_batch_size: 4\n")
    wait_until(lambda: stack.api.get("/models").json()["models"], 30)
    # Then describe answers 404 naming the upload that is missing, not an empty list
    answer = stack.api.get("/models/early")
    assert answer.status_code == 404
    assert "has a config but no versions" in answer.text
    assert "/models/early/1/model.onnx" in answer.text


def test_customized_describe_is_refused_saying_where_model_code_runs(published):
    # TorchServe's describe_handle is model code: never run beside the management API
    answer = published.api.get("/models/m?customized=true")
    assert answer.status_code == 400
    assert "describe_handle" in answer.json()["error"]
    assert published.api.get("/models/m?customized=false").status_code == 200
