"""The queue side's services: result and payload stores, queue URLs, queued inference."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

from lambdaserve.queued.inference import InProcessInvoker, Invoker, QueuedInference
from lambdaserve.queued.invokers import LambdaInvoker
from lambdaserve.queued.results import PayloadStore, ResultStore
from lambdaserve.serving.model_server import ModelServer
from lambdaserve.settings import Settings
from lambdaserve.wiring.aws import AwsClients

if TYPE_CHECKING:  # imported where the batcher's path is built: not on the async submit path
    from lambdaserve.queued.delivery import TopUp, VisibilityLease
    from lambdaserve.serving.data_capture import DataCapture


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
    capture: DataCapture | None = None,
) -> QueuedInference:
    """The batcher's domain: Lambda invoke of the infer function when one is configured."""
    clients = clients or AwsClients(settings)
    invoker: Invoker = (
        LambdaInvoker(clients.client("lambda"), settings.infer_function)
        if settings.infer_function
        else InProcessInvoker(server, queue.payloads, capture)
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


@dataclass(frozen=True)
class ConsumerServices:
    """The queue consumer's services (the batcher function's path): queued inference, the
    sub-second top-up and the visibility lease."""

    queued: QueuedInference
    topup: TopUp
    lease: VisibilityLease


def build_consumer_services(
    settings: Settings,
    queue: QueueServices,
    server: Callable[[], ModelServer],
    clients: AwsClients,
    capture: DataCapture | None = None,
) -> ConsumerServices:
    """The batcher function's (and ``lambdaserve worker``'s) path over ``queue``."""
    from lambdaserve.queued.delivery import TopUp, VisibilityLease

    topup = TopUp(
        queue.sqs,
        queue.requests_queue_url,
        settings.topup_messages,
        settings.topup_window_s,
        settings.retry_delay_s,
    )
    lease = VisibilityLease(queue.sqs, queue.requests_queue_url, settings.visibility_lease_s)
    queued = build_queued_inference(settings, queue, server, clients, capture)
    return ConsumerServices(queued, topup, lease)
