"""serve's gRPC server is chosen by LAMBDASERVE_GRPC_SERVER (serve --grpc-server): pygrpc-
native's by default, grpcio's when asked, and a name it does not know refused saying which."""

from __future__ import annotations

import asyncio
import tempfile

import grpc
import pygrpc_native.aio
import pytest

from lambdaserve.apps.grpc.server import new_server, short_temp_dir
from lambdaserve.settings import Settings


def built(kind: str) -> object:
    async def build() -> object:
        return new_server(kind, [("grpc.so_reuseport", 0)])

    return asyncio.run(build())


def test_the_default_is_pygrpc_natives_server_and_grpcio_is_one_setting_away():
    # Given the settings of an environment that names no server
    default = Settings.from_env({}).grpc_server
    # When each choice builds its server
    # Then the default is pygrpc-native's, and grpcio's is there when asked
    assert isinstance(built(default), pygrpc_native.aio.Server)
    assert isinstance(
        built(Settings.from_env({"LAMBDASERVE_GRPC_SERVER": "grpcio"}).grpc_server), grpc.aio.Server
    )


def test_an_unknown_server_is_refused_naming_the_choices():
    with pytest.raises(ValueError, match="grpcio or native"):
        built("h2o")


def test_the_native_server_starts_under_a_temp_dir_too_long_for_its_socket(tmp_path, monkeypatch):
    # Given a temp dir too long to hold a Unix socket's path (a task's or a test's own)
    long_dir = tmp_path / ("d" * 90)
    long_dir.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(long_dir))
    echo = grpc.stream_stream_rpc_method_handler(lambda requests, context: requests)

    async def start_and_stop() -> None:
        server = new_server("native", [])
        # a bidirectional method: pygrpc-native serves it from a grpcio server on a socket
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("t.T", {"E": echo}),))
        server.add_insecure_port("127.0.0.1:0")
        # When it starts as serve starts it
        with short_temp_dir():
            await server.start()
        await server.stop(0)

    asyncio.run(start_and_stop())
    # Then it started, and the process's temp dir is as it was
    assert tempfile.tempdir == str(long_dir)
