"""``make dev DEPLOYED=1`` (``lambdaserve dev --deployed``) as a developer runs it, from the
environment ``make dev`` builds: template.yaml's stack, each function in its own process with
the template's environment under its own role, the HTTP API routing as deployed; a template
without a permission the journey needs is denied, and dev says so by name."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import yaml

from lambdaserve.local.template import load_template
from tests.deployed.test_template_mutations import without_action
from tests.shipped import built
from tests.support import free_port

# the environment `make dev` builds (scripts/shipped_envs.py builds it as the Makefile does)
LAMBDASERVE = built("dev") / "bin" / "lambdaserve"
ROWS = {"inputs": [{"name": "INPUT__0", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]}


@contextmanager
def dev_deployed(log: Path, template: Path | None = None) -> Iterator[str]:
    port = free_port()
    environment = {k: v for k, v in os.environ.items() if not k.startswith("LAMBDASERVE_")}
    if template is not None:
        environment["LAMBDASERVE_TEMPLATE"] = str(template)
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(LAMBDASERVE), "dev", "--deployed", "--inference-port", str(port),
             "--aws-port", str(free_port())],
            stdout=out, stderr=subprocess.STDOUT, env=environment,
        )  # fmt: skip
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            process.terminate()
            process.wait(60)


def status_of(url: str) -> int:
    try:
        return httpx.get(url, timeout=10).status_code
    except httpx.TransportError:
        return 0


def wait_for(probe: object, timeout_s: float, log: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while not probe():  # type: ignore[operator]
        assert time.monotonic() < deadline, log.read_text(errors="replace")[-4000:]
        time.sleep(0.5)


def test_dev_deployed_serves_through_the_template_shape(tmp_path: Path):
    # Given `lambdaserve dev --deployed` with the demo model published through it
    log = tmp_path / "dev.log"
    before = set(Path(tempfile.gettempdir()).glob("lambdaserve-deployed-*"))
    with dev_deployed(log) as api:
        wait_for(lambda: status_of(f"{api}/v2/models/demo-mlp/ready") == 200, 120, log)
        # When the HTTP API is called as deployed: inference, async, management
        answer = httpx.post(f"{api}/v2/models/demo-mlp/infer", json=ROWS, timeout=30)
        accepted = httpx.post(
            f"{api}/v2/models/demo-mlp/infer",
            json=ROWS,
            headers={"prefer": "respond-async"},
            timeout=30,
        )
        status_url = api + json.loads(accepted.text)["status_url"]
        wait_for(lambda: status_of(status_url) == 200, 60, log)
        models = httpx.get(f"{api}/models", timeout=30)
        missing = httpx.get(f"{api}/no/such/route", timeout=30)
        said = log.read_text()
    # Then each answer comes from the function the template routes it to, in its own process
    assert answer.status_code == 200, answer.text
    assert accepted.status_code == 202, accepted.text
    assert answer.json()["outputs"][0]["shape"] == [1, 3]
    assert models.json()["models"][0]["modelName"] == "demo-mlp"  # ManageApiFunction's
    assert missing.status_code == 404 and missing.json() == {"message": "Not Found"}
    assert "IAM DENIED" not in said, said[-3000:]
    # And each function's log, where the banner points, holds what it wrote, kept after stop
    logs = Path(said.split("logs ", 1)[1].split()[0]).parent
    for function in ("InferFunction", "ManageEventsFunction", "ManageApiFunction"):
        written = (logs / f"{function}.log").read_text()
        assert "START RequestId: " in written and "REPORT RequestId: " in written, function
    assert "demo-mlp" in (logs / "ManageEventsFunction.log").read_text()  # its logger's lines
    assert (logs / "BatcherFunction.log").exists()
    # And nothing is left in /tmp
    assert set(Path(tempfile.gettempdir()).glob("lambdaserve-deployed-*")) <= before
    # And the banner says how to publish and what to try, ready to copy
    assert "aws s3 cp model.onnx s3://" in said and "AWS_ENDPOINT_URL=" in said
    assert "curl -s -X POST http://" in said and "/predictions/demo-mlp" in said


def test_dev_deployed_refuses_the_flags_it_cannot_honour():
    # When dev --deployed is given a port the deployed stack has no use for
    done = subprocess.run(
        [str(LAMBDASERVE), "dev", "--deployed", "--grpc-port", "9001"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    # Then it refuses, naming the flag and what does it instead
    assert done.returncode == 2
    assert "--grpc-port: gRPC is the serve task's (EnableServerMode=true)" in done.stderr


def test_dev_deployed_names_what_a_role_denies(tmp_path: Path):
    # Given template.yaml without the infer function's s3:GetObject
    template = copy.deepcopy(load_template())
    without_action("InferFunction", "s3:GetObject")(template)
    changed = tmp_path / "template.yaml"
    changed.write_text(yaml.safe_dump(template, sort_keys=False))
    log = tmp_path / "dev.log"
    # When dev --deployed runs from it and the demo model is asked for an answer
    with dev_deployed(log, changed) as api:

        def denied() -> bool:
            if status_of(f"{api}/v2/models/demo-mlp/ready") == 200:
                httpx.post(f"{api}/v2/models/demo-mlp/infer", json=ROWS, timeout=30)
            return "IAM DENIED" in log.read_text(errors="replace")

        wait_for(denied, 120, log)
        said = log.read_text(errors="replace")
    # Then dev names the function, the action and the resource
    assert "InferFunction was denied s3:GetObject" in said, said[-3000:]
    assert "models/demo-mlp/1/model.onnx" in said
