"""Triton's rate limiter flags of ``serve`` and ``dev``, as ``tritonserver`` takes them:
``--rate-limit execution_count|off`` and ``--rate-limit-resource NAME:COUNT[:DEVICE]``
(repeatable). Read into the environment, as the trace flags are, so every process of
``serve --workers N`` and ``dev``'s in-process server build the same limiter."""

from __future__ import annotations

import argparse

from lambdaserve.serving.rate_limiter import OFF, check_mode, parse_resources


def add_rate_limit_flags(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--rate-limit",
        default=OFF,
        metavar="execution_count|off",
        help="Triton's rate limiter: execution_count runs an instance only when the resources "
        "its instance_group rate_limiter names are free, the lowest executions x priority "
        "first; off (the default) ignores resources and priorities",
    )
    command.add_argument(
        "--rate-limit-resource",
        action="append",
        default=[],
        metavar="NAME:COUNT[:DEVICE]",
        help="how much of a rate limiter resource there is (on every device, or on DEVICE); "
        "a model needing more refuses to load. Without it: what the most demanding "
        "instance needs",
    )


def rate_limit_env(args: argparse.Namespace) -> dict[str, str]:
    """The environment that carries the flags; InvalidInput for a bad one."""
    mode = check_mode(args.rate_limit)
    parse_resources(args.rate_limit_resource)  # refused here, before any server starts
    if mode == OFF and not args.rate_limit_resource:
        return {}
    return {
        "LAMBDASERVE_RATE_LIMIT": mode,
        "LAMBDASERVE_RATE_LIMIT_RESOURCES": ",".join(args.rate_limit_resource),
    }
