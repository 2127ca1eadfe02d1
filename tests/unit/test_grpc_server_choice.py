"""serve's gRPC server is chosen by LAMBDASERVE_GRPC_SERVER (serve --grpc-server): pygrpc-
native's by default, grpcio's when asked, and a name it does not know refused saying which."""

from __future__ import annotations

import asyncio

import grpc
import pygrpc_native.aio
import pytest

from lambdaserve.apps.grpc.server import new_server
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
