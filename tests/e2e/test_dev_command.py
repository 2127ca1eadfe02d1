"""`lambdaserve dev` as a user runs it: a subprocess on free ports, driven over HTTP."""

from __future__ import annotations

import json
import re
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import boto3
import httpx
import pytest

from tests import builders
from tests.shipped import user_environment
from tests.support import free_port, wait_until

pytestmark = pytest.mark.e2e


@pytest.fixture
def dev_process(
    tmp_path: Path, dev_command: list[str]
) -> Iterator[tuple[subprocess.Popen[str], dict[str, int]]]:
    ports = {name: free_port() for name in ("aws", "management", "inference", "metrics", "grpc")}
    log = (tmp_path / "dev.log").open("w+")
    env = {
        **user_environment(),
        "LAMBDASERVE_WORK_DIR": str(tmp_path / "work"),
        # the synchronous answer limit, smaller than Lambda's 6 MB for a quick check
        "LAMBDASERVE_MAX_RESPONSE_BYTES": "200000",
    }
    process = subprocess.Popen(
        [
            *dev_command,
            "dev",
            "--aws-port",
            str(ports["aws"]),
            "--management-port",
            str(ports["management"]),
            "--inference-port",
            str(ports["inference"]),
            "--metrics-port",
            str(ports["metrics"]),
            "--grpc-port",
            str(ports["grpc"]),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    try:
        wait_until(lambda: "Ctrl-C stops everything" in (tmp_path / "dev.log").read_text(), 60)
        yield process, ports
    finally:
        if process.poll() is None:
            process.kill()
        log.close()


def pipeline_queue(endpoint: str) -> tuple[object, str]:
    """An EventBridge rule for lambdaserve's state changes, targeting a new SQS queue."""
    sqs = boto3.client("sqs", endpoint_url=endpoint, region_name="us-east-1")
    events = boto3.client("events", endpoint_url=endpoint, region_name="us-east-1")
    url = sqs.create_queue(QueueName="deploy-pipeline")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]
    pattern = {"source": ["lambdaserve"], "detail-type": ["Model Version State Change"]}
    events.put_rule(Name="wait-for-ready", EventPattern=json.dumps(pattern))
    events.put_targets(Rule="wait-for-ready", Targets=[{"Id": "q", "Arn": arn["QueueArn"]}])
    return sqs, url


def state_event(pipeline: tuple[object, str], model: str, state: str) -> dict | None:
    sqs, url = pipeline
    for message in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get(  # type: ignore[attr-defined]
        "Messages", []
    ):
        event = json.loads(message["Body"])
        if (event["detail"]["model"], event["detail"]["state"]) == (model, state):
            return dict(event)
    return None


def ready_versions(port: int) -> set[tuple[str, str]]:
    response = httpx.post(f"http://127.0.0.1:{port}/v2/repository/index", json={"ready": True})
    return {(e["name"], e["version"]) for e in response.json()}


def test_dev_publishes_by_upload_and_stops_cleanly(dev_process):
    process, ports = dev_process
    endpoint = f"http://127.0.0.1:{ports['aws']}"
    # Given the demo model published on start
    wait_until(lambda: ("demo-mlp", "1") in ready_versions(ports["management"]), 30)
    # and a deploy pipeline's EventBridge rule on the default bus, its target a queue
    pipeline = pipeline_queue(endpoint)
    # When a user uploads a model with boto3
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    s3.put_object(
        Bucket="lambdaserve-models", Key="models/resnet/1/model.onnx", Body=builders.onnx_mlp()
    )
    # Then it is READY over HTTP, with its signature
    wait_until(lambda: ("resnet", "1") in ready_versions(ports["management"]), 15)
    # and the pipeline hears of it from the emulator's EventBridge
    ready = wait_until(lambda: state_event(pipeline, "resnet", "READY"), 15)
    assert ready["detail-type"] == "Model Version State Change"
    assert ready["detail"]["previous_state"] == "LOADING"
    [entry] = httpx.get(f"http://127.0.0.1:{ports['management']}/models/resnet").json()
    assert entry["signature"]["inputs"][0]["datatype"] == "FP32"
    # And it answers inference on the inference port, as the demo model does
    inference = f"http://127.0.0.1:{ports['inference']}"
    body = {
        "inputs": [{"name": "INPUT__0", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]
    }
    answer = httpx.post(f"{inference}/v2/models/resnet/infer", json=body, timeout=60)
    assert answer.status_code == 200
    assert answer.json()["outputs"][0]["shape"] == [1, 3]
    demo = httpx.post(f"{inference}/predictions/demo-mlp", json=[0.1, 0.2, 0.3, 0.4], timeout=60)
    assert demo.status_code == 200 and abs(sum(demo.json()) - 1.0) < 1e-5  # softmax
    # And Ctrl-C stops everything with exit code 0, releasing the ports
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=30) == 0
    for port in ports.values():
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"http://127.0.0.1:{port}/", timeout=2)


