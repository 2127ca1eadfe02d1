"""Model code in the infer function as template.yaml deploys it (`EnablePythonModels=true`):
a Triton Python model is checked where it serves (the manage function's load-check event),
answers API Gateway's events, and runs in a worker process of the image's own interpreter
(the shipped default), so a crash of its code is answered once and the next request is
served again by a restarted worker, while the function itself lives on."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from signal import SIGKILL

import numpy as np
import pytest

from lambdaserve.catalog.store import Catalog
from lambdaserve.local.http_api_event import http_api_event
from lambdaserve.publishing.serving_check import check_event
from tests.deployed.stack import STACK, DeployedStack, deployed, state_changes
from tests.support import wait_until

CONFIG = b"""
backend: "python"
input [{ name: "INPUT0", data_type: TYPE_FP32, dims: [ -1 ] }]
output [
  { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ -1 ] },
  { name: "PID", data_type: TYPE_INT64, dims: [ 1 ] }
]
"""
DOUBLER = b"""
import os

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            pid = pb_utils.Tensor("PID", __import__("numpy").array([os.getpid()], "int64"))
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x * 2), pid]))
        return responses
"""


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DeployedStack]:
    # as deployed with EnablePythonModels=true; code workers left at the shipped default
    with deployed(tmp_path_factory.mktemp("model-code"), {"EnablePythonModels": "true"}) as running:
        yield running


def _infer(stack: DeployedStack, value: float) -> dict:
    tensor = {"name": "INPUT0", "datatype": "FP32", "shape": [1], "data": [value]}
    body = json.dumps({"inputs": [tensor]}).encode()
    return stack.invoke("InferFunction", http_api_event("POST", "/v2/models/doubler/infer", body))


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def test_a_python_model_runs_in_a_worker_of_the_infer_function_and_survives_its_crash(
    stack: DeployedStack,
):
    """Given a Python model published through the manage image
    When the manage function's load check reaches the infer image, then API Gateway's
    infer events, then its worker process is killed, then another event
    Then the check loads it in the infer function, the answers are the model's and come
    from a child process of the function, the event after the kill answers once that the
    code crashed, and the next is answered by a new worker in the same function."""
    stack.publish("doubler", {"config.pbtxt": CONFIG, "1/model.py": DOUBLER})
    [record] = Catalog(stack.clients.dynamodb, stack.settings.table).versions("doubler")
    checked = stack.invoke("InferFunction", check_event(record))
    assert checked["loaded"] is True, checked
    assert checked["environment"] == f"the infer function {STACK}-InferFunction"

    answer = _infer(stack, 1.5)
    assert answer["statusCode"] == 200, answer
    outputs = {o["name"]: o["data"] for o in json.loads(answer["body"])["outputs"]}
    assert outputs["OUTPUT0"] == [3.0]
    [worker] = outputs["PID"]
    function_pid = stack.function("InferFunction").pid
    assert worker != function_pid and worker in _children(function_pid)

    os.kill(worker, SIGKILL)
    crashed = _infer(stack, 2.0)
    # the event after the kill meets the dead worker and is answered that the code crashed,
    # unless the function saw the exit first and started a new worker (a loaded machine):
    # then it is answered by that one
    if crashed["statusCode"] != 200:
        assert crashed["statusCode"] == 500, crashed
        assert "crashed" in crashed["body"] and "SIGKILL" in crashed["body"]

    def answered() -> dict | None:
        again = _infer(stack, 2.0)
        return again if again["statusCode"] == 200 else None

    again = wait_until(answered, 120, interval_s=0.5)
    outputs = {o["name"]: o["data"] for o in json.loads(again["body"])["outputs"]}
    assert outputs["OUTPUT0"] == [4.0] and outputs["PID"][0] != worker


PEER_MODELS = Path(__file__).parents[1] / "fixtures" / "peer_models"
PIPELINE = Path(__file__).parents[1] / "fixtures" / "paddle_pipeline"


def _paddle_mlp() -> tuple[dict[str, bytes], np.ndarray, np.ndarray]:
    """Paddle's own saved model (tests/fixtures/peer_models), its input and Paddle's answer."""
    expected = json.loads((PEER_MODELS / "expected.json").read_text())["fixtures"]["paddle_mlp"]
    files = {
        f"model.{suffix}": (PEER_MODELS / "paddle_mlp" / f"model.{suffix}").read_bytes()
        for suffix in ("pdmodel", "pdiparams")
    }
    x = np.array(expected["inputs"]["x"]["data"], dtype=expected["inputs"]["x"]["dtype"])
    prob = expected["outputs"]["softmax_0.tmp_0"]
    return files, x, np.array(prob["data"], dtype=prob["dtype"])


def test_a_paddle_model_and_a_paddle_serving_pipeline_answer_through_the_http_api(
    stack: DeployedStack,
):
    """Given Paddle's saved model as a version of its own, and Paddle Serving's pipeline
    (web_service.py and config.yml unchanged) over the same model
    When both are published through the manage function and called through the HTTP API's
    routes (KServe v2, and Paddle's /{name}/prediction)
    Then both are READY through the load check and answer what Paddle computed."""
    files, x, prob = _paddle_mlp()
    stack.publish("paddle-mlp", {f"1/{name}": body for name, body in files.items()})
    tensor = {"name": "x", "datatype": "FP32", "shape": list(x.shape), "data": x.ravel().tolist()}
    body = json.dumps({"inputs": [tensor]}).encode()
    answer = stack.http(http_api_event("POST", "/v2/models/paddle-mlp/infer", body))
    assert answer["statusCode"] == 200, answer
    [output] = json.loads(answer["body"])["outputs"]
    np.testing.assert_allclose(np.reshape(output["data"], prob.shape), prob, rtol=1e-5)

    pipeline = {
        f"1/{p.relative_to(PIPELINE).as_posix()}": p.read_bytes()
        for p in sorted(PIPELINE.rglob("*"))
        if p.is_file()
    }
    for name, model in files.items():  # as paddle.static.save_inference_model names them
        pipeline[f"1/mlp_model/inference.{name.split('.', 1)[1]}"] = model
    stack.publish("mlp_pipeline", pipeline)
    rows = ";".join(",".join(repr(float(v)) for v in row) for row in x)
    request = {"key": ["x", "scale"], "value": [rows, "2"]}
    event = http_api_event("POST", "/mlp_pipeline/prediction", json.dumps(request).encode())
    answered = stack.http(event)
    assert answered["statusCode"] == 200, answered
    reply = json.loads(answered["body"])
    assert reply["err_no"] == 0, reply
    assert json.loads(reply["value"][0]) == prob.argmax(axis=1).tolist()
    np.testing.assert_allclose(json.loads(reply["value"][1]), (prob * 2).round(6), rtol=1e-5)
    stack.assert_no_denials()


def _manage(stack: DeployedStack, method: str, path: str, body: dict | None = None) -> dict:
    sent = json.dumps(body).encode() if body is not None else b""
    return stack.invoke("ManageApiFunction", http_api_event(method, path, sent))


def test_the_management_api_changes_a_python_models_config_and_deletes_a_version(
    stack: DeployedStack,
):
    """Given a Python model published through the manage image
    When the management API (ManageApiFunction, under its role) changes its config, then
    deletes its version
    Then the config change is applied and the version checked again where it serves (the
    infer function loads it before READY), and the delete removes its objects; no role is
    denied a call on the way."""
    stack.publish("managed", {"config.pbtxt": CONFIG, "1/model.py": DOUBLER})
    # a parameter changes the version's effective config: it is checked again where it serves
    fields = {"parameters": {"team": {"string_value": "vision"}}}
    changed = _manage(stack, "PUT", "/models/managed", fields)
    assert changed["statusCode"] == 200, changed
    assert json.loads(changed["body"])["parameters"]["team"] == {"string_value": "vision"}
    [version] = Catalog(stack.clients.dynamodb, stack.settings.table).versions("managed")
    assert version.state == "READY", version.reason
    answer = _infer_model(stack, "managed", 3.0)
    assert answer["statusCode"] == 200, answer
    deleted = _manage(stack, "DELETE", "/models/managed/1")
    assert deleted["statusCode"] == 200, deleted
    listed = stack.clients.s3.list_objects_v2(
        Bucket=stack.settings.bucket, Prefix="models/managed/1/"
    )
    assert listed.get("KeyCount", 0) == 0, listed
    stack.assert_no_denials()


def _infer_model(stack: DeployedStack, model: str, value: float) -> dict:
    tensor = {"name": "INPUT0", "datatype": "FP32", "shape": [1], "data": [value]}
    body = json.dumps({"inputs": [tensor]}).encode()
    return stack.invoke("InferFunction", http_api_event("POST", f"/v2/models/{model}/infer", body))


ONCE_ONLY = b"""
import os

import triton_python_backend_utils as pb_utils

MARK = "MARK_PATH"


class TritonPythonModel:
    # loads once: a second execution environment finds what the first left, and fails, as
    # code whose dependency went away since its check does
    def initialize(self, args):
        if os.path.exists(MARK):
            raise RuntimeError("the resource this model needs is gone")
        open(MARK, "w").close()

    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0")
                 .as_numpy())]
            )
            for r in requests
        ]
