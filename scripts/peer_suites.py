"""Run the peers' own test suites against lambdaserve and print passed/failed per suite.

    make peer-suites SUITES=/path/to/checkouts

``SUITES`` holds checkouts you fetched (this never downloads anything; CI cannot fetch
them): ``triton-client`` (triton-inference-server/client), ``triton-server``
(triton-inference-server/server), ``serve`` (pytorch/serve) and ``kserve`` (kserve/kserve).
A missing one is reported absent. Triton's suites start their own ``lambdaserve dev`` on
Triton's port 8000 (``suites/triton_suites.py``); TorchServe's Postman collections (newman)
and KServe's v2 required API run against a ``lambdaserve dev`` started here on 8080/8081
(``suites/torchserve_postman.py``). Exit 1 when any suite has failures.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def run(command: list[str]) -> int:
    print("$", " ".join(command), flush=True)
    return subprocess.call(command)


def with_dev_stack(work: Path, command: list[str]) -> int:
    """``command`` against a ``lambdaserve dev`` on the default ports, stopped afterwards."""
    busy = [port for port in (8080, 8081, 4566) if port_open(port)]
    if busy:
        print(f"ports {busy} are taken: stop what serves there first", file=sys.stderr)
        return 2
    log = (work / "dev.log").open("wb")
    env = {**os.environ, "LAMBDASERVE_WORK_DIR": str(work / "dev")}
    dev = subprocess.Popen(
        [sys.executable, "-m", "lambdaserve.cli", "dev"],  # KServe's checks use the demo model
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not (port_open(8080) and port_open(8081)):
            if time.monotonic() > deadline or dev.poll() is not None:
                print(f"lambdaserve dev did not start; see {work / 'dev.log'}", file=sys.stderr)
                return 2
            time.sleep(0.5)
        return run(command)
    finally:
        os.killpg(dev.pid, signal.SIGINT)
        dev.wait(timeout=30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suites", type=Path, default=os.environ.get("SUITES"), required=False)
    parser.add_argument("--only", choices=["triton", "torchserve"], help="run one family")
    parser.add_argument(
        "--suite-python",
        default=sys.executable,
        help="interpreter for Triton's tests (with their client packages: psutil, attrdict)",
    )
    args = parser.parse_args()
    if args.suites is None:
        parser.error("say where the checkouts are: --suites DIR (or SUITES=DIR)")
    root = args.suites.resolve()
    codes = []
    with tempfile.TemporaryDirectory(prefix="peer-suites-") as tmp:
        work = Path(tmp)
        if args.only in (None, "triton"):
            codes.append(
                run(
                    [
                        sys.executable,
                        str(HERE / "suites" / "triton_suites.py"),
                        "--triton-client",
                        str(root / "triton-client"),
                        "--triton-server",
                        str(root / "triton-server"),
                        "--python",
                        args.suite_python,
                        "--json",
                        str(work / "triton.json"),
                    ]
                )
            )
        if args.only in (None, "torchserve"):
            command = [sys.executable, str(HERE / "suites" / "torchserve_postman.py")]
            command += ["--torchserve", str(root / "serve"), "--kserve", str(root / "kserve")]
            codes.append(with_dev_stack(work, command))
    return max(codes, default=0) and 1


if __name__ == "__main__":
    sys.exit(main())