def test_the_aws_cli_upload_from_the_readme_works(dev_process, dev_command, tmp_path: Path):
    _, ports = dev_process
    model = tmp_path / "model.onnx"
    model.write_bytes(builders.onnx_mlp())
    # The aws CLI as make dev installs it (the local extra), beside `lambdaserve`
    aws = str(Path(dev_command[0]).with_name("aws"))
    subprocess.run(
        [
            aws,
            "--endpoint-url",
            f"http://127.0.0.1:{ports['aws']}",
            "s3",
            "cp",
            str(model),
            "s3://lambdaserve-models/models/cli-model/1/model.onnx",
        ],
        check=True,
        capture_output=True,
        env={**user_environment(), "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test"},
    )
    wait_until(lambda: ("cli-model", "1") in ready_versions(ports["management"]), 15)


def test_the_console_reads_like_a_server_log(dev_process, tmp_path: Path):
    _, ports = dev_process
    wait_until(lambda: ("demo-mlp", "1") in ready_versions(ports["management"]), 60)
    inference = f"http://127.0.0.1:{ports['inference']}"
    # The first request loads the model: on a busy machine that outlasts httpx's 5 s default
    answer = httpx.post(f"{inference}/predictions/demo-mlp", json=[0.1, 0.2, 0.3, 0.4], timeout=60)
    assert answer.status_code == 200, answer.text
    # The access line is written after the response is sent, and the management API's own
    # lines (the readiness polls above) come earlier: wait for this request's line itself
    log = wait_until(
        lambda: (
            (text := (tmp_path / "dev.log").read_text())
            and "POST /predictions/demo-mlp 200 " in text
            and text
        ),
        30,
    )
    # The banner prints what `aws s3 cp` needs, and says what persists
    assert f"export AWS_ENDPOINT_URL=http://127.0.0.1:{ports['aws']} AWS_ACCESS_KEY_ID=test" in log
    assert "the embedded emulator keeps nothing" in log
    # Text lines, an access log with the model and version, and no emulator noise
    assert "INFO    lambdaserve.publishing.registrar  demo-mlp version 1 is READY" in log
    assert "POST /predictions/demo-mlp 200 " in log and "model=demo-mlp" in log
    assert '"level"' not in log and "Moto" not in log and "UserWarning" not in log


def test_torchserves_metrics_api_answers_on_its_own_port(dev_process):
    # Given a prediction served, as a TorchServe user makes one
    _, ports = dev_process
    wait_until(lambda: ("demo-mlp", "1") in ready_versions(ports["management"]), 60)
    inference = f"http://127.0.0.1:{ports['inference']}"
    answer = httpx.post(f"{inference}/predictions/demo-mlp", json=[0.1, 0.2, 0.3, 0.4], timeout=60)
    assert answer.status_code == 200, answer.text
    # When the metrics port is scraped, as TorchServe's metrics API is
    text = httpx.get(f"http://127.0.0.1:{ports['metrics']}/metrics", timeout=30).text
    # Then it answers as TorchServe's Postman collection checks it, and counts the model
    assert re.search(r'Requests2XX\{Level="Host",Hostname=".*",\} \d+\.\d+', text)
    assert re.search(
        r'^ts_inference_requests_total\{model_name="demo-mlp",model_version="1",hostname=".+",\} '
        r"1\.0$",
        text,
        re.M,
    )


