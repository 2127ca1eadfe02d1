"""Integration fixtures: an emulator over HTTP (moto server, or LocalStack when given),
the stack's resources under unique names per test, the event pump feeding the real
manage handler, and the management API served by uvicorn."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from lambdaserve.apps.one_url import RepositoryOnInferenceUrl
from lambdaserve.handlers import batcher, manage
from lambdaserve.local.dev import MANAGE_CONCURRENCY, check_model_code_in
from lambdaserve.local.emulator import Emulator
from lambdaserve.local.resources import LocalResources, ensure_resources
from lambdaserve.processes.background import BackgroundServer
from lambdaserve.processes.event_pump import EventPump, PumpConfig
from lambdaserve.settings import Settings, get_settings
from lambdaserve.wiring.aws import AwsClients
from lambdaserve.wiring.manage import ManageServices
from lambdaserve.wiring.process import Process, install
from tests.support import free_port, stop_together, wait_until


@pytest.fixture(scope="session")
def aws_endpoint(request: pytest.FixtureRequest) -> Iterator[str]:
    given = request.config.getoption("--aws-endpoint") or os.environ.get("LOCALSTACK_ENDPOINT")
    if given:
        yield given
        return
    emulator = Emulator("127.0.0.1", free_port()).start()
    yield emulator.endpoint
    emulator.stop()


@dataclass
class Stack:
    settings: Settings
    clients: AwsClients
    resources: LocalResources
    services: ManageServices
    pump: EventPump
    api: httpx.Client
    inference: httpx.Client
    process: Process
    requests_pump: EventPump | None = None

    def pause_requests(self) -> None:
        """Stop feeding the requests queue to the batcher (messages accumulate)."""
        if self.requests_pump is not None:
            self.requests_pump.stop()
            self.requests_pump = None

    def resume_requests(self, batch_size: int = 10) -> None:
        self.pause_requests()
        self.requests_pump = EventPump(
            self.clients.sqs,
            self.resources.requests.url,
            self.resources.requests.arn,
            batcher.handler,
            "lambdaserve-batcher",
            config=PumpConfig(batch_size=batch_size, poll_wait_s=1, retry_delay_s=1),
            region=self.settings.region,
        )
        self.requests_pump.start()

    def put(self, key: str, body: bytes) -> None:
        self.clients.s3.put_object(Bucket=self.settings.bucket, Key=key, Body=body)

    def queue_depth(self, url: str) -> int:
        """Messages in a queue, visible or in flight."""
        attributes = self.clients.sqs.get_queue_attributes(
            QueueUrl=url,
            AttributeNames=[
                "ApproximateNumberOfMessages",
                "ApproximateNumberOfMessagesNotVisible",
            ],
        )["Attributes"]
        return sum(int(v) for v in attributes.values())

    def delete(self, key: str) -> None:
        self.clients.s3.delete_object(Bucket=self.settings.bucket, Key=key)

    def index(self, **body: Any) -> list[dict[str, Any]]:
        response = self.api.post("/v2/repository/index", json=body)
        assert response.status_code == 200, response.text
        return list(response.json())

    def state(self, model: str, version: int) -> tuple[str, str] | None:
        for entry in self.index():
            if entry["name"] == model and entry["version"] == str(version):
                return entry["state"], entry["reason"]
        return None

    def wait_state(self, model: str, version: int, state: str, timeout_s: float = 20) -> str:
        """Wait until the index shows ``state``; returns the reason."""
        found = wait_until(
            lambda: (s := self.state(model, version)) is not None and s[0] == state and s,
            timeout_s,
        )
        return str(found[1])


@pytest.fixture
def stack(aws_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Stack]:
    suffix = uuid.uuid4().hex[:10]
    monkeypatch.setenv("AWS_ENDPOINT_URL", aws_endpoint)
    monkeypatch.setenv("LAMBDASERVE_BUCKET", f"models-{suffix}")
    monkeypatch.setenv("LAMBDASERVE_TABLE", f"catalog-{suffix}")
    monkeypatch.setenv("LAMBDASERVE_REPOSITORY_EVENTS_QUEUE", f"events-{suffix}")
    monkeypatch.setenv("LAMBDASERVE_REQUESTS_QUEUE", f"requests-{suffix}")
    monkeypatch.setenv("LAMBDASERVE_WORK_DIR", str(tmp_path / "work"))
    monkeypatch.setenv("LAMBDASERVE_PYTHON_MODELS", "1")  # as in `lambdaserve dev`
    get_settings.cache_clear()
    settings = get_settings()
    clients = AwsClients(settings)
    # one process object for every function, as in `lambdaserve dev`
    process = Process(settings, clients=clients)
    install(process)
    check_model_code_in(process)  # as `lambdaserve dev` does
    resources = ensure_resources(clients, settings)
    pump = EventPump(
        clients.sqs,
        resources.repository_events.url,
        resources.repository_events.arn,
        manage.events_handler,
        "lambdaserve-manage",
        config=PumpConfig(
            batch_size=10, poll_wait_s=1, retry_delay_s=1, concurrency=MANAGE_CONCURRENCY
        ),
        region=settings.region,
    )
    pump.start()
    server = BackgroundServer(process.management_app, "127.0.0.1", free_port()).start()
    one_url = RepositoryOnInferenceUrl(process.inference_app, process.management_app, process.plane)
    inference_server = BackgroundServer(one_url, "127.0.0.1", free_port()).start()
    with (
        httpx.Client(base_url=server.url, timeout=30) as api,
        httpx.Client(base_url=inference_server.url, timeout=30) as inference,
    ):
        stack = Stack(settings, clients, resources, process.manage, pump, api, inference, process)
        stack.resume_requests()
        yield stack
        # the pumps' long polls and the servers' shutdowns run side by side: one at a time,
        # they were seconds of every integration test's teardown
        stop_together(stack.requests_pump, inference_server, server, pump)
        stack.requests_pump = None
    process.server().residency.close()  # as a server stops: its model code's worker processes end
    install(None)
    get_settings.cache_clear()
