"""The ``lambdaserve`` command line."""

from __future__ import annotations

import argparse
import json
import sys

from lambdaserve.errors import LambdaServeError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lambdaserve", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    dev = commands.add_parser("dev", help="run the whole system locally")
    dev.add_argument("--host", default="127.0.0.1")
    dev.add_argument("--inference-port", type=int, default=8080)
    dev.add_argument("--management-port", type=int, default=8081)
    dev.add_argument("--aws-port", type=int, default=4566)
    dev.add_argument(
        "--aws-endpoint", default=None, help="use a running LocalStack (or other) endpoint"
    )
    dev.add_argument("--no-demo", action="store_true", help="do not publish the demo model")

    commands.add_parser(
        "reconcile", help="bring the catalog in line with the bucket (uses AWS_* environment)"
    )

    serve = commands.add_parser(
        "serve", help="serve the inference API long-running, with dynamic batching (ECS)"
    )
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8080)
    serve.add_argument("--no-batching", action="store_true", help="one execution per request")
    serve.add_argument(
        "--workers", type=int, default=1, help="processes sharing the port (one per core)"
    )

    worker = commands.add_parser("worker", help="consume the requests queue in this process (ECS)")
    worker.add_argument("--poll-wait", type=int, default=20, help="SQS long-poll seconds (1-20)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "dev":
            from lambdaserve.local.dev import DevOptions, run_dev

            run_dev(
                DevOptions(
                    host=args.host,
                    inference_port=args.inference_port,
                    management_port=args.management_port,
                    aws_port=args.aws_port,
                    aws_endpoint=args.aws_endpoint,
                    demo=not args.no_demo,
                )
            )
        elif args.command == "reconcile":
            from lambdaserve.services import build_manage_services
            from lambdaserve.settings import get_settings

            count = build_manage_services(get_settings()).registrar.reconcile_all()
            print(json.dumps({"models": count}))
        elif args.command == "serve":
            from lambdaserve.long_running import serve

            serve(args.host, args.port, batching=not args.no_batching, workers=args.workers)
        elif args.command == "worker":
            from lambdaserve.long_running import work

            work(args.poll_wait)
    except LambdaServeError as exc:
        print(f"lambdaserve: {exc.message}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
