"""The package's import graph in numbers: modules, arrows, circles, arrows that run up.

Read from the code by grimp (the graph import-linter checks), every import counted: those
inside functions and under ``TYPE_CHECKING`` too, since they tie the files as much as any.

- top-level modules: files in ``lambdaserve/`` itself (the package face, settings, errors
  and the CLI belong there; everything else lives in a room);
- circles: groups of modules that import each other in a loop (strongly connected parts);
- arrows up: imports that run from a lower room to a higher one in the layers declared in
  ``pyproject.toml`` (``[tool.importlinter]``), and imports inside a circle (whichever way
  its files are stacked, one of them runs up).

    python scripts/import_graph.py [--json PATH] [--check]

``--check`` exits 1 when there is a circle or an arrow up (``make lint`` runs it).
"""

from __future__ import annotations

import argparse
import json
import sys
import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import grimp

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "lambdaserve"


def circles(graph: Any, modules: Iterable[str]) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one module (or a self-import)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(start: str) -> None:
        nonlocal counter
        work = [(start, iter(sorted(graph.find_modules_directly_imported_by(start))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append(
                        (child, iter(sorted(graph.find_modules_directly_imported_by(child))))
                    )
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                part = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    part.append(member)
                    if member == node:
                        break
                if len(part) > 1 or node in graph.find_modules_directly_imported_by(node):
                    found.append(sorted(part))

    for module in sorted(modules):
        if module not in index:
            visit(module)
    return found


def declared_layers() -> list[list[str]]:
    """The room layers of the import-linter contract named "rooms", top first."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    for contract in config.get("tool", {}).get("importlinter", {}).get("contracts", []):
        if contract.get("type") == "layers":
            return [[part.strip() for part in layer.split("|")] for layer in contract["layers"]]
    return []


def room_of(module: str, layers: list[list[str]]) -> int | None:
    for level, names in enumerate(layers):
        for name in names:
            if module == name or module.startswith(name + "."):
                return level
    return None


def measure() -> dict[str, Any]:
    graph = grimp.build_graph(PACKAGE, include_external_packages=False)
    modules = sorted(m for m in graph.modules if m.startswith(PACKAGE))
    arrows = [
        (importer, imported)
        for importer in modules
        for imported in sorted(graph.find_modules_directly_imported_by(importer))
        if imported.startswith(PACKAGE)
    ]
    found = circles(graph, modules)
    in_circle = {m: i for i, part in enumerate(found) for m in part}
    layers = declared_layers()
    up = []
    for importer, imported in arrows:
        if importer in in_circle and in_circle.get(imported) == in_circle[importer]:
            up.append((importer, imported, "circle"))
            continue
        below, above = room_of(importer, layers), room_of(imported, layers)
        # a lower index is a higher layer: importing one is an arrow up
        if below is not None and above is not None and above < below:
            up.append((importer, imported, "layers"))
    top_level = [
        m for m in modules if m.count(".") == 1 and not graph.find_children(m) and m != PACKAGE
    ]
    return {
        "modules": len(modules),
        "top_level_modules": top_level,
        "arrows": len(arrows),
        "circles": found,
        "arrows_up": [{"from": a, "to": b, "why": why} for a, b, why in up],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write the measurements here")
    parser.add_argument("--check", action="store_true", help="exit 1 on a circle or arrow up")
    args = parser.parse_args()
    result = measure()
    print(
        f"{result['modules']} modules, {len(result['top_level_modules'])} top-level "
        f"({', '.join(m.split('.')[-1] for m in result['top_level_modules'])}), "
        f"{result['arrows']} import arrows, {len(result['circles'])} circles, "
        f"{len(result['arrows_up'])} arrows up"
    )
    for number, part in enumerate(result["circles"], 1):
        print(f"  circle {number}: {', '.join(part)}")
    for arrow in result["arrows_up"]:
        print(f"  up ({arrow['why']}): {arrow['from']} -> {arrow['to']}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 1 if args.check and (result["circles"] or result["arrows_up"]) else 0


if __name__ == "__main__":
    sys.exit(main())
