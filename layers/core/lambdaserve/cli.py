"""The ``lambdaserve`` command line: dev, reconcile, serve, worker."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

from lambdaserve.errors import LambdaServeError
from lambdaserve.processes.flags_from_env import fill_from_environment
from lambdaserve.processes.rate_limit_flags import add_rate_limit_flags, rate_limit_env
from lambdaserve.processes.rollout_command import add_rollout_command, run_rollout_command
from lambdaserve.processes.trace_flags import add_trace_flags, trace_env

_FORMAT = argparse.ArgumentDefaultsHelpFormatter


def _whole(low: int, high: int, what: str) -> Callable[[str], int]:
    """An argparse type: a whole number from ``low`` to ``high``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{what} are {low} to {high}, got {value}")
        return value

    return parse


_poll_wait = _whole(1, 20, "SQS long polls (seconds)")
_port = _whole(1, 65535, "ports")
_port_or_off = _whole(0, 65535, "ports (0: off)")


def _directory(text: str) -> Path:
    path = Path(text).expanduser()
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is not a directory")
    return path


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lambdaserve",
        description="Serve ML models on AWS serverless building blocks (S3, DynamoDB, Lambda).",
        formatter_class=_FORMAT,
    )
    commands = parser.add_subparsers(dest="command", required=True)

    dev = commands.add_parser(
        "dev",
        help="run the whole system locally (emulator, handlers, both APIs)",
        formatter_class=_FORMAT,
    )
    dev.add_argument("--host", default="127.0.0.1", help="address the APIs listen on")
    dev.add_argument("--inference-port", type=_port, default=8080, help="inference API port")
    dev.add_argument("--management-port", type=_port, default=8081, help="management API port")
    dev.add_argument(
        "--metrics-port",
        type=_port_or_off,
        default=8082,
        help="TorchServe's metrics API port (GET /metrics, TorchServe's names); 0 turns it off",
    )
    dev.add_argument(
        "--grpc-port",
        type=_port_or_off,
        default=8001,
        help="gRPC port (Triton's 8001): KServe v2/Triton, TF Serving, TorchServe and Paddle "
        "services; 0 turns it off",
    )
    dev.add_argument("--aws-port", type=_port, default=4566, help="embedded AWS emulator port")
    dev.add_argument(
        "--aws-endpoint",
        default=None,
        help="use a running LocalStack (or other AWS-compatible endpoint) instead of the "
        "embedded emulator",
    )
    dev.add_argument("--no-demo", action="store_true", help="do not publish the demo model")
    dev.add_argument(
        "--no-lambda-limits",
        "--no-response-limit",
        dest="no_response_limit",
        action="store_true",
        help="take requests and answer synchronously beyond Lambda's 6 MB (up to Triton's "
        "64 MB requests); deployed, such requests and answers are a 413",
    )
    dev.add_argument(
        "--server-mode",
        action="store_true",
        help="run `lambdaserve serve` beside the Lambda emulation and the HTTP API as deployed "
        "in front of the infer function: KIND_GPU models are forwarded to it, or queued when "
        "it is down",
    )
    dev.add_argument("--server-port", type=_port, default=8090, help="--server-mode: serve's port")
    dev.add_argument(
        "--http-api-port",
        type=_port,
        default=9000,
        help="--server-mode: the HTTP API as deployed (API Gateway events to the infer function)",
    )
    dev.add_argument(
        "--deployed",
        action="store_true",
        help="the stack as `sam deploy` makes it from template.yaml: each function in its own "
        "process with the template's environment, under its own role (IAM enforced)",
    )
    dev.add_argument(
        "--parameter-overrides",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="--deployed: template parameters, as `sam deploy` takes them",
    )
    dev.add_argument(
        "--model-repository",
        "--model-store",  # TorchServe's name for its folder of .mar files
        dest="model_repository",
        type=_directory,
        default=None,
        metavar="DIR",
        help="a folder in the repository layout (<model>/<version>/model.onnx), or holding "
        "TorchServe .mar archives (TorchServe's --model-store): uploaded at start and "
        "watched, so adding, changing or deleting files publishes, updates or retires versions",
    )
    _logging_flags(dev, access_log_default=True)
    _model_control_flag(dev)
    add_trace_flags(dev)
    add_rate_limit_flags(dev)

    reconcile = commands.add_parser(
        "reconcile",
        help="bring the catalog in line with the bucket",
        formatter_class=_FORMAT,
    )
    reconcile.add_argument(
        "--aws-endpoint",
        default=None,
        help="AWS-compatible endpoint (default: AWS_ENDPOINT_URL, else AWS itself)",
    )

    add_rollout_command(commands, _FORMAT)

    serve = commands.add_parser(
        "serve",
        help="serve the inference API long-running, with dynamic batching (ECS)",
        formatter_class=_FORMAT,
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on")
    serve.add_argument("--port", type=_port, default=8080, help="port to listen on")
    _model_control_flag(serve)
    serve.add_argument("--no-batching", action="store_true", help="one execution per request")
    serve.add_argument(
        "--workers",
        type=_workers,
        default=1,
        help="worker processes sharing the HTTP and gRPC ports (SO_REUSEPORT), each with its "
        "own models and batcher, under a supervisor that replaces one that dies and drains "
        "them all on SIGTERM; one runs Python on one core, so one per core: auto (the cores "
        "this process may use); 1 serves in this process",
    )
    serve.add_argument(
        "--metrics-port",
        type=_port_or_off,
        default=0,
        help="also serve TorchServe's metrics API on this port (one worker only; 0: off)",
    )
    serve.add_argument(
        "--grpc-port",
        type=_port_or_off,
        default=8001,
        help="gRPC port (Triton's 8001): KServe v2/Triton, TF Serving, TorchServe and Paddle "
        "services in the same batcher as HTTP; 0 turns it off",
    )
    serve.add_argument(
        "--grpc-server",
        choices=("grpcio", "native"),
        default=None,
        help="the gRPC server: grpcio's, or pygrpc-native's drop-in, whose HTTP/2 and gRPC "
        "work runs outside the GIL (LAMBDASERVE_GRPC_SERVER; default native)",
    )
    serve.add_argument(
        "--grpc-management",
        action="store_true",
        help="also answer the management RPCs (Triton's repository load/unload/index, "
        "TorchServe's management service); the task role then needs the manage permissions",
    )
    serve.add_argument(
        "--management-port",
        type=_port_or_off,
        default=0,
        help="also serve the management API on this port (TorchServe's 8081: describe with "
        "workers, PUT /models/<m>?min_worker= scales model code's workers; one worker only; "
        "0: off); the task role then needs the manage permissions",
    )
    serve.add_argument(
        "--cache-config",
        action="append",
        default=[],
        metavar="CACHE,SETTING=VALUE",
        help="Triton's response cache for models with response_cache { enable: true }: "
        "local,size=<bytes> (this process; default 64 MiB) and redis,host=<h>,port=<p> "
        "(shared by every instance; also user=, password=, tls_enabled=, wait_timeout_ms=, ttl=)",
    )
    _logging_flags(serve, access_log_default=False)
    add_trace_flags(serve)
    add_rate_limit_flags(serve)

    worker = commands.add_parser(
        "worker", help="consume the requests queue in this process (ECS)", formatter_class=_FORMAT
    )
    worker.add_argument(
        "--poll-wait", type=_poll_wait, default=20, help="SQS long-poll seconds (1-20)"
    )
    return parser


def _workers(text: str) -> int:
    from lambdaserve.processes.supervisor import replica_count

    try:
        return replica_count(text)
    except LambdaServeError as exc:
        raise argparse.ArgumentTypeError(exc.message) from exc


def _model_control_flag(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--model-control-mode",
        choices=("explicit", "none", "poll"),
        default=None,
        help="tritonserver's flag: explicit (the default) takes load and unload; none or poll "
        "refuse them as Triton does (LAMBDASERVE_MODEL_CONTROL_MODE)",
    )


def _logging_flags(command: argparse.ArgumentParser, access_log_default: bool) -> None:
    command.add_argument(
        "--log-level",
        choices=("debug", "info", "warning", "error"),
        default="info",
        help="what the text log shows",
    )
    command.add_argument(
        "--access-log",
        action=argparse.BooleanOptionalAction,
        default=access_log_default,
        help="one line per request: method, path, status, latency, model and version",
    )


# dev's flags that `dev --deployed` cannot honour (the template decides), and what does instead
_NOT_DEPLOYED = {
    "management_port": "--management-port: the management API is the HTTP API's /models routes",
    "metrics_port": "--metrics-port: the functions publish metrics as deployed (EMF)",
    "grpc_port": "--grpc-port: gRPC is the serve task's (EnableServerMode=true)",
    "aws_endpoint": "--aws-endpoint: the deployed stack runs on its embedded emulator",
    "no_response_limit": "--no-response-limit: API Gateway's and Lambda's limits are the stack's",
    "server_mode": "--server-mode: --parameter-overrides EnableServerMode=true",
    "server_port": "--server-port: --parameter-overrides EnableServerMode=true",
    "http_api_port": "--http-api-port: the HTTP API listens on --inference-port",
    "model_repository": "--model-repository: publish with aws s3 cp (the banner says how)",
    "model_control_mode": "--model-control-mode: the template sets each function's",
    "trace_config": "--trace-config: --parameter-overrides ServerModeTraceConfig=...",
    "rate_limit": "--rate-limit: --parameter-overrides ServerModeRateLimit=...",
    "rate_limit_resource": "--rate-limit-resource: ServerModeRateLimitResources=...",
}


def _refuse_what_deployed_ignores(args: argparse.Namespace) -> None:
    """Each flag given with --deployed that it would not honour, refused by name."""
    defaults = vars(_parser().parse_args(["dev"]))
    given = [why for dest, why in _NOT_DEPLOYED.items() if getattr(args, dest) != defaults[dest]]
    if given:
        raise LambdaServeError(
            "dev --deployed runs the stack as template.yaml deploys it and cannot honour: "
            + "; ".join(given)
        )


def _emulator_installed() -> None:
    """`dev` runs the emulator (lambdaserve.local and the `local` extra), which the images, the
    layer and `pip install lambdaserve[server]` do not ship."""
    import importlib.util

    for module, what in (("lambdaserve.local", "lambdaserve/local"), ("moto", "moto")):
        if importlib.util.find_spec(module) is None:
            raise LambdaServeError(
                f"`lambdaserve dev` runs the local AWS emulator, and {what} is not installed "
                "here (the images and the layer ship without it): pip install "
                "'lambdaserve[local]' from a checkout, or run `make dev`"
            )


def _reconcile(args: argparse.Namespace) -> int:
    if args.aws_endpoint:
        os.environ["AWS_ENDPOINT_URL"] = args.aws_endpoint
    from lambdaserve.settings import get_settings
    from lambdaserve.wiring.manage import build_manage_services

    count = build_manage_services(get_settings()).registrar.reconcile_all()
    print(json.dumps({"models": count}))
    return 0


# the commands that start no server: each one call
_ONE_CALL: dict[str, Callable[[argparse.Namespace], int]] = {
    "reconcile": _reconcile,
    "rollout": run_rollout_command,
}


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if getattr(args, "model_control_mode", None):  # read with the settings (every process)
        os.environ["LAMBDASERVE_MODEL_CONTROL_MODE"] = args.model_control_mode
    try:
        fill_from_environment(args, os.environ)  # serve's, from a task definition's variables
        if args.command in ("dev", "serve"):  # read with the plane (every process)
            os.environ.update(trace_env(args, getattr(args, "workers", 1)))
            os.environ.update(rate_limit_env(args))
        if args.command in _ONE_CALL:
            return _ONE_CALL[args.command](args)
        if args.command == "dev":
            _emulator_installed()
            from lambdaserve.local.dev import run_dev
            from lambdaserve.local.dev_options import DevOptions

            if args.deployed:
                from lambdaserve.local.deployed_dev import parameter_overrides, run_deployed_dev

                _refuse_what_deployed_ignores(args)

                run_deployed_dev(
                    DevOptions(args.host, args.inference_port, aws_port=args.aws_port),
                    parameter_overrides(args.parameter_overrides),
                    demo=not args.no_demo,
                )
                return 0
            run_dev(
                DevOptions(
                    host=args.host,
                    inference_port=args.inference_port,
                    management_port=args.management_port,
                    metrics_port=args.metrics_port or None,
                    grpc_port=args.grpc_port,
                    response_limit=not args.no_response_limit,
                    aws_port=args.aws_port,
                    aws_endpoint=args.aws_endpoint,
                    demo=not args.no_demo,
                    model_repository=args.model_repository,
                    log_level=args.log_level,
                    access_log=args.access_log,
                    server_mode_port=args.server_port if args.server_mode else None,
                    http_api_port=args.http_api_port,
                )
            )
        elif args.command == "serve":
            if args.grpc_server:  # read from the environment (by every worker process too)
                os.environ["LAMBDASERVE_GRPC_SERVER"] = args.grpc_server
            if args.cache_config:  # read from the environment (by every worker process too)
                from lambdaserve.serving.response_cache.from_settings import cache_config_env

                os.environ.update(cache_config_env(args.cache_config))
            from lambdaserve.processes.replica_contract import ServeOptions

            options = ServeOptions(
                args.host,
                args.port,
                batching=not args.no_batching,
                log_level=args.log_level,
                access_log=args.access_log,
                metrics_port=args.metrics_port or None,
                grpc_port=args.grpc_port,
                grpc_management=args.grpc_management,
                management_port=args.management_port or None,
            )
            if args.workers > 1:  # the supervisor imports no server; its replicas do
                from lambdaserve.processes.supervisor import serve_replicas

                serve_replicas(options, args.workers)
            else:
                from lambdaserve.processes.serve import serve

                serve(options)
        elif args.command == "worker":  # the SQS consumer (ECS)
            from lambdaserve.processes.queue_consumer import work

            work(args.poll_wait)
    except LambdaServeError as exc:
        print(f"lambdaserve: {exc.message}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
