"""bench_cold's first-request child, in a fresh interpreter against the parent's emulator.

    python scripts/cold/request_child.py serve MODEL BODY_PATH   # infer api_handler, phases
    python scripts/cold/request_child.py floor KEY MODEL_PATH    # boto3 + InferenceSession

``serve`` imports the infer function's handler (Lambda's init), wraps the functions one
first request goes through with timers (library code unchanged), then times the first
``api_handler`` call and one warm call. ``floor`` times the same object's ``download_file``
from the same emulator, ``InferenceSession(path)`` and one ``run``. One ``##RESULT {json}``
line on stdout (seconds).
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

clock = time.perf_counter
PHASES: dict[str, float] = {}
_active: set[str] = set()


def timed(name: str, skip_within: frozenset[str] = frozenset()) -> Callable[[Any], Any]:
    """Add the wrapped call's time to PHASES[name]; nested or re-entrant calls count once."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if name in _active or _active & skip_within:
                return fn(*args, **kwargs)
            _active.add(name)
            start = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                PHASES[name] = PHASES.get(name, 0.0) + clock() - start
                _active.discard(name)

        return wrapper

    return decorate


def instrument() -> None:
    import lambdaserve.catalog.repository
    import lambdaserve.serving.cache
    import lambdaserve.serving.model_server
    import lambdaserve.wiring.aws
    import lambdaserve.wiring.process
    from lambdaserve.serving.residency import loading

    def patch(owner: Any, attribute: str, name: str) -> None:
        setattr(owner, attribute, timed(name)(getattr(owner, attribute)))

    patch(lambdaserve.wiring.process.Process, "server", "services build")
    patch(lambdaserve.wiring.aws.AwsClients, "client", "  boto3 clients")
    patch(lambdaserve.serving.model_server.VersionResolver, "_read", "catalog read")
    patch(lambdaserve.serving.cache.ArtifactCache, "materialize", "download (cache)")
    patch(lambdaserve.catalog.repository.ModelRepository, "download", "  S3 download_file")
    patch(lambdaserve.serving.cache, "file_sha256", "  sha256 check")
    patch(loading, "warm_up", "warm-up")
    runtime_named = loading.runtime_named

    @timed("runtime import")
    def timed_runtime(backend: str) -> Any:
        runtime = runtime_named(backend)
        load = runtime.load

        @timed("session create")
        def timed_load(*args: Any, **kwargs: Any) -> Any:
            loaded = load(*args, **kwargs)
            loaded.run = timed("run", frozenset({"warm-up"}))(loaded.run)
            return loaded

        runtime.load = timed_load
        return runtime

    loading.runtime_named = timed_runtime  # type: ignore[assignment]


def serve(model: str, body_path: str) -> dict[str, Any]:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.path.insert(0, os.path.join(root, "functions", "infer"))
    start = clock()
    app = __import__("app")
    imported = clock()
    from lambdaserve.local.http_api_event import http_api_event
    from lambdaserve.processes.event_pump import LocalContext

    instrument()
    with open(body_path, "rb") as body:
        event, context = (
            http_api_event("POST", f"/v2/models/{model}/infer", body.read()),
            LocalContext("infer"),
        )
    began = clock()
    first = app.api_handler(event, context)
    total = clock() - began
    phases = dict(PHASES)  # the first request's; the warm one below adds its run
    assert first["statusCode"] == 200, first
    began = clock()
    assert app.api_handler(event, context)["statusCode"] == 200
    warm = clock() - began
    return {"init_import_s": imported - start, "total_s": total, "warm_s": warm, "phases": phases}


def floor(key: str, model_path: str) -> dict[str, Any]:
    start = clock()
    import boto3
    import numpy as np
    import onnxruntime as ort

    imported = clock()
    s3 = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"])
    client = clock()
    s3.download_file(os.environ["LAMBDASERVE_BUCKET"], key, model_path)
    downloaded = clock()
    session = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"])
    created = clock()
    feed = {
        i.name: np.zeros([d if isinstance(d, int) else 1 for d in i.shape], np.float32)
        for i in session.get_inputs()
    }
    session.run(None, feed)
    ran = clock()
    return {
        "imports_s": imported - start,
        "client_s": client - imported,
        "download_s": downloaded - client,
        "session_s": created - downloaded,
        "run_s": ran - created,
    }


if __name__ == "__main__":
    mode, name, path = sys.argv[1:4]
    result = serve(name, path) if mode == "serve" else floor(name, path)
    print("##RESULT " + json.dumps(result), flush=True)
