"""A TorchServe archive built with a requirements file, published to the stack as deployed
with EnablePythonModels=true: its environment built by the code-validator function (wheels
only, from the stack's PackageIndexUrl), stored through the manage function's presigned
URL, and imported by the handler where it serves."""

from __future__ import annotations

import json
from pathlib import Path

from lambdaserve.local.http_api_event import http_api_event
from tests.deployed.stack import deployed
from tests.torchserve_archives import _model_archiver
from tests.wheelhouse import build_wheelhouse

HANDLER = (
    b"import tinypkg\n\n"
    b"def handle(data, context):\n"
    b"    return [{'tinypkg': tinypkg.VERSION} for _ in data or []]\n"
)


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
