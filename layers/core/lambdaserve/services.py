"""Wiring: build the domain objects of a function from settings and AWS clients."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

from lambdaserve.aws import AwsClients
from lambdaserve.catalog import Catalog
from lambdaserve.inference_services import build_model_server
from lambdaserve.invokers import LambdaInvoker
from lambdaserve.management import ModelManager
from lambdaserve.pipelines.ensemble_registry import Dependents, EnsembleRegistry
from lambdaserve.queued import InProcessInvoker, Invoker, QueuedInference
from lambdaserve.registrar import Registrar
from lambdaserve.repository import ModelRepository
from lambdaserve.results import PayloadStore, ResultStore
from lambdaserve.serving import ModelServer
from lambdaserve.settings import Settings
from lambdaserve.validation import VersionValidator

__all__ = [
    "ManageServices",
    "build_manage_services",
    "build_model_server",
    "build_queue_services",
    "build_queued_inference",
]


@dataclass(frozen=True)
class ManageServices:
    """What the manage function (events, schedule and API) works with."""

    repository: ModelRepository
    catalog: Catalog
    registrar: Registrar
    manager: ModelManager


def build_manage_services(
    settings: Settings,
    clients: AwsClients | None = None,
    on_config_rejected: Callable[[str, str], None] | None = None,
) -> ManageServices:
    clients = clients or AwsClients(settings)
    repository = ModelRepository(clients.s3, settings.bucket, settings.models_prefix)
    catalog = Catalog(clients.dynamodb, settings.table)
    validator = VersionValidator(
        repository,
        settings.max_model_bytes,
        settings.work_dir,
        python_models=settings.python_models,
    )
    registrar = Registrar(
        repository,
        catalog,
        validator,
        on_config_rejected=on_config_rejected,
        ensembles=EnsembleRegistry(catalog, Dependents(clients.dynamodb, settings.table)),
    )
    return ManageServices(
        repository, catalog, registrar, ModelManager(repository, catalog, registrar)
    )


@dataclass(frozen=True)
class QueueServices:
    """What the batcher (and the async API) work with."""

    results: ResultStore
    payloads: PayloadStore
    sqs: Any
    requests_queue_url: Callable[[], str]
    gpu_queue_url: Callable[[], str] | None = None


def build_queue_services(settings: Settings, clients: AwsClients | None = None) -> QueueServices:
    clients = clients or AwsClients(settings)

    def url_of(name: str) -> Callable[[], str]:
        return cache(lambda: str(clients.sqs.get_queue_url(QueueName=name)["QueueUrl"]))

    return QueueServices(
        ResultStore(
            clients.dynamodb, settings.table, clients.s3, settings.bucket, settings.results_ttl_s
        ),
        PayloadStore(clients.s3, settings.bucket),
        clients.sqs,
        url_of(settings.requests_queue),
        url_of(settings.gpu_requests_queue) if settings.gpu_requests_queue else None,
    )


def build_queued_inference(
    settings: Settings,
    queue: QueueServices,
    server: Callable[[], ModelServer],
    clients: AwsClients | None = None,
) -> QueuedInference:
    """The batcher's domain: Lambda invoke of the infer function when one is configured."""
    clients = clients or AwsClients(settings)
    invoker: Invoker = (
        LambdaInvoker(clients.client("lambda"), settings.infer_function)
        if settings.infer_function
        else InProcessInvoker(server, queue.payloads)
    )
    return QueuedInference(
        queue.results,
        queue.payloads,
        invoker,
        max_receive_count=settings.max_receive_count,
        send_reply=lambda url, body: queue.sqs.send_message(
            QueueUrl=url, MessageBody=body.decode()
        ),
    )
