"""Every module the code, docs and project file name exists: a move or rename cannot leave
a stale name behind (dotted names such as ``lambdaserve.serving.data_plane`` anywhere, and
room paths such as ``runtimes/torchserve/handler.py`` in the docs). The signs check
themselves too: the short names (``serving.data_plane``) in the package's docstrings and
comments and in docs/architecture.md resolve, every module is in the architecture's module
map and nothing gone is, and each room's ``__init__`` docstring names exactly its modules."""

from __future__ import annotations

import ast
import functools
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "layers" / "core" / "lambdaserve"
ROOMS = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists())
DOTTED = re.compile(r"(?<![\w.])lambdaserve(?:\.[a-z_][a-z0-9_]*)+")
# logger names under the package's logger, not modules
LOGGERS = {"lambdaserve.access", "lambdaserve.python_model", "lambdaserve.model_code"}
ROOM_PATH = re.compile(r"(?<![\w/.])((?:" + "|".join(ROOMS) + r")/[\w/]+\.py)")


def _texts() -> list[Path]:
    files = [*PACKAGE.rglob("*.py"), *(ROOT / "docs").glob("*.md"), ROOT / "README.md"]
    files += [ROOT / "pyproject.toml", ROOT / "Makefile", ROOT / "template.yaml"]
    files += [*(ROOT / "scripts").rglob("*.py"), *(ROOT / "functions").rglob("*")]
    return [f for f in files if f.is_file() and "protos" not in f.parts]


def _resolves(name: str) -> bool:
    """The longest prefix that is a module or package, and the rest defined in its source."""
    parts = name.split(".")[1:]
    for cut in range(len(parts), -1, -1):
        base = PACKAGE.joinpath(*parts[:cut])
        source = base.with_suffix(".py") if cut else PACKAGE / "__init__.py"
        if (base / "__init__.py").exists() and cut:
            source = base / "__init__.py"
        elif not source.exists():
            continue
        rest = parts[cut:]
        if not rest:
            return True
        return re.search(
            rf"\b(def|class)\s+{rest[0]}\b|^{rest[0]}\s*[:=]", source.read_text(), re.M
        ) is not None or ((base / rest[0]).with_suffix(".py").exists())
    return False


def test_every_dotted_module_name_exists():
    # Given every file that names lambdaserve's modules / When each name is looked up
    stale = sorted(
        f"{path.relative_to(ROOT)}: {name}"
        for path in _texts()
        for name in set(DOTTED.findall(path.read_text(errors="ignore")))
        if name not in LOGGERS and not _resolves(name.rstrip("."))
    )
    # Then each one resolves to a module (and the attribute after it, where one is named)
    assert not stale, "\n".join(stale)


