"""What a benchmark point cost in CPU, read from /proc: the server's whole process tree and
the load generator's (this process and its children: wrk, gRPC client threads), so a ratio
that moves with the machine can be told from one that moves with the code.

    meter = CpuMeter(server_pid); ...load...; cost = meter.cost(requests)
"""

from __future__ import annotations

import os
import time
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


def tree(root: int) -> list[int]:
    """``root`` and every process below it."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(entry.name))
    found, stack = [], [root]
    while stack:
        pid = stack.pop()
        found.append(pid)
        stack.extend(children.get(pid, []))
    return found


def cpu_seconds(pids: list[int]) -> float:
    """User + system time of ``pids``, with that of their waited-for children (a wrk run)."""
    total = 0
    for pid in pids:
        try:
            fields = (Path(f"/proc/{pid}/stat")).read_text().rsplit(")", 1)[1].split()
            total += sum(int(v) for v in fields[11:15])
        except OSError:
            continue
    return total / TICK


class CpuMeter:
    """CPU seconds the server's tree and the load generator's spend from now on."""

    def __init__(self, server_pid: int) -> None:
        self._server_pid = server_pid
        self._server_pids = tree(server_pid)
        self._server = cpu_seconds(self._server_pids)
        self._load = cpu_seconds(self._load_pids())
        self._started = time.monotonic()

    def _load_pids(self) -> list[int]:
        """This process and its children, less the server's tree (benchmarks spawn it)."""
        server = set(tree(self._server_pid))
        return [pid for pid in tree(os.getpid()) if pid not in server]

    def cost(self, requests: float) -> dict[str, float]:
        """Per 1,000 requests: the server's and the load's CPU seconds; req/s per server core
        used; the server's cores busy on average."""
        elapsed = time.monotonic() - self._started
        pids = sorted(set(self._server_pids) | set(tree(self._server_pid)))
        server = max(cpu_seconds(pids) - self._server, 1e-9)
        load = max(cpu_seconds(self._load_pids()) - self._load, 0.0)
        requests = max(requests, 1.0)
        return {
            "server_cpu_s_per_1k": round(server / requests * 1000, 3),
            "load_cpu_s_per_1k": round(load / requests * 1000, 3),
            "req_s_per_core": round(requests / server, 0),
            "server_cores": round(server / elapsed, 2),
        }
