"""The deployed stack (``lambdaserve.local.deployed_stack``) with each function started from
the shipped environment its image or zip builds (``scripts/shipped_envs.py``), and each ECS
task from the CPU server image's (``serve-cpu``: functions/infer/Dockerfile.cpu), never the
test venv's."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lambdaserve.local.deploy_locally import deployed as deployed_here
from lambdaserve.local.deployed_stack import DeployedStack
from lambdaserve.local.function_process import FunctionProcess, base_environment
from lambdaserve.local.stack_plumbing import STACK
from lambdaserve.local.stack_shape import FunctionShape
from tests.shipped import built, shipped_envs

__all__ = ["GRANT_USES", "STACK", "DeployedStack", "ShippedLauncher", "deployed"]
# a file: each deployed stack notes there which test file each principal's calls came from
GRANT_USES = "LAMBDASERVE_GRANT_USES"

# the shipped environment each function's source builds (scripts/shipped_envs.py)
ENVIRONMENTS = {
    "functions/infer/Dockerfile": "infer",
    "functions/manage/Dockerfile": "manage",
    "functions/batcher": "batcher",
}


@dataclass(frozen=True)
class ShippedLauncher:
    """Each function from its shipped environment (``variants``: another environment for a
    function, as a profile's image variant builds it)."""

    variants: Mapping[str, str] = field(default_factory=dict)
    task_python: tuple[str, ...] = ()

    def function(
        self, shape: FunctionShape, environment: Mapping[str, str], log: Path
    ) -> FunctionProcess:
        name = self.variants.get(shape.logical) or ENVIRONMENTS[shape.source]
        module = shipped_envs()
        env = module.ENVS[name]
        target = built(name)
        return FunctionProcess(
            name,
            module.interpreter(env, target),
            paths=module.paths(env, target),
            code=target,
            environment={**base_environment(), **environment},
            log=log,
        )


@contextmanager
def deployed(
    work: Path,
    parameters: Mapping[str, str] | None = None,
    *,
    template: Mapping[str, Any] | None = None,
    tasks: str = "serve-cpu",
    **variants: str,
) -> Iterator[DeployedStack]:
    """The deployed stack for ``parameters`` (``template``: a changed template.yaml), its
    functions from their shipped environments (``variants``: by logical id; ``tasks``: the
    environment every task runs from, ``serve-cpu`` unless named)."""
    launcher = ShippedLauncher(variants, task_python=task_interpreter(tasks))
    uses = os.environ.get(GRANT_USES)  # read before the stack clears LAMBDASERVE_*
    mutated = bool(os.environ.get("LAMBDASERVE_TEMPLATE"))  # make test-grants' runs
    listeners = [_noting_uses(Path(uses))] if uses else []
    with deployed_here(work, launcher, parameters, template=template, listeners=listeners) as stack:
        try:
            yield stack
        finally:
            if mutated:
                # a journey that failed on a denial's effect (a task's 500, a function's
                # error) before it asked for denials: the grant it lacked is named here, for
                # test-grants, beside that failure
                stack.assert_no_denials()


def _noting_uses(path: Path) -> Callable[[str], None]:
    """A listener writing "<test file> <principal>" once per pair: which journeys each role
    takes part in (make test-grants runs only those without the role's grant)."""
    seen: set[tuple[str, str]] = set()

    def note(principal: str) -> None:
        test = os.environ.get("PYTEST_CURRENT_TEST", "").split("::")[0]
        if (test, principal) not in seen:
            seen.add((test, principal))
            with path.open("a") as out:
                out.write(f"{test} {principal}\n")

    return note


def task_interpreter(name: str) -> tuple[str, ...]:
    """The interpreter of shipped environment ``name``, built (or reused) for the tasks."""
    module = shipped_envs()
    return tuple(module.interpreter(module.ENVS[name], built(name)))


def state_changes(stack: DeployedStack, model: str) -> Callable[[], list[tuple[str, str]]]:
    """A queue on the stack's bus for ``model``'s version state changes (an EventBridge rule
    matching its events); read it for the (previous state, state) pairs announced so far."""
    sqs, events = stack.clients.sqs, stack.clients.client("events")
    name = f"changes-{model}"
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]
    pattern = {"source": ["lambdaserve"], "detail": {"model": [model]}}
    events.put_rule(Name=name, EventPattern=json.dumps(pattern))
    events.put_targets(Rule=name, Targets=[{"Id": "q", "Arn": arn["QueueArn"]}])

    def read() -> list[tuple[str, str]]:
        messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
        details = [json.loads(m["Body"])["detail"] for m in messages]
        return [(d["previous_state"], d["state"]) for d in details]

    return read
