"""pip's failures, said as the reason a version is UNAVAILABLE: which requirement, and why
(only a source distribution, no wheel for the image's platform, a conflict with what the
image pins, not in the index)."""

from __future__ import annotations

import re

from packaging.utils import canonicalize_name

_NOT_FOUND = re.compile(r"No matching distribution found for (\S+)")
_FROM = re.compile(r"Could not find a version that satisfies the requirement (.+?) \(from versions")
_SOURCES = re.compile(r"Skipping link: No sources permitted for ([^:]+): (\S+)")
_TAGS = re.compile(r"Skipping link: none of the wheel's tags \(([^)]*)\) are compatible.*?: (\S+)")
_USERINFO = re.compile(r"([a-z+]+://)[^/@\s]*@")
_PROJECT = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)")


def pip_reason(output: str, python_version: str, index: str, pins: dict[str, str]) -> str:
    """One sentence naming the requirement pip could not install, from its ``-vv`` output;
    ``pins`` are the image's packages (canonical name: version). Credentials in a URL
    (a private index's token) never reach the reason."""
    return _USERINFO.sub(r"\1", _reason(output, python_version, index, pins))


def _reason(output: str, python_version: str, index: str, pins: dict[str, str]) -> str:
    missing = _NOT_FOUND.findall(output)
    if "The conflict is caused by" in output or (
        not missing and "conflicting dependencies" in output
    ):
        return _conflict(output)
    if missing:
        name = _project(missing[-1])
        if name in pins:  # only the image's version is allowed, and it does not fit
            wanted = next((r for r in _FROM.findall(output) if _project(r) == name), missing[-1])
            return (
                f"requirement {wanted} conflicts with the serving image's {name} "
                f"{pins[name]} (the packages the image pins cannot be replaced by a model)"
            )
        return _not_found(output, missing[-1], python_version, index)
    errors = [line.strip() for line in output.splitlines() if line.startswith("ERROR:")]
    return errors[-1][len("ERROR:") :].strip()[:500] if errors else output.strip()[-500:]


def _not_found(output: str, requirement: str, python_version: str, index: str) -> str:
    name = _project(requirement)
    wanted = next((r for r in _FROM.findall(output) if _project(r) == name), requirement)
    sources = [url for project, url in _SOURCES.findall(output) if _project(project) == name]
    tagged = [
        (tags, url)
        for tags, url in _TAGS.findall(output)
        if _project(_file_name(url).split("-", 1)[0]) == name
    ]
    if tagged:
        tags, url = tagged[0]
        return (
            f"requirement {wanted}: no wheel for CPython {python_version} on this image's "
            f"platform (Linux x86_64, manylinux): {_file_name(url)} is for {tags}; "
            "choose a version that publishes such a wheel"
        )
    if sources:
        return (
            f"requirement {wanted}: only a source distribution ({_file_name(sources[0])}) "
            "is published, and sources are never built at publish (no package code runs at "
            "install: wheels only); publish a wheel of it to your package index "
            "(LAMBDASERVE_PACKAGE_INDEX_URL) or choose a version that has one"
        )
    return f"requirement {wanted}: no version of it is in the package index ({index})"


def _conflict(output: str) -> str:
    lines = output.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if "The conflict is caused by" in line)
    except StopIteration:
        cause = [line.strip() for line in lines if "conflicting dependencies" in line]
        return (cause[-1] if cause else "conflicting requirements").removeprefix("ERROR: ")
    causes = []
    for line in lines[start + 1 :]:
        if not line.startswith("    "):
            break
        causes.append(line.strip())
    pinned = [c.split(")", 1)[1].strip() for c in causes if "(constraint)" in c]
    asked = "; ".join(c for c in causes if "(constraint)" not in c)
    if pinned:
        return (
            f"the requirements conflict with the serving image's {', '.join(pinned)} (the "
            f"packages the image pins cannot be replaced by a model): {asked}"
        )
    return f"the requirements conflict with each other: {asked}"


def _project(requirement: str) -> str:
    match = _PROJECT.match(requirement.strip())
    return canonicalize_name(match.group(1)) if match else requirement


def _file_name(url: str) -> str:
    return url.split("#", 1)[0].rsplit("/", 1)[-1]
