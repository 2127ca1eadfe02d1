"""``serve --workers N``: N replicas (serving processes) share the HTTP and gRPC ports; this
supervises them.

One Python process runs on one core at a time, so N processes serve on N cores, each with
its own model copies, dynamic batcher and catalog refresher (the catalog is the truth each
refresher follows, so a model loaded or unloaded through the management API, which writes
the catalog, reaches every replica). Each replica binds its own listening socket with
SO_REUSEPORT (``serve_replica``) and gRPC binds with ``grpc.so_reuseport``: the kernel hashes
each new connection to one of the listening sockets, so connections spread evenly over the
replicas rather than to whichever process wakes first on one shared socket.

The supervisor (this process, PID 1 in the container) starts the replicas in a process
group of their own, replaces one that dies, and forwards SIGTERM and SIGINT to each, so an
ECS stop drains every replica (``processes.drain``); it exits once all have, with 0 when
every replica did. A slot whose replica dies before its startup went through (ports bound,
gRPC started), three times in a row, stops the whole server (a port in use or a broken
setting would otherwise restart forever). "Worker" is kept for the model-code workers
(``workers``); only the command line's ``--workers`` and the environment keep the word here.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from types import FrameType

from lambdaserve.errors import InvalidInput
from lambdaserve.processes import siblings
from lambdaserve.processes.replica_contract import (
    BATCHING_ENV,
    GRPC_ENV,
    HTTP_ENV,
    LOGGING_ENV,
    PARENT_ENV,
    ServeOptions,
    reuseport_socket,
)
from lambdaserve.processes.serve_banner import banner
from lambdaserve.settings import default_work_dir

logger = logging.getLogger(__name__)
INTRA_OP_ENV = "LAMBDASERVE_INTRA_OP_THREADS"
WORK_DIR_ENV = "LAMBDASERVE_WORK_DIR"
GIVE_UP_AFTER = 3  # deaths in a row of one slot's replica before its startup went through


class Supervisor:
    def __init__(self, count: int, env: dict[str, str], directory: Path) -> None:
        self._count = count
        self._env = env
        self._group = siblings.Siblings(directory, count, 0)
        self._running: dict[int, tuple[int, subprocess.Popen[bytes]]] = {}  # pid -> slot
        self._failures = [0] * count
        self._stopping = False
        self._codes: list[int] = []

    def run(self) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._forward)
        for slot in range(self._count):
            self._start(slot)
        while self._running:
            try:
                pid, status = os.wait()
            except ChildProcessError:
                break
            if pid not in self._running:
                continue
            slot, replica = self._running.pop(pid)
            code = os.waitstatus_to_exitcode(status)
            replica.returncode = code  # reaped here: Popen must not wait for it again
            if self._stopping:
                self._codes.append(code)
                continue
            self._replace(slot, pid, code)
        return next((code for code in self._codes if code != 0), 0)

    def _start(self, slot: int) -> None:
        if self._stopping:  # a signal came while the replicas were being started
            return
        env = {**self._env, siblings.SLOT_ENV: str(slot)}
        replica = subprocess.Popen(
            [sys.executable, "-m", "lambdaserve.processes.serve_replica"],
            env=env,
            process_group=0,  # Ctrl-C reaches the supervisor, which forwards it once
        )
        self._running[replica.pid] = (slot, replica)

    def _replace(self, slot: int, pid: int, code: int) -> None:
        started = self._group.started_marker(slot)
        self._failures[slot] = 0 if started.exists() else self._failures[slot] + 1
        started.unlink(missing_ok=True)
        self._group.ready_marker(slot).unlink(missing_ok=True)
        if self._failures[slot] >= GIVE_UP_AFTER:
            logger.error(
                "replica %d died %d times before it started serving (last exit %d); stopping",
                slot,
                GIVE_UP_AFTER,
                code,
            )
            self._codes.append(code or 1)
            self._forward(signal.SIGTERM, None)
            return
        logger.warning("replica %d (pid %d) exited with %d; starting another", slot, pid, code)
        self._start(slot)

    def _forward(self, sig: int, frame: FrameType | None) -> None:
        # a second SIGTERM reaches the replicas too: they skip what is left of the drain delay
        self._stopping = True
        for pid in list(self._running):
            with contextlib.suppress(ProcessLookupError):  # exited, not yet reaped
                os.kill(pid, sig)


def serve_replicas(options: ServeOptions, replicas: int) -> None:
    """``serve`` with ``--workers`` > 1: ``replicas`` processes. This process imports no
    server: it only supervises (tens of MB less than a replica), and each replica builds the
    app from its environment."""
    from lambdaserve.processes.logs import use_text_logs

    if options.metrics_port:
        raise InvalidInput(
            "--metrics-port needs --workers 1: each worker process counts only what it served, "
            "and a scrape would reach one of them; scale out by tasks with one worker each"
        )
    if options.management_port:
        raise InvalidInput(
            "--management-port needs --workers 1: each worker process has its own model "
            "copies and model-code workers, so a describe or a PUT ?min_worker= would reach "
            "one of them; scale out by tasks with one worker each"
        )
    print(
        banner(options, replicas),
        flush=True,
    )
    use_text_logs(options.log_level)  # the supervisor's own lines: a replica replaced, say
    env = {
        **os.environ,
        BATCHING_ENV: "1" if options.batching else "0",
        LOGGING_ENV: f"{options.log_level}:{int(options.access_log)}",
        GRPC_ENV: f"{options.host}:{options.grpc_port}:{int(options.grpc_management)}",
    }
    code = run_replicas(replicas, options.host, options.port, env)
    if code:
        raise SystemExit(code)


def run_replicas(count: int, host: str, port: int, env: dict[str, str]) -> int:
    """Run ``count`` ``serve`` replicas on ``host:port`` until SIGTERM/SIGINT; the exit code."""
    try:  # fail at once, not in every replica: another server holds the port
        reuseport_socket(host, port).close()
    except OSError as exc:
        raise InvalidInput(f"cannot listen on {host}:{port}: {exc.strerror}") from exc
    directory = Path(tempfile.mkdtemp(prefix="lambdaserve-workers-"))
    env = {
        **env,
        # its own process group's default would give each replica its own cache
        WORK_DIR_ENV: env.get(WORK_DIR_ENV) or default_work_dir(),
        siblings.DIR_ENV: str(directory),
        siblings.COUNT_ENV: str(count),
        HTTP_ENV: f"{host}:{port}",
        PARENT_ENV: str(os.getpid()),
        **threads_per_replica(env, count),
    }
    try:
        return Supervisor(count, env, directory).run()
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def threads_per_replica(env: dict[str, str], count: int) -> dict[str, str]:
    """Each replica's model threads, unless LAMBDASERVE_INTRA_OP_THREADS says: the cores
    shared out, so ``count`` replicas do not each start a pool as wide as the machine
    (measured on 2 cores, 2 replicas: 2 threads each cost 1.26x the CPU per gRPC call and
    1.32x per binary request of 1 thread each; docs/benchmarks.md)."""
    if env.get(INTRA_OP_ENV):
        return {}
    return {INTRA_OP_ENV: str(max(1, len(os.sched_getaffinity(0)) // count))}


def replica_count(text: str) -> int:
    """``--workers`` (the replicas): a number, or ``auto`` for the cores this process may
    run on."""
    if text == "auto":
        return len(os.sched_getaffinity(0))
    try:
        count = int(text)
    except ValueError:
        count = 0
    if count < 1:
        raise InvalidInput(f"--workers takes a number (1 or more) or auto, not {text!r}")
    return count
