"""Every module the code, docs and project file name exists: a move or rename cannot leave
a stale name behind (dotted names such as ``lambdaserve.serving.data_plane`` anywhere, and
room paths such as ``runtimes/torchserve/handler.py`` in the docs)."""

from __future__ import annotations

import re
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
