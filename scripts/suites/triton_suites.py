"""Run Triton's public HTTP test suites against a lambdaserve dev stack; passed/failed per suite.

Suites (fetched by you; this script never downloads anything):
  --triton-client DIR  (env TRITON_CLIENT_DIR)  a checkout of triton-inference-server/client:
                       src/python/examples/*http*.py, image_client.py
  --triton-server DIR  (env TRITON_SERVER_DIR)  a checkout of triton-inference-server/server:
                       qa/L0_http/*.py (with qa/common)

It starts `python -m lambdaserve.cli dev` (the lambdaserve on PYTHONPATH) on Triton's port
8000 (management 8011, AWS emulator 4577) unless --use-running, publishes the models the
suites name (triton_models.py) by S3 upload, waits for them in the repository index, runs:
  1. client examples with Triton's seven example models (simple_http_model_control.py and
     python_http_aio_test.py count them);
  2. qa/L0_http's Python tests after adding the qa models,
and prints `suite | passed | failed | expected | skipped` and every non-pass with its reason.

  PYTHONPATH=layers/core .venv/bin/python scripts/suites/triton_suites.py \\
      --triton-client /work/peer-suites/triton-client \\
      --triton-server /work/peer-suites/triton-server --json /tmp/triton.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import triton_models as models
import triton_runs as runs
import triton_stack
from PIL import Image

CLIENT = "triton client examples (HTTP)"
QA = "triton server qa/L0_http"


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--triton-client", type=Path, default=os.environ.get("TRITON_CLIENT_DIR"))
    parser.add_argument("--triton-server", type=Path, default=os.environ.get("TRITON_SERVER_DIR"))
    parser.add_argument("--use-running", action="store_true", help="use a dev stack on 8000")
    parser.add_argument("--python", default=sys.executable, help="interpreter of the suites")
    parser.add_argument("--json", type=Path, help="write the results here too")
    parser.add_argument("--work-dir", type=Path, help="logs and scratch (default: a temp dir)")
    return parser.parse_args()


def _suite_dir(path: Path | None, inside: str, label: str, flag: str) -> Path | None:
    if path is None:
        print(f"{label}: absent (give {flag} DIR); not run")
        return None
    if not (path / inside).is_dir():
        print(f"{label}: absent ({path / inside} does not exist); not run")
        return None
    return path


def _image(work: Path) -> Path:
    folder = work / "images"
    folder.mkdir(exist_ok=True)
    pixels = np.random.default_rng(1).integers(0, 255, (256, 320, 3), dtype=np.uint8)
    path = folder / "noise.jpg"
    Image.fromarray(pixels).save(path)
    return path


def _publish(stack: triton_stack.Stack, files: dict[str, bytes], expect: set[str]) -> None:
    models.publish(files, stack.aws_endpoint)
    states = models.wait_settled(models.model_names(files), stack.management_url)
    for name, state in sorted(states.items()):
        if state != "READY" and name not in expect:
            print(f"  warning: {name} is {state}")


def run(args: argparse.Namespace, work: Path) -> dict[str, list[runs.Outcome]]:
    client = _suite_dir(args.triton_client, "src/python/examples", CLIENT, "--triton-client")
    server = _suite_dir(args.triton_server, "qa/L0_http", QA, "--triton-server")
    results: dict[str, list[runs.Outcome]] = {}
    if client is None and server is None:
        return results
    stack = triton_stack.use_running() if args.use_running else triton_stack.start(work)
    print(f"lambdaserve dev: {stack.inference_url} (log {stack.log_path or 'not ours'})")
    try:
        sequences = {"simple_sequence", "simple_dyna_sequence"}
        _publish(stack, models.example_models(), expect=sequences)
        qa_dir = runs.prepare_qa(server, work) if server else None
        env = {"SERVER_PID": str(stack.pid)} if stack.pid else {}
        log = work / "qa.log"
        if qa_dir:  # it counts the repository's models: before the qa models are added
            results[QA] = runs.run_qa(args.python, qa_dir, runs.QA_INDEXED_IDS, env, log)
        if client:
            logs = work / "client-logs"
            logs.mkdir(exist_ok=True)
            examples = client / "src/python/examples"
            results[CLIENT] = [
                runs.run_example(args.python, examples, example, logs)
                for example in runs.client_examples(_image(work))
            ]
        if qa_dir and server:
            # model control left `simple` unloaded with max_batch_size 16: serve it as it was
            models.load(stack.management_url, "simple", {"max_batch_size": 8})
            _publish(stack, models.qa_models(), expect=set())
            results[QA] += runs.run_qa(args.python, qa_dir, runs.QA_MAIN_IDS, env, log)
            results[QA] += runs.skipped_files(server)
    finally:
        stack.stop()
    return results


def report(results: dict[str, list[runs.Outcome]]) -> dict[str, object]:
    rows = []
    print(f"\n{'suite':34} | passed | failed | expected | skipped")
    for suite, outcomes in results.items():
        counts = {s: sum(o.status == s for o in outcomes) for s in runs.STATUSES}
        rows.append({"suite": suite, **counts})
        print(
            f"{suite:34} | {counts['passed']:6} | {counts['failed']:6} | "
            f"{counts['expected']:8} | {counts['skipped']:7}"
        )
    for status in ("failed", "expected", "skipped"):
        listed = [(s, o) for s, outs in results.items() for o in outs if o.status == status]
        if listed:
            print(f"\n{status}:")
            for suite, outcome in listed:
                print(f"  [{suite.split()[1]}] {outcome.name}: {outcome.reason}")
    return {
        "counts": rows,
        "outcomes": {s: [vars(o) for o in outs] for s, outs in results.items()},
    }


def main() -> int:
    args = _args()
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="triton-suites-"))
    work.mkdir(parents=True, exist_ok=True)
    results = run(args, work)
    summary = report(results)
    print(f"\nlogs: {work}")
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1))
    return 1 if any(o.status == "failed" for outs in results.values() for o in outs) else 0


if __name__ == "__main__":
    sys.exit(main())
