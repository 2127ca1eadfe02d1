"""What the replicas of one ``serve --workers N`` share: a directory of their own.

The supervisor (``processes.supervisor``) makes the directory and names it in each replica's
environment, with the replica count and the replica's slot. Two things live there:

- ``ready-<slot>``: written by a replica once its warm-up ended. A replica reports ready only
  once every slot has one, so the task's health check (which reaches whichever replica the
  kernel hands the connection to) says ready only when every replica is. The supervisor
  removes a dead replica's marker before it starts the replacement.
- ``started-<slot>``: written once a replica's startup went through (its ports bound, gRPC
  started). The supervisor gives up on a slot whose replicas keep dying before that.
- ``metrics-<pid>.json``: each replica's metric samples, rewritten every second, which the
  replica answering a ``/metrics`` scrape sums with its own (``metrics.shared``).

Files, not a socket between the processes: nothing to keep alive, and a replica that dies
leaves its last samples behind, so summed counters never fall when it is replaced.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path

DIR_ENV = "LAMBDASERVE_WORKERS_DIR"
COUNT_ENV = "LAMBDASERVE_WORKERS"
SLOT_ENV = "LAMBDASERVE_WORKER_SLOT"
_POLL_S = 0.1


@dataclass(frozen=True)
class Siblings:
    """This replica's view of its group: the shared directory, the count, its own slot."""

    directory: Path
    count: int
    slot: int

    def ready_marker(self, slot: int) -> Path:
        return self.directory / f"ready-{slot}"

    def started_marker(self, slot: int) -> Path:
        return self.directory / f"started-{slot}"

    def mark_started(self) -> None:
        """This replica's startup went through (its ports bound): it serves."""
        write_atomically(self.started_marker(self.slot), str(os.getpid()).encode())

    def metrics_file(self, pid: int) -> Path:
        return self.directory / f"metrics-{pid}.json"

    def metrics_files(self) -> list[Path]:
        return sorted(self.directory.glob("metrics-*.json"))

    def all_ready(self) -> bool:
        return all(self.ready_marker(slot).exists() for slot in range(self.count))

    def warmed_then_wait(self, stop: threading.Event | None = None) -> None:
        """Mark this replica warm, then wait until every sibling is (or ``stop`` is set)."""
        write_atomically(self.ready_marker(self.slot), str(os.getpid()).encode())
        stop = stop or threading.Event()
        while not self.all_ready() and not stop.wait(_POLL_S):
            pass


def from_env() -> Siblings | None:
    """The group this process works in; None for a ``serve`` of one process."""
    directory = os.environ.get(DIR_ENV)
    if not directory:
        return None
    return Siblings(Path(directory), int(os.environ[COUNT_ENV]), int(os.environ[SLOT_ENV]))


def write_atomically(path: Path, data: bytes) -> None:
    """Readers see the old file or the new one, never half of one."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_bytes(data)
    os.replace(temporary, path)
