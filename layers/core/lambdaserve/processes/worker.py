"""``lambdaserve worker``: the batcher's path in this process, fed by long-polling SQS."""

from __future__ import annotations

import signal
import threading
from typing import Any

from lambdaserve.serving.prefetch import Prefetcher
from lambdaserve.settings import get_settings


def work(poll_wait_s: int = 20) -> None:
    """Long-poll the requests queue and run the batcher's path in this process."""
    from lambdaserve.handlers import batcher
    from lambdaserve.processes.event_pump import EventPump, PumpConfig
    from lambdaserve.wiring.aws import AwsClients

    settings = get_settings()
    sqs = AwsClients(settings).sqs
    url = sqs.get_queue_url(QueueName=settings.requests_queue)["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    pump = EventPump(
        sqs,
        url,
        arn,
        batcher.handler,
        "lambdaserve-worker",
        config=PumpConfig(
            batch_size=10, poll_wait_s=poll_wait_s, retry_delay_s=5, function_timeout_s=900
        ),
        region=settings.region,
    )
    stop = threading.Event()
    if settings.prefetch_interval_s > 0:
        Prefetcher(batcher.model_server, settings.prefetch_interval_s).start()

    def _request_stop(*_: Any) -> None:
        stop.set()

    signal.signal(signal.SIGINT, _request_stop)
    signal.signal(signal.SIGTERM, _request_stop)
    pump.start()
    print(f"lambdaserve worker: consuming {url}", flush=True)
    stop.wait()
    pump.stop(timeout=float(poll_wait_s) + 60)
