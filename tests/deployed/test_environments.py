"""A TorchServe archive built with a requirements file, published to the stack as deployed
with EnablePythonModels=true: its environment built by the code-validator function (wheels
only, from the stack's PackageIndexUrl), stored through the manage function's presigned
URL, and imported by the handler where it serves. On the same stack, the other two roles
that validate model code do it under their own grants: the scheduled reconcile heals a
Python model with requirements whose event was lost (its environment built and stored, its
auto_complete_config run by the code validator), and the management API's config change
validates it again (the environment looked up, auto_complete_config run again)."""

from __future__ import annotations

import json
from pathlib import Path

from lambdaserve.catalog.store import Catalog
from lambdaserve.local.http_api_event import http_api_event
from tests.deployed.stack import deployed
from tests.torchserve_archives import _model_archiver
from tests.wheelhouse import build_wheelhouse

HANDLER = (
    b"import tinypkg\n\n"
    b"def handle(data, context):\n"
    b"    return [{'tinypkg': tinypkg.VERSION} for _ in data or []]\n"
)
# a Python model whose answer says which tinypkg its environment holds
# (tinypkg imported by initialize: auto_complete_config runs without the environment)
SCALER = b"""
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        return auto_complete_model_config

    def initialize(self, args):
        import tinypkg

        self.scale = float(tinypkg.VERSION)

    def execute(self, requests):
        scale = self.scale
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor(
                "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy() * scale
            )])
            for r in requests
        ]
"""
SCALER_CONFIG = b"""
backend: "python"
input [{ name: "INPUT0", data_type: TYPE_FP32, dims: [ -1 ] }]
output [{ name: "OUTPUT0", data_type: TYPE_FP32, dims: [ -1 ] }]
"""
SCHEDULED = {
    "version": "0",
    "id": "7f1e2c3a-0b4d-4e5f-8a9b-1c2d3e4f5a6b",
    "detail-type": "Scheduled Event",
    "source": "aws.events",
    "account": "123456789012",
    "time": "2026-12-07T00:00:00Z",
    "region": "us-east-1",
    "resources": ["arn:aws:events:us-east-1:123456789012:rule/reconcile"],
    "detail": {},
}


def test_a_mar_with_a_requirements_file_answers_with_its_own_packages(tmp_path: Path):
    # Given an archive made by torch-model-archiver --requirements-file (tinypkg==2.0), and
    # the stack with model code on and the package index a local wheelhouse
    wheels = build_wheelhouse(tmp_path / "wheelhouse")
    (tmp_path / "handler.py").write_bytes(HANDLER)
    (tmp_path / "requirements.txt").write_text("tinypkg==2.0\n")
    export = _model_archiver(
        tmp_path,
        [
            "--model-name", "envmar", "--version", "1.0", "--handler",
            str(tmp_path / "handler.py"), "--requirements-file", str(tmp_path / "requirements.txt"),
        ],
    )  # fmt: skip
    parameters = {"EnablePythonModels": "true", "PackageIndexUrl": str(wheels)}
    with deployed(tmp_path / "stack", parameters) as stack:
        # When it is uploaded beside the versions and the manage function publishes it
        archive = (export / "envmar.mar").read_bytes()
        stack.publish("envmar", {"models/envmar.mar": archive}, under="models/")
        # Then TorchServe's /predictions answers from its handler, with its own tinypkg
        event = http_api_event("POST", "/predictions/envmar", b"{}")
        answer = stack.invoke("InferFunction", event)
        assert answer["statusCode"] == 200, answer
        assert json.loads(answer["body"]) == {"tinypkg": "2.0"}
        _reconcile_and_manage_validate_model_code(stack)


def _reconcile_and_manage_validate_model_code(stack) -> None:
    catalog = Catalog(stack.clients.dynamodb, stack.settings.table)
    # Given a Python model with its own requirements (tinypkg==1.0: an environment not built
    # yet) uploaded while its S3 events were lost
    bucket = stack.settings.bucket
    for name, body in (
        ("config.pbtxt", SCALER_CONFIG),
        ("1/model.py", SCALER),
        ("1/requirements.txt", b"tinypkg==1.0\n"),
    ):
        stack.clients.s3.put_object(Bucket=bucket, Key=f"models/scaler/{name}", Body=body)
    [source] = stack.shape.function("ManageEventsFunction").sources
    stack.clients.sqs.purge_queue(QueueUrl=stack.queue(source.queue).url)
    # When the schedule invokes the reconcile function (under its role)
    stack.invoke("ReconcileFunction", SCHEDULED)
    # Then its environment was built and its code checked: it is READY and answers with it
    [record] = catalog.versions("scaler")
    assert record.state == "READY", record.reason
    assert _scaled(stack, 3.0) == [3.0]
    # When the management API changes a parameter (under its role)
    fields = {"parameters": {"team": {"string_value": "vision"}}}
    event = http_api_event("PUT", "/models/scaler", json.dumps(fields).encode())
    changed = stack.invoke("ManageApiFunction", event)
    # Then the version was validated again (environment looked up, code completed and
    # loaded where it serves) and still answers from its environment
    assert changed["statusCode"] == 200, changed
    [record] = catalog.versions("scaler")
    assert record.state == "READY", record.reason
    assert _scaled(stack, 2.0) == [2.0]


def _scaled(stack, value: float) -> list[float]:
    tensor = {"name": "INPUT0", "datatype": "FP32", "shape": [1], "data": [value]}
    body = json.dumps({"inputs": [tensor]}).encode()
    answer = stack.invoke("InferFunction", http_api_event("POST", "/v2/models/scaler/infer", body))
    assert answer["statusCode"] == 200, answer
    return json.loads(answer["body"])["outputs"][0]["data"]
