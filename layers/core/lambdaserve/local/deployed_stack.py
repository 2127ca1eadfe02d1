"""The stack as ``sam deploy`` makes it, run on this machine: every function started from its
shape in template.yaml (handler, environment, limits, queue sources) under its own role's
credentials, against the moto emulator with IAM enforced. ``lambdaserve dev --deployed``
and the deployed-shape journeys (``tests/deployed``) both run it.

What starts a function's execution environment is a ``Launcher``: the journeys start each
from the shipped environment its image or zip builds, ``dev`` from this checkout's code
under the developer's interpreter. Either way the stack adds only what the deployment itself
provides: the emulator's endpoint (for AWS's), the role's credentials (what Lambda puts in a
function's environment), the region, and a ``/tmp`` of each function's own (Lambda's
per-environment scratch space: values under ``/tmp/`` point into it). It sets no
``LAMBDASERVE_*`` variable.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from lambdaserve.catalog.store import Catalog
from lambdaserve.errors import LambdaServeError
from lambdaserve.local import lambda_tracing
from lambdaserve.local.emulator import free_port
from lambdaserve.local.function_process import FunctionProcess, base_environment
from lambdaserve.local.http_routes import HttpRoute, choose
from lambdaserve.local.iam import Credentials, Enforcement
from lambdaserve.local.lambda_service import FunctionFailed
from lambdaserve.local.resources import LocalResources, QueuePair
from lambdaserve.local.stack_plumbing import (
    LOAD_BALANCED_PORT,
    REGION,
    STACK,
    MappingClient,
    answers,
    stop,
    tail,
    under_own_tmp,
)
from lambdaserve.local.stack_shape import FunctionShape, StackShape
from lambdaserve.processes.event_pump import EventPump, PumpConfig
from lambdaserve.settings import Settings
from lambdaserve.wiring.aws import AwsClients

# What a container's port is published as here (Docker's -p): each flag's value is the
# container's port, and the load balancer's name points at the HTTP one
PORT_FLAGS = ("--port", "--grpc-port", "--management-port", "--metrics-port")


class StackError(LambdaServeError):
    """The deployed stack cannot do what was asked: a role denied a call, a function or task
    the template lacks, a task that never answered."""


class Launcher(Protocol):
    """Starts execution environments: a function's (from its shape's source) and the task
    image's interpreter."""

    @property
    def task_python(self) -> Sequence[str]: ...

    def function(
        self, shape: FunctionShape, environment: Mapping[str, str], log: Path
    ) -> FunctionProcess: ...


