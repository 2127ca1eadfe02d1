"""A model version's requirements file, read as untrusted input (at publish, in the manage
function): TorchServe's ``--requirements-file`` (named by the manifest's
``model.requirementsFile``), or ``requirements.txt`` beside model code.

Only named requirements pass (``name[extras] specifier ; marker``): no URLs, paths, editable
installs, nested files or pip options (an index of its own, ``--trusted-host``), since each
would reach outside the index the deployment chose or run a build. A requirement that names
a package the serving image pins and excludes the image's version is refused here, before
anything is resolved: the image's numpy, torch and runtimes are never replaced.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import orjson
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from lambdaserve.config.model_files import CODE_FILES, MANIFEST_FILE
from lambdaserve.errors import ModelRejected

REQUIREMENTS_FILE = "requirements.txt"
MAX_REQUIREMENTS_BYTES = 64 * 1024
MAX_REQUIREMENTS = 200
FORMAT = 1  # bump when the layout of a built environment changes: identical inputs rebuild


@dataclass(frozen=True)
class Requirements:
    """Validated, normalized requirement lines (sorted, one per distribution spec)."""

    lines: tuple[str, ...]
    source: str  # the file they came from, for reasons: "requirements.txt"

    def text(self) -> str:
        return "".join(f"{line}\n" for line in self.lines)


@dataclass(frozen=True)
class Target:
    """Where an environment runs: the serving image's Python, platform and pins."""

    python_version: str  # "3.11"
    platforms: tuple[str, ...]  # pip --platform tags, most specific first
    pins: tuple[tuple[str, str], ...]  # (canonical name, version) the image has installed

    def constraints(self) -> str:
        return "".join(f"{name}=={version}\n" for name, version in self.pins)

    def pinned(self) -> dict[str, str]:
        return dict(self.pins)


def requirements_of(root: Path, model_file: str) -> Requirements | None:
    """The requirements a version with code ships: its TorchServe manifest's
    ``model.requirementsFile``, else ``requirements.txt`` beside the code; None without."""
    if model_file not in CODE_FILES:
        return None
    name = REQUIREMENTS_FILE
    if model_file == MANIFEST_FILE:
        try:
            model = orjson.loads((root / MANIFEST_FILE).read_bytes()).get("model") or {}
            name = str(model.get("requirementsFile") or "") if isinstance(model, dict) else ""
        except (orjson.JSONDecodeError, AttributeError):
            return None  # the runtime's check of the manifest says what is wrong with it
        if not name:
            return None
    path = (root / name).resolve()
    if not path.is_relative_to(root.resolve()) or not path.is_file():
        if model_file == MANIFEST_FILE:
            raise ModelRejected(
                f"{MANIFEST_FILE} names requirementsFile {name!r}, which the archive does not "
                "hold; build it with torch-model-archiver --requirements-file"
            )
        return None
    return parse_requirements(path.read_bytes(), name)


def parse_requirements(text: bytes, source: str) -> Requirements:
    """The requirement lines of ``text``, or ModelRejected naming the line and why."""
    if len(text) > MAX_REQUIREMENTS_BYTES:
        raise ModelRejected(f"{source} is over {MAX_REQUIREMENTS_BYTES} bytes")
    try:
        decoded = text.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ModelRejected(f"{source} is not UTF-8 text") from None
    lines: set[str] = set()
    for number, line in _logical_lines(decoded):
        if line.startswith("-"):
            raise ModelRejected(
                f"{source} line {number}: {line.split()[0]!r} is not accepted: a requirements "
                "file lists packages by name only (the package index is the deployment's "
                "setting, LAMBDASERVE_PACKAGE_INDEX_URL; sources are never built)"
            )
        try:
            requirement = Requirement(line)
        except InvalidRequirement as exc:
            raise ModelRejected(
                f"{source} line {number}: {line!r} is not a requirement: {exc}"
            ) from None
        if requirement.url:
            raise ModelRejected(
                f"{source} line {number}: {requirement.name} @ {requirement.url} is refused: "
                "requirements are installed from the package index by name and version only"
            )
        lines.add(str(requirement))
    if len(lines) > MAX_REQUIREMENTS:
        raise ModelRejected(f"{source} lists more than {MAX_REQUIREMENTS} requirements")
    return Requirements(tuple(sorted(lines)), source)


def check_pins(requirements: Requirements, target: Target) -> None:
    """A requirement on a package the image pins must allow the image's version."""
    pinned = target.pinned()
    for line in requirements.lines:
        requirement = Requirement(line)
        name = canonicalize_name(requirement.name)
        if not applies(requirement, target):
            continue
        if name in pinned and not requirement.specifier.contains(pinned[name], prereleases=True):
            raise ModelRejected(
                f"{requirements.source}: {line} conflicts with the serving image's "
                f"{name} {pinned[name]}: the packages the image pins (numpy, torch, the "
                "runtimes, lambdaserve's own) cannot be replaced by a model; require a range "
                f"that includes {pinned[name]}, or leave {name} out"
            )


def applies(requirement: Requirement, target: Target) -> bool:
    """Whether a requirement's marker (``; python_version < "3.12"``) holds where it serves."""
    if requirement.marker is None:
        return True
    version = target.python_version
    return requirement.marker.evaluate(
        {"python_version": version, "python_full_version": f"{version}.0"}
    )


def beyond_image(requirements: Requirements, target: Target) -> Requirements:
    """The requirements the image does not already satisfy (``check_pins`` passed: a
    requirement naming an image package allows the image's version, which serves it)."""
    pinned = target.pinned()
    return Requirements(
        tuple(
            line
            for line in requirements.lines
            if canonicalize_name(Requirement(line).name) not in pinned
        ),
        requirements.source,
    )


def environment_digest(requirements: Requirements, target: Target, index: str) -> str:
    """Identical requirements for the same image and index build once."""
    document = {
        "format": FORMAT,
        "requirements": list(requirements.lines),
        "python": target.python_version,
        "platforms": list(target.platforms),
        "pins": [list(pin) for pin in target.pins],
        "index": index,
    }
    return hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()


def image_target(python_version: str = "", platforms: tuple[str, ...] = ()) -> Target:
    """The target of the image this process runs in: its Python, its platform tags and
    every distribution installed in it (so nothing a model installs shadows one)."""
    import sys

    from packaging.tags import platform_tags

    version = python_version or f"{sys.version_info.major}.{sys.version_info.minor}"
    pins = {}
    for distribution in metadata.distributions():
        name = distribution.metadata["Name"]
        if name:
            pins[canonicalize_name(name)] = distribution.version
    # manylinux tags only: a plain linux_x86_64 wheel was built for one machine, not an image
    tags = platforms or tuple(tag for tag in platform_tags() if tag.startswith("manylinux"))
    return Target(version, tags, tuple(sorted(pins.items())))


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """Lines without comments, backslash continuations joined, blank ones left out."""
    result: list[tuple[int, str]] = []
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split(" #", 1)[0].strip() if not raw.lstrip().startswith("#") else ""
        if not pending:
            start = number
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = (pending + line).strip()
        pending = ""
        if line:
            result.append((start, line))
    if pending.strip():
        result.append((start, pending.strip()))
    return result
