"""uvicorn servers in background threads, stoppable without signals."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import uvicorn
from starlette.types import ASGIApp

from lambdaserve.metrics.stats import StatsRegistry
from lambdaserve.processes.asgi.access_log import AccessLog
from lambdaserve.processes.asgi.metrics_api import ResponseCounts, metrics_api_app
from lambdaserve.processes.asgi.slow_clients import KEEP_ALIVE_S, BodyTimeout, HeaderTimeoutHttp
from lambdaserve.settings import get_settings


class BackgroundServer:
    """Serve one ASGI app with uvicorn in a daemon thread."""

    def __init__(
        self,
        app: ASGIApp,
        host: str,
        port: int,
        log_level: str = "warning",
        access_log: bool = False,
    ) -> None:
        self.host = host
        self.port = port
        served: ASGIApp = BodyTimeout(app, get_settings().client_timeout_s)
        if access_log:
            served = AccessLog(served)
        self._server = uvicorn.Server(
            uvicorn.Config(
                served,
                host=host,
                port=port,
                log_level=log_level,
                access_log=False,
                http=HeaderTimeoutHttp,
                timeout_keep_alive=KEEP_ALIVE_S,
                log_config=None,
            )
        )
        self._thread = threading.Thread(
            target=self._server.run, name=f"uvicorn-{port}", daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout_s: float = 10.0) -> BackgroundServer:
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"uvicorn did not start on {self.url}")
            time.sleep(0.02)
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        self._server.should_exit = True
        self._thread.join(timeout_s)


def start_metrics_api(
    host: str, port: int, stats: Callable[[], StatsRegistry]
) -> tuple[BackgroundServer, ResponseCounts]:
    """TorchServe's metrics API on ``port`` (its disk gauges for the model cache's disk), and
    the counts it reports: wrap the apps it counts with ``counts.watch``."""
    responses = ResponseCounts()
    app = metrics_api_app(stats, responses, get_settings().work_dir)
    return BackgroundServer(app, host, port).start(), responses


def start_management_api(host: str, port: int, access_log: bool = False) -> BackgroundServer:
    """The management API on ``port`` (``serve --management-port``): the app ``make dev``
    serves on 8081, over this process's model server, so TorchServe's describe lists its
    workers and ``PUT /models/{m}?min_worker=`` scales them."""
    from lambdaserve.wiring.process import current

    app = current().management_app
    return BackgroundServer(app, host, port, access_log=access_log).start()
