"""The cold start a function's tracer costs: the import and init of Powertools' Tracer (AWS
X-Ray, what the functions use: handlers/xray.py's ``tracer()``) in the infer function's
shipped environment (scripts/shipped_envs.py), each run a fresh interpreter as a Lambda
init is; beside it, for the choice docs/operations.md explains, the in-process part of the
ADOT layer's path: the OpenTelemetry SDK's TracerProvider, batch processor and OTLP/HTTP
exporter, and botocore's instrumentation where installed (the ADOT layer adds its collector
extension's start on top, which no Python process here can time).

Each run first imports what the infer function's init imports anyway (boto3, Powertools'
Logger), so the time is the tracer's own. Median and spread of ``--runs`` runs, in ms.

    python scripts/bench_tracer_init.py [--runs 15]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

XRAY = """
import time, boto3, aws_lambda_powertools
from aws_lambda_powertools import Logger
start = time.perf_counter()
from lambdaserve.handlers import xray
assert xray.tracer() is not None
print((time.perf_counter() - start) * 1000)
"""

OTEL = """
import time, boto3, aws_lambda_powertools
from aws_lambda_powertools import Logger
start = time.perf_counter()
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
provider = TracerProvider()
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
provider.get_tracer("lambdaserve")
try:
    from opentelemetry.instrumentation.botocore import BotocoreInstrumentor
    BotocoreInstrumentor().instrument()
except ImportError:
    pass
print((time.perf_counter() - start) * 1000)
"""


def _shipped_envs():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("shipped_envs", ROOT / "scripts/shipped_envs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def timed(
    command: list[str], code: str, environment: dict[str, str], runs: int
) -> dict[str, float]:
    times = []
    for _ in range(runs):
        done = subprocess.run(
            [*command, "-c", code], env=environment, capture_output=True, text=True, check=True
        )
        times.append(float(done.stdout.strip().splitlines()[-1]))
    return {
        "median_ms": round(statistics.median(times), 1),
        "min_ms": round(min(times), 1),
        "max_ms": round(max(times), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    module = _shipped_envs()
    env = module.ENVS["infer"]
    target, _ = module.build(env)
    paths = [str(ROOT / "layers/core"), *module.paths(env, Path(target))]
    lambda_like = {
        "PATH": os.environ["PATH"],
        "PYTHONPATH": os.pathsep.join(paths),
        "LAMBDA_TASK_ROOT": str(target),
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_XRAY_DAEMON_ADDRESS": "127.0.0.1:2000",
        "POWERTOOLS_SERVICE_NAME": "lambdaserve-infer",
    }
    command = [arg for arg in module.interpreter(env, Path(target)) if arg != "-I"]
    report = {"xray_powertools_tracer_in_infer_env": timed(command, XRAY, lambda_like, args.runs)}
    try:
        import opentelemetry.sdk  # noqa: F401

        report["otel_sdk_otlp_http_in_this_venv"] = timed(
            [sys.executable], OTEL, {**lambda_like, "PYTHONPATH": ""}, args.runs
        )
    except ImportError:
        report["otel_sdk_otlp_http_in_this_venv"] = {"skipped": "the OpenTelemetry SDK is absent"}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
