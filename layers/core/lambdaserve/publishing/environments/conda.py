"""Triton's ``EXECUTION_ENV_PATH``: a conda-pack tarball beside a Python model
(``$$TRITON_MODEL_DIRECTORY/env.tar.gz``) becomes the model's environment.

The tarball is untrusted input, read in the manage function as data (nothing in it runs):
only ``lib/python3.X/site-packages/`` is taken, as regular files and directories at relative
paths (no links, devices or ``..``), each no bigger than its header says, under a member
count, a decompression ratio and the environment size budget. Its Python must be the
image's; a package the image pins must be at the image's version, and is then left to the
image. The env's interpreter, ``bin/`` and its shared libraries (``lib/*.so``) are not
used: the image's Python runs the model, so an extension that links a library only the
conda env ships does not load.
"""

from __future__ import annotations

import re
import shutil
import tarfile
from pathlib import Path, PurePosixPath

from packaging.utils import canonicalize_name

from lambdaserve.config.model_config import ModelConfig
from lambdaserve.errors import ModelRejected
from lambdaserve.publishing.archives import MAX_RATIO, _relative
from lambdaserve.publishing.environments.requirements import Target

PARAMETER = "EXECUTION_ENV_PATH"
MODEL_DIRECTORY = "$$TRITON_MODEL_DIRECTORY/"
MAX_MEMBERS = 200_000
_SITE = re.compile(r"^(?:\./)?lib/python(\d+\.\d+)/site-packages/(.*)$")
_CHUNK = 1024**2


def execution_env_key(config: ModelConfig, models_prefix: str) -> str:
    """The bucket key ``EXECUTION_ENV_PATH`` names, or "" when the config sets none."""
    value = dict(config.parameters).get(PARAMETER, "")
    if not value:
        return ""
    if not value.startswith(MODEL_DIRECTORY) or not value.endswith((".tar.gz", ".tgz")):
        raise ModelRejected(
            f"{PARAMETER} {value!r}: name a conda-pack tarball beside the model, as "
            f"'{MODEL_DIRECTORY}env.tar.gz' (uploaded to {models_prefix}{config.name}/env.tar.gz)"
        )
    relative = value[len(MODEL_DIRECTORY) :]
    try:
        path = _relative(relative)
    except ModelRejected:
        raise ModelRejected(f"{PARAMETER} {value!r} points outside the model directory") from None
    return f"{models_prefix}{config.name}/{path}"


def site_packages_of(tarball: Path, name: str, target: Target, into: Path, max_bytes: int) -> int:
    """Unpack the tarball's site-packages into ``into`` (checked); the bytes unpacked."""
    packed = tarball.stat().st_size
    total = count = 0
    try:
        with tarfile.open(tarball, "r:*") as archive:
            for member in archive:
                count += 1
                if count > MAX_MEMBERS:
                    raise ModelRejected(f"{name} holds more than {MAX_MEMBERS} entries")
                match = _SITE.match(member.name)
                if not match or not match.group(2):
                    continue  # the interpreter, bin/, lib/*.so: not used here
                if match.group(1) != target.python_version:
                    raise ModelRejected(
                        f"{name} is an environment for Python {match.group(1)}; the serving "
                        f"image runs Python {target.python_version}: build it with "
                        f"python={target.python_version}"
                    )
                path = _relative(match.group(2))
                if member.isdir():
                    continue
                if not member.isreg():
                    raise ModelRejected(
                        f"{name}: site-packages/{path} is a link or special file; "
                        "environments may hold regular files only"
                    )
                total += member.size
                if total > max_bytes:
                    raise ModelRejected(
                        f"{name}: its site-packages unpack to over {max_bytes / 1024**2:.0f} MB, "
                        "the environment budget (LAMBDASERVE_ENV_MAX_BYTES)"
                    )
                if total > _CHUNK and total > MAX_RATIO * packed:
                    raise ModelRejected(f"{name} expands over {MAX_RATIO}x: refused as a bomb")
                _extract(archive, member, into / path, name)
    except tarfile.TarError as exc:
        raise ModelRejected(f"{name} is not a tar.gz (conda-pack's format): {exc}") from None
    if total == 0:
        raise ModelRejected(
            f"{name} holds no lib/python{target.python_version}/site-packages: pack the "
            "environment with conda-pack"
        )
    return total - _leave_image_packages(into, target, name)


def _extract(archive: tarfile.TarFile, member: tarfile.TarInfo, target: Path, name: str) -> None:
    source = archive.extractfile(member)
    if source is None:
        raise ModelRejected(f"{name}: {member.name!r} cannot be read")
    target.parent.mkdir(parents=True, exist_ok=True)
    written = 0
    with source, open(target, "wb") as out:
        while chunk := source.read(_CHUNK):
            written += len(chunk)
            if written > member.size:
                raise ModelRejected(f"{name}: {member.name!r} holds more than it declares")
            out.write(chunk)


def _leave_image_packages(site: Path, target: Target, name: str) -> int:
    """Packages the image pins: the same version is the image's to serve (removed here);
    another version is refused. The bytes removed."""
    pinned = target.pinned()
    removed = 0
    for metadata in sorted(site.glob("*.dist-info/METADATA")):
        fields = dict(
            line.split(": ", 1)
            for line in metadata.read_text(errors="replace").splitlines()
            if ": " in line and not line.startswith(" ")
        )
        package = canonicalize_name(fields.get("Name", ""))
        if package not in pinned:
            continue
        if fields.get("Version") != pinned[package]:
            raise ModelRejected(
                f"{name} has {package} {fields.get('Version')}; the serving image pins "
                f"{package} {pinned[package]}, which a model cannot replace: build the "
                f"environment with {package}=={pinned[package]}, or leave it out"
            )
        record = metadata.parent / "RECORD"
        paths = (
            [line.split(",", 1)[0] for line in record.read_text().splitlines()]
            if (record.is_file())
            else []
        )
        emptied: set[Path] = set()
        for relative in paths:
            file = (site / PurePosixPath(relative)).resolve()
            if file.is_relative_to(site.resolve()) and file.is_file():
                removed += file.stat().st_size
                file.unlink()
                emptied.add(file.parent)
        for emptied_folder in sorted(emptied, key=lambda p: -len(p.parts)):
            folder = emptied_folder
            while folder != site.resolve() and folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
                folder = folder.parent
        if metadata.parent.is_dir():
            removed += sum(p.stat().st_size for p in metadata.parent.rglob("*") if p.is_file())
            shutil.rmtree(metadata.parent, ignore_errors=True)
    return removed
