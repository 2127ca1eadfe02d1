"""The batcher function: queued requests -> batches per model version -> infer -> results."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.data_classes import SQSEvent
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from lambdaserve.handlers import xray
from lambdaserve.queued.consumer import Delivered, consume
from lambdaserve.queued.inference import QueueMessage, message_trace
from lambdaserve.tracing.propagation import TraceContext
from lambdaserve.wiring.process import current

logger = Logger(service="lambdaserve-batcher")
copy_config_to_registered_loggers(source_logger=logger, include={"lambdaserve"})
metrics = Metrics(namespace="lambdaserve", service="lambdaserve-batcher")


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
@xray.capture
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """SQS event source mapping of a requests queue, one per priority level (partial batch
    failures, DLQ). A mapping delivers one queue's messages: the top-up and the lease use
    that queue (the records' ``eventSourceARN``)."""
    process = current()
    services = process.consumer
    records = list(SQSEvent(event).records)
    queue = services.delivery(records[0].event_source_arn if records else None)
    delivered = [
        Delivered(
            QueueMessage(
                r.message_id,
                r.body,
                int(r.attributes.approximate_receive_count),
                _trace_of(r),
            ),
            r.receipt_handle,
        )
        for r in records
    ]
    done = consume(services.queued, queue.topup, queue.lease, delivered, process.metrics.flush)
    metrics.add_metric(name="QueuedRequests", unit=MetricUnit.Count, value=done.total)
    metrics.add_metric(name="ToppedUp", unit=MetricUnit.Count, value=done.topped_up)
    metrics.add_metric(name="Retried", unit=MetricUnit.Count, value=done.retried)
    return {"batchItemFailures": [{"itemIdentifier": i} for i in sorted(done.retry)]}


def _trace_of(record: SQSRecord) -> TraceContext | None:
    """The queued request's trace: its ``traceparent`` attribute, else ``AWSTraceHeader``."""
    attribute = (record.get("messageAttributes") or {}).get("traceparent") or {}
    traceparent = attribute.get("stringValue")
    return message_trace(traceparent, record.attributes.aws_trace_header)
