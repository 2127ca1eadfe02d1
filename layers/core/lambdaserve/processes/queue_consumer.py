"""``lambdaserve worker``: the queue consumer of ECS tasks, the batcher function's path in this
process, fed by long-polling SQS (its services: ``Process.consumer``)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from typing import Any

from lambdaserve.queued.consumer import Delivered, consume
from lambdaserve.queued.inference import QueueMessage
from lambdaserve.serving.residency.prefetch import Prefetcher
from lambdaserve.settings import get_settings
from lambdaserve.wiring.process import Process


def consume_event(process: Process) -> Callable[[dict[str, Any], Any], dict[str, Any]]:
    """The batcher function's path for the pump's SQS events, in this process."""

    def handle(event: dict[str, Any], _: Any) -> dict[str, Any]:
        services = process.consumer
        records = event["Records"]
        queue = services.delivery(records[0]["eventSourceARN"] if records else None)
        delivered = [
            Delivered(
                QueueMessage(
                    r["messageId"], r["body"], int(r["attributes"]["ApproximateReceiveCount"])
                ),
                r["receiptHandle"],
            )
            for r in records
        ]
        done = consume(services.queued, queue.topup, queue.lease, delivered, process.metrics.flush)
        return {"batchItemFailures": [{"itemIdentifier": i} for i in sorted(done.retry)]}

    return handle


def work(poll_wait_s: int = 20) -> None:
    """Long-poll the requests queue and run the batcher's path in this process."""
    from lambdaserve.processes.event_pump import EventPump, PumpConfig
    from lambdaserve.wiring.process import install

    process = Process(get_settings(), service="lambdaserve-worker")
    install(process)
    settings = process.settings
    sqs = process.clients.sqs
    url = sqs.get_queue_url(QueueName=settings.requests_queue)["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    pump = EventPump(
        sqs,
        url,
        arn,
        consume_event(process),
        "lambdaserve-worker",
        config=PumpConfig(
            batch_size=10, poll_wait_s=poll_wait_s, retry_delay_s=5, function_timeout_s=900
        ),
        region=settings.region,
    )
    stop = threading.Event()
    if settings.prefetch_interval_s > 0:
        Prefetcher(lambda: process.server().residency, settings.prefetch_interval_s).start()

    def _request_stop(*_: Any) -> None:
        stop.set()

    signal.signal(signal.SIGINT, _request_stop)
    signal.signal(signal.SIGTERM, _request_stop)
    pump.start()
    print(f"lambdaserve worker: consuming {url}", flush=True)
    # ECS's SIGTERM may reach a pump's thread: its handler runs only when this (the main)
    # thread next runs bytecode, which a wait without timeout never does
    while not stop.wait(0.5):
        pass
    pump.stop(timeout=float(poll_wait_s) + 60)
