"""Run TorchServe's Postman collections (and KServe's v2 checks) against lambdaserve.

    lambdaserve dev &      # inference 8080, management 8081, AWS emulator 4566
    python scripts/suites/torchserve_postman.py --torchserve ~/serve --kserve ~/kserve \
        --json suites.json

``--torchserve`` is a checkout of pytorch/serve (``test/postman/`` and the ``examples/``
files the inference data names), ``--kserve`` one of kserve/kserve
(``docs/predict-api/v2/required_api.md``). Nothing is downloaded: a suite whose files are
absent is reported ABSENT. newman comes from ``--newman``, else
/work/peer-suites/node/node_modules/.bin/newman, else PATH
(``npm install --prefix DIR newman``). The upstream files are read, never changed: the
adaptations (ts_transform.py) are made in memory and printed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import kserve_v2
import ts_transform as tx
from ts_newman import Assertion, find_newman, run_collection
from ts_publish import Publisher, PublishHelper
from ts_report import SuiteRun, print_table, write_json

POSTMAN = Path("test/postman")


def _load(path: Path) -> Any:
    return json.loads(path.read_text())


def _outcome(run: SuiteRun, name: str, found: Assertion, plan: tx.Plan) -> None:
    got = f"got {found.status}: {found.body[:160]}"
    if plan.kind == "na":
        run.add(name, "n/a", plan.why)
    elif found.error:
        run.add(name, "failed", f"{plan.why + ': ' if plan.why else ''}{found.error}; {got}")
    elif plan.kind == "refused" and plan.marker not in found.body:
        run.add(name, "failed", f"refused without saying why ({plan.marker!r} expected); {got}")
    elif plan.kind == "refused":
        run.add(name, "refused-by-design", plan.why)
    else:
        run.add(name, "passed")


def management(args: argparse.Namespace, newman: str, root: Path) -> SuiteRun:
    run = SuiteRun("torchserve-management")
    rows, plans = tx.management_rows(_load(root / POSTMAN / "management_data.json"))
    collection = tx.management_collection(
        _load(root / POSTMAN / "management_api_test_collection.json")
    )
    for i, (row, plan) in enumerate(zip(rows, plans, strict=True)):
        if plan.kind != "as-is":
            run.notes.append(f"#{i} {row['test']} [{row['METHOD']} {row['path']}]: {plan.why}")
    assertions = _run(args, newman, root, collection, rows, run)
    for found in assertions:
        row = rows[found.iteration]
        name = f"#{found.iteration} {row['test']} [{row['METHOD']} {row['path']}]"
        _outcome(run, name, found, plans[found.iteration])
    return run


def inference(args: argparse.Namespace, newman: str, root: Path) -> list[SuiteRun]:
    run, added = SuiteRun("torchserve-inference"), SuiteRun("torchserve-inference-added-shapes")
    rows = tx.inference_rows(_load(root / POSTMAN / "inference_data.json"))
    collection, notes = tx.inference_collection(
        _load(root / POSTMAN / "inference_api_test_collection.json"),
        shapes=not args.no_added_shapes,
    )
    run.notes += notes
    missing = sorted(
        {r["file"] for r in rows if not (root / "test" / r["file"]).resolve().exists()}
    )
    if missing:
        run.notes.append(f"example files absent (their requests go without a body): {missing}")
    for found in _run(args, newman, root, collection, rows, run):
        row = rows[found.iteration]
        name = f"#{found.iteration} {row['model_name']} / {found.item} / {found.name}"
        target = added if found.item.startswith("[added]") else run
        _outcome(target, name, found, tx.inference_plan(found.item, found.name))
    return [run] + ([] if args.no_added_shapes else [added])


def _run(  # noqa: PLR0917
    args: argparse.Namespace,
    newman: str,
    root: Path,
    collection: dict[str, Any],
    rows: list[dict[str, Any]],
    run: SuiteRun,
) -> list[Assertion]:
    publisher = Publisher(args.management_url, args.aws_endpoint, timeout_s=args.publish_timeout)
    with PublishHelper(publisher) as helper:
        env = {"ls-helper": helper.url} | _ports(args)
        assertions = run_collection(
            newman, collection, rows, root / POSTMAN / "environment.json", root / "test", env
        )
    run.notes += publisher.log + [f"PUBLISH ERROR: {e}" for e in helper.errors]
    return assertions


def _ports(args: argparse.Namespace) -> dict[str, str]:
    """The environment's hostname and ports, from the URLs given."""
    from urllib.parse import urlsplit

    inference, management_ = urlsplit(args.inference_url), urlsplit(args.management_url)
    return {
        "hostname": inference.hostname or "localhost",
        "pred-port": str(inference.port or 80),
        "mgmt-port": str(management_.port or 80),
    }


def torchserve(args: argparse.Namespace) -> list[SuiteRun]:
    names = ["torchserve-management", "torchserve-inference"]
    root = Path(args.torchserve) if args.torchserve else None
    if root is None or not (root / POSTMAN / "management_api_test_collection.json").exists():
        why = "no --torchserve given" if root is None else f"{root / POSTMAN} has no collections"
        return [SuiteRun(n, absent=f"{why} (a pytorch/serve checkout)") for n in names]
    newman = find_newman(args.newman)
    if newman is None:
        return [
            SuiteRun(n, absent="newman not found (npm install --prefix DIR newman)") for n in names
        ]
    return [management(args, newman, root), *inference(args, newman, root)]


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--torchserve", help="a pytorch/serve checkout (test/postman, examples)")
    parser.add_argument("--kserve", help="a kserve/kserve checkout (docs/predict-api/v2)")
    parser.add_argument("--newman", help="the newman executable")
    parser.add_argument("--inference-url", default="http://127.0.0.1:8080")
    parser.add_argument("--management-url", default="http://127.0.0.1:8081")
    parser.add_argument("--aws-endpoint", default="http://127.0.0.1:4566")
    parser.add_argument("--publish-timeout", type=float, default=60.0)
    parser.add_argument("--no-added-shapes", action="store_true", help="only the upstream requests")
    parser.add_argument("--only", choices=["torchserve", "kserve"], help="run one of the two")
    parser.add_argument("--json", type=Path, help="write every outcome here")
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="list every transformation and n/a"
    )
    return parser.parse_args(argv)


def _unreachable(args: argparse.Namespace) -> str:
    """Why no lambdaserve stack answers at the URLs given ("" when one does)."""
    import urllib.request

    for url in (f"{args.inference_url}/v2/health/live", f"{args.management_url}/models"):
        try:
            urllib.request.urlopen(url, timeout=5).close()
        except OSError as error:
            return f"no lambdaserve stack answers {url} ({error}): start `lambdaserve dev`"
    return ""


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if down := _unreachable(args):
        print(down, file=sys.stderr)
        return 2
    runs: list[SuiteRun] = []
    if args.only != "kserve":
        runs += torchserve(args)
    if args.only != "torchserve":
        runs.append(kserve_v2.run_suite(args.kserve, args.inference_url, args.aws_endpoint))
    for run in runs:
        if run.notes and (args.verbose or run.suite.startswith("torchserve")):
            print(f"\n{run.suite}: transformations and publishing")
            for note in run.notes:
                print(f"  * {note}")
    print_table(runs, verbose=args.verbose)
    if args.json:
        write_json(runs, args.json)
    return 1 if any(r.count("failed") for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
