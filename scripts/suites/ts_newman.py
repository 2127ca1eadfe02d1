"""Running a Postman collection with newman and reading its JSON report."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_NEWMAN = Path("/work/peer-suites/node/node_modules/.bin/newman")


@dataclass(frozen=True)
class Assertion:
    iteration: int
    item: str
    name: str
    error: str  # empty when it passed
    status: int | None
    body: str  # the first 300 characters of the answer


def find_newman(given: str | None) -> str | None:
    if given:
        return given if Path(given).exists() or shutil.which(given) else None
    if DEFAULT_NEWMAN.exists():
        return str(DEFAULT_NEWMAN)
    return shutil.which("newman")


def run_collection(  # noqa: PLR0917 (the run is these seven things)
    newman: str,
    collection: dict[str, Any],
    data: list[dict[str, Any]],
    environment: Path,
    working_dir: Path,
    env_vars: dict[str, str],
    timeout_s: float = 1800,
) -> list[Assertion]:
    """Run ``collection`` once per ``data`` row; every assertion of every request."""
    with tempfile.TemporaryDirectory(prefix="ts-postman-") as tmp:
        folder = Path(tmp)
        (folder / "collection.json").write_text(json.dumps(collection))
        (folder / "data.json").write_text(json.dumps(data))
        report = folder / "report.json"
        command = [
            newman,
            "run",
            str(folder / "collection.json"),
            "-e",
            str(environment),
            "-d",
            str(folder / "data.json"),
            "--working-dir",
            str(working_dir),
            "-r",
            "json",
            "--reporter-json-export",
            str(report),
            "--timeout-request",
            "60000",
        ]
        for key, value in env_vars.items():
            command += ["--env-var", f"{key}={value}"]
        done = subprocess.run(
            command, check=False, capture_output=True, text=True, timeout=timeout_s
        )
        if not report.exists():
            raise RuntimeError(
                f"newman wrote no report (rc {done.returncode}): {done.stderr[-2000:]}"
            )
        return _assertions(json.loads(report.read_text()))


def _assertions(report: dict[str, Any]) -> list[Assertion]:
    found: list[Assertion] = []
    # A pm.sendRequest in a script makes the reporter list the execution twice (same cursor).
    unique = {e["cursor"]["ref"]: e for e in report["run"]["executions"]}
    for execution in unique.values():
        iteration = execution["cursor"]["iteration"]
        item = execution["item"]["name"]
        response = execution.get("response") or {}
        status = response.get("code")
        body = bytes((response.get("stream") or {}).get("data", [])[:300]).decode(errors="replace")
        if execution.get("requestError"):
            body = f"request error: {execution['requestError'].get('message', '')}"
        scripts = [
            e
            for e in execution.get("testScript", []) + execution.get("prerequestScript", [])
            if e.get("error")
        ]
        for script in scripts:  # a script that threw: an assertion that failed
            message = script["error"].get("message", "script error")
            found.append(Assertion(iteration, item, "script", message, status, body))
        for assertion in execution.get("assertions", []):
            error = (assertion.get("error") or {}).get("message", "")
            found.append(Assertion(iteration, item, assertion["assertion"], error, status, body))
    return found
