"""The Lambda functions as deployed, each from its shipped environment (``LambdaProcess``),
against the moto emulator: what the e2e journeys through the images share."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lambdaserve.catalog.store import Catalog
from lambdaserve.local.dev import point_environment_at
from lambdaserve.local.emulator import Emulator
from lambdaserve.local.resources import LocalResources, ensure_resources
from lambdaserve.processes.event_pump import EventPump, PumpConfig
from lambdaserve.settings import Settings, get_settings
from lambdaserve.wiring.aws import AwsClients
from tests.lambda_process import LambdaProcess
from tests.support import free_port


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


@contextmanager
def deploy(
    work: Path, *, python_models: bool, infer_environment: dict[str, str] | None = None
) -> Iterator[Deployed]:
    """The emulator, its resources, and the manage and infer functions from their shipped
    environments (``infer_environment`` added to the infer function's); the test process's
    environment restored afterwards."""
    saved = dict(os.environ)
    emulator = Emulator("127.0.0.1", free_port()).start()
    try:
        settings = point_environment_at(emulator.endpoint)
        clients = AwsClients(settings)
        resources = ensure_resources(clients, settings)
        # EnablePythonModels as given; metrics lines left out here
        environment = {
            **{k: v for k, v in os.environ.items() if k.startswith(("AWS_", "LAMBDASERVE_"))},
            "LAMBDASERVE_PYTHON_MODELS": "true" if python_models else "false",
            "POWERTOOLS_METRICS_DISABLED": "true",
            "LAMBDASERVE_WORK_DIR": str(work / "infer"),
        }
        with (
            LambdaProcess("manage", work / "manage.log", environment) as manage,
            LambdaProcess(
                "infer", work / "infer.log", {**environment, **(infer_environment or {})}
            ) as infer,
        ):
            yield Deployed(settings, clients, resources, manage, infer, environment, work)
    finally:
        emulator.stop()
        os.environ.clear()
        os.environ.update(saved)
        get_settings.cache_clear()
