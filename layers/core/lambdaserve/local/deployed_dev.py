"""``lambdaserve dev --deployed``: the stack as ``sam deploy`` makes it, on this machine.

Every function runs in an execution environment of its own, started from its shape in
template.yaml (this checkout's ``functions/`` code under the developer's interpreter: the
environment ``make dev`` builds) with the template's environment and under its own role,
IAM enforced by the embedded emulator. Each queue feeds its function as the template's
event source mapping does; the HTTP API sends each request through the route API Gateway
picks to the function the template integrates there; the tasks the parameter set deploys
start from their commands. What a role denies is printed as it happens, naming the
function, the action and the resource.

Not emulated: the HTTP API's authorizers (IAM, JWT) and throttling, and the queues' resource
policies (AWS::SQS::QueuePolicy: S3 and EventBridge deliver here without them), which moto's
CloudFormation does not create; its warning about them is not repeated at every start.
"""

from __future__ import annotations

import logging
import shutil
import signal
import sys
import threading
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lambdaserve.local.demo import DEMO_MODEL, demo_mlp_bytes
from lambdaserve.local.deploy_locally import deployed
from lambdaserve.local.deployed_api import HttpApiEmulation
from lambdaserve.local.deployed_stack import DeployedStack
from lambdaserve.local.dev_options import DevOptions
from lambdaserve.local.function_process import FunctionProcess, base_environment
from lambdaserve.local.lambda_service import FunctionFailed
from lambdaserve.local.stack_shape import FunctionShape
from lambdaserve.local.template import checkout_root, load_template
from lambdaserve.processes.background import BackgroundServer
from lambdaserve.processes.event_pump import EventPump, LocalContext

# API Gateway's HTTP API payload limit
HTTP_API_MAX_BODY = 10 * 1024**2


@dataclass(frozen=True)
class CheckoutLauncher:
    """Each function from this checkout's code (``functions/<name>``, where its image or zip
    is built from) under this interpreter; tasks under it too."""

    root: Path
    task_python: tuple[str, ...] = field(default=(sys.executable,))

    def function(
        self, shape: FunctionShape, environment: Mapping[str, str], log: Path
    ) -> FunctionProcess:
        code = self.root / shape.source
        if not code.is_dir():  # an image's Dockerfile: its directory is the task root
            code = code.parent
        return FunctionProcess(
            shape.logical,
            (sys.executable,),
            paths=(str(code),),
            code=code,
            # Lambda's task root is read-only: no bytecode written into the checkout
            environment={**base_environment(), "PYTHONDONTWRITEBYTECODE": "1", **environment},
            log=log,
        )


def parameter_overrides(pairs: list[str]) -> dict[str, str]:
    """``Key=Value`` pairs, as ``sam deploy --parameter-overrides`` takes them."""
    values = {}
    for pair in pairs:
        key, found, value = pair.partition("=")
        if not found:
            raise SystemExit(f"--parameter-overrides takes Key=Value, not {pair!r}")
        values[key] = value
    return values


