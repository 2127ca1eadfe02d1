"""One worker process: spawned with the version's environment first on its path, its two
shared areas, its socket; its output re-logged in the serving process with the model and
version; killed, reaped and described (pid, start time, RSS)."""

from __future__ import annotations

import collections
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import orjson

from lambdaserve.workers import messages
from lambdaserve.workers.channel import RECORD_MARK, Channel
from lambdaserve.workers.shared_area import Area

logger = logging.getLogger(__name__)
INITIAL_AREA = 1 << 20
_TAIL = 20  # last error lines kept for a crash's message (the whole output is logged)
# What a crash's message keeps of the output the code printed itself: errors, not chatter
_ERROR_LINE = re.compile(
    r"Traceback|Error|Exception|Fatal|Segmentation|Abort|Killed|^\s*File \"|panic|error:"
)
# An absolute path: the client and the version's reason get its last part only
_PATH = re.compile(r"""(?:/[^\s/"':,()]+)+/([^\s/"':,()]+)""")


def without_paths(text: str) -> str:
    """``text`` with absolute paths cut to their file name: the server's layout (its cache,
    site-packages) is not the client's business, and the log has the whole line."""
    return _PATH.sub(r"\1", text)


class WorkerProcess:
    """A started child: its socket (``channel``) and its two shared areas; the version's
    workforce hands it to one call at a time (``workers.worker_model``)."""

    def __init__(
        self,
        label: str,
        python_paths: tuple[Path, ...],
        index: int = 0,
        on_exit: Callable[[WorkerProcess], None] | None = None,
    ) -> None:
        self.index = index
        self.busy = False  # taken by a call (its caller handles the worker's end)
        self._on_exit = on_exit
        self.label = label  # "model version N worker K", for the log
        self.tail: collections.deque[str] = collections.deque(maxlen=_TAIL)
        self.started_at = time.time()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.requests = Area.anonymous("lambdaserve-worker-requests", INITIAL_AREA)
        self.responses = Area.anonymous("lambdaserve-worker-responses", INITIAL_AREA)
        env = dict(os.environ)
        fds = (theirs.fileno(), self.requests.fd, self.responses.fd)
        env["LAMBDASERVE_WORKER_FDS"] = ",".join(str(fd) for fd in fds)
        env["PYTHONUNBUFFERED"] = "1"
        if python_paths:  # before the serving image's site-packages
            env["PYTHONPATH"] = os.pathsep.join(
                [str(p) for p in python_paths]
                + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
            )
        self.process = subprocess.Popen(
            [sys.executable, "-m", "lambdaserve.workers.child"],
            env=env,
            pass_fds=fds,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        theirs.close()
        self.pid = self.process.pid
        self.channel = Channel(ours)
        self._pump = threading.Thread(
            target=self._relay, name=f"worker-{self.pid}-log", daemon=True
        )
        self._pump.start()

    def start(self, spec: messages.Message, timeout: float) -> messages.Message:
        """Send the load spec; the child's answer once its code is initialized."""
        self.channel.send(spec)
        return self.channel.receive(timeout)

    def _relay(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            if line.startswith(RECORD_MARK):
                try:
                    record = orjson.loads(line[len(RECORD_MARK) :])
                    logging.getLogger(record["name"]).log(
                        record["level"], "[%s pid %s] %s", self.label, self.pid, record["text"]
                    )
                    if int(record["level"]) >= logging.WARNING:  # not start-up chatter
                        self.tail.extend(str(record["text"]).splitlines()[-3:])
                    continue
                except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                    pass
            if _ERROR_LINE.search(line):
                self.tail.append(line)
            logger.info("[%s pid %s] %s", self.label, self.pid, line)
        if self._on_exit is not None:  # its output ends when it does: told at once
            self._on_exit(self)

    def alive(self) -> bool:
        return self.process.poll() is None

    def how_it_ended(self, wait_s: float = 5.0) -> str:
        """The exit, in words (``killed by SIGKILL``, ``exited with status 3``), and the
        last lines it wrote."""
        try:
            code = self.process.wait(wait_s)
        except subprocess.TimeoutExpired:
            return "stopped answering"
        if threading.current_thread() is not self._pump:
            self._pump.join(timeout=wait_s)
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            ended = f"killed by {name}"
        else:
            ended = f"exited with status {code}"
        lines = [without_paths(line.strip()) for line in self.tail if line.strip()][-3:]
        return ended + (f"; its last error: {' | '.join(lines)}" if lines else "")

    def rss_bytes(self) -> int:
        """Resident memory, from /proc (0 where there is none)."""
        try:
            fields = Path(f"/proc/{self.pid}/statm").read_text().split()
            return int(fields[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            return 0

    def kill(self) -> None:
        if self.alive():
            self.process.kill()
        self.process.wait()

    def stop(self, grace_s: float = 5.0) -> None:
        """Ask the child to finalize and exit; kill it when it does not in time."""
        if self.alive():
            try:
                self.channel.send(messages.stop())
                self.process.wait(grace_s)
            except Exception:
                self.kill()
        self.close()

    def close(self) -> None:
        self.channel.close()
        self.requests.close()
        self.responses.close()
