"""Every grant in template.yaml is needed by a journey: each statement taken out in turn, the
deployed journeys run against the template without it, and each removal must fail them,
naming a denied action of that statement, or be listed in KEPT with its reason.

    python scripts/test_grants.py [--only RESOURCE ...] [--report FILE]     (make test-grants)

A unit is one element of a function's or role's statement list, one SAM policy template
(LambdaInvokePolicy, ...) or one conditional policy (Fn::If). The journeys are the tests in
tests/deployed but the mutation tests (which bring their own templates) and dev --deployed's
(a process of its own, without LAMBDASERVE_TEMPLATE). They run once on the template as it
is, noting which test files each role's calls came from (LAMBDASERVE_GRANT_USES); then,
for each unit, the files its role takes part in run without it, with pytest -x so a
removal that is caught stops at its first failure. A role no journey takes part in is
reported as such. Not part of .ci/run: with every unit it takes hours.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from lambdaserve.local.template import load_template

ROOT = Path(__file__).resolve().parents[1]
GRANT_USES = "LAMBDASERVE_GRANT_USES"  # tests/deployed/stack.py notes each role's journeys there
JOURNEYS = ["tests/deployed", "--ignore=tests/deployed/test_template_mutations.py"]
JOURNEYS += ["--ignore=tests/deployed/test_dev_deployed.py"]
# unit -> why it stays though no journey fails without it
KEPT: dict[str, str] = {
    # AWS's S3 answers a GET or HEAD of a missing key with 403 instead of 404 where the caller
    # may not list the bucket; moto answers 404 either way
    "InferFunction/Policies[4].Statement[2]": (
        "s3:ListBucket: without it AWS's S3 answers a GET of a missing key 403, not 404, and "
        "the infer function tells a stored body or result that is gone (a 4xx saying to send "
        "again) from S3 failing (503) by that 404 (queued/results.py); moto answers 404 "
        "either way, so no emulated journey can fail without it"
    ),
    "InferBatchFunction/Policies[4].Statement[2]": (
        "s3:ListBucket: without it AWS's S3 answers a GET of a missing key 403, not 404, and "
        "the batch function tells a stored request body that is gone (a 4xx result saying to "
        "send again) from S3 failing (retried) by that 404 (queued/results.py); moto answers "
        "404 either way, so no emulated journey can fail without it"
    ),
    "GpuTaskRole/Policies[0].PolicyDocument.Statement[5]": (
        "s3:ListBucket: without it AWS's S3 answers a GET of a missing key 403, not 404, and "
        "the GPU worker tells a stored request body that is gone (a 4xx result) from S3 "
        "failing (retried) by that 404 (queued/results.py); moto answers 404 either way, so "
        "no emulated journey can fail without it"
    ),
}
# grants no emulated journey can need: moto's S3 does not ask KMS on an SSE-KMS read or write,
# where AWS's S3 calls kms:Decrypt / kms:GenerateDataKey as the caller (the role)
KEPT_KMS = "S3's SSE-KMS calls on the caller's behalf, which moto's S3 does not make"


@dataclass(frozen=True)
class Unit:
    resource: str
    label: str  # "Policies[3].Statement[1]", "Policies[0]:LambdaInvokePolicy"
    actions: tuple[str, ...]
    path: tuple[Any, ...]  # where it lives in the template's dict

    @property
    def name(self) -> str:
        return f"{self.resource}/{self.label}"


def units(template: dict[str, Any]) -> Iterator[Unit]:
    for logical, resource in template["Resources"].items():
        properties = resource.get("Properties", {})
        if resource["Type"] == "AWS::Serverless::Function":
            for index, policy in enumerate(properties.get("Policies") or []):
                yield from _policy_units(logical, ("Policies", index), policy)
        elif resource["Type"] == "AWS::IAM::Role":
            for index, policy in enumerate(properties.get("Policies") or []):
                document = policy.get("PolicyDocument", {})
                for number, _ in enumerate(document.get("Statement", [])):
                    where = ("Policies", index, "PolicyDocument", "Statement", number)
                    statement = document["Statement"][number]
                    yield Unit(logical, _label(where), _actions(statement), where)


def _policy_units(logical: str, where: tuple[Any, ...], policy: Any) -> Iterator[Unit]:
    if isinstance(policy, dict) and "Statement" in policy:
        for number, statement in enumerate(policy["Statement"]):
            path = (*where, "Statement", number)
            yield Unit(logical, _label(path), _actions(statement), path)
    elif isinstance(policy, dict) and "Fn::If" in policy:
        yield Unit(logical, _label(where) + ":If", _actions(policy), where)
    elif isinstance(policy, dict):  # a SAM policy template: {Name: {...}}
        yield Unit(logical, f"{_label(where)}:{next(iter(policy))}", (), where)
    else:  # a managed policy's name
        yield Unit(logical, f"{_label(where)}:{policy}", (), where)


def _label(path: tuple[Any, ...]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")


def _actions(node: Any) -> tuple[str, ...]:
    return tuple(sorted(set(re.findall(r'"([a-z0-9-]+:[A-Za-z*]+)"', json.dumps(node)))))


def without(template: dict[str, Any], unit: Unit) -> dict[str, Any]:
    changed = copy.deepcopy(template)
    node: Any = changed["Resources"][unit.resource]["Properties"]
    for step in unit.path[:-1]:
        node = node[step]
    del node[unit.path[-1]]
    if unit.path[-2] == "Statement" and not node:
        # its policy's only statement: the policy goes (IAM refuses an empty Statement list)
        properties = changed["Resources"][unit.resource]["Properties"]
        del properties[unit.path[0]][unit.path[1]]
    return changed


def journeys_by_role(log: Path, uses: Path) -> dict[str, set[str]]:
    """Principal -> the test files whose stacks it made calls in, from one run of every
    journey on the template as it is (which must pass)."""
    uses.unlink(missing_ok=True)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-m", "deployed", *JOURNEYS],
        cwd=ROOT,
        env={**os.environ, GRANT_USES: str(uses)},
        capture_output=True,
        text=True,
        check=False,
    )
    with log.open("a") as out:
        out.write(f"\n===== the template as it is\n{(done.stdout + done.stderr)[-6000:]}\n")
    if done.returncode != 0:
        raise SystemExit("test-grants: the journeys fail on the template as it is (see the log)")
    found: dict[str, set[str]] = {}
    for line in uses.read_text().splitlines():
        test, _, principal = line.partition(" ")
        if test:
            found.setdefault(principal, set()).add(test)
    return found


def files_for(unit: Unit, by_role: dict[str, set[str]]) -> list[str]:
    """The journeys ``unit``'s role took part in: an assumed role's ARN names the role and
    the session (the function's or task's logical id)."""
    names = {unit.resource, f"{unit.resource}Role"}
    return sorted(
        {
            test
            for principal, tests in by_role.items()
            if "assumed-role/" in principal
            and names & set(principal.split("assumed-role/", 1)[1].split("/"))
            for test in tests
        }
    )


def run(unit: Unit, template: dict[str, Any], log: Path, files: list[str]) -> tuple[str, str]:
    """("killed" | "survived" | "kept" | "failed unnamed", what the journeys said)."""
    if not files:
        return "survived", "no journey takes part as this role"
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "template.yaml"
        path.write_text(yaml.safe_dump(without(template, unit), sort_keys=False))
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-x", "-q", "-m", "deployed", *files],
            cwd=ROOT,
            env={**os.environ, "LAMBDASERVE_TEMPLATE": str(path)},
            capture_output=True,
            text=True,
            check=False,
        )
    said = done.stdout + done.stderr
    with log.open("a") as out:
        out.write(f"\n===== {unit.name} {unit.actions}\n{said[-6000:]}\n")
    if done.returncode == 0:
        if unit.actions and all(a.startswith("kms:") for a in unit.actions):
            return "kept", KEPT_KMS
        return ("kept", KEPT[unit.name]) if unit.name in KEPT else ("survived", "")
    named = [a for a in unit.actions if f"was denied {a}" in said]
    if named or not unit.actions:
        failed = re.findall(r"^FAILED (\S+)", said, re.M)
        return "killed", f"{', '.join(named) or 'a policy template'} ({', '.join(failed[:1])})"
    return "failed unnamed", (re.findall(r"^E .*$", said, re.M) or ["?"])[0][:200]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=[], help="these resources' units only")
    parser.add_argument("--unit", nargs="*", default=[], help="these units only (their names)")
    parser.add_argument("--report", default=str(ROOT / ".cache/grants/report.md"))
    args = parser.parse_args()
    template = load_template()
    chosen = [
        u
        for u in units(template)
        if (not args.only or u.resource in args.only) and (not args.unit or u.name in args.unit)
    ]
    report = Path(args.report)
    report.parent.mkdir(parents=True, exist_ok=True)
    log = report.with_suffix(".log")
    log.write_text("")
    rows, started = [], time.monotonic()
    by_role = journeys_by_role(log, report.with_suffix(".uses"))
    for number, unit in enumerate(chosen, 1):
        began = time.monotonic()
        verdict, detail = run(unit, template, log, files_for(unit, by_role))
        rows.append(f"| {unit.name} | {', '.join(unit.actions)} | {verdict} | {detail} |")
        print(f"[{number}/{len(chosen)}] {unit.name}: {verdict} {detail} "
              f"({time.monotonic() - began:.0f} s)", flush=True)  # fmt: skip
    counts = {v: sum(f"| {v} |" in r for r in rows) for v in ("killed", "kept", "survived")}
    text = [
        f"# make test-grants, {time.strftime('%Y-%m-%d %H:%M')}, "
        f"{time.monotonic() - started:.0f} s",
        "",
        f"{len(rows)} grants: {counts['killed']} fail a journey, {counts['kept']} kept on "
        f"purpose, {counts['survived']} needed by no journey",
        "",
        "| grant | actions | verdict | what failed |",
        "|---|---|---|---|",
        *rows,
    ]
    report.write_text("\n".join(text) + "\n")
    print("\n".join(text[:3]))
    return 0 if all("| killed |" in r or "| kept |" in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
