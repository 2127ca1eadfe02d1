"""Run INSIDE a shipped environment (its own interpreter, no test venv): imports each entry point,
then checks statically that every third-party module reachable from them is installed here.

    python -I [-S] scripts/env_imports.py SPEC_JSON

SPEC_JSON: {"paths": [dirs put first on sys.path, as Lambda's task root and layer are],
"entries": [files or "module:NAME"], "optional": {module: install hint}}. Standard library only:
this file runs where nothing but the environment under test is importable.

Reachable means: the entry files' imports, then every lambdaserve module they import, at module
level and inside function bodies alike (a function-body import fails at request time, which is
how httpx in forwarding/forwarder.py answered 500 to every request), `if TYPE_CHECKING:` left out.
A missing module is allowed only when it is an optional runtime in ``optional`` AND the package
says how to install it (its hint appears in the package's source); otherwise the check fails,
naming the module and each importer. Prints one JSON line: {"imported": [...], "missing": [...]}.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import sys
import traceback
from pathlib import Path

PACKAGE = "lambdaserve"


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_of(source: str, module: str, is_package: bool) -> list[tuple[str, list[str], int]]:
    """(imported module, names from it, line) for each import in ``source``, nested ones too."""
    found: list[tuple[str, list[str], int]] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.extend((alias.name, [], node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            names = [alias.name for alias in node.names]
            if node.level:  # relative: resolved against this module's package
                parts = module.split(".")
                base = parts if is_package else parts[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            found.append((target, names, node.lineno))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(source))
    return found


class Walk:
    """The lambdaserve modules reachable from the entries, and the third-party imports in them."""

    def __init__(self, root: Path) -> None:
        self.root = root  # the directory holding the lambdaserve package
        self.seen: set[str] = set()
        self.third_party: dict[str, list[str]] = {}  # dotted module -> ["importer:line", ...]

    def file_of(self, module: str) -> tuple[Path, bool] | None:
        base = self.root.joinpath(*module.split("."))
        if (base / "__init__.py").is_file():
            return base / "__init__.py", True
        if base.with_suffix(".py").is_file():
            return base.with_suffix(".py"), False
        return None

    def source(self, name: str, source: str, is_package: bool) -> None:
        for target, names, line in imports_of(source, name, is_package):
            top = target.split(".")[0]
            if top == PACKAGE:
                self.module(target)
                for item in names:  # `from lambdaserve.<room> import y`: y may be a module
                    if self.file_of(f"{target}.{item}") is not None:
                        self.module(f"{target}.{item}")
            elif top and top not in sys.stdlib_module_names and top != "__future__":
                self.third_party.setdefault(target, []).append(f"{name}:{line}")

    def module(self, name: str) -> None:
        parts = name.split(".")
        for depth in range(1, len(parts) + 1):  # importing a.b.c runs a and a.b first
            dotted = ".".join(parts[:depth])
            if dotted in self.seen:
                continue
            self.seen.add(dotted)
            found = self.file_of(dotted)
            if found is not None:
                path, is_package = found
                self.source(dotted, path.read_text(encoding="utf-8"), is_package)


def installed(module: str) -> bool:
    """Whether ``module`` can be found here; a namespace package's first subpackage too."""
    parts = module.split(".")
    try:
        spec = importlib.util.find_spec(parts[0])
        if spec is None:
            return False
        if spec.origin in (None, "namespace") and len(parts) > 1:
            return importlib.util.find_spec(".".join(parts[:2])) is not None
    except (ImportError, ValueError):
        return False
    return True


def import_entry(entry: str) -> str:
    if entry.startswith("module:"):
        name = entry.removeprefix("module:")
        importlib.import_module(name)
        return name
    path = Path(entry)
    name = f"entry_{path.parent.name}_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    handlers = [n for n in getattr(module, "__all__", []) if n.endswith("handler")]
    not_callable = [n for n in handlers if not callable(getattr(module, n, None))]
    if not handlers or not_callable:
        raise AssertionError(f"{entry}: handlers {handlers} (not callable: {not_callable})")
    return f"{entry} ({', '.join(handlers)})"


def main() -> int:
    spec = json.loads(sys.argv[1])
    sys.path[:0] = spec["paths"]
    optional: dict[str, str] = spec["optional"]
    package_spec = importlib.util.find_spec(PACKAGE)
    if package_spec is None or not package_spec.submodule_search_locations:
        print(json.dumps({"imported": [], "missing": [f"{PACKAGE} itself is not installed"]}))
        return 1
    root = Path(next(iter(package_spec.submodule_search_locations))).parent
    walk = Walk(root)
    imported, missing, optional_absent = [], [], []
    for entry in spec["entries"]:
        if entry.startswith("module:"):
            walk.module(entry.removeprefix("module:"))
        else:
            text = Path(entry).read_text(encoding="utf-8")
            walk.source(f"entry:{Path(entry).parent.name}/app", text, False)
        try:
            imported.append(import_entry(entry))
        except Exception:  # any failure is the finding: report it with its traceback
            missing.append(f"import of {entry} failed:\n{traceback.format_exc(limit=-3)}")
    package_text = "\n".join(p.read_text(encoding="utf-8") for p in root.rglob("*.py"))
    for module in sorted(walk.third_party):
        if installed(module):
            continue
        importers = ", ".join(sorted(set(walk.third_party[module])))
        hint = optional.get(module.split(".")[0])
        if hint is not None and hint in package_text:
            optional_absent.append(module)
        elif hint is None:
            missing.append(f"{module} is not installed here; imported by {importers}")
        else:
            missing.append(
                f"{module} (optional) is missing and the package never tells the user to "
                f"install it with {hint!r}; imported by {importers}"
            )
    answer = {"imported": imported, "missing": missing, "optional_absent": optional_absent}
    print(json.dumps({**answer, "modules": len(walk.seen)}))
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
