"""The Lambda paths as deployed, from the environments the images and the zip hold (built by
scripts/shipped_envs.py as their recipes build them, nothing of the test venv importable there):
publish through the manage image's events handler fed by the real repository-events queue;
v2 infer and /predictions through the infer image's api_handler with API Gateway's events;
Prefer: respond-async through the requests queue to the batcher (its zip and layer); a KIND_GPU
model's request forwarded to a real `lambdaserve serve`. All against the moto emulator."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import onnxruntime as ort
import pytest

from lambdaserve.catalog.store import Catalog
from lambdaserve.local.dev import point_environment_at
from lambdaserve.local.emulator import Emulator
from lambdaserve.local.http_api_event import http_api_event
from lambdaserve.local.resources import LocalResources, ensure_resources
from lambdaserve.processes.event_pump import EventPump, PumpConfig
from lambdaserve.settings import Settings, get_settings
from lambdaserve.wiring.aws import AwsClients
from tests import builders
from tests.integration.grpc_support import lambdaserve_serve
from tests.lambda_process import LambdaProcess
from tests.support import free_port

pytestmark = pytest.mark.e2e
EVENTS = Path(__file__).parents[1] / "events"
MLP = builders.onnx_mlp(4, 3)
GPU_CONFIG = b"max_batch_size: 8\ninstance_group [{ kind: KIND_GPU }]"


@dataclass
class Deployed:
    settings: Settings
    clients: AwsClients
    resources: LocalResources
    manage: LambdaProcess
    infer: LambdaProcess
    environment: dict[str, str]
    work: Path

    def pump(self, queue: str, handler: Any, until: Any, timeout_s: float = 240) -> None:
        """The event source mapping: SQS batches of ``queue`` to ``handler`` until ``until()``."""
        url, arn = getattr(self.resources, queue).url, getattr(self.resources, queue).arn
        pump = EventPump(
            self.clients.sqs,
            url,
            arn,
            handler,
            queue,
            config=PumpConfig(batch_size=10, poll_wait_s=1, retry_delay_s=1),
            region=self.settings.region,
        )
        deadline = time.monotonic() + timeout_s
        while not until():
            assert time.monotonic() < deadline, f"{queue}: not done within {timeout_s} s"
            pump.poll_once()

    def publish(self, model: str, files: dict[str, bytes]) -> None:
        for name, body in files.items():
            key = f"models/{model}/{name}"
            self.clients.s3.put_object(Bucket=self.settings.bucket, Key=key, Body=body)
        catalog = Catalog(self.clients.dynamodb, self.settings.table)

        def ready() -> bool:
            versions = catalog.versions(model)
            return bool(versions) and versions[0].state == "READY"

        self.pump("repository_events", self.manage.handler("events_handler"), ready)


@pytest.fixture(scope="module")
def deployed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployed]:
    work = tmp_path_factory.mktemp("images")
    saved = dict(os.environ)
    emulator = Emulator("127.0.0.1", free_port()).start()
    try:
        settings = point_environment_at(emulator.endpoint)
        clients = AwsClients(settings)
        resources = ensure_resources(clients, settings)
        # as deployed: Python models off (template Globals), metrics lines left out here
        environment = {
            **{k: v for k, v in os.environ.items() if k.startswith(("AWS_", "LAMBDASERVE_"))},
            "LAMBDASERVE_PYTHON_MODELS": "false",
            "POWERTOOLS_METRICS_DISABLED": "true",
            "LAMBDASERVE_WORK_DIR": str(work / "infer"),
        }
        with (
            LambdaProcess("manage", work / "manage.log", environment) as manage,
            LambdaProcess("infer", work / "infer.log", environment) as infer,
        ):
            stack = Deployed(settings, clients, resources, manage, infer, environment, work)
            stack.publish("mlp", {"1/model.onnx": MLP})
            yield stack
    finally:
        emulator.stop()
        os.environ.clear()
        os.environ.update(saved)
        get_settings.cache_clear()


def expected(rows: list[list[float]]) -> np.ndarray:
    return ort.InferenceSession(MLP).run(None, {"INPUT__0": np.array(rows, np.float32)})[0]


def sample(name: str) -> dict[str, Any]:
    return dict(json.loads((EVENTS / name).read_text()))


def test_v2_infer_from_api_gateways_event_in_the_infer_image(deployed: Deployed):
    # Given a model published through the manage image (READY in the catalog)
    # When API Gateway's v2 infer event reaches the infer image's api_handler
    response = deployed.infer.invoke("api_handler", sample("apigw_v2_infer_json.json"))
    # Then it answers the model's outputs for both rows
    assert response["statusCode"] == 200, response
    [output] = json.loads(response["body"])["outputs"]
    rows = [[0.1, 0.2, 0.3, 0.4], [1, 2, 3, 4]]
    np.testing.assert_allclose(output["data"], expected(rows).ravel(), rtol=1e-5)


def test_torchserve_predictions_in_the_infer_image(deployed: Deployed):
    # When TorchServe's /predictions event reaches the infer image
    response = deployed.infer.invoke("api_handler", sample("apigw_v2_predictions.json"))
    # Then it answers as TorchServe does: the row's outputs
    assert response["statusCode"] == 200, response
    np.testing.assert_allclose(
        json.loads(response["body"]), expected([[0.1, 0.2, 0.3, 0.4]])[0], rtol=1e-5
    )


def test_a_queued_request_is_answered_by_the_batcher_zip_and_layer(deployed: Deployed):
    # Given a v2 request sent with Prefer: respond-async to the infer image
    body = sample("apigw_v2_infer_json.json")["body"].encode()
    event = http_api_event("POST", "/v2/models/mlp/infer", body)
    event["headers"]["prefer"] = "respond-async"
    accepted = deployed.infer.invoke("api_handler", event)
    assert accepted["statusCode"] == 202, accepted
    status_url = json.loads(accepted["body"])["status_url"]
    # When the requests queue feeds the batcher as built from its zip and the layer
    with LambdaProcess("batcher", deployed.work / "batcher.log", deployed.environment) as batcher:

        def answered() -> bool:
            done = deployed.infer.invoke("api_handler", http_api_event("GET", status_url, b""))
            return bool(done["statusCode"] == 200)

        deployed.pump("requests", batcher.handler("handler"), answered)
    # Then the status URL answers the outputs
    done = deployed.infer.invoke("api_handler", http_api_event("GET", status_url, b""))
    [output] = json.loads(done["body"])["outputs"]
    rows = [[0.1, 0.2, 0.3, 0.4], [1, 2, 3, 4]]
    np.testing.assert_allclose(output["data"], expected(rows).ravel(), rtol=1e-5)


def test_a_gpu_models_request_is_forwarded_to_serve_from_the_infer_image(deployed: Deployed):
    # Given a KIND_GPU model and a real `lambdaserve serve`, the infer image pointed at it
    deployed.publish("gpu", {"config.pbtxt": GPU_CONFIG, "1/model.onnx": MLP})
    with lambdaserve_serve() as served:
        pointed = {
            **deployed.environment,
            "LAMBDASERVE_SERVER_URL": f"http://127.0.0.1:{served.http}",
            "LAMBDASERVE_WORK_DIR": str(deployed.work / "infer-server-mode"),
        }
        with LambdaProcess("infer", deployed.work / "infer-sm.log", pointed) as infer:
            # When its v2 infer event reaches the infer image
            body = sample("apigw_v2_infer_json.json")["body"].encode()
            event = http_api_event("POST", "/v2/models/gpu/infer", body)
            response = infer.invoke("api_handler", event)
        # Then `serve` answered it (its statistics count both rows), with the model's outputs
        assert response["statusCode"] == 200, response
        stats = httpx.get(f"http://127.0.0.1:{served.http}/v2/models/gpu/stats", timeout=30)
    assert sum(int(m["inference_count"]) for m in stats.json()["model_stats"]) == 2
    [output] = json.loads(response["body"])["outputs"]
    rows = [[0.1, 0.2, 0.3, 0.4], [1, 2, 3, 4]]
    np.testing.assert_allclose(output["data"], expected(rows).ravel(), rtol=1e-5)
