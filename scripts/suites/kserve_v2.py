"""KServe's v2 required API (``docs/predict-api/v2/required_api.md``) against lambdaserve.

    python scripts/suites/kserve_v2.py --kserve ~/kserve [--inference-url URL] [--json PATH]

KServe ships the document, not a suite: ``kserve_checks.py`` has one named check per
endpoint and behaviour the document states, against ``lambdaserve dev``'s demo model
(``demo-mlp``). When ``rest_predict_v2.yaml`` sits beside the document, responses are also
validated against its schemas. Nothing is downloaded: without the document the suite is
reported ABSENT.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kserve_checks import CHECKS, Api
from ts_report import SuiteRun, print_table, write_json

DOCS = Path("docs/predict-api/v2")


def _schemas(root: Path) -> dict[str, object]:
    spec = root / DOCS / "rest_predict_v2.yaml"
    if not spec.exists():
        return {}
    try:
        import yaml

        return yaml.safe_load(spec.read_text())["components"]["schemas"]
    except Exception:  # the checks run without schema validation then
        return {}


def run_suite(kserve: str | None, inference_url: str, aws_endpoint: str = "") -> SuiteRun:
    run = SuiteRun("kserve-v2-required")
    root = Path(kserve) if kserve else None
    if root is None or not (root / DOCS / "required_api.md").exists():
        why = (
            "no --kserve given" if root is None else f"{root / DOCS / 'required_api.md'} is absent"
        )
        run.absent = f"{why} (a kserve/kserve checkout)"
        return run
    api = Api(inference_url.rstrip("/"), _schemas(root))
    run.notes.append(
        f"{len(CHECKS)} checks from required_api.md"
        + (
            f"; responses validated with rest_predict_v2.yaml's {len(api.schemas)} schemas"
            if api.schemas
            else ""
        )
    )
    for name, check in CHECKS:
        try:
            run.add(name, "passed", check(api))
        except AssertionError as error:
            run.add(name, "failed", str(error))
        except OSError as error:
            run.add(name, "failed", f"no answer: {error}")
    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--kserve", help="a kserve/kserve checkout (docs/predict-api/v2)")
    parser.add_argument("--inference-url", default="http://127.0.0.1:8080")
    parser.add_argument("--json", type=Path)
    parser.add_argument("-v", "--verbose", action="store_true", help="each check's note")
    args = parser.parse_args(argv)
    run = run_suite(args.kserve, args.inference_url)
    if args.verbose:
        for outcome in run.outcomes:
            print(f"{outcome.outcome:>6}  {outcome.name}: {outcome.reason}")
    print_table([run])
    if args.json:
        write_json([run], args.json)
    return 1 if run.count("failed") or run.absent else 0


if __name__ == "__main__":
    sys.exit(main())
