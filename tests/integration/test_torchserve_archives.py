"""A TorchServe user's day, unchanged: torch-model-archiver builds the .mar, `aws s3 cp`
publishes it, curl calls /predictions and /explanations as TorchServe documents, the
management API's describe, set-default and unregister take the archive's version string."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.test_handlers_and_images import curl
from tests.support import wait_until
from tests.torchserve_archives import (
    archive,
    builtin_archive,
    expected,
    jpeg,
    torchserve_answers,
    workflow_archive,
)

pytest.importorskip("ts")
pytestmark = pytest.mark.torch


def aws_s3_cp(stack, source: Path, key: str) -> None:
    """The AWS CLI, as a user publishes (its endpoint is the stack's emulator)."""
    aws = shutil.which("aws") or str(Path(sys.executable).parent / "aws")
    subprocess.run(
        [aws, "s3", "cp", str(source), f"s3://{stack.settings.bucket}/{key}"],
        check=True,
        capture_output=True,
        timeout=120,
        env={
            **os.environ,
            "AWS_ACCESS_KEY_ID": "test",
            "AWS_SECRET_ACCESS_KEY": "test",
            "AWS_DEFAULT_REGION": stack.settings.region,
        },
    )


def wait_published(stack, model: str, version: int, label: str) -> None:
    """READY, then labelled with the archive's modelVersion (the label follows READY)."""
    stack.wait_state(model, version, "READY", timeout_s=60)
    wait_until(lambda: stack.api.get(f"/models/{model}/{label}").status_code == 200, 30)


@pytest.fixture
def url(stack) -> str:
    return str(stack.inference.base_url).rstrip("/")


def test_a_mar_published_with_aws_s3_cp_answers_curl_as_torchserve_does(stack, url, tmp_path: Path):
    # Given tiny.mar, built by torch-model-archiver, copied to the bucket with the AWS CLI
    aws_s3_cp(stack, archive(tmp_path, "tiny", "1.0"), "models/tiny.mar")
    wait_published(stack, "tiny", 1, "1.0")
    # When curl posts JSON to the archive's version, as TorchServe's docs do
    row = [0.5, -1.0, 2.0, 0.25]
    status, body, _ = curl(
        "-X", "POST", f"{url}/predictions/tiny/1.0", "-H", "Content-Type: application/json",
        "-d", json.dumps({"values": row}),
    )  # fmt: skip
    # Then the handler's answer is the eager model's, computed by hand
    assert status == 200, body
    assert json.loads(body) == expected(tmp_path, [row])[0]
    # And explanations reach its explain_handle (target as a multipart field)
    status, body, _ = curl(
        "-X", "POST", f"{url}/explanations/tiny", "-F", f"data={json.dumps({'values': row})}",
        "-F", "target=1",
    )  # fmt: skip
    assert status == 200 and len(json.loads(body)) == 4, body
    # And the handler's custom metric is on /metrics
    metrics = stack.inference.get("/metrics").text
    assert "TinyRows_total" in metrics


def test_describe_set_default_and_unregister_take_the_archive_version(stack, tmp_path: Path):
    # Given two uploads of tiny: modelVersion 1.0, then 2.0
    aws_s3_cp(stack, archive(tmp_path, "tiny", "1.0"), "models/tiny.mar")
    wait_published(stack, "tiny", 1, "1.0")
    aws_s3_cp(stack, archive(tmp_path, "tiny", "2.0"), "models/tiny.mar")
    wait_published(stack, "tiny", 2, "2.0")
    # When a TorchServe script describes the model
    entries = stack.api.get("/models/tiny").json()
    # Then each version shows its archive's version string, and a READY worker
    assert [e["modelVersion"] for e in entries] == ["1.0", "2.0"]
    assert all(e["workers"][0]["status"] == "READY" for e in entries)
    # When it sets 1.0 as the default, then unregisters 2.0
    assert stack.api.put("/models/tiny/1.0/set-default").status_code == 200
    [default] = [e for e in stack.api.get("/models/tiny").json() if e["isDefault"]]
    assert default["modelVersion"] == "1.0"
    assert stack.api.delete("/models/tiny/2.0").status_code == 200  # the objects go; events follow
    stack.wait_state("tiny", 2, "UNAVAILABLE", timeout_s=60)


def test_a_hostile_archive_is_unavailable_in_the_index(stack, tmp_path: Path):
    import io
    import zipfile

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as out:
        manifest = {"model": {"modelName": "evil", "modelVersion": "1.0", "handler": "h.py"}}
        out.writestr("MAR-INF/MANIFEST.json", json.dumps(manifest))
        out.writestr("h.py", "def handle(data, context):\n    return data\n")
        out.writestr("../../outside.py", "x = 1\n")
    stack.put("models/evil.mar", buffer.getvalue())
    reason = stack.wait_state("evil", 1, "UNAVAILABLE", timeout_s=60)
    assert reason.startswith("archive evil.mar: ") and "outside the archive" in reason


def test_a_workflow_answers_wfpredict_and_the_workflow_apis(stack, url, tmp_path: Path):
    # Given tiny.mar and pipeline.war (pre_processing -> tiny -> post_processing), copied up
    aws_s3_cp(stack, archive(tmp_path, "tiny", "1.0"), "models/tiny.mar")
    aws_s3_cp(stack, workflow_archive(tmp_path), "models/pipeline.war")
    stack.wait_state("pipeline", 1, "READY", timeout_s=60)
    stack.wait_state("tiny", 1, "READY", timeout_s=60)
    # When curl posts to TorchServe's workflow inference API
    row = [0.25, 0.5, -2.0, 1.0]
    status, body, _ = curl(
        "-X", "POST", f"{url}/wfpredict/pipeline", "-H", "Content-Type: application/json",
        "-d", json.dumps({"raw": row}),
    )  # fmt: skip
    # Then the function nodes ran around the model
    assert status == 200, body
    by_hand = expected(tmp_path, [row])[0]
    assert json.loads(body)["label"] == ["cat", "dog", "bird"][by_hand["class"]]
    # And the workflow management API lists, describes, refuses URLs and unregisters
    listed = stack.api.get("/workflows").json()["workflows"]
    assert [w["workflowName"] for w in listed] == ["pipeline"]
    [described] = stack.api.get("/workflows/pipeline").json()
    assert described["state"] == ["READY"]
    refused = stack.api.post("/workflows", params={"url": "https://example.com/x.war"})
    assert refused.status_code == 400 and "aws s3 cp pipeline.war" in refused.json()["error"]
    assert stack.api.get("/workflows/tiny").status_code == 404
    assert stack.api.delete("/workflows/pipeline").status_code == 200
    stack.wait_state("pipeline", 1, "UNAVAILABLE", timeout_s=60)


def test_serve_answers_the_archive_through_its_front_door_as_curl_sends(stack, tmp_path: Path):
    from tests.integration.grpc_support import lambdaserve_serve

    # Given tiny.mar published, and `lambdaserve serve` (whose front door answers
    # /predictions before the app's router)
    aws_s3_cp(stack, archive(tmp_path, "tiny", "1.0"), "models/tiny.mar")
    wait_published(stack, "tiny", 1, "1.0")
    row = [0.5, -1.0, 2.0, 0.25]
    with lambdaserve_serve() as served:
        base = f"http://127.0.0.1:{served.http}"
        # When curl posts JSON, a raw body (-T) and a multipart field, by label and by default
        answers = [
            curl("-X", "POST", f"{base}/predictions/tiny/1.0", "-H",
                 "Content-Type: application/json", "-d", json.dumps({"values": row})),
            curl("-X", "POST", f"{base}/predictions/tiny", "-F",
                 f"data={json.dumps({'values': row})}"),
            curl("-X", "POST", f"{base}/predictions/nope", "-d", "{}"),
            curl("-X", "POST", f"{base}/predictions/tiny/9.9", "-d", "{}"),
        ]  # fmt: skip
    # Then the handler answers as by hand, and errors name what is missing
    want = expected(tmp_path, [row])[0]
    assert answers[0][0] == 200 and json.loads(answers[0][1]) == want
    assert answers[1][0] == 200 and json.loads(answers[1][1]) == want
    assert answers[2][0] == 404 and b"nope" in answers[2][1]
    assert answers[3][0] == 404 and b"9.9" in answers[3][1]


@pytest.mark.skipif(
    not all(importlib.util.find_spec(m) for m in ("torchvision", "captum")),
    reason="the built-in vision handlers need torchvision and captum (lambdaserve[torchserve])",
)
def test_the_builtin_image_classifier_answers_curl_T_of_a_jpeg(stack, url, tmp_path: Path):
    from tests.integration.grpc_support import lambdaserve_serve

    # Given an archive naming TorchServe's built-in image_classifier (eager model.py, its state
    # dict, index_to_name.json), copied to the bucket with the AWS CLI
    mar = builtin_archive(tmp_path, "classifier", "image_classifier", "2.0")
    aws_s3_cp(stack, mar, "models/classifier.mar")
    wait_published(stack, "classifier", 1, "2.0")
    kitten = tmp_path / "kitten.jpg"
    kitten.write_bytes(jpeg(seed=3))
    # When curl uploads the JPEG as TorchServe's docs do, to the HTTP API and to `serve`
    answers = [curl(f"{url}/predictions/classifier/2.0", "-T", str(kitten))]
    with lambdaserve_serve() as served:
        answers.append(
            curl(f"http://127.0.0.1:{served.http}/predictions/classifier", "-T", str(kitten))
        )
    # Then both answer what TorchServe's own loader and handler answer in this process: the
    # top five classes by the names in index_to_name.json
    [want] = torchserve_answers(mar, [kitten.read_bytes()], tmp_path)
    assert len(want) == 5
    for status, body, _ in answers:
        assert status == 200, body
        assert json.loads(body) == json.loads(json.dumps(want))


def test_serve_batches_a_handlers_requests_as_its_model_config_yaml_asks(stack, tmp_path: Path):
    from concurrent.futures import ThreadPoolExecutor

    import httpx

    from lambdaserve.local.emulator import free_port
    from lambdaserve.processes.background import BackgroundServer
    from lambdaserve.processes.serve import build_serving_app

    # Given tiny.mar whose model-config.yaml asks TorchServe's frontend for batches of four,
    # waiting up to 2 s for them
    config = tmp_path / "model-config.yaml"
    config.write_text("batchSize: 4\nmaxBatchDelay: 2000\nhandler:\n  scale: 2.0\n")
    aws_s3_cp(stack, archive(tmp_path, "tiny", "1.0", config=config), "models/tiny.mar")
    wait_published(stack, "tiny", 1, "1.0")
    rows = [[0.5, -1.0, 2.0, 0.25], [1.0, 0.0, -0.5, 3.0], [0.0, 0.1, 0.2, 0.3], [-2.0, 1, 1, 0]]
    server = BackgroundServer(build_serving_app(batching=True), "127.0.0.1", free_port()).start()
    try:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            assert client.get("/v2/models/tiny/ready").status_code == 200  # loaded first
            before = _counts(client, "tiny")
            # When four requests arrive together, as TorchServe's clients send them
            with ThreadPoolExecutor(len(rows)) as pool:
                answers = list(
                    pool.map(
                        lambda row: client.post("/predictions/tiny/1.0", json={"values": row}),
                        rows,
                    )
                )
            after = _counts(client, "tiny")
    finally:
        server.stop()
    # Then each gets its own row's answer, from one call of the handler with all four
    assert [a.status_code for a in answers] == [200] * 4, [a.text for a in answers]
    assert [a.json() for a in answers] == expected(tmp_path, rows)
    assert (after[0] - before[0], after[1] - before[1]) == (4, 1), after


def _counts(client, model: str) -> tuple[int, int]:
    """Inferences and executions so far (none before the first request)."""
    stats = client.get(f"/v2/models/{model}/stats").json()["model_stats"]
    return (stats[0]["inference_count"], stats[0]["execution_count"]) if stats else (0, 0)
