"""Rollouts that judge themselves (issue 52): ``POST /models/{m}/rollouts`` moves a label's
weight to a new version step by step, each step baked and judged against the stable version
from the fleet's tallies (the catalog), rolled back without a person when the analysis
fails, promoted when it passes; each move an EventBridge event. Clients keep asking the
label through v2 infer the whole time; tritonclient's HTTP client and TorchServe's curl call
meet the label's version before and after. Budget: ~40 s (two rollouts at 2 s intervals).

The judge runs as ``lambdaserve dev`` runs it (``local.rollout_loop``), here every second.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import httpx
import numpy as np
import pytest
import tritonclient.http

from lambdaserve.local.rollout_loop import RolloutLoop
from tests.integration.label_models import BODY, CONFIG
from tests.support import wait_until

MODEL = "ranker"
LABEL = "prod"
HEADER = "lambdaserve-model-version"
# every version answers its input times its number; FAILING of every 10 requests fail
CODE = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.count = 0

    def execute(self, requests):
        answers = []
        for request in requests:
            self.count += 1
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            if self.count % 10 < FAILING:
                answers.append(pb_utils.InferenceResponse(error=pb_utils.TritonError("flaky")))
            else:
                answers.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x * NUMBER)]))
        return answers
"""
FAST = {"interval_seconds": 2, "min_samples": 10, "max_error_rate": 0.05}
EVENTS = ("RolloutStepStarted", "BakeStarted", "RolloutPromoted", "RollbackStarted",
          "RollbackCompleted", "RolloutPaused")  # fmt: skip


@pytest.fixture
def bus(monkeypatch: pytest.MonkeyPatch) -> None:
    """The emulator's default EventBridge bus, as ``lambdaserve dev`` sets it."""
    monkeypatch.setenv("LAMBDASERVE_EVENT_BUS", "default")


@pytest.fixture
def published(bus: None, stack: Any) -> Iterator[Any]:
    """Version 1 (stable), 2 (fails 3 requests in 10) and 3 (healthy), the label on 1, and
    a client asking the label the whole time, counting who answered and how."""
    stack.put(f"models/{MODEL}/config.pbtxt", CONFIG)
    for number, failing in ((1, 0), (2, 3), (3, 0)):
        code = CODE.replace("FAILING", str(failing)).replace("NUMBER", str(number))
        stack.put(f"models/{MODEL}/{number}/model.py", code.encode())
    for number in (1, 2, 3):
        stack.wait_state(MODEL, number, "READY", timeout_s=90)
    assert stack.api.put(f"/models/{MODEL}/labels/{LABEL}?version=1").status_code == 200
    traffic = Traffic(str(stack.inference.base_url))
    judge = RolloutLoop(stack.process, 1.0).start()
    try:
        yield stack, traffic.start()
    finally:
        judge.stop()
        traffic.stop()


