"""The trace flags of ``serve`` and ``dev``, as ``tritonserver`` takes them: ``--trace-config``
(repeatable) and the older ``--trace-file``, ``--trace-level`` (repeatable) and
``--trace-rate``. Read into the environment, as ``--cache-config`` is, so every process of
``serve --workers N`` and ``dev``'s in-process server build their tracer from the same
config (``tracing.config``)."""

from __future__ import annotations

import argparse

from lambdaserve.errors import InvalidInput
from lambdaserve.tracing.config import TRITON, trace_config


def add_trace_flags(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--trace-config",
        action="append",
        default=[],
        metavar="[MODE,]SETTING=VALUE",
        help="Triton's tracing: triton,file=<path> and triton,log-frequency=<n> (the trace "
        "file, written at shutdown or every n traces to <path>.0, <path>.1, ...); level=OFF|"
        "TIMESTAMPS|TENSORS, rate=<every n-th request>, count=<traces, -1: no limit>, "
        "mode=triton|opentelemetry; opentelemetry,url=<OTLP/HTTP endpoint> and "
        "opentelemetry,resource=<key>=<value>. The settings API changes them at run time",
    )
    command.add_argument(
        "--trace-file", default=None, help="older form of --trace-config triton,file=<path>"
    )
    command.add_argument(
        "--trace-level",
        action="append",
        default=[],
        help="older form of --trace-config level=<OFF|TIMESTAMPS|TENSORS> (repeatable)",
    )
    command.add_argument(
        "--trace-rate", type=int, default=None, help="older form of --trace-config rate=<n>"
    )


def trace_env(args: argparse.Namespace, workers: int = 1) -> dict[str, str]:
    """The environment that carries the flags' config; {} when no trace flag was given.
    InvalidInput for a bad flag, or for a trace file that several processes would share."""
    if not (args.trace_config or args.trace_file or args.trace_level or args.trace_rate):
        return {}
    config = trace_config(args.trace_config, args.trace_file, args.trace_level, args.trace_rate)
    if workers > 1 and config.mode == TRITON and config.file:
        raise InvalidInput(
            "a Triton trace file is written by one process: with --workers N each replica "
            "would write over the others' traces; trace with --workers 1, or use "
            "--trace-config mode=opentelemetry"
        )
    return config.to_env()
