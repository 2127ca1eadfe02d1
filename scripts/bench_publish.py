"""Publish -> READY latency and convergence under shuffled events, on the local stack.

Phase 1: N uploads, one at a time; for each, the time from put_object returning to
the version showing READY over the management API (polled every 5 ms).
Phase 2: E bucket operations (uploads, overwrites, deletes, configs) over a few
models with the event pump paused; their S3 events are then drained from the
queue, shuffled, a fifth duplicated, re-sent, and the pump resumed. Reports the
drain time and whether the catalog equals the bucket afterwards.

    python scripts/bench_publish.py [--uploads 50] [--events 1000]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time

import boto3
import httpx

from lambdaserve.local.demo import demo_mlp_bytes
from lambdaserve.local.dev import DevStack
from lambdaserve.local.dev_options import DevOptions
from lambdaserve.local.emulator import free_port
from lambdaserve.settings import get_settings

GOOD = demo_mlp_bytes()
BAD = b"not a model" * 8


def publish_latency(stack: DevStack, s3, api: httpx.Client, uploads: int) -> list[float]:
    settings = get_settings()
    latencies = []
    for i in range(uploads):
        model = f"bench-{i:03d}"
        start = time.perf_counter()
        s3.put_object(Bucket=settings.bucket, Key=f"models/{model}/1/model.onnx", Body=GOOD)
        while True:
            response = api.get(f"/models/{model}/1")
            if response.status_code == 200 and response.json()[0]["state"] == "READY":
                break
            time.sleep(0.005)
        latencies.append(time.perf_counter() - start)
    return latencies


def shuffled_events(stack: DevStack, s3, events: int, seed: int) -> dict[str, object]:
    settings = get_settings()
    assert stack.resources is not None
    queue = stack.resources.repository_events.url
    sqs = boto3.client("sqs", endpoint_url=stack.endpoint, region_name=settings.region)
    rng = random.Random(seed)
    stack.stop_event_pumps()
    for _ in range(events):
        model = f"shuffle-{rng.randrange(5)}"
        version = rng.randrange(1, 6)
        action = rng.choices(["good", "bad", "delete", "config", "unconfig"], [5, 1, 3, 1, 1])[0]
        key = f"models/{model}/{version}/model.onnx"
        if action == "good":
            s3.put_object(Bucket=settings.bucket, Key=key, Body=GOOD)
        elif action == "bad":
            s3.put_object(Bucket=settings.bucket, Key=key, Body=BAD)
        elif action == "delete":
            s3.delete_object(Bucket=settings.bucket, Key=key)
        elif action == "config":
            s3.put_object(
                Bucket=settings.bucket,
                Key=f"models/{model}/config.pbtxt",
                Body=b"version_policy: { latest { num_versions: 2 } }",
            )
        else:
            s3.delete_object(Bucket=settings.bucket, Key=f"models/{model}/config.pbtxt")
    bodies = []
    while True:
        batch = sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10).get("Messages", [])
        if not batch:
            break
        for message in batch:
            bodies.append(message["Body"])
            sqs.delete_message(QueueUrl=queue, ReceiptHandle=message["ReceiptHandle"])
    delivered = bodies + rng.sample(bodies, len(bodies) // 5)
    rng.shuffle(delivered)
    for start in range(0, len(delivered), 10):
        sqs.send_message_batch(
            QueueUrl=queue,
            Entries=[
                {"Id": str(i), "MessageBody": b}
                for i, b in enumerate(delivered[start : start + 10])
            ],
        )
    started = time.perf_counter()
    stack.start_event_pumps()
    while _depth(sqs, queue):
        time.sleep(0.05)
    drain_s = time.perf_counter() - started
    return {
        "s3_events": len(bodies),
        "delivered_with_duplicates": len(delivered),
        "drain_seconds": round(drain_s, 2),
        "events_per_second": round(len(delivered) / drain_s, 1),
        "converged": _converged(),
        "dlq_messages": _depth(sqs, stack.resources.repository_events.dlq_url),
    }


def _depth(sqs, url: str) -> int:
    attributes = sqs.get_queue_attributes(
        QueueUrl=url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return sum(int(v) for v in attributes.values())


def _converged() -> bool:
    from lambdaserve.handlers.manage import services

    repository, catalog = services().repository, services().catalog
    for model in {f"shuffle-{i}" for i in range(5)}:
        in_bucket = set(repository.versions(model))
        in_catalog = {v.version for v in catalog.versions(model) if v.present}
        if in_bucket != in_catalog:
            return False
        for record in catalog.versions(model):
            if record.present:
                [obj] = repository.version_objects(model, record.version)
                if record.files and record.files[0]["etag"] != obj.etag:
                    return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--uploads", type=int, default=50)
    parser.add_argument("--events", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    options = DevOptions(
        aws_port=free_port(), management_port=free_port(), inference_port=free_port(), demo=False
    )
    stack = DevStack(options).start()
    try:
        s3 = boto3.client("s3", endpoint_url=stack.endpoint, region_name="us-east-1")
        with httpx.Client(base_url=f"http://127.0.0.1:{options.management_port}") as api:
            latencies = publish_latency(stack, s3, api, args.uploads)
        ms = sorted(x * 1000 for x in latencies)
        publish = {
            "uploads": len(ms),
            "p50_ms": round(statistics.median(ms), 1),
            "p95_ms": round(ms[int(0.95 * (len(ms) - 1))], 1),
            "max_ms": round(ms[-1], 1),
        }
        print(json.dumps({"publish_to_ready": publish}))
        print(json.dumps({"shuffled_events": shuffled_events(stack, s3, args.events, args.seed)}))
    finally:
        stack.stop()


if __name__ == "__main__":
    main()