class Traffic:
    """Clients asking ``versions/prod``: (version that answered, status) of each answer."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.answers: Counter[tuple[str, int]] = Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._ask, daemon=True)

    def start(self) -> Traffic:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def since(self) -> Counter[tuple[str, int]]:
        """The answers from now on (a fresh counter, filled as they come)."""
        self.answers = Counter()
        return self.answers

    def _ask(self) -> None:
        with httpx.Client(base_url=self.url, timeout=30) as client:
            while not self._stop.is_set():
                answer = client.post(f"/v2/models/{MODEL}/versions/{LABEL}/infer", json=BODY)
                version = answer.headers.get("lambdaserve-model-version", "?")
                self.answers[(version, answer.status_code)] += 1


def pipeline(stack: Any) -> tuple[Any, str]:
    """A deploy pipeline's rule for lambdaserve's rollout events, into a queue."""
    endpoint = stack.settings.endpoint_url
    sqs = boto3.client("sqs", endpoint_url=endpoint, region_name="us-east-1")
    events = boto3.client("events", endpoint_url=endpoint, region_name="us-east-1")
    # a queue and rule of this test's own: an earlier test's events must not be heard here
    name = f"rollout-events-{uuid.uuid4().hex[:8]}"
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]
    pattern = {"source": ["lambdaserve"], "detail-type": list(EVENTS)}
    events.put_rule(Name=name, EventPattern=json.dumps(pattern))
    events.put_targets(Rule=name, Targets=[{"Id": "q", "Arn": arn["QueueArn"]}])
    return sqs, url


def heard(queue: tuple[Any, str], last: str) -> list[dict[str, Any]]:
    """The rollout events the pipeline heard, until one of kind ``last``."""
    sqs, url = queue
    found: list[dict[str, Any]] = []

    def until_last() -> bool:
        batch = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
        found.extend(json.loads(m["Body"]) for m in batch)
        return any(e["detail-type"] == last for e in found)

    wait_until(until_last, 15, 0.1)
    return found


def settled(stack: Any, traffic: Traffic) -> Counter[tuple[str, int]]:
    """The answers from when every process has seen the label's new weights: a serving
    process trusts its catalog view for LAMBDASERVE_CATALOG_TTL_S (docs/rollouts.md)."""
    time.sleep(stack.settings.catalog_ttl_s + 0.5)
    return traffic.since()


def status(stack: Any) -> dict[str, Any]:
    answer = stack.api.get(f"/models/{MODEL}/rollouts/{LABEL}")
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def start(stack: Any, to: int) -> dict[str, Any]:
    body = {"label": LABEL, "to": to, "steps": [20, 50, 100], "bake_seconds": 2, "analysis": FAST}
    answer = stack.api.post(f"/models/{MODEL}/rollouts", json=body)
    assert answer.status_code == 201, answer.text
    return dict(answer.json())


def test_a_version_failing_30_percent_is_rolled_back_by_the_analysis(published):
    # Given clients asking the label, and a pipeline listening for rollout events
    stack, traffic = published
    events = pipeline(stack)
    # When a rollout moves 20% of the label to version 2, which fails 3 requests in 10
    started = start(stack, 2)
    assert (started["phase"], started["weight"]) == ("Progressing", 20)
    # Then the analysis rolls it back without a person
    done = wait_until(lambda: (s := status(stack))["phase"] != "Progressing" and s, 40, 0.2)
    assert done["phase"] == "RolledBack", done
    # within two measurements of its first failing window
    phases = [m["phase"] for m in done["measurements"]]
    assert phases[-1] == "Failed" and len(phases) <= 2, phases
    judged = done["rolled_back"]["measurement"]
    assert 0.15 < judged["canary"]["error_rate"] < 0.45, judged
    assert judged["stable"]["error_rate"] == 0, judged
    assert "error rate" in done["rolled_back"]["reason"]
    # and once every process has re-read the catalog, the label is 100% stable
    after = settled(stack, traffic)
    wait_until(lambda: sum(after.values()) >= 200, 30)
    assert set(after) == {("1", 200)}, after
    [first, *_] = stack.api.get(f"/models/{MODEL}/1").json()
    assert first["weightedLabels"][LABEL]["versions"] == {"1": 100, "2": 0}
    assert [r["phase"] for r in first["rollouts"]] == ["RolledBack"]
    assert "error rate" in first["rollouts"][0]["rolledBack"]["reason"]
    # and the events say why
    got = heard(events, "RollbackCompleted")
    kinds = [e["detail-type"] for e in got]
    assert kinds == ["RolloutStepStarted", "BakeStarted", "RollbackStarted", "RollbackCompleted"]
    assert "analysis failed: error rate" in got[-1]["detail"]["trigger"], got[-1]
    assert got[-1]["detail"]["measurement"]["phase"] == "Failed"


def rollout_command(stack: Any, *words: str) -> subprocess.CompletedProcess[str]:
    """``lambdaserve rollout ...`` as a user runs it, against the stack's management API."""
    url = str(stack.api.base_url)
    command = [str(Path(sys.executable).parent / "lambdaserve"), "rollout", *words, "--url", url]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


def triton_version(stack: Any) -> str:
    """The version that answers the label for tritonclient's HTTP client, as users call it."""
    url = str(stack.inference.base_url).removeprefix("http://").rstrip("/")
    client = tritonclient.http.InferenceServerClient(url)
    tensor = tritonclient.http.InferInput("INPUT0", [1, 4], "FP32")
    tensor.set_data_from_numpy(np.array([[1, 2, 3, 4]], np.float32))
    result = client.infer(MODEL, [tensor], model_version=LABEL)
    return str(result.get_response()["model_version"])


