"""``deployed()``: template.yaml's stack for a parameter set, on an embedded emulator with IAM
enforced (the emulator, the stateful resources, every function's and task's shape)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from lambdaserve.local.deployed_stack import DeployedStack, Launcher
from lambdaserve.local.emulator import Emulator, free_port
from lambdaserve.local.http_routes import http_routes
from lambdaserve.local.iam import Credentials, Enforcement
from lambdaserve.local.lambda_service import lambda_invokes
from lambdaserve.local.resources import ensure_resources
from lambdaserve.local.sam_translation import parameter_values, transformed
from lambdaserve.local.stack_plumbing import (
    LOAD_BALANCED_PORT,
    REGION,
    STACK,
    emulated_names,
    with_conditional_queues,
)
from lambdaserve.local.stack_shape import read_shape
from lambdaserve.local.template import load_template
from lambdaserve.settings import get_settings
from lambdaserve.wiring.aws import AwsClients

RESOURCE_NAMES = {
    "LAMBDASERVE_BUCKET": "models",
    "LAMBDASERVE_TABLE": "catalog",
    "LAMBDASERVE_REPOSITORY_EVENTS_QUEUE": "repository-events",
    "LAMBDASERVE_REQUESTS_QUEUE": "requests",
}


@contextmanager
def deployed(
    work: Path,
    launcher: Launcher,
    parameters: Mapping[str, str] | None = None,
    *,
    template: Mapping[str, Any] | None = None,
    host: str = "127.0.0.1",
    aws_port: int | None = None,
    listeners: Sequence[Callable[[str], None]] = (),
) -> Iterator[DeployedStack]:
    """The emulator (on ``aws_port``, else a free one), the stack's resources, and its
    functions' shapes for ``parameters`` (the template's defaults where not given), IAM
    enforced throughout; ``template``: a changed template.yaml (its functions and tasks;
    the stateful part stays the file's); ``listeners``: told each allowed call's principal.
    This process's environment is the stack's administrator's while it runs."""
    saved = dict(os.environ)
    # read before the stack's environment replaces this one's (LAMBDASERVE_TEMPLATE among it)
    template = template or load_template()
    emulator = Emulator(host, aws_port or free_port()).start()
    try:
        # moto's accounts are the process's, not a server's: each stack starts from nothing
        httpx.post(f"{emulator.endpoint}/moto-api/reset", timeout=30).raise_for_status()
        bootstrap = Credentials("bootstrap", "bootstrap")
        enforcement = Enforcement(emulator.endpoint, REGION, bootstrap)
        enforcement.listeners.extend(listeners)
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
        ports = {LOAD_BALANCED_PORT: free_port()}
        values = parameter_values(template, parameters or {})
        names = emulated_names(settings, resources, ports)
        names, queues = with_conditional_queues(clients, names, template, values)
        translated = transformed(template, REGION)
        shape = read_shape(translated, values, names)
        stack = DeployedStack(shape, enforcement, resources, clients, settings, work, launcher)
        stack.queues.update(queues)
        stack.routes = http_routes(translated)
        stack.ports.update(ports)
        with enforcement.enforced(), lambda_invokes(stack.route), stack:
            yield stack
            stack.assert_no_denials()
    finally:
        emulator.stop()
        os.environ.clear()
        os.environ.update(saved)
        get_settings.cache_clear()
