"""``serve``'s flags whose count varies, given by the environment instead: an ECS task
definition's Command is a fixed list, so template.yaml's ServerModeTraceConfig,
ServerModeCacheConfig, ServerModeRateLimit and ServerModeRateLimitResources reach the serve
task as variables, read here as if they were flags. A flag on the command line wins; what is
read is checked exactly as the flag would be (a bad value stops ``serve`` before it listens).

- ``LAMBDASERVE_SERVE_TRACE_CONFIG``: ``--trace-config`` values, space-separated
  (``level=TIMESTAMPS rate=100 triton,file=/tmp/trace.json``)
- ``LAMBDASERVE_SERVE_CACHE_CONFIG``: ``--cache-config`` values, space-separated
- ``LAMBDASERVE_RATE_LIMIT`` and ``LAMBDASERVE_RATE_LIMIT_RESOURCES`` (comma-separated
  NAME:COUNT[:DEVICE]): ``--rate-limit`` and ``--rate-limit-resource``
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Mapping

from lambdaserve.serving.rate_limiter import OFF

TRACE_CONFIG_FLAGS = "LAMBDASERVE_SERVE_TRACE_CONFIG"
CACHE_CONFIG_FLAGS = "LAMBDASERVE_SERVE_CACHE_CONFIG"
RATE_LIMIT = "LAMBDASERVE_RATE_LIMIT"
RATE_LIMIT_RESOURCES = "LAMBDASERVE_RATE_LIMIT_RESOURCES"


def fill_from_environment(args: argparse.Namespace, env: Mapping[str, str]) -> None:
    """Set each flag of ``serve``'s ``args`` not given on the command line from ``env``, where
    it names one (other commands' flags are left as given)."""
    if getattr(args, "command", None) != "serve":
        return
    tracing = args.trace_config or args.trace_file or args.trace_level or args.trace_rate
    if not tracing:
        args.trace_config = shlex.split(env.get(TRACE_CONFIG_FLAGS, ""))
    if not args.cache_config:  # serve's own flag (the early return above)
        args.cache_config = shlex.split(env.get(CACHE_CONFIG_FLAGS, ""))
    if args.rate_limit == OFF and not args.rate_limit_resource:
        args.rate_limit = env.get(RATE_LIMIT, "").strip() or OFF
        resources = env.get(RATE_LIMIT_RESOURCES, "")
        args.rate_limit_resource = [r.strip() for r in resources.split(",") if r.strip()]