def test_dev_answers_triton_grpc_clients_and_manages_over_grpc(dev_process):
    # Given `lambdaserve dev` with its demo model, gRPC on the port its banner prints
    import numpy as np
    import tritonclient.grpc as grpcclient

    _, ports = dev_process
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{ports['grpc']}")
    wait_until(lambda: ("demo-mlp", "1") in ready_versions(ports["management"]), 60)
    # When Triton's gRPC client infers and manages the repository, as against Triton
    tensor = grpcclient.InferInput("INPUT__0", [1, 4], "FP32")
    tensor.set_data_from_numpy(np.array([[0.1, 0.2, 0.3, 0.4]], np.float32))
    answer = client.infer("demo-mlp", [tensor]).as_numpy("OUTPUT__0")
    index = client.get_model_repository_index(as_json=True)["models"]
    client.unload_model("demo-mlp")
    unloaded = client.is_model_ready("demo-mlp")
    client.load_model("demo-mlp")
    # Then it answers, lists the demo model, and follows unload and load at once
    assert answer.shape == (1, 3)
    assert any(m["name"] == "demo-mlp" for m in index)
    assert not unloaded and client.is_model_ready("demo-mlp")


def test_dev_refuses_an_answer_over_the_synchronous_limit_as_deployed(dev_process):
    # Given `lambdaserve dev` (here with a 200 KB limit; deployed and by default, 6 MB)
    _, ports = dev_process
    wait_until(lambda: ("demo-mlp", "1") in ready_versions(ports["management"]), 60)
    rows = 5000
    body = {
        "inputs": [
            {"name": "INPUT__0", "datatype": "FP32", "shape": [rows, 4], "data": [0.5] * rows * 4}
        ]
    }
    url = f"http://127.0.0.1:{ports['inference']}/v2/models/demo-mlp/infer"
    # When an answer would be larger than that, and when it is not
    large = httpx.post(url, json=body, timeout=60)
    body["inputs"][0]["shape"] = [10, 4]
    body["inputs"][0]["data"] = [0.5] * 40
    small = httpx.post(url, json=body, timeout=60)
    # Then the large one is the 413 the deployed path answers, saying what to do
    assert large.status_code == 413
    assert "Prefer: respond-async" in large.json()["error"]
    assert small.status_code == 200


def test_a_handler_whose_initialize_raises_never_shows_ready(dev_process, tmp_path: Path):
    """Given `lambdaserve dev` as a fresh clone's `make dev` runs it (no TorchServe)
    When a TorchServe archive whose handler's initialize raises is uploaded, and the index
    is polled from that moment
    Then it never shows READY, and ends UNAVAILABLE naming the fix (`make dev TORCHSERVE=1`);
    with TorchServe installed the handler's own message and traceback are the reason
    (tests/unit/test_torchserve_archives.py, tests/integration/test_ready_means_it_answers.py)."""
    pytest.importorskip("ts")  # the test process builds the archive with TorchServe's tools
    from tests.torchserve_archives import archive

    _, ports = dev_process
    endpoint = f"http://127.0.0.1:{ports['aws']}"
    mar = archive(tmp_path, "broken").read_bytes()
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    s3.put_object(Bucket="lambdaserve-models", Key="models/broken.mar", Body=mar)
    seen: list[tuple[str, str]] = []

    def settled() -> bool:
        index = httpx.post(f"http://127.0.0.1:{ports['management']}/v2/repository/index")
        entries = [e for e in index.json() if e["name"] == "broken"]
        seen.extend((e["state"], e["reason"]) for e in entries)
        return bool(entries) and entries[0]["state"] not in ("LOADING",)

    wait_until(settled, 120)
    assert all(state != "READY" for state, _ in seen), seen
    state, reason = seen[-1]
    assert state == "UNAVAILABLE" and "make dev TORCHSERVE=1" in reason, reason
