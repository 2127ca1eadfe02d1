"""Build one model environment from its requirements, in the sandbox (a child process with
no credentials, or the code-validator function): wheels only, for the serving image's
Python and platform, under the image's pins, packed and PUT to a presigned URL.

pip resolves first (``--dry-run --report``, ``--only-binary=:all:``: no sdist is built, so no
code of the packages runs here); then only what the image does not already have is
installed, ``--no-deps`` into a target directory. What the image has stays the image's.

Run as ``python -m lambdaserve.publishing.environments.build`` with the request as JSON on
stdin; the answer is JSON on stdout.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name
from pydantic import BaseModel, Field

from lambdaserve.errors import ModelRejected
from lambdaserve.publishing.bare_environment import bare_environment
from lambdaserve.publishing.environments.pip_reasons import pip_reason

PIP_TIMEOUT_S = 600.0
CONTENT_TYPE = "application/gzip"  # signed into the presigned URL: the PUT must send it
# what pip needs to reach an index over TLS
PIP_KEPT = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE")


class BuildRequest(BaseModel):
    """What the manage function asks the sandbox to build (a trust boundary: an event)."""

    requirements: str
    source: str = "requirements.txt"
    python_version: str
    platforms: list[str] = Field(min_length=1)
    constraints: str = ""
    pinned: list[str] = Field(default_factory=list)  # canonical names the image has
    index_url: str
    max_bytes: int
    put_url: str = ""  # empty: the tarball is left at ``output`` (tests, benchmarks)
    output: str = ""


def build(request: BuildRequest, scratch: Path) -> dict[str, Any]:
    """Resolve, install, check the size, pack and upload; ModelRejected says which
    requirement and why."""
    (scratch / "requirements.txt").write_text(request.requirements)
    (scratch / "constraints.txt").write_text(request.constraints)
    report = scratch / "report.json"
    _pip(
        request,
        scratch,
        [
            "install",
            "--dry-run",
            # pip before 24 takes --platform only with --target, even for a dry run (the
            # Lambda python3.12 image's pip 23.2 refused every build without it)
            "--target",
            str(scratch / "resolved"),
            "--ignore-installed",
            "-vv",
            "--report",
            str(report),
            "-c",
            str(scratch / "constraints.txt"),
            "-r",
            str(scratch / "requirements.txt"),
        ],
    )
    pinned = set(request.pinned)
    resolved = json.loads(report.read_text()).get("install", [])
    wanted = sorted(
        f"{item['metadata']['name']}=={item['metadata']['version']}"
        for item in resolved
        if canonicalize_name(item["metadata"]["name"]) not in pinned
    )
    if not wanted:
        return {"packages": [], "bytes": 0, "unpacked_bytes": 0, "sha256": ""}
    target = scratch / "site"
    _pip(
        request, scratch, ["install", "--no-deps", "--no-compile", "--target", str(target), *wanted]
    )
    unpacked = _check_size(target, request.max_bytes, request.source)
    tarball = Path(request.output) if request.output else scratch / "environment.tar.gz"
    pack(target, tarball)
    if request.put_url:
        _put(request.put_url, tarball)
    return {
        "packages": wanted,
        "bytes": tarball.stat().st_size,
        "unpacked_bytes": unpacked,
        "sha256": hashlib.sha256(tarball.read_bytes()).hexdigest(),
    }


def _pip(request: BuildRequest, scratch: Path, arguments: list[str]) -> None:
    index = (
        ["--no-index", "--find-links", request.index_url]
        if _is_local(request.index_url)
        else ["--index-url", request.index_url]
    )
    platform = [f"--platform={tag}" for tag in request.platforms]
    command = [
        sys.executable,
        "-m",
        "pip",
        "--isolated",  # no pip.conf, no PIP_* variables: this request's settings only
        "--disable-pip-version-check",
        "--no-input",
        "--no-cache-dir",
        *arguments[:1],
        "--only-binary=:all:",
        f"--python-version={request.python_version}",
        "--implementation=cp",
        *platform,
        *index,
        *arguments[1:],
    ]
    try:
        done = subprocess.run(
            command,
            check=False,
            cwd=scratch,
            env=_bare_environment(scratch),
            capture_output=True,
            text=True,
            timeout=PIP_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        raise ModelRejected(
            f"{request.source}: installing the requirements ran over {PIP_TIMEOUT_S:.0f} s"
        ) from None
    if done.returncode != 0:
        pins = dict(
            line.split("==", 1) for line in request.constraints.splitlines() if "==" in line
        )
        output = done.stdout + done.stderr
        reason = pip_reason(output, request.python_version, request.index_url, pins)
        raise ModelRejected(f"{request.source}: {reason}")


def _is_local(index: str) -> bool:
    return not index.startswith(("http://", "https://", "file://"))


def _bare_environment(scratch: Path) -> dict[str, str]:
    return bare_environment(scratch, PIP_KEPT, PIP_CONFIG_FILE=os.devnull)


def _check_size(target: Path, max_bytes: int, source: str) -> int:
    sizes: dict[str, int] = {}
    for path in target.rglob("*"):
        if path.is_symlink() or not (path.is_file() or path.is_dir()):
            raise ModelRejected(f"{source}: a wheel installed {path.name!r}, not a plain file")
        if path.is_file():
            top = path.relative_to(target).parts[0]
            sizes[top] = sizes.get(top, 0) + path.stat().st_size
    total = sum(sizes.values())
    if total > max_bytes:
        largest = ", ".join(
            f"{name} {size / 1024**2:.0f} MB"
            for name, size in sorted(sizes.items(), key=lambda item: -item[1])[:3]
        )
        raise ModelRejected(
            f"{source}: the environment unpacks to {total / 1024**2:.0f} MB, over the "
            f"{max_bytes / 1024**2:.0f} MB budget (LAMBDASERVE_ENV_MAX_BYTES); the largest: "
            f"{largest}"
        )
    return total


def pack(target: Path, tarball: Path) -> None:
    """A tarball of the same files is the same bytes: sorted, no times, no owners."""

    def normalized(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
        info.mode = 0o755 if info.isdir() else 0o644
        return info

    with (
        open(tarball, "wb") as raw,
        gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0) as zipped,
        tarfile.open(fileobj=zipped, mode="w", format=tarfile.PAX_FORMAT) as archive,
    ):
        for path in sorted(target.rglob("*")):
            archive.add(path, path.relative_to(target).as_posix(), False, filter=normalized)


def installed_packages(site: Path) -> list[str]:
    """``name==version`` of each distribution in a site directory (its dist-info)."""
    found = []
    for metadata in site.glob("*.dist-info/METADATA"):
        fields = dict(
            line.split(": ", 1)
            for line in metadata.read_text(errors="replace").splitlines()
            if ": " in line and not line.startswith(" ")
        )
        if fields.get("Name"):
            found.append(f"{fields['Name']}=={fields.get('Version', '')}")
    return sorted(found)


def _put(url: str, tarball: Path) -> None:
    with open(tarball, "rb") as body:
        request = urllib.request.Request(
            url,
            data=body,
            method="PUT",
            # urllib's default type for a body is a form, which a server may try to parse
            headers={
                "Content-Length": str(tarball.stat().st_size),
                "Content-Type": CONTENT_TYPE,
            },
        )
        with urllib.request.urlopen(request, timeout=300) as response:
            if response.status >= 300:
                raise OSError(f"storing the environment answered HTTP {response.status}")


def main() -> None:
    request = BuildRequest.model_validate_json(sys.stdin.buffer.read())
    with tempfile.TemporaryDirectory(prefix="environment-") as scratch:
        try:
            answer = build(request, Path(scratch))
        except ModelRejected as exc:
            answer = {"error": exc.message}
    sys.stdout.write(json.dumps(answer))


if __name__ == "__main__":
    main()
