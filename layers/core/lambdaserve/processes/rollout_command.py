"""``lambdaserve rollout start|status|promote|abort``: the management API's rollout routes
from a shell (``--url``: the management API, ``LAMBDASERVE_MANAGEMENT_URL``, else ``dev``'s
port). Prints the answer's JSON; a refusal's message goes to stderr, exit 2."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import urllib.error
import urllib.request
from typing import Any

DEFAULT_URL = "http://127.0.0.1:8081"


def add_rollout_command(commands: Any, formatter: type[argparse.HelpFormatter]) -> None:
    rollout = commands.add_parser(
        "rollout",
        help="start, watch, promote or abort a model's rollout",
        formatter_class=formatter,
    )
    actions = rollout.add_subparsers(dest="action", required=True)
    for name, text in [
        ("start", "move a label to a version step by step, each step baked and judged"),
        ("status", "a label's current or last rollout (every label's without --label)"),
        ("promote", "the next step now (a paused rollout resumes); --full: all of them"),
        ("abort", "roll back: the new version's weight to 0"),
    ]:
        action = actions.add_parser(name, help=text, formatter_class=formatter)
        action.add_argument("model")
        action.add_argument("--label", required=name != "status")
        action.add_argument(
            "--url",
            default=os.environ.get("LAMBDASERVE_MANAGEMENT_URL", DEFAULT_URL),
            help="the management API (default: LAMBDASERVE_MANAGEMENT_URL, else dev's)",
        )
        if name == "start":
            action.add_argument("--to", type=int, required=True, help="the new version")
            action.add_argument("--steps", default="10,50,100", help="its weight at each step")
            action.add_argument("--bake-seconds", type=int, default=300)
            action.add_argument(
                "--analysis", default="{}", help="gates as JSON, e.g. '{\"min_samples\": 100}'"
            )
        if name == "promote":
            action.add_argument("--full", action="store_true", help="straight to 100%%")


def run_rollout_command(args: argparse.Namespace) -> int:
    base = f"{args.url.rstrip('/')}/models/{args.model}/rollouts"
    if args.action == "start":
        body = {
            "label": args.label,
            "to": args.to,
            "steps": [int(step) for step in args.steps.split(",")],
            "bake_seconds": args.bake_seconds,
            "analysis": json.loads(args.analysis),
        }
        return _call("POST", base, body)
    if args.action == "status":
        return _call("GET", f"{base}/{args.label}" if args.label else base)
    if args.action == "promote":
        return _call("POST", f"{base}/{args.label}/promote" + ("?full=true" if args.full else ""))
    return _call("POST", f"{base}/{args.label}/abort")


def _call(method: str, url: str, body: dict[str, Any] | None = None) -> int:
    data = json.dumps(body).encode() if body is not None else b""
    request = urllib.request.Request(url, data=data if method == "POST" else None, method=method)
    request.add_header("content-type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            print(json.dumps(json.loads(answer.read()), indent=1))
            return 0
    except urllib.error.HTTPError as refused:
        text = refused.read().decode(errors="replace")
        with contextlib.suppress(ValueError, AttributeError):  # an answer that is not ours
            text = json.loads(text).get("message", text)
        print(f"lambdaserve rollout: {refused.code}: {text}", file=sys.stderr)
        return 2
    except urllib.error.URLError as unreachable:
        print(f"lambdaserve rollout: {url} unreachable ({unreachable.reason})", file=sys.stderr)
        return 2