class DeployedDev:
    """The deployed stack with its mappings polling, its HTTP API listening and its tasks
    running, until ``stop``."""

    def __init__(self, stack: DeployedStack, options: DevOptions, demo: bool = True) -> None:
        self.stack = stack
        self.options = options
        self.demo = demo
        self._pumps: list[EventPump] = []
        self._servers: list[BackgroundServer] = []
        self._said = 0

    def start(self) -> DeployedDev:
        stack = self.stack
        for logical, shape in stack.shape.functions.items():
            if shape.sources:
                for pump in stack.pumps(logical):
                    pump.start()
                    self._pumps.append(pump)
        for logical, task in stack.shape.tasks.items():
            serves = "serve" in task.command
            stack.task(logical, ready_path="/v2/health/ready" if serves else "")
        api = HttpApiEmulation(self._request, LocalContext("http-api"), HTTP_API_MAX_BODY)
        self._servers.append(
            BackgroundServer(
                api, self.options.host, self.options.inference_port, access_log=True
            ).start()
        )
        return self

    def _request(self, event: dict[str, Any], _context: Any) -> Any:
        try:
            return self.stack.http(event)
        except FunctionFailed as error:  # API Gateway's answer to a function error
            print(error, file=sys.stderr, flush=True)
            return {"statusCode": 500, "body": '{"message":"Internal Server Error"}'}

    def report_denials(self) -> None:
        """What a role denied since the last report, on stderr."""
        denials = self.stack.enforcement.denials
        for denial in denials[self._said :]:
            print(f"IAM DENIED: {denial}", file=sys.stderr, flush=True)
        self._said = len(denials)

    def stop(self) -> None:
        for pump in self._pumps:
            pump.stop()
        for server in self._servers:
            server.stop()

    def banner(self) -> str:
        stack, host = self.stack, self.options.host
        admin = stack.enforcement.admin
        lines = [
            "lambdaserve dev --deployed: template.yaml's stack, each function in its own "
            "process under its own role",
            f"  HTTP API          http://{host}:{self.options.inference_port}",
            f"  AWS emulator      {stack.enforcement.endpoint}  (administrator: "
            f"AWS_ACCESS_KEY_ID={admin.access_key} AWS_SECRET_ACCESS_KEY={admin.secret_key})",
            f"  publish           s3://{stack.settings.bucket}/models/<model>/<version>/...",
            f"  functions         {', '.join(stack.shape.functions)}",
            f"  logs              {stack.work}/<function>.log  (kept after it stops)",
        ]
        for logical in stack.shape.tasks:
            lines.append(f"  task              {logical}")
        inference = f"http://{host}:{self.options.inference_port}"
        lines += [
            "  for the aws CLI   export AWS_ENDPOINT_URL="
            f"{stack.enforcement.endpoint} AWS_ACCESS_KEY_ID={admin.access_key} "
            f"AWS_SECRET_ACCESS_KEY={admin.secret_key} AWS_DEFAULT_REGION={stack.settings.region}",
            f"  publish a model   aws s3 cp model.onnx s3://{stack.settings.bucket}/"
            f"{stack.settings.models_prefix}<model>/1/model.onnx",
        ]
        if self.demo:
            lines.append(
                f"  try               curl -s -X POST {inference}/predictions/{DEMO_MODEL} "
                "-d '[0.1, 0.2, 0.3, 0.4]'"
            )
        lines.append("Ctrl-C stops everything.")
        return "\n".join(lines)


class _SaidInTheDocstring(logging.Filter):
    """moto's word that its CloudFormation creates no queue policy (the docstring says so)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "CloudFormation support for AWS::SQS::QueuePolicy" not in record.getMessage()


def run_deployed_dev(
    options: DevOptions, parameters: Mapping[str, str], *, demo: bool = True
) -> None:
    """The deployed stack for ``parameters`` until SIGINT/SIGTERM (``demo``: the demo model
    published through it)."""
    stopping = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stopping.set())
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    # in the checkout, not /tmp: laid anew at each start, kept after it stops (the logs)
    work = checkout_root() / ".cache" / "dev-deployed"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    launcher = CheckoutLauncher(checkout_root())
    template = load_template()  # read before the stack's environment replaces this one's
    logging.getLogger("moto").addFilter(_SaidInTheDocstring())
    warnings.filterwarnings("ignore", "Tried to parse AWS::SQS::QueuePolicy", UserWarning)
    with deployed(
        work, launcher, parameters, template=template, host=options.host, aws_port=options.aws_port
    ) as stack:
        stack.enforcement.denials.clear()
        running = DeployedDev(stack, options, demo).start()
        try:
            if demo:
                stack.clients.s3.put_object(
                    Bucket=stack.settings.bucket,
                    Key=f"models/{DEMO_MODEL}/1/model.onnx",
                    Body=demo_mlp_bytes(),
                )
            print(running.banner(), flush=True)
            while not stopping.wait(1):
                running.report_denials()
        finally:
            print("stopping ...", flush=True)
            running.stop()
            # what a role denied is reported above; the stack's exit does not raise on it
            stack.enforcement.denials.clear()
