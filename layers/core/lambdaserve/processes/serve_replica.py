"""One replica (serving process) of ``serve --workers N``, started by
``processes.supervisor``: the serving app, as ``serve`` builds it, on a SO_REUSEPORT socket
of its own.

``python -m lambdaserve.processes.serve_replica``; the supervisor's environment says what to
serve (``processes.serve``'s ``LAMBDASERVE_SERVE_*`` and ``processes.siblings``' variables).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

from lambdaserve.processes.replica_contract import (
    HTTP_ENV,
    PARENT_ENV,
    reuseport_socket,
)

_PR_SET_PDEATHSIG = 1


def _die_with_the_supervisor() -> None:
    # a supervisor killed outright (SIGKILL, OOM) cannot forward SIGTERM: the kernel does,
    # so the replicas drain and exit rather than hold the ports without a parent
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != int(os.environ[PARENT_ENV]):  # it died before the line above
        sys.exit(1)


def main() -> None:
    import uvicorn

    from lambdaserve.processes.serve import serving_app_from_env, uvicorn_options

    _die_with_the_supervisor()
    host, port = os.environ[HTTP_ENV].rsplit(":", 1)
    sock = reuseport_socket(host, int(port))
    config = uvicorn.Config(serving_app_from_env(), **uvicorn_options(host, int(port)))
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
