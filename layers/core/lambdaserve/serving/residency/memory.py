"""This process's memory as residency measures it: its resident set (what the OOM killer and
Lambda's memory limit count), and handing freed heap back so the next measurement sees it."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import gc
import importlib
import os
from collections.abc import Callable
from functools import cache

from lambdaserve.config import runtime_names as names

# The library each runtime imports inside its load: imported before a load is measured, so
# the first version of a runtime is not charged with the library every version shares.
RUNTIME_LIBRARIES = {
    names.TORCHSCRIPT_RUNTIME: "torch",
    names.OPENVINO_RUNTIME: "openvino",
    names.ONNX_RUNTIME: "onnxruntime",
    names.TENSORFLOW_RUNTIME: "tensorflow",
    names.PADDLE_INFERENCE_RUNTIME: "paddle.inference",
}


def process_resident_bytes() -> int:
    """This process's resident set size in bytes (``/proc/self/statm``); 0 where there is no
    /proc (macOS: residency then counts files and worker processes only)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            pages = int(statm.read().split()[1])
    except (OSError, ValueError, IndexError):
        return 0
    return pages * os.sysconf("SC_PAGE_SIZE")


def import_runtime_library(runtime: str) -> None:
    """Import the library ``runtime`` loads with (nothing when it is not installed: the load
    itself then says so)."""
    library = RUNTIME_LIBRARIES.get(runtime)
    if library is None:
        return
    with contextlib.suppress(Exception):  # the load that follows says what is missing
        importlib.import_module(library)


def release_freed_memory(*, collect: bool = True) -> None:
    """After versions left: collect their cycles (``collect``) and give glibc's freed heap
    back to the system (``malloc_trim``), so the memory is free for the next version and the
    next version's measurement is not hidden by reused heap."""
    if collect:
        gc.collect()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@cache
def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    try:
        trim: Callable[[int], int] = ctypes.CDLL(name).malloc_trim
        return trim if name else None
    except (OSError, AttributeError):  # not glibc (musl, macOS): no trim
        return None
