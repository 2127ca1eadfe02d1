"""What ``serve``, the supervisor of ``serve --workers N`` and each of its replicas (serving
processes) agree on: the command line's options, the environment variables that tell a
replica what to serve, and the SO_REUSEPORT socket every replica binds. Below ``serve``,
``serve_replica`` and ``supervisor``, so none of them imports another's module for it."""

from __future__ import annotations

import socket
from dataclasses import dataclass

HTTP_ENV = "LAMBDASERVE_SERVE_HTTP"  # host:port
BATCHING_ENV = "LAMBDASERVE_SERVE_BATCHING"  # 1 or 0
LOGGING_ENV = "LAMBDASERVE_SERVE_LOGGING"  # level:access log (1 or 0)
GRPC_ENV = "LAMBDASERVE_SERVE_GRPC"  # host:port:management (1 or 0)
PARENT_ENV = "LAMBDASERVE_WORKERS_PARENT"  # the supervisor's pid


@dataclass(frozen=True)
class ServeOptions:
    """``lambdaserve serve``'s choices, for its one process or for its supervisor."""

    host: str
    port: int
    batching: bool = True
    log_level: str = "info"
    access_log: bool = False
    metrics_port: int | None = None  # TorchServe's metrics API beside it
    grpc_port: int = 0  # 0: off
    grpc_management: bool = False
    management_port: int | None = None  # TorchServe's management API beside it


def reuseport_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` that other processes may bind too."""
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(address)
    return sock
