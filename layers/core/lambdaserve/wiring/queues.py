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
    from lambdaserve.serving.capture.data_capture import DataCapture


@dataclass(frozen=True)
class QueueServices:
    """What the batcher (and the async API) work with."""

    results: ResultStore
    payloads: PayloadStore
    sqs: Any
    requests_queue_url: Callable[[], str]
    gpu_queue_url: Callable[[], str] | None = None
    # Triton's priority levels' queues, level 1 (the requests queue) first
    level_queue_urls: tuple[Callable[[], str], ...] = ()


def build_queue_services(settings: Settings, clients: AwsClients | None = None) -> QueueServices:
    clients = clients or AwsClients(settings)

    def url_of(name: str) -> Callable[[], str]:
        return cache(lambda: str(clients.sqs.get_queue_url(QueueName=name)["QueueUrl"]))

    requests = url_of(settings.requests_queue)
    return QueueServices(
        ResultStore(
            clients.dynamodb, settings.table, clients.s3, settings.bucket, settings.results_ttl_s
        ),
        PayloadStore(clients.s3, settings.bucket),
        clients.sqs,
        requests,
        url_of(settings.gpu_requests_queue) if settings.gpu_requests_queue else None,
        (requests, *(url_of(name) for name in settings.priority_queues)),
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
class QueueDelivery:
    """The sub-second top-up and the visibility lease on one queue."""

    topup: TopUp
    lease: VisibilityLease


@dataclass(frozen=True)
class ConsumerServices:
    """The queue consumer's services (the batcher function's path): queued inference, and
    the delivery helpers of the queue a delivery came from (``delivery(eventSourceARN)``:
    each priority level's mapping delivers its own queue's messages, which only that queue
    can top up, delete or lease; ``None``: the requests queue)."""

    queued: QueuedInference
    delivery: Callable[[str | None], QueueDelivery]


def build_consumer_services(
    settings: Settings,
    queue: QueueServices,
    server: Callable[[], ModelServer],
    clients: AwsClients,
    capture: DataCapture | None = None,
) -> ConsumerServices:
    """The batcher function's (and ``lambdaserve worker``'s) path over ``queue``."""
    from lambdaserve.queued.delivery import TopUp, VisibilityLease

    def url_of(arn: str) -> Callable[[], str]:
        name = arn.rsplit(":", 1)[-1]
        return cache(lambda: str(queue.sqs.get_queue_url(QueueName=name)["QueueUrl"]))

    @cache
    def delivery(arn: str | None) -> QueueDelivery:
        url = queue.requests_queue_url if arn is None else url_of(arn)
        topup = TopUp(
            queue.sqs,
            url,
            settings.topup_messages,
            settings.topup_window_s,
            settings.retry_delay_s,
        )
        return QueueDelivery(topup, VisibilityLease(queue.sqs, url, settings.visibility_lease_s))

    queued = build_queued_inference(settings, queue, server, clients, capture)
    return ConsumerServices(queued, delivery)
