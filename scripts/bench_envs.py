"""Publish -> READY of a model with a small requirements.txt, on the local stack (`make
dev`'s path: the manage handler, the sandbox child that runs pip, the presigned PUT).

After a warm-up handler (the first model code to load pays for cold imports), three
TorchServe handlers are published one after another, each timed from its last
put_object to READY over the management API (polled every 20 ms):
1. the handler alone (no requirements: the floor);
2. the handler with requirements.txt naming one pure-Python wheel and one wheel with a native
   extension: the first publish, which builds the environment;
3. another model with the same requirements.txt: the environment is reused (cache hit).

    python scripts/bench_envs.py [--index file:///opt/pypi/simple] [--pure humanize]
        [--native msgpack]

``--index`` is the package index the sandbox installs from (PyPI by default; a local
mirror where the machine cannot reach it). One run; nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import boto3
import httpx

from lambdaserve.local.dev import DevStack
from lambdaserve.local.dev_options import DevOptions
from lambdaserve.local.emulator import free_port
from lambdaserve.settings import get_settings

HANDLER = b"def handle(data, context):\n    return [{'ok': True} for _ in data or []]\n"


def publish(s3, api: httpx.Client, model: str, requirements: bytes | None) -> dict[str, object]:
    bucket = get_settings().bucket
    if requirements is not None:
        s3.put_object(Bucket=bucket, Key=f"models/{model}/1/requirements.txt", Body=requirements)
    s3.put_object(Bucket=bucket, Key=f"models/{model}/1/handler.py", Body=HANDLER)
    started = time.perf_counter()
    while True:
        response = api.get(f"/models/{model}/1")
        if response.status_code == 200 and response.json()[0]["state"] != "LOADING":
            break
        time.sleep(0.02)
    seconds = time.perf_counter() - started
    [described] = response.json()
    environment = described.get("environment") or {}
    return {
        "model": model,
        "state": described["state"],
        "reason": described["reason"][:200],
        "seconds": round(seconds, 2),
        "packages": environment.get("packages", []),
        "environment_bytes": environment.get("size", 0),
        "unpacked_bytes": environment.get("unpacked_bytes", 0),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--index", default="https://pypi.org/simple")
    parser.add_argument("--pure", default="humanize")
    parser.add_argument("--native", default="msgpack")
    args = parser.parse_args()
    os.environ["LAMBDASERVE_PACKAGE_INDEX_URL"] = args.index
    options = DevOptions(
        aws_port=free_port(), management_port=free_port(), inference_port=free_port(), demo=False
    )
    stack = DevStack(options).start()
    requirements = f"{args.pure}\n{args.native}\n".encode()
    try:
        s3 = boto3.client("s3", endpoint_url=stack.endpoint, region_name="us-east-1")
        with httpx.Client(
            base_url=f"http://127.0.0.1:{options.management_port}", timeout=30
        ) as api:
            publish(s3, api, "env-warm-up", None)  # the first model code loads cold imports
            runs = [
                publish(s3, api, "env-none", None),
                publish(s3, api, "env-first", requirements),
                publish(s3, api, "env-second", requirements),
            ]
        for run in runs:
            print(json.dumps(run))
        print(
            json.dumps(
                {
                    "index": args.index,
                    "first_over_floor_s": round(runs[1]["seconds"] - runs[0]["seconds"], 2),
                    "second_over_floor_s": round(runs[2]["seconds"] - runs[0]["seconds"], 2),
                }
            )
        )
    finally:
        stack.stop()


if __name__ == "__main__":
    main()
