"""Drift found by us, not by users: the unit tests and the deployed journeys against the newest
release of every package, no lock.

    python scripts/test_latest.py DIR [PYTEST ARGS...]      (make test-latest)

A copy of this checkout goes to DIR/tree (tracked and untracked files, no venv or cache); there
`scripts/lock.sh --upgrade` moves every lock to the newest release pyproject.toml allows, and
`make test-deployed` and the unit tests run from the venv and shipped environments those locks
build. DIR/report.md says which packages moved (from -> to) and what failed. Not part of
.ci/run: it needs the network's newest releases and takes as long as the suites do.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_PIN = re.compile(r"^([A-Za-z0-9._-]+)(?:\[[^\]]*\])?==([^ ;\\]+)", re.M)


def pins(lock: Path) -> dict[str, str]:
    return {name.lower(): version for name, version in _PIN.findall(lock.read_text())}


def copy_tree(tree: Path) -> None:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout.split(b"\0")
    shutil.rmtree(tree, ignore_errors=True)
    for name in filter(None, listed):
        source = ROOT / name.decode()
        if source.is_file():
            target = tree / name.decode()
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


def moved(before: Path, after: Path) -> list[str]:
    old, new = pins(before), pins(after)
    lines = [f"- {p}: {old[p]} -> {new[p]}" for p in sorted(new) if p in old and old[p] != new[p]]
    lines += [f"- {p}: new, {new[p]}" for p in sorted(set(new) - set(old))]
    lines += [f"- {p}: gone (was {old[p]})" for p in sorted(set(old) - set(new))]
    return lines


def run(step: str, command: list[str], tree: Path, log: Path) -> tuple[str, int, float]:
    started = time.monotonic()
    with log.open("a") as out:
        out.write(f"\n$ {' '.join(command)}\n")
        out.flush()
        done = subprocess.run(command, cwd=tree, stdout=out, stderr=subprocess.STDOUT, check=False)
    return step, done.returncode, time.monotonic() - started


def main() -> int:
    home = Path(sys.argv[1]).resolve()
    pytest_args = sys.argv[2:]
    tree, log = home / "tree", home / "test-latest.log"
    home.mkdir(parents=True, exist_ok=True)
    log.write_text("")
    copy_tree(tree)
    uv = os.environ.get("UV", "uv")
    env_uv = str(Path(uv).resolve()) if os.sep in uv else uv
    results = [
        run("lock --upgrade", ["env", f"UV={env_uv}", "scripts/lock.sh", "--upgrade"], tree, log)
    ]
    lines = moved(ROOT / "locks/test.txt", tree / "locks/test.txt")
    args = " ".join(pytest_args)
    if results[0][1] == 0:
        results.append(run("shipped-envs", ["make", "shipped-envs"], tree, log))
        results.append(run("install", ["make", "install-test", "install-redis"], tree, log))
        unit = [".venv/bin/pytest", "tests/unit", "-q", "-m", "not own_process and not tensorflow"]
        results.append(run("unit tests", [*unit, *pytest_args], tree, log))
        results.append(
            run("test-deployed", ["make", "test-deployed", f"ARGS=-q {args}"], tree, log)
        )
    failures = re.findall(r"^(?:FAILED|ERROR) .*$", log.read_text(), re.M)
    report = [
        f"# make test-latest, {time.strftime('%Y-%m-%d %H:%M')}",
        "",
        f"## Packages that moved in the test venv ({len(lines)})",
        *(lines or ["- none"]),
        "",
        "## Results",
        *(
            f"- {step}: {'ok' if rc == 0 else f'FAILED (exit {rc})'}, {s:.0f} s"
            for step, rc, s in results
        ),
        "",
        f"## What broke ({len(failures)})",
        *(f"- {line}" for line in failures[:200]),
        "",
        f"Full log: {log}",
    ]
    (home / "report.md").write_text("\n".join(report) + "\n")
    print("\n".join(report))
    return 0 if all(rc == 0 for _, rc, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