"""
ONCE_CONFIG = b"""
backend: "python"
input [{ name: "INPUT0", data_type: TYPE_FP32, dims: [ -1 ] }]
output [{ name: "OUTPUT0", data_type: TYPE_FP32, dims: [ -1 ] }]
"""


def test_a_version_failing_to_load_where_it_serves_is_unavailable_and_announced(
    stack: DeployedStack, tmp_path: Path
):
    """Given a READY Python model whose code loads once only (checked where it serves)
    When a second execution environment of the infer function is asked for it
    Then that load fails, and the infer function, under its role, marks the version
    UNAVAILABLE with the code's error and announces it on the stack's bus."""
    changes = state_changes(stack, "once")
    code = ONCE_ONLY.replace(b"MARK_PATH", str(tmp_path / "loaded").encode())
    stack.publish("once", {"config.pbtxt": ONCE_CONFIG, "1/model.py": code})
    tensor = {"name": "INPUT0", "datatype": "FP32", "shape": [1], "data": [1.0]}
    event = http_api_event(
        "POST", "/v2/models/once/infer", json.dumps({"inputs": [tensor]}).encode()
    )
    with stack.another_instance("InferFunction", 3) as second:
        answer = second(event)
    assert answer["statusCode"] >= 400, answer
    [version] = Catalog(stack.clients.dynamodb, stack.settings.table).versions("once")
    assert version.state == "UNAVAILABLE" and "is gone" in version.reason, version
    states = changes()
    assert ("READY", "UNAVAILABLE") in states, states


def test_the_scheduled_reconcile_checks_a_python_model_where_it_serves(stack: DeployedStack):
    """Given a Python model uploaded while its S3 event was lost
    When the schedule invokes the reconcile function, under its role
    Then the version is validated and loaded where it serves (the infer function) and READY."""
    for name, body in {"config.pbtxt": CONFIG, "1/model.py": DOUBLER}.items():
        stack.clients.s3.put_object(
            Bucket=stack.settings.bucket, Key=f"models/reconciled/{name}", Body=body
        )
    [source] = stack.shape.function("ManageEventsFunction").sources
    stack.clients.sqs.purge_queue(QueueUrl=stack.queue(source.queue).url)
    answer = stack.invoke("ReconcileFunction", {"source": "aws.events", "detail": {}})
    assert answer["models"] >= 1, answer
    [version] = Catalog(stack.clients.dynamodb, stack.settings.table).versions("reconciled")
    assert version.state == "READY", version.reason
    assert _infer_model(stack, "reconciled", 2.0)["statusCode"] == 200


def test_a_version_failing_to_load_on_the_queued_path_is_unavailable_and_announced(
    stack: DeployedStack, tmp_path: Path
):
    """Given a READY Python model whose code loads once only (checked where it serves)
    When a queued request for it reaches the infer batch function (a new execution
    environment: the batcher's invoke)
    Then that load fails, and the batch function, under its role, marks the version
    UNAVAILABLE with the code's error and announces it on the stack's bus."""
    changes = state_changes(stack, "once_queued")
    code = ONCE_ONLY.replace(b"MARK_PATH", str(tmp_path / "loaded").encode())
    stack.publish("once_queued", {"config.pbtxt": ONCE_CONFIG, "1/model.py": code})
    tensor = {"name": "INPUT0", "datatype": "FP32", "shape": [1], "data": [1.0]}
    body = json.dumps({"inputs": [tensor]}).encode()
    event = http_api_event("POST", "/v2/models/once_queued/infer", body)
    event["headers"]["prefer"] = "respond-async"
    accepted = stack.invoke("InferFunction", event)
    assert accepted["statusCode"] == 202, accepted
    catalog = Catalog(stack.clients.dynamodb, stack.settings.table)

    def unavailable() -> bool:
        return catalog.versions("once_queued")[0].state == "UNAVAILABLE"

    stack.pump("BatcherFunction", unavailable)
    [version] = catalog.versions("once_queued")
    assert "is gone" in version.reason, version
    states = changes()
    assert ("READY", "UNAVAILABLE") in states, states
    stack.assert_no_denials()
