"""Unit fixtures: moto in-process (no network), the resources of the local stack."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from moto import mock_aws

from lambdaserve.handlers import load_check
from lambdaserve.local.resources import LocalResources, ensure_resources
from lambdaserve.publishing.serving_check import InProcessCheck
from lambdaserve.settings import Settings
from lambdaserve.wiring.aws import AwsClients
from lambdaserve.wiring.inference import build_model_server
from lambdaserve.wiring.manage import ManageServices, build_manage_services
from lambdaserve.wiring.process import Process, install


@dataclass
class InProcessAws:
    settings: Settings
    clients: AwsClients
    resources: LocalResources
    services: ManageServices

    def use_process(self) -> Process:
        """This test's process object (what the handlers serve with), installed."""
        process = Process(self.settings, clients=self.clients)
        install(process)
        return process

    def put(self, key: str, body: bytes) -> None:
        self.clients.s3.put_object(Bucket=self.settings.bucket, Key=key, Body=body)


@pytest.fixture
def aws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[InProcessAws]:
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        # model code in this process: the unit tests are the domain's; worker processes
        # (the shipped default) have tests of their own (test_worker_*, integration)
        settings = Settings(
            work_dir=str(tmp_path / "work"), max_model_bytes=1_000_000, code_workers=False
        )
        clients = AwsClients(settings)
        resources = ensure_resources(clients, settings)
        yield InProcessAws(settings, clients, resources, build_manage_services(settings, clients))
        left = install(None)  # its records written in the background land in this moto
        if left is not None:
            left.flush_records(10.0)


@pytest.fixture
def model_code_enabled(aws: InProcessAws) -> InProcessAws:
    """``aws`` where model code may run (LAMBDASERVE_PYTHON_MODELS), versions up to 50 MB."""
    aws.services.registrar._validator._python_models = True
    aws.settings = replace(aws.settings, python_models=True, max_model_bytes=50_000_000)
    # as `lambdaserve dev` does: model code is loaded where it serves before it is READY
    serving = build_model_server(aws.settings, aws.clients)
    aws.services.registrar.check_where_it_serves(
        InProcessCheck(lambda event: load_check.handle(event, serving))
    )
    return aws
