"""The pipes between models keep their shape: ``pb_utils``' internals are
``runtimes.triton_python``'s own, models reach other models only through the one port
(``runtimes.model_calls``), and the worker protocol's messages are written in
``workers.messages`` alone. (import-linter checks who imports ``pb_utils``; it cannot see a
private name read through an import, so this test reads the source.)"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "layers" / "core" / "lambdaserve"
TRITON_PYTHON = PACKAGE / "runtimes" / "triton_python"
PRIVATE_PB_UTILS = re.compile(r"\bpb_utils\._\w+")
# the protocol's op key, its kinds' key and its replies' keys, as string literals
PROTOCOL_WORD = re.compile(
    r"""(get\(\s*["'](op|kind|results|responses|answers|retire|batching)["'])"""
    r"""|(["'](op|kind|results|responses|answers|retire|batching)["']\s*[:\]])"""
)
WORKERS = PACKAGE / "workers"


def _sources(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.py") if "protos" not in p.parts)


def test_nothing_outside_triton_python_touches_pb_utils_private_names():
    # Given every module of the package outside runtimes/triton_python, and the scripts
    outside = [p for p in _sources(PACKAGE) if TRITON_PYTHON not in p.parents]
    outside += _sources(ROOT / "scripts")
    # When their source is read for pb_utils._<name>
    found = [
        f"{p.relative_to(ROOT)}: {m.group(0)}"
        for p in outside
        for m in PRIVATE_PB_UTILS.finditer(p.read_text())
    ]
    # Then there is none: BLS reaches other models through runtimes.model_calls
    assert found == []


def test_one_installer_for_model_to_model_calls():
    # Given the runtimes that call other models (pb_utils, ensembles, workflows)
    runtimes = PACKAGE / "runtimes"
    # When their source is read for registries of their own
    installers = [
        str(p.relative_to(ROOT))
        for p in _sources(runtimes)
        if re.search(r"^def install\(", p.read_text(), re.MULTILINE)
    ]
    # Then the port's install is the only one
    assert installers == ["layers/core/lambdaserve/runtimes/model_calls.py"]


def test_the_worker_protocols_messages_are_written_in_one_module():
    # Given every module of the package
    # When their source is read for the protocol's keys
    writers = [
        str(p.relative_to(PACKAGE))
        for p in _sources(PACKAGE)
        if p.is_relative_to(WORKERS) and PROTOCOL_WORD.search(p.read_text())
    ]
    writers += [
        str(p.relative_to(PACKAGE))
        for p in _sources(PACKAGE)
        if not p.is_relative_to(WORKERS) and re.search(r"""["']op["']\s*:""", p.read_text())
    ]
    # Then only workers/messages.py names them
    assert writers == ["workers/messages.py"]
