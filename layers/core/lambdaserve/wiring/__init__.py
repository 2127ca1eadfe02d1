"""Wiring: the composition root (``process``: one ``Process`` per running process, built once
from ``Settings``) and the builders it uses: AWS clients (``aws``), the inference side alone
(``inference``, what a cold start imports), a long-running server's plane with its batchers
and readiness (``planes``), the manage side (``manage``), the queue side (``queues``), the
rollouts service (``rollouts``).

Imports ``apps``, ``forwarding`` and the domain rooms; handlers, processes, the local stack and
the CLI take their objects from it.
"""
