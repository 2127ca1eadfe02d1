"""The batcher function: queued requests -> batches per model version -> infer -> results."""

from __future__ import annotations

from functools import cache
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.data_classes import SQSEvent
from aws_lambda_powertools.utilities.typing import LambdaContext

from lambdaserve.metrics.emf import InvocationMetrics
from lambdaserve.metrics.stats import StatsRegistry
from lambdaserve.queued.delivery import TopUp, VisibilityLease
from lambdaserve.queued.inference import QueuedInference, QueueMessage
from lambdaserve.serving.model_server import ModelServer
from lambdaserve.settings import get_settings
from lambdaserve.wiring.inference import build_model_server
from lambdaserve.wiring.queues import build_queue_services, build_queued_inference

logger = Logger(service="lambdaserve-batcher")
copy_config_to_registered_loggers(source_logger=logger, include={"lambdaserve"})
metrics = Metrics(namespace="lambdaserve", service="lambdaserve-batcher")
# Per-model counts of the batches this process runs itself (``lambdaserve worker``), flushed
# after each batch as the infer function flushes its own after each invocation.
worker_metrics = InvocationMetrics("lambdaserve-worker")


@cache
def _server() -> ModelServer:
    """Only used without LAMBDASERVE_INFER_FUNCTION (local stack, ECS worker)."""
    return build_model_server(get_settings(), stats=StatsRegistry(worker_metrics.record))


def model_server() -> ModelServer:
    """The server the batches run on (the ECS worker prefetches into its cache)."""
    return _server()


@cache
def services() -> tuple[QueuedInference, TopUp, VisibilityLease]:
    settings = get_settings()
    queue = build_queue_services(settings)
    topup = TopUp(
        queue.sqs,
        queue.requests_queue_url,
        settings.topup_messages,
        settings.topup_window_s,
        settings.retry_delay_s,
    )
    lease = VisibilityLease(queue.sqs, queue.requests_queue_url, settings.visibility_lease_s)
    return build_queued_inference(settings, queue, _server), topup, lease


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """SQS event source mapping of the requests queue (partial batch failures, DLQ)."""
    queued, topup, lease = services()
    records = list(SQSEvent(event).records)
    delivered = [
        QueueMessage(r.message_id, r.body, int(r.attributes.approximate_receive_count))
        for r in records
    ]
    extra = topup.fetch()
    handles = [r.receipt_handle for r in records] + [handle for _, handle in extra]
    try:
        with lease.hold(handles):  # a crash returns these within the lease, not the queue's 6 min
            retry = queued.process(delivered + [message for message, _ in extra])
    finally:
        worker_metrics.flush()
    topup.settle(extra, retry)
    topup.retry_later(
        [
            (m, r.receipt_handle)
            for m, r in zip(delivered, records, strict=True)
            if m.message_id in retry
        ]
    )
    metrics.add_metric(
        name="QueuedRequests", unit=MetricUnit.Count, value=len(delivered) + len(extra)
    )
    metrics.add_metric(name="ToppedUp", unit=MetricUnit.Count, value=len(extra))
    metrics.add_metric(name="Retried", unit=MetricUnit.Count, value=len(retry))
    return {
        "batchItemFailures": [
            {"itemIdentifier": r.message_id} for r in records if r.message_id in retry
        ]
    }
