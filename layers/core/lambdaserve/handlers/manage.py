"""The manage function: repository events (SQS), the schedule, and the management API."""

from __future__ import annotations

import json
import threading
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import (
    BatchProcessor,
    EventType,
    process_partial_response,
)
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from lambdaserve.handlers.s3_events import object_keys
from lambdaserve.publishing.events import EventBatch, is_model_code_key
from lambdaserve.wiring.manage import ManageServices
from lambdaserve.wiring.process import current

logger = Logger(service="lambdaserve-manage")
# Domain modules log with the standard library; give them the handler's JSON format.
copy_config_to_registered_loggers(source_logger=logger, include={"lambdaserve"})
metrics = Metrics(namespace="lambdaserve", service="lambdaserve-manage")


def _config_rejected(model: str, reason: str) -> None:
    metrics.add_metric(name="ConfigsRejected", unit=MetricUnit.Count, value=1)


def services() -> ManageServices:
    """This process's management side (built on first use, so importing stays cheap); the
    configs it rejects are counted in this function's metrics."""
    process = current()
    process.on_config_rejected = _config_rejected
    return process.manage


class _Delivery(threading.local):
    """The event batch of the invocation in progress (one per SQS batch; per thread: the dev
    stack invokes several batches at once, as Lambda's pollers do, in one process)."""

    current: EventBatch | None = None


_delivery = _Delivery()


def record_handler(record: SQSRecord) -> None:
    """Reconcile what one queued S3 notification points at; raising retries the record."""
    logger.append_keys(message_id=record.message_id)
    batch = _delivery.current or EventBatch(services().registrar, services().uploads)
    for key in object_keys(record.json_body):
        batch.on_object_event(key)
        metrics.add_metric(name="RepositoryEvents", unit=MetricUnit.Count, value=1)


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def events_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """SQS event source mapping of the repository-events queue (partial batch failures)."""
    metrics.add_metric(name="EventBatches", unit=MetricUnit.Count, value=1)
    _delivery.current = EventBatch(services().registrar, services().uploads)
    records = sorted(event.get("Records", []), key=code_last)
    try:
        return dict(
            process_partial_response(
                event={**event, "Records": records},
                record_handler=record_handler,
                processor=BatchProcessor(event_type=EventType.SQS),  # its state is per batch
                context=context,
            )
        )
    finally:
        _delivery.current = None


def code_last(record: dict[str, Any]) -> bool:
    """Model code is loaded where it serves before it is READY (seconds): a batch's tensor
    models and configs go first, not behind it."""
    try:
        keys = object_keys(json.loads(record.get("body") or "{}"))
    except Exception:  # a malformed body fails in its own record's handler, with its reason
        return False
    return any(is_model_code_key(key) for key in keys)


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def reconcile_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Scheduled full reconcile that heals missed events."""
    count = services().registrar.reconcile_all()
    metrics.add_metric(name="ModelsReconciled", unit=MetricUnit.Count, value=count)
    return {"models": count}


def api_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """API Gateway (HTTP API) events for the management API."""
    services()  # its rejected configs counted here
    return dict(current().management_lambda_app(event, context))
