"""A local package index for the model-environment tests: wheels pip builds from throwaway
projects, and a source-only distribution (pip never builds it: wheels only)."""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

_PYPROJECT = """[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"
[project]
name = "{name}"
version = "{version}"
dependencies = {dependencies}
"""


def build_wheelhouse(root: Path) -> Path:
    """``root/wheels``: tinypkg 1.0 and 2.0 (``tinypkg.VERSION`` says which), needsold 1.0
    (requires ``numpy<2``), sdonly 1.0 as an sdist only, and winonly 1.0 as a Windows wheel
    only."""
    projects = []
    for name, version, dependencies in (
        ("tinypkg", "1.0", []),
        ("tinypkg", "2.0", []),
        ("needsold", "1.0", ["numpy<2"]),
    ):
        project = root / f"{name}-{version}"
        (project / name).mkdir(parents=True)
        (project / "pyproject.toml").write_text(
            _PYPROJECT.format(name=name, version=version, dependencies=dependencies)
        )
        (project / name / "__init__.py").write_text(f"VERSION = {version!r}\n")
        projects.append(str(project))
    wheels = root / "wheels"
    # two versions of one project cannot be built in one pip call
    for batch in (projects[1:], projects[:1]):
        _pip_wheel(wheels, batch)
    _sdist(wheels / "sdonly-1.0.tar.gz", "sdonly", "1.0")
    # a project whose only wheel is for another platform (pip judges by the file name)
    shutil.copyfile(
        wheels / "tinypkg-1.0-py3-none-any.whl", wheels / "winonly-1.0-cp311-cp311-win_amd64.whl"
    )
    return wheels


def _pip_wheel(wheels: Path, projects: list[str]) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--isolated",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--wheel-dir",
            str(wheels),
            *projects,
        ],
        check=True,
        capture_output=True,
    )


def _sdist(path: Path, name: str, version: str) -> None:
    """A source distribution as an index serves one (PKG-INFO and a setup.py)."""
    files = {
        "PKG-INFO": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        "setup.py": f"from setuptools import setup\nsetup(name={name!r}, version={version!r})\n",
    }
    with tarfile.open(path, "w:gz") as archive:
        for file_name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{name}-{version}/{file_name}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))


def conda_pack(
    path: Path,
    python: str,
    numpy: str,
    *,
    link_inside: bool = False,
) -> Path:
    """A tarball shaped as conda-pack writes one: bin/python a link, lib/ a shared library,
    and in lib/python<X.Y>/site-packages tinypkg 3.0 and numpy at version ``numpy``."""
    site = f"lib/python{python}/site-packages"
    files = {
        "lib/libexample.so": b"\x7fELF",
        f"{site}/tinypkg/__init__.py": b"VERSION = '3.0'\n",
        f"{site}/tinypkg-3.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: tinypkg\n"
        b"Version: 3.0\n",
        f"{site}/numpy/__init__.py": b"raise ImportError('the env numpy, not the image one')\n",
        f"{site}/numpy-{numpy}.dist-info/METADATA": (
            f"Metadata-Version: 2.1\nName: numpy\nVersion: {numpy}\n".encode()
        ),
        f"{site}/numpy-{numpy}.dist-info/RECORD": (
            f"numpy/__init__.py,,\nnumpy-{numpy}.dist-info/METADATA,,\n".encode()
        ),
    }
    with tarfile.open(path, "w:gz") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
        links = [("bin/python", f"python{python}")]
        if link_inside:
            links.append((f"{site}/escape", "/etc"))
        for name, target in links:
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            archive.addfile(info)
    return path