@dataclass
class DeployedStack:
    shape: StackShape
    enforcement: Enforcement
    resources: LocalResources
    clients: AwsClients  # the stack's administrator's, for uploads and checks
    settings: Settings
    work: Path
    launcher: Launcher
    _started: dict[str, FunctionProcess] = field(default_factory=dict)
    _credentials: dict[str, Credentials] = field(default_factory=dict)
    ports: dict[int, int] = field(default_factory=dict)  # container port -> this host's
    routes: tuple[HttpRoute, ...] = ()  # the HTTP API's
    # the queues a condition creates (the GPU service's, priority levels 2 and 3) by logical id
    queues: dict[str, QueuePair] = field(default_factory=dict)
    # where functions send X-Ray segments (Lambda's AWS_XRAY_DAEMON_ADDRESS): a journey's
    # listener; unset, a closed port (UDP: nothing waits on it)
    xray_daemon: str = "127.0.0.1:2000"
    _exits: ExitStack = field(default_factory=ExitStack)

    def function(self, logical: str) -> FunctionProcess:
        """Function ``logical`` as deployed, started once (kept warm as Lambda keeps it)."""
        if logical not in self._started:
            shape = self.shape.function(logical)
            environment = self.environment_of(shape, self.credentials(logical))
            log = self.work / f"{logical}.log"
            self._started[logical] = self._exits.enter_context(
                self.launcher.function(shape, environment, log)
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
        if command[:1] != ["lambdaserve"]:
            raise StackError(f"{logical} runs {command}, not lambdaserve")
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
        log = (self.work / f"{logical}.log").open("wb")
        process = subprocess.Popen(
            [*self.launcher.task_python, "-m", "lambdaserve.cli", *command[1:]],
            env=environment,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        self._exits.callback(stop, process)
        if ready_path and LOAD_BALANCED_PORT in self.ports:
            url = f"http://127.0.0.1:{self.ports[LOAD_BALANCED_PORT]}{ready_path}"
            deadline = time.monotonic() + 180
            while not answers(url):
                if process.poll() is not None:
                    raise StackError(f"{logical} exited:\n{tail(log.name)}")
                if time.monotonic() > deadline:
                    raise StackError(f"{logical} not ready:\n{tail(log.name)}")
                time.sleep(0.5)
        return process

    @contextmanager
    def another_instance(
        self, logical: str, number: int = 2
    ) -> Iterator[Callable[[dict[str, Any]], Any]]:
        """Execution environment ``number`` of function ``logical`` (Lambda scaling out),
        started cold, with its own scratch and log; yields its invoke."""
        shape = self.shape.function(logical)
        environment = self.environment_of(shape, self.credentials(logical), f"-{number}")
        handler = shape.handler.rsplit(".", 1)[-1]
        log = self.work / f"{logical}-{number}.log"
        with self.launcher.function(shape, environment, log) as process:
            yield lambda event: process.invoke(
                handler, event, lambda_tracing.begin(shape.tracing, None).header
            )

    def invoke(self, logical: str, event: dict[str, Any], trace: str | None = None) -> Any:
        """``event`` to function ``logical``'s handler (the one the template names);
        ``trace``: the caller's X-Ray trace header, which Lambda continues."""
        handler = self.shape.function(logical).handler.rsplit(".", 1)[-1]
        answer = self._invoked(logical, handler, event, trace)
        self.assert_no_denials()  # a denied call fails the journey by name, not by its effect
        return answer

    def _invoked(self, logical: str, handler: str, event: dict[str, Any], trace: str | None) -> Any:
        """One invocation as Lambda runs it: its trace header made from the function's
        tracing mode, and (sampled) the function's own segment sent to the daemon."""
        shape = self.shape.function(logical)
        invocation = lambda_tracing.begin(shape.tracing, trace)
        try:
            return self.function(logical).invoke(handler, event, invocation.header)
        finally:
            if shape.tracing != "Disabled":
                name = f"{STACK}-{logical}"
                lambda_tracing.send_function_segment(self.xray_daemon, name, invocation)

    def http(self, event: dict[str, Any]) -> Any:
        """An HTTP API request (a payload 2.0 event) through the route API Gateway picks, to
        the function the template integrates there (404 where no route matches)."""
        http = event["requestContext"]["http"]
        chosen = choose(self.routes, http["method"], event["rawPath"])
        if chosen is None:
            return {"statusCode": 404, "body": '{"message":"Not Found"}'}
        route, parameters = chosen
        # API Gateway's trace header on the request it passes on (the client's, else new)
        headers = dict(event.get("headers") or {})
        if not any(name.lower() == "x-amzn-trace-id" for name in headers):
            headers["x-amzn-trace-id"] = f"Root={lambda_tracing.new_root()}"
        trace = next(v for k, v in headers.items() if k.lower() == "x-amzn-trace-id")
        event = {**event, "routeKey": route.key, "pathParameters": parameters, "headers": headers}
        handler = self.shape.function(route.function).handler.rsplit(".", 1)[-1]
        return self._invoked(route.function, handler, event, trace)

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
            # what Lambda sets for X-Ray (the SDK and Powertools' Tracer read them)
            "LAMBDA_TASK_ROOT": "/var/task",
            "AWS_XRAY_DAEMON_ADDRESS": self.xray_daemon,
            "AWS_XRAY_CONTEXT_MISSING": "LOG_ERROR",
        }

    def pumps(self, logical: str, **config: Any) -> list[EventPump]:
        """Function ``logical``'s event source mappings as Lambda polls them: batch size
        and window from the template, under the function's role (``config``: the pump's
        own timings)."""
        shape = self.shape.function(logical)
        if not shape.sources:
            raise StackError(f"template.yaml maps no queue to {logical}")
        # the mapping polls with the function's role: its queue permissions count too
        sqs = MappingClient(
            self.enforcement.client("sqs", self.credentials(logical)), self.clients.sqs
        )
        name = shape.handler.rsplit(".", 1)[-1]

        def handler(event: dict[str, Any], _context: Any) -> Any:
            return self._invoked(logical, name, event, None)  # Lambda starts the trace

        made = []
        for source in shape.sources:
            queue = self.queue(source.queue)
            settings = PumpConfig(
                batch_size=source.batch_size,
                batching_window_s=float(source.window_s),
                function_timeout_s=float(shape.timeout_s),
                **config,
            )
            made.append(
                EventPump(
                    sqs, queue.url, queue.arn, handler, logical, config=settings, region=REGION
                )
            )
        return made

    def pump(self, logical: str, until: Callable[[], bool], timeout_s: float = 240) -> None:
        """Function ``logical``'s event source mappings, polled until ``until()``."""
        pumps = self.pumps(logical, poll_wait_s=1, retry_delay_s=1)
        deadline = time.monotonic() + timeout_s
        while not until():
            if time.monotonic() > deadline:
                raise StackError(f"{logical}: not done within {timeout_s} s")
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
                raise StackError(f"{model} is UNAVAILABLE: {versions[0].reason}")
            return bool(versions) and versions[0].state == state

        self.pump("ManageEventsFunction", reached)

    def route(
        self, name: str, qualifier: str | None, payload: bytes, trace: str | None = None
    ) -> bytes:
        """A Lambda invoke of one of the stack's functions (by name or ARN, any qualifier:
        the alias runs the code as deployed here), answered by that function (``trace``:
        the invoke's X-Amzn-Trace-Id, the caller's X-Ray context)."""
        function = name.rsplit(":function:", 1)[-1].split(":", 1)[0]
        logical = function.removeprefix(f"{STACK}-")
        if logical not in self.shape.functions:
            raise FunctionFailed(f"no function {name} in the deployed stack")
        try:
            answer = self.invoke(logical, json.loads(payload or b"{}"), trace)
            return json.dumps(answer).encode()
        except FunctionFailed as error:
            raise FunctionFailed(str(error)[-2000:]) from error

    def assert_no_denials(self) -> None:
        denials = self.enforcement.denials
        if denials:
            raise StackError("IAM denied what a journey needs:\n" + "\n".join(map(str, denials)))

    def __enter__(self) -> DeployedStack:
        return self

    def __exit__(self, *exc: object) -> None:
        """Every function's environment and every task stopped."""
        self._exits.close()

    def queue(self, logical: str) -> QueuePair:
        pairs = {
            "RepositoryEventsQueue": self.resources.repository_events,
            "RequestsQueue": self.resources.requests,
            **self.queues,
        }
        if logical not in pairs:
            raise StackError(f"the local stack has no queue {logical}")
        return pairs[logical]
