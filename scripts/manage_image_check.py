"""The manage image's publish-time validation, proven without a Docker engine.

Installs what ``functions/manage/Dockerfile`` installs (its own ``/build[<EXTRAS>]`` line,
with the default EXTRAS) under python3.12, the functions' runtime, into a folder laid out as
the image's ``LAMBDA_TASK_ROOT`` with the function's ``app.py``; then publishes the peer
fixtures (a TF SavedModel in TF Serving's layout and in Triton's, a Paddle model, an OpenVINO
IR) and an ONNX model into the embedded emulator, and feeds the repository-events queue to
``app.events_handler`` in that python3.12 process, one Lambda invocation per SQS batch. Every
version must become READY with a signature; exit status 1 otherwise.

Usage: python scripts/manage_image_check.py [PATH_TO_PYTHON3.12]
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from lambdaserve.catalog.store import Catalog
from lambdaserve.local.demo import demo_mlp_bytes
from lambdaserve.local.dev import point_environment_at
from lambdaserve.local.emulator import Emulator, free_port
from lambdaserve.local.resources import ensure_resources
from lambdaserve.processes.event_pump import EventPump, PumpConfig
from lambdaserve.wiring.aws import AwsClients

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "functions/manage/Dockerfile"
TASK_ROOT = ROOT / ".aws-sam/manage-image"
FIXTURES = ROOT / "tests/fixtures/peer_models"
# model -> (fixture folder, where its files go inside the version)
PUBLISHED = {
    "tfserving-layout": ("savedmodel_mlp", ""),
    "triton-layout": ("savedmodel_mlp", "model.savedmodel/"),
    "paddle": ("paddle_mlp", ""),
    "openvino-ir": ("openvino_mlp", ""),
}
# The handler as the Lambda runtime calls it: the event on stdin, the result on one line.
RUNTIME = """
import json, sys
import app
from lambdaserve.processes.event_pump import LocalContext

context = LocalContext("lambdaserve-manage", timeout_s=300, memory_limit_in_mb=6144)
result = app.events_handler(json.load(sys.stdin), context)
print("HANDLER-RESULT " + json.dumps(result))
"""


def pip_install(python: str) -> list[str]:
    return [python, "-m", "pip", "install", "-q", "--disable-pip-version-check"]


def python312(given: str | None) -> str | None:
    if given:
        return given
    versions = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    candidates = [shutil.which("python3.12"), *sorted(versions.glob("3.12*/bin/python3.12"))]
    for candidate in filter(None, candidates):
        # a pyenv shim is on PATH even where pyenv would not run 3.12: ask it
        if (
            subprocess.run([candidate, "--version"], capture_output=True, check=False).returncode
            == 0
        ):
            return str(candidate)
    return None


def image_extras() -> str:
    text = DOCKERFILE.read_text()
    default = re.search(r"^ARG EXTRAS=(\S+)$", text, re.M)
    if not default or '"/build[${EXTRAS}]"' not in text:
        raise SystemExit(f"{DOCKERFILE}: no `ARG EXTRAS=` and /build[${{EXTRAS}}] install")
    return default.group(1)


def install(python: str) -> None:
    """The Dockerfile's install, into a fresh task root."""
    shutil.rmtree(TASK_ROOT, ignore_errors=True)
    started = time.monotonic()
    subprocess.run(
        [*pip_install(python), "--target", str(TASK_ROOT), f"{ROOT}[{image_extras()}]"],
        check=True,
    )
    shutil.copy(ROOT / "functions/manage/app.py", TASK_ROOT / "app.py")
    size = sum(p.stat().st_size for p in TASK_ROOT.rglob("*") if p.is_file()) / 2**20
    print(
        f"manage image: [{image_extras()}] installed under {Path(python).name} in "
        f"{time.monotonic() - started:.0f} s, {size:.0f} MB"
    )


def handler_in_image(python: str, work: Path) -> Any:
    def invoke(event: dict[str, Any], context: Any) -> dict[str, Any]:
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))},
            "PYTHONPATH": str(TASK_ROOT),
            "LAMBDASERVE_WORK_DIR": str(work),
            "AWS_LAMBDA_FUNCTION_NAME": "lambdaserve-manage",
            "POWERTOOLS_SERVICE_NAME": "lambdaserve-manage",
            # as deployed (template Globals: EnablePythonModels defaults to false)
            "LAMBDASERVE_PYTHON_MODELS": "false",
        }
        ran = subprocess.run(
            [python, "-s", "-c", RUNTIME],
            check=False,
            input=json.dumps(event),
            capture_output=True,
            text=True,
            env=env,
            cwd=work,
            timeout=600,
        )
        lines = [line for line in ran.stdout.splitlines() if line.startswith("HANDLER-RESULT ")]
        if ran.returncode or not lines:
            raise RuntimeError(f"the handler failed:\n{ran.stderr[-4000:]}{ran.stdout[-2000:]}")
        return dict(json.loads(lines[-1].removeprefix("HANDLER-RESULT ")))

    return invoke


def publish(clients: AwsClients, bucket: str) -> None:
    for model, (fixture, inside) in PUBLISHED.items():
        root = FIXTURES / fixture
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            key = f"models/{model}/1/{inside}{path.relative_to(root).as_posix()}"
            clients.s3.put_object(Bucket=bucket, Key=key, Body=path.read_bytes())
    clients.s3.put_object(Bucket=bucket, Key="models/onnx/1/model.onnx", Body=demo_mlp_bytes())


def main() -> int:
    python = python312(sys.argv[1] if len(sys.argv) > 1 else None)
    if python is None:
        print("manage_image_check.py: skipped: needs python3.12 (the functions' runtime)")
        return 0
    install(python)
    emulator = Emulator("127.0.0.1", free_port()).start()
    try:
        settings = point_environment_at(emulator.endpoint)
        clients = AwsClients(settings)
        resources = ensure_resources(clients, settings)
        catalog = Catalog(clients.dynamodb, settings.table)
        with tempfile.TemporaryDirectory() as work:
            pump = EventPump(
                clients.sqs,
                resources.repository_events.url,
                resources.repository_events.arn,
                handler_in_image(python, Path(work)),
                "lambdaserve-manage",
                config=PumpConfig(batch_size=10, poll_wait_s=1, retry_delay_s=1),
                region=settings.region,
            )
            publish(clients, settings.bucket)
            models = [*PUBLISHED, "onnx"]
            # Until every version serves, or the queue has stayed empty (a version whose
            # first files arrived alone may be UNAVAILABLE until the rest arrive)
            deadline, idle = time.monotonic() + 600, 0
            while time.monotonic() < deadline and idle < 3:
                idle = 0 if pump.poll_once() else idle + 1
                records = {m: catalog.versions(m) for m in models}
                if all(r and r[0].state == "READY" for r in records.values()):
                    break
        failed = 0
        for model, versions in records.items():
            record = versions[0] if versions else None
            state = record.state if record else "missing"
            detail = (
                f"{record.runtime}, inputs {[i['name'] for i in record.signature['inputs']]}"
                if record and record.signature
                else (record.reason if record else "no catalog entry")
            )
            print(f"  {model:18} {state:12} {detail}")
            failed += state != "READY"
        print(f"manage image: {len(records) - failed} of {len(records)} versions READY")
        return 1 if failed else 0
    finally:
        emulator.stop()


if __name__ == "__main__":
    raise SystemExit(main())