def curl_version(stack: Any) -> str:
    """The version that answers TorchServe's curl call on the label (its response header)."""
    url = f"{stack.inference.base_url}/predictions/{MODEL}/{LABEL}".replace("//pred", "/pred")
    command = ["curl", "-sS", "-D", "-", "-o", "/dev/null", "-H", "Content-Type: application/json"]
    said = subprocess.run(
        [*command, "-d", "[[1, 2, 3, 4]]", url],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    headers = dict(line.split(": ", 1) for line in said.stdout.splitlines() if ": " in line)
    assert said.stdout.startswith("HTTP/1.1 200"), said
    return headers[HEADER].strip()


def test_a_healthy_version_reaches_100_percent_through_its_steps(published):
    # Given clients asking the label, and a pipeline listening for rollout events
    stack, traffic = published
    events = pipeline(stack)
    # and tritonclient and TorchServe's curl call meeting version 1 by the label
    assert (triton_version(stack), curl_version(stack)) == ("1", "1")
    # When `lambdaserve rollout start` moves the label to version 3, which is healthy
    analysis = json.dumps(FAST)
    words = ["--label", LABEL, "--to", "3", "--steps", "20,50,100", "--bake-seconds", "2"]
    started = rollout_command(stack, "start", MODEL, *words, "--analysis", analysis)
    assert started.returncode == 0, started.stderr
    assert json.loads(started.stdout)["weight"] == 20
    weights: set[int] = set()

    def promoted() -> dict[str, Any] | None:
        now = status(stack)
        weights.add(now["weight"])
        return now if now["phase"] != "Progressing" else None

    done = wait_until(promoted, 60, 0.2)
    # Then it reached 100% through each of its steps, judged at each
    assert done["phase"] == "Promoted", done
    assert {20, 50, 100} <= weights, weights
    assert all(m["phase"] != "Failed" for m in done["measurements"]), done["measurements"]
    # and once every process has re-read the catalog, every answer is version 3's
    after = settled(stack, traffic)
    wait_until(lambda: sum(after.values()) >= 200, 30)
    assert set(after) == {("3", 200)}, after
    # and tritonclient and TorchServe's curl call, unchanged, meet version 3 by the label
    assert (triton_version(stack), curl_version(stack)) == ("3", "3")
    # and each move was announced
    got = heard(events, "RolloutPromoted")
    steps = [e["detail"]["weight"] for e in got if e["detail-type"] == "RolloutStepStarted"]
    assert steps == [20, 50, 100], got
    assert got[-1]["detail"]["measurement"]["phase"] == "Successful"


def test_a_bad_rollout_is_refused_with_what_to_send(stack):
    # Given a model with no label to roll out on
    stack.put(f"models/{MODEL}/config.pbtxt", CONFIG)
    healthy = CODE.replace("FAILING", "0").replace("NUMBER", "1")
    stack.put(f"models/{MODEL}/1/model.py", healthy.encode())
    stack.wait_state(MODEL, 1, "READY", timeout_s=90)

    # When rollouts are asked badly
    def refused(body: dict[str, Any], said: str) -> None:
        answer = stack.api.post(f"/models/{MODEL}/rollouts", json=body)
        # Then each is a 4xx saying what is wrong
        message = answer.json().get("message", answer.text)
        assert 400 <= answer.status_code < 500 and said in message, (body, answer.text)

    refused({"label": "prod", "to": 2}, "PUT /models/ranker/labels/prod")
    assert stack.api.put(f"/models/{MODEL}/labels/prod?version=1").status_code == 200
    refused({"to": 2}, '"label"')
    refused({"label": "prod", "to": 1}, "already serves version 1")
    refused({"label": "prod", "to": 2, "steps": [50, 10]}, '"steps"')
    refused({"label": "prod", "to": 2, "analysis": {"min_samples": 0}}, "min_samples")
    refused({"label": "prod", "to": 2, "colour": "red"}, "unknown field")
    refused({"label": "prod", "to": 9}, "version 9")
    # and the command line says the same, exiting 2
    said = rollout_command(stack, "start", MODEL, "--label", "prod", "--to", "9")
    assert said.returncode == 2 and "version 9" in said.stderr, said
    listed = rollout_command(stack, "status", MODEL)
    assert listed.returncode == 0 and json.loads(listed.stdout) == {"rollouts": []}, listed