@pytest.mark.parametrize("page", [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"])
def test_every_module_path_a_page_names_exists(page: Path):
    missing = sorted(
        p for p in set(ROOM_PATH.findall(page.read_text())) if not (PACKAGE / p).exists()
    )
    assert not missing, f"{page.name} names modules that do not exist: {missing}"


# --- short names: ``room.module`` in docstrings, comments and the architecture page ---------

ARCHITECTURE = ROOT / "docs" / "architecture.md"
TOP_MODULES = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__")
SHORT = re.compile(r"(?<![\w./-])(?:" + "|".join(ROOMS) + r")(?:\.[A-Za-z_]\w*)+")
# a room's name before a file suffix names a file, not a module: ``config.pbtxt``
FILE_SUFFIXES = {"pbtxt", "json", "yml", "yaml", "txt", "py", "md", "toml", "proto"}
# short names that read as a room's module but are not one, each with why
NOT_MODULES = {
    # processes/event_pump.py: the pump's PumpConfig field, not the config room
    "config.concurrency",
}


def _is_module_name(name: str) -> bool:
    return name.split(".")[1] not in FILE_SUFFIXES and name not in NOT_MODULES


@functools.cache
def _notes(path: Path) -> tuple[tuple[int, str], ...]:
    """A module's docstrings and comments, each with the line it starts on."""
    source = path.read_text()
    notes = [
        (token.start[0], token.string)
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type == tokenize.COMMENT
    ]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            docstring = ast.get_docstring(node, clean=False)
            if docstring:
                notes.append((getattr(node, "lineno", 1), docstring))
    return tuple(notes)


def _package_sources() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "protos" not in p.parts)


def test_every_short_module_name_in_a_docstring_or_comment_exists():
    # Given every docstring and comment in the package / When each ``room.module`` is looked up
    stale = sorted(
        f"{path.relative_to(ROOT)}:{line}: {name}"
        for path in _package_sources()
        for line, note in _notes(path)
        for name in set(SHORT.findall(note))
        if _is_module_name(name) and not _resolves(f"lambdaserve.{name}")
    )
    # Then each one resolves, as lambdaserve.room.module would
    assert not stale, "stale module names (write the module's name now):\n" + "\n".join(stale)


def test_every_module_path_a_module_names_exists():
    missing = sorted(
        f"{path.relative_to(ROOT)}: {name}"
        for path in _package_sources()
        for name in set(ROOM_PATH.findall(path.read_text()))
        if not (PACKAGE / name).exists()
    )
    assert not missing, "modules named that do not exist:\n" + "\n".join(missing)


def test_every_short_module_name_on_the_architecture_page_exists():
    stale = sorted(
        name
        for name in set(SHORT.findall(ARCHITECTURE.read_text()))
        if _is_module_name(name) and not _resolves(f"lambdaserve.{name}")
    )
    assert not stale, f"docs/architecture.md names modules that do not exist: {stale}"


# --- the module map: docs/architecture.md's list of every room's modules -------------------

MAP_FILE = re.compile(r"(?<![\w.])((?:\w+/)*)(\w+\.py)\b")
# file names in the map that are not the package's modules, each with why
NOT_PACKAGE_FILES = {
    "web_service.py",  # a Paddle Serving pipeline's own file, in the user's version
}


@functools.cache
def _module_map() -> dict[str, str]:
    """The module map's text by room ("" for the package's top-level lines): the code block
    after "Their modules:", a room's part starting at its two-space-indented ``room/``."""
    block = ARCHITECTURE.read_text().split("Their modules:", 1)[1].split("```")[1]
    parts: dict[str, str] = {}
    room: str | None = None
    for line in block.splitlines():
        starts = re.match(r" {2}(\w+)/\s", line)
        if starts and starts.group(1) in ROOMS:
            room = starts.group(1)
        elif not line.startswith("    "):
            room = "" if line.startswith("  ") else None
        if room is not None:
            parts[room] = parts.get(room, "") + line + "\n"
    return parts


def _modules() -> list[Path]:
    """Every module and package of the package, relative to it (generated stubs left out)."""
    found = [p.relative_to(PACKAGE) for p in _package_sources() if p.name != "__init__.py"]
    found += [
        p.parent.relative_to(PACKAGE)
        for p in _package_sources()
        if p.name == "__init__.py" and len(p.relative_to(PACKAGE).parts) > 2
    ]
    return sorted(found)


def _in_map(module: Path) -> bool:
    """A room's module appears in its room's part of the map as ``name.py`` (or
    ``sub/name.py`` where it is in a subpackage named there); a package as ``name/``."""
    room, *inner = module.parts
    text = _module_map().get(room if inner else "", "")
    if not inner:
        return re.search(rf"(?<![\w./]){re.escape(room)}\b", text) is not None
    name = inner[-1] if module.suffix else inner[-1] + "/"
    parents = "".join(re.escape(p) + "/" for p in inner[:-1])
    bare = re.search(rf"(?<![\w./]){re.escape(name)}(?!\w)", text) is not None
    placed = re.search(rf"(?<![\w./]){parents}{re.escape(name)}(?!\w)", text) is not None
    return placed or (bare and all(f"{p}/" in text for p in inner[:-1]))


def test_every_module_appears_in_the_architecture_map():
    # Given every module and subpackage / When the map's part for its room is searched
    missing = sorted(str(m) for m in _modules() if not _in_map(m))
    # Then each one is named there
    assert not missing, "docs/architecture.md's module map lacks:\n" + "\n".join(missing)


def test_every_file_the_architecture_map_names_exists():
    gone = sorted(
        f"{room}/: {sub}{name}"
        for room, text in _module_map().items()
        for sub, name in set(MAP_FILE.findall(text))
        if name not in NOT_PACKAGE_FILES
        and not (
            (PACKAGE / room / sub / name).exists()
            or (not sub and any((PACKAGE / room).rglob(name)))
        )
    )
    assert not gone, "docs/architecture.md's module map names modules that do not exist:\n" + (
        "\n".join(gone)
    )


# --- each room's __init__ docstring: the room's own modules, exactly -----------------------

QUOTED = re.compile(r"``([a-z_][a-z0-9_]*)(?:\.[a-z_][a-z0-9_]*)*``")


@pytest.mark.parametrize("room", ROOMS)
def test_a_rooms_docstring_names_exactly_its_modules(room: str):
    # Given the room's modules and subpackages, and the names its docstring quotes
    own = {p.stem for p in (PACKAGE / room).glob("*.py") if p.stem != "__init__"}
    own |= {p.parent.name for p in (PACKAGE / room).glob("*/__init__.py")}
    docstring = ast.get_docstring(ast.parse((PACKAGE / room / "__init__.py").read_text())) or ""
    quoted = set(QUOTED.findall(docstring))
    # When the quoted names that are not other rooms (or the package's own modules) are taken
    named = {n for n in quoted if n in own or n not in {*ROOMS, *TOP_MODULES, "lambdaserve"}}
    # Then they are exactly the room's modules
    stale = [f"names modules it does not have: {sorted(named - own)}"] if named - own else []
    stale += [f"leaves out modules it has: {sorted(own - named)}"] if own - named else []
    assert not stale, f"{room}/__init__.py " + "; ".join(stale)


# --- each room's __init__ docstring: the rooms it imports ----------------------------------

# "Imports ...", "It imports ...", "...: imports only ..." up to the sentence's end or a ";"
IMPORTS = re.compile(r"(?:^|[.;:]\s+|\bIt\s+)[Ii]mports\s(.*?)(?:;|\.\s|\.$)", re.S)
# a sentence that names some rooms and then "and below" / "the domain rooms" claims no more
OPEN_ENDED = ("below", "every other", "domain rooms")


def _imported_rooms(room: str) -> set[str]:
    """The other rooms (and top-level modules) a room's modules import, lazy imports too."""
    found: set[str] = set()
    for path in (PACKAGE / room).rglob("*.py"):
        if "protos" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            found |= {n.split(".")[1] for n in names if n.startswith("lambdaserve.")}
    return found & {*ROOMS, *TOP_MODULES} - {room}


def _imports_sentence(room: str) -> str | None:
    docstring = ast.get_docstring(ast.parse((PACKAGE / room / "__init__.py").read_text())) or ""
    sentence = IMPORTS.search(docstring)
    return sentence.group(1) if sentence else None


# local ("it may import every other") and processes ("never imports handlers") say no more
@pytest.mark.parametrize("room", [room for room in ROOMS if _imports_sentence(room)])
def test_a_rooms_docstring_names_the_rooms_it_imports(room: str):
    # Given the sentence of the room's docstring that says what it imports
    sentence = _imports_sentence(room) or ""
    words = set(re.findall(r"\w+", sentence))
    named = words & {*ROOMS, *TOP_MODULES}
    # When the room's modules' imports are read
    imported = _imported_rooms(room)
    # Then the sentence names no room the room does not import, and, unless it ends "and
    # below", every room it does
    assert named <= imported, f"{room}/__init__.py: imports nothing of {sorted(named - imported)}"
    if not any(phrase in sentence for phrase in OPEN_ENDED):
        assert imported <= named, f"{room}/__init__.py: also imports {sorted(imported - named)}"
