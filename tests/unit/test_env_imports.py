"""scripts/env_imports.py, the check run inside each shipped environment: run as CI runs it (its
own interpreter with -I -S, the environment's directory alone on sys.path), on a small package
laid out as an image's task root."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHECK = ROOT / "scripts" / "env_imports.py"
ENTRY = 'from lambdaserve.routes import answer\n\n__all__ = ["handler"]\nhandler = answer\n'


def task_root(tmp_path: Path, routes: str) -> Path:
    package = tmp_path / "lambdaserve"
    (package / "queued").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "queued" / "__init__.py").write_text("")
    (package / "queued" / "forward.py").write_text(
        "def forward():\n    import not_shipped_client\n    return not_shipped_client\n"
    )
    (package / "routes.py").write_text(routes)
    (tmp_path / "app.py").write_text(ENTRY)
    return tmp_path


def check(root: Path, optional: dict[str, str] | None = None) -> tuple[int, dict]:
    spec = {"paths": [str(root)], "entries": [str(root / "app.py")], "optional": optional or {}}
    done = subprocess.run(
        [sys.executable, "-I", "-S", str(CHECK), json.dumps(spec)],
        capture_output=True,
        text=True,
        check=False,
        cwd=root,
        timeout=120,
    )
    return done.returncode, json.loads(done.stdout.strip().splitlines()[-1])


def test_a_function_body_import_of_an_uninstalled_module_fails_naming_module_and_importer(
    tmp_path: Path,
):
    # Given an entry point that imports fine, but reaches (through a relative import) a module
    # whose function body imports a package this environment lacks, as httpx was in server mode
    root = task_root(
        tmp_path,
        "from .queued import forward\n\ndef answer(event, context):\n"
        "    return forward.forward()\n",
    )
    # When the check runs with only that directory importable
    status, answer = check(root)
    # Then the entry imported, and the check fails naming the module and where it is imported
    assert status == 1
    assert answer["imported"] == [f"{root / 'app.py'} (handler)"]
    assert answer["missing"] == [
        "not_shipped_client is not installed here; imported by lambdaserve.queued.forward:2"
    ]


def test_an_optional_runtime_passes_only_where_the_package_names_its_install(tmp_path: Path):
    # Given the same package, the missing module declared an optional runtime
    routes = "def answer(event, context):\n    from lambdaserve.queued import forward\n"
    root = task_root(tmp_path, routes)
    optional = {"not_shipped_client": "pip install lambdaserve[client]"}
    # When the package never says how to install it, the check still fails (a bare ImportError)
    status, answer = check(root, optional)
    assert status == 1
    assert "never tells the user" in answer["missing"][0]
    # When the package says so where it reports the absence, it passes, listed as absent
    (root / "lambdaserve" / "routes.py").write_text(
        routes + '\nHINT = "pip install lambdaserve[client]"\n'
    )
    status, answer = check(root, optional)
    assert (status, answer["missing"]) == (0, [])
    assert answer["optional_absent"] == ["not_shipped_client"]


def test_type_checking_imports_and_the_standard_library_are_not_requirements(tmp_path: Path):
    # Given imports only a type checker runs, and standard-library ones in function bodies
    routes = (
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import not_shipped_types\n"
        "def answer(event, context):\n    import json, http.client\n    return json\n"
    )
    root = task_root(tmp_path, routes)
    (root / "lambdaserve" / "queued" / "forward.py").write_text("")
    # When the check runs, Then nothing is missing
    status, answer = check(root)
    assert (status, answer["missing"]) == (0, [])


def test_an_entry_that_fails_to_import_is_reported_with_its_error(tmp_path: Path):
    # Given an entry point whose package raises at import (a module-level import gone missing)
    root = task_root(tmp_path, "import not_shipped_at_import\n")
    # When the check runs, Then it fails with the import error and the static finding both
    status, answer = check(root)
    assert status == 1
    assert "No module named 'not_shipped_at_import'" in answer["missing"][0]
    assert "imported by lambdaserve.routes:1" in answer["missing"][1]
