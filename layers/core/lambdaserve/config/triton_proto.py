"""Triton's model-config messages: tritonclient's generated ``model_config_pb2``, loaded
without running ``tritonclient.grpc``'s package ``__init__``, which imports grpc and asyncio
(about 55 ms of a Lambda cold start, measured by ``scripts/bench_cold.py``) for a module that
needs only protobuf. Registered under its own name, so a later ``import tritonclient.grpc``
reuses it (one descriptor in protobuf's pool)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

_NAME = "tritonclient.grpc.model_config_pb2"


def model_config_pb2() -> ModuleType:
    loaded = sys.modules.get(_NAME)
    if loaded is not None:
        return loaded
    package = importlib.util.find_spec("tritonclient")
    if package is None or not package.submodule_search_locations:
        raise ImportError("tritonclient is not installed: pip install 'tritonclient[grpc]'")
    path = Path(next(iter(package.submodule_search_locations))) / "grpc" / "model_config_pb2.py"
    spec = importlib.util.spec_from_file_location(_NAME, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load Triton's model config messages from {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[_NAME] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[_NAME]
        raise
    return module


pb: ModuleType = model_config_pb2()
