"""The stack as ``sam deploy`` makes it, run locally: every function started from its shape
in template.yaml (handler, environment, limits, queue sources) under its own role's
credentials, against the moto emulator with IAM enforced.

The harness adds only what the deployment itself provides: the emulator's endpoint (for
AWS's), the role's credentials (what Lambda puts in a function's environment), the region,
and a ``/tmp`` of each function's own (Lambda's per-environment scratch space: values
under ``/tmp/`` point into it). It sets no ``LAMBDASERVE_*`` variable.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from lambdaserve.catalog.store import Catalog
from lambdaserve.local.emulator import Emulator
from lambdaserve.local.iam import Credentials, Enforcement
from lambdaserve.local.lambda_service import FunctionFailed, lambda_invokes
from lambdaserve.local.resources import LocalResources, ensure_resources
from lambdaserve.local.sam_translation import parameter_values, transformed
from lambdaserve.local.stack_shape import FunctionShape, StackShape, read_shape
from lambdaserve.local.template import load_template
from lambdaserve.processes.event_pump import EventPump, PumpConfig
from lambdaserve.settings import Settings, get_settings
from lambdaserve.wiring.aws import AwsClients
from tests.deployed.plumbing import (
    LOAD_BALANCED_PORT,
    REGION,
    STACK,
    MappingClient,
    answers,
    emulated_names,
    stop,
    tail,
    under_own_tmp,
    with_gpu_queue,
)
from tests.lambda_process import LambdaProcess, base_environment
from tests.support import free_port

# the shipped environment each function's source builds (scripts/shipped_envs.py)
ENVIRONMENTS = {
    "functions/infer/Dockerfile": "infer",
    "functions/manage/Dockerfile": "manage",
    "functions/batcher": "batcher",
}


RESOURCE_NAMES = {
    "LAMBDASERVE_BUCKET": "models",
    "LAMBDASERVE_TABLE": "catalog",
    "LAMBDASERVE_REPOSITORY_EVENTS_QUEUE": "repository-events",
    "LAMBDASERVE_REQUESTS_QUEUE": "requests",
}
# What a container's port is published as here (Docker's -p): each flag's value is the
# container's port, and the load balancer's name points at the HTTP one
PORT_FLAGS = ("--port", "--grpc-port", "--management-port", "--metrics-port")


@dataclass
class DeployedStack:
    shape: StackShape
    enforcement: Enforcement
    resources: LocalResources
    clients: AwsClients  # the harness's own (the administrator's), for uploads and checks
    settings: Settings
    work: Path
    variants: Mapping[str, str] = field(default_factory=dict)
    _started: dict[str, LambdaProcess] = field(default_factory=dict)
    _credentials: dict[str, Credentials] = field(default_factory=dict)
    ports: dict[int, int] = field(default_factory=dict)  # container port -> this host's
    _exits: ExitStack = field(default_factory=ExitStack)

    def function(self, logical: str) -> LambdaProcess:
        """Function ``logical`` as deployed, started once (kept warm as Lambda keeps it)."""
        if logical not in self._started:
            shape = self.shape.function(logical)
            environment = self.environment_of(shape, self.credentials(logical))
            name = self.variants.get(logical) or ENVIRONMENTS[shape.source]
            log = self.work / f"{logical}.log"
            self._started[logical] = self._exits.enter_context(
                LambdaProcess(name, log, environment, inherit=False)
            )
        return self._started[logical]

    def credentials(self, logical: str) -> Credentials:
        """Function or task ``logical``'s role, assumed (what Lambda or ECS hands it, and
        what a function's event source mappings poll with)."""
        if logical not in self._credentials:
            if logical in self.shape.functions:
                role = self.shape.function(logical).role
            else:
                role = self.shape.task(logical).role
            self._credentials[logical] = self.enforcement.assume(role, logical)
        return self._credentials[logical]

    def task(self, logical: str, ready_path: str = "/v2/health/ready") -> subprocess.Popen[bytes]:
        """Task ``logical``'s container, started from its command under its task role, its
        ports published on free ports of this host (``ports``), once it answers ready."""
        shape = self.shape.task(logical)
        command = list(shape.command)
        assert command[:1] == ["lambdaserve"], f"{logical} runs {command}, not lambdaserve"
        for index, part in enumerate(command[:-1]):
            if part in PORT_FLAGS:
                command[index + 1] = str(
                    self.ports.setdefault(int(command[index + 1]), free_port())
                )
        scratch = self.work / "tmp" / logical
        scratch.mkdir(parents=True, exist_ok=True)
        environment = {
            **base_environment(),
            **under_own_tmp(shape.environment, shape.literal, scratch),
            **self.credentials(logical).environment(),
            "AWS_ENDPOINT_URL": self.enforcement.endpoint,
            "AWS_DEFAULT_REGION": REGION,
            "TMPDIR": str(scratch),
            "POWERTOOLS_METRICS_DISABLED": "true",
        }
        # the image's interpreter: the test venv's, which holds what the GPU image installs
        log = (self.work / f"{logical}.log").open("wb")
        process = subprocess.Popen(
            [sys.executable, "-m", "lambdaserve.cli", *command[1:]],
            env=environment,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        self._exits.callback(stop, process)
        if ready_path and LOAD_BALANCED_PORT in self.ports:
            url = f"http://127.0.0.1:{self.ports[LOAD_BALANCED_PORT]}{ready_path}"
            deadline = time.monotonic() + 180
            while not answers(url):
                assert process.poll() is None, f"{logical} exited:\n{tail(log.name)}"
                assert time.monotonic() < deadline, f"{logical} not ready:\n{tail(log.name)}"
                time.sleep(0.5)
        return process

    @contextmanager
    def another_instance(self, logical: str) -> Iterator[Callable[[dict[str, Any]], Any]]:
        """A second execution environment of function ``logical`` (Lambda scaling out),
        started cold; yields its invoke."""
        shape = self.shape.function(logical)
        environment = self.environment_of(shape, self.credentials(logical), "-2")
        name = self.variants.get(logical) or ENVIRONMENTS[shape.source]
        handler = shape.handler.rsplit(".", 1)[-1]
        log = self.work / f"{logical}-2.log"
        with LambdaProcess(name, log, environment, inherit=False) as process:
            yield lambda event: process.invoke(handler, event)

    def invoke(self, logical: str, event: dict[str, Any]) -> Any:
        """``event`` to function ``logical``'s handler (the one the template names)."""
        handler = self.shape.function(logical).handler.rsplit(".", 1)[-1]
        answer = self.function(logical).invoke(handler, event)
        self.assert_no_denials()  # a denied call fails the journey by name, not by its effect
        return answer

    def environment_of(
        self, shape: FunctionShape, credentials: Credentials, instance: str = ""
    ) -> dict[str, str]:
        scratch = self.work / "tmp" / (shape.logical + instance)
        scratch.mkdir(parents=True, exist_ok=True)
        return {
            **under_own_tmp(shape.environment, shape.literal, scratch),
            **credentials.environment(),
            "AWS_ENDPOINT_URL": self.enforcement.endpoint,
            "AWS_REGION": REGION,
            "AWS_DEFAULT_REGION": REGION,
            "AWS_LAMBDA_FUNCTION_NAME": f"{STACK}-{shape.logical}",
            "AWS_LAMBDA_FUNCTION_TIMEOUT": str(shape.timeout_s),
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(shape.memory_mb),
            "TMPDIR": str(scratch),
            # EMF metric lines are CloudWatch's; here they would only bury the logs
            "POWERTOOLS_METRICS_DISABLED": "true",
        }

    def pump(self, logical: str, until: Callable[[], bool], timeout_s: float = 240) -> None:
        """Function ``logical``'s event source mappings, polled as Lambda polls them (batch
        size and window from the template) until ``until()``."""
        shape = self.shape.function(logical)
        assert shape.sources, f"template.yaml maps no queue to {logical}"
        # the mapping polls with the function's role: its queue permissions count too
        sqs = MappingClient(
            self.enforcement.client("sqs", self.credentials(logical)), self.clients.sqs
        )
        pumps = []
        for source in shape.sources:
            queue = self._queue(source.queue)
            config = PumpConfig(
                batch_size=source.batch_size,
                batching_window_s=float(source.window_s),
                poll_wait_s=1,
                retry_delay_s=1,
                function_timeout_s=float(shape.timeout_s),
            )
            handler = self.function(logical).handler(shape.handler.rsplit(".", 1)[-1])
            pumps.append(
                EventPump(sqs, queue.url, queue.arn, handler, logical, config=config, region=REGION)
            )
        deadline = time.monotonic() + timeout_s
        while not until():
            assert time.monotonic() < deadline, f"{logical}: not done within {timeout_s} s"
            for pump in pumps:
                pump.poll_once()
            self.assert_no_denials()

    def publish(
        self, model: str, files: dict[str, bytes], state: str = "READY", *, under: str = ""
    ) -> None:
        """Upload a version as a user does (``files`` under ``models/<model>/``, or under
        ``models/`` with ``under="models/"``: an archive beside the versions); the manage
        function's queue until the model's newest version is ``state``."""
        for name, body in files.items():
            key = name if under else f"models/{model}/{name}"
            self.clients.s3.put_object(Bucket=self.settings.bucket, Key=key, Body=body)
        catalog = Catalog(self.clients.dynamodb, self.settings.table)

        def reached() -> bool:
            versions = catalog.versions(model)
            if versions and versions[0].state == "UNAVAILABLE" != state:
                raise AssertionError(f"{model} is UNAVAILABLE: {versions[0].reason}")
            return bool(versions) and versions[0].state == state

        self.pump("ManageEventsFunction", reached)

    def route(self, name: str, qualifier: str | None, payload: bytes) -> bytes:
        """A Lambda invoke of one of the stack's functions (by name or ARN, any qualifier:
        the alias runs the code as deployed here), answered by that function."""
        function = name.rsplit(":function:", 1)[-1].split(":", 1)[0]
        logical = function.removeprefix(f"{STACK}-")
        if logical not in self.shape.functions:
            raise FunctionFailed(f"no function {name} in the deployed stack")
        try:
            return json.dumps(self.invoke(logical, json.loads(payload or b"{}"))).encode()
        except AssertionError as error:  # the handler raised (LambdaProcess says so)
            raise FunctionFailed(str(error)[-2000:]) from error

    def assert_no_denials(self) -> None:
        denials = self.enforcement.denials
        assert not denials, "IAM denied what a journey needs:\n" + "\n".join(map(str, denials))

    def _queue(self, logical: str) -> Any:
        pairs = {
            "RepositoryEventsQueue": self.resources.repository_events,
            "RequestsQueue": self.resources.requests,
        }
        assert logical in pairs, f"the local stack has no queue {logical}"
        return pairs[logical]


@contextmanager
def deployed(
    work: Path,
    parameters: Mapping[str, str] | None = None,
    *,
    template: Mapping[str, Any] | None = None,
    **variants: str,
) -> Iterator[DeployedStack]:
    """The emulator, the stack's resources, and its functions' shapes for ``parameters``
    (the template's defaults where not given), IAM enforced throughout; ``template``: a
    changed template.yaml (its functions and tasks; the stateful part stays the file's)."""
    saved = dict(os.environ)
    emulator = Emulator("127.0.0.1", free_port()).start()
    try:
        # moto's accounts are the process's, not a server's: each stack starts from nothing
        httpx.post(f"{emulator.endpoint}/moto-api/reset", timeout=30).raise_for_status()
        bootstrap = Credentials("bootstrap", "bootstrap")
        enforcement = Enforcement(emulator.endpoint, REGION, bootstrap)
        os.environ.update(enforcement.admin.environment())
        os.environ.update(
            AWS_ENDPOINT_URL=emulator.endpoint, AWS_REGION=REGION, AWS_DEFAULT_REGION=REGION
        )
        for name in [k for k in os.environ if k.startswith("LAMBDASERVE_")]:
            del os.environ[name]
        # names of the stack's own, not the settings' defaults: a function that lacks the
        # variable naming a resource must not find it all the same
        os.environ.update(
            {variable: f"{STACK}-{name}" for variable, name in RESOURCE_NAMES.items()}
        )
        get_settings.cache_clear()
        settings = get_settings()
        clients = AwsClients(settings)
        resources = ensure_resources(clients, settings)
        template = template or load_template()
        ports = {LOAD_BALANCED_PORT: free_port()}
        values = parameter_values(template, parameters or {})
        names = emulated_names(settings, resources, ports)
        if values["EnableGpuService"] == "true":
            names = with_gpu_queue(clients, names, template)
        shape = read_shape(transformed(template, REGION), values, names)
        stack = DeployedStack(shape, enforcement, resources, clients, settings, work, variants)
        stack.ports.update(ports)
        with enforcement.enforced(), lambda_invokes(stack.route), stack._exits:
            yield stack
            stack.assert_no_denials()
    finally:
        emulator.stop()
        os.environ.clear()
        os.environ.update(saved)
        get_settings.cache_clear()
