"""The cost of ``instance_group.count`` on the Lambda path (issue 40): the slot a bounded
version's execution takes and gives back, measured against the same model without a stated
count, on the infer function's direct path (bytes in, bytes out: ``v2_infer``, one request
per call as a Lambda instance runs them), c=1, requests of the two models interleaved.

The slots live in the catalog table of the embedded emulator (moto over HTTP on this
machine; ``LAMBDASERVE_INFLIGHT_STORE=dynamodb``: two conditional UpdateItems a request) and
in a real ``redis-server`` on this machine (``redis``: two round trips). Deployed, each
DynamoDB write takes a few milliseconds in-region (docs/from-triton.md).

    python scripts/bench_inflight.py [--requests 300] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench_sequences import emulator_and_redis

from lambdaserve.apps.v2_calls import v2_infer
from lambdaserve.local.demo import demo_mlp_bytes
from lambdaserve.local.resources import ensure_resources
from lambdaserve.serving.data_plane import InferenceDataPlane
from lambdaserve.settings import get_settings
from lambdaserve.wiring.aws import AwsClients
from lambdaserve.wiring.inference import build_model_server
from lambdaserve.wiring.manage import build_manage_services

BOUNDED = b"max_batch_size: 8\ninstance_group [{ count: 4 }]\n"
BODY = json.dumps(
    {"inputs": [{"name": "INPUT__0", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]}
).encode()


def summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": statistics.median(ordered) * 1000,
        "p90_ms": ordered[int(len(ordered) * 0.9)] * 1000,
    }


def direct_path(store: str, requests: int) -> dict[str, Any]:
    settings = replace(get_settings(), in_lambda=True, inflight_store=store)
    server = build_model_server(settings)
    plane = InferenceDataPlane(lambda: server)
    samples: dict[str, list[float]] = {"free": [], "bounded": []}
    for model in samples:
        v2_infer(plane, model, None, BODY, None)  # loaded before the clock starts
    for _ in range(requests):
        for model, taken in samples.items():
            started = time.perf_counter()
            v2_infer(plane, model, None, BODY, None)
            taken.append(time.perf_counter() - started)
    free, bounded = summary(samples["free"]), summary(samples["bounded"])
    added = bounded["p50_ms"] - free["p50_ms"]
    print(
        f"slots in {store}: unbounded p50 {free['p50_ms']:.2f} ms, bounded p50 "
        f"{bounded['p50_ms']:.2f} ms (p90 {free['p90_ms']:.2f} / {bounded['p90_ms']:.2f}): "
        f"added {added:.2f} ms",
        flush=True,
    )
    return {"unbounded": free, "bounded": bounded, "added_p50_ms": added}


def publish() -> None:
    settings = get_settings()
    clients = AwsClients(settings)
    ensure_resources(clients, settings)
    registrar = build_manage_services(settings, clients).registrar
    for name, config in (("bounded", BOUNDED), ("free", b"max_batch_size: 8\n")):
        clients.s3.put_object(
            Bucket=settings.bucket, Key=f"models/{name}/config.pbtxt", Body=config
        )
        clients.s3.put_object(
            Bucket=settings.bucket, Key=f"models/{name}/1/model.onnx", Body=demo_mlp_bytes()
        )
        registrar.reconcile_model(name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--json", type=Path, help="write every number here")
    args = parser.parse_args()
    with emulator_and_redis("bench-inflight-") as (_, redis_port):
        os.environ.update(
            LAMBDASERVE_REDIS_HOST="127.0.0.1", LAMBDASERVE_REDIS_PORT=str(redis_port)
        )
        get_settings.cache_clear()
        publish()
        report = {store: direct_path(store, args.requests) for store in ("dynamodb", "redis")}
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
