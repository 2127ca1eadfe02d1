"""Model environments at publish with real pip and real wheels from a local wheelhouse (no
network): requirements files read as untrusted input, wheels only, the image's pins kept,
a size budget; where it serves, the tarball unpacked checked and importable in a child."""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from lambdaserve.catalog.items import VersionRecord, version_from_item, version_to_item
from lambdaserve.config.model_config import ModelConfig
from lambdaserve.errors import ModelNotReady, ModelRejected
from lambdaserve.publishing.environments.build import BuildRequest, build
from lambdaserve.publishing.environments.conda import (
    PARAMETER,
    execution_env_key,
    site_packages_of,
)
from lambdaserve.publishing.environments.pip_reasons import pip_reason
from lambdaserve.publishing.environments.requirements import (
    Requirements,
    beyond_image,
    check_pins,
    environment_digest,
    image_target,
    parse_requirements,
    requirements_of,
)
from lambdaserve.serving.cache import ArtifactCache
from lambdaserve.serving.residency.environments import EnvironmentDirectories, environment_file
from tests.wheelhouse import build_wheelhouse, conda_pack

TARGET = image_target()
NUMPY = TARGET.pinned()["numpy"]


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheelhouse(tmp_path_factory.mktemp("wheelhouse"))


def build_of(requirements: str, wheels: Path, out: Path, max_bytes: int = 10**9) -> dict:
    request = BuildRequest(
        requirements=requirements,
        python_version=TARGET.python_version,
        platforms=list(TARGET.platforms),
        constraints=TARGET.constraints(),
        pinned=[name for name, _ in TARGET.pins],
        index_url=str(wheels),
        max_bytes=max_bytes,
        output=str(out / "environment.tar.gz"),
    )
    scratch = out / "scratch"
    scratch.mkdir(parents=True)
    return build(request, scratch)


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ("-e .", "'-e' is not accepted"),
        ("--index-url https://example.invalid/simple", "'--index-url' is not accepted"),
        ("-r other.txt", "'-r' is not accepted"),
        ("tinypkg @ https://example.invalid/tinypkg.whl", "by name and version only"),
        ("tiny pkg ==", "is not a requirement"),
    ],
)
def test_a_requirements_file_lists_packages_by_name_only(line: str, said: str):
    """Given a requirements file with a pip option, a URL or nonsense on line 2
    When it is read at publish
    Then it is refused naming the line and why."""
    with pytest.raises(ModelRejected) as refused:
        parse_requirements(f"# ok\n{line}\n".encode(), "requirements.txt")
    assert "requirements.txt line 2" in refused.value.message
    assert said in refused.value.message


def test_requirements_are_normalized_so_equal_files_have_one_digest():
    """Given two requirements files that differ in order, comments and spacing
    When they are read
    Then they are the same requirements and the same environment digest."""
    one = parse_requirements(b"tinypkg == 1.0  # pinned\nsix\n", "requirements.txt")
    two = parse_requirements(b"six\n\ntinypkg==1.0\n", "requirements.txt")
    assert one.lines == two.lines == ("six", "tinypkg==1.0")
    assert environment_digest(one, TARGET, "i") == environment_digest(two, TARGET, "i")
    assert environment_digest(one, TARGET, "i") != environment_digest(one, TARGET, "other")


def test_a_requirement_excluding_the_images_numpy_is_refused_before_resolving():
    """Given a requirement numpy<2 while the image has numpy 2.x
    When it is checked against the image's pins
    Then it is refused naming numpy, the image's version and why."""
    assert NUMPY.startswith("2.")
    with pytest.raises(ModelRejected) as refused:
        check_pins(Requirements(("numpy<2", "tinypkg"), "requirements.txt"), TARGET)
    assert f"numpy<2 conflicts with the serving image's numpy {NUMPY}" in refused.value.message
    check_pins(Requirements((f"numpy>={NUMPY}",), "requirements.txt"), TARGET)  # allowed
    # a marker that does not hold where it serves asks for nothing
    check_pins(Requirements(('numpy<2; python_version < "3"',), "requirements.txt"), TARGET)


def test_an_sdist_only_package_is_refused_with_the_reason(wheels: Path, tmp_path: Path):
    """Given a wheelhouse where sdonly has only a source distribution
    When requirements naming it are built
    Then it is refused: only a source distribution, never built."""
    with pytest.raises(ModelRejected) as refused:
        build_of("sdonly\n", wheels, tmp_path)
    message = refused.value.message
    assert "requirement sdonly: only a source distribution (sdonly-1.0.tar.gz)" in message
    assert "never built" in message


def test_a_package_without_a_wheel_for_the_platform_is_refused(wheels: Path, tmp_path: Path):
    """Given a wheelhouse where winonly has only a Windows wheel
    When requirements naming it are built
    Then it is refused: no wheel for this Python and platform, naming the wheel it has."""
    with pytest.raises(ModelRejected) as refused:
        build_of("winonly\n", wheels, tmp_path)
    message = refused.value.message
    assert f"requirement winonly: no wheel for CPython {TARGET.python_version}" in message
    assert "winonly-1.0-cp311-cp311-win_amd64.whl is for cp311-cp311-win_amd64" in message


def test_a_dependency_that_conflicts_with_the_images_numpy_is_refused(wheels: Path, tmp_path: Path):
    """Given needsold, whose wheel requires numpy<2, and an image with numpy 2.x
    When requirements naming it are built
    Then pip's resolution under the image's pins refuses it, naming numpy and needsold."""
    with pytest.raises(ModelRejected) as refused:
        build_of("needsold\n", wheels, tmp_path)
    message = refused.value.message
    assert f"numpy=={NUMPY}" in message or f"numpy {NUMPY}" in message
    assert "needsold" in message and "numpy<2" in message


def test_a_missing_package_is_refused_naming_the_index(wheels: Path, tmp_path: Path):
    """Given a requirement no index entry has
    When it is built
    Then the reason names the requirement and the index."""
    with pytest.raises(ModelRejected) as refused:
        build_of("nothere==3\n", wheels, tmp_path)
    assert "requirement nothere==3: no version of it is in the package index" in str(
        refused.value.message
    )


def test_an_environment_over_the_size_budget_is_refused(wheels: Path, tmp_path: Path):
    """Given a budget smaller than tinypkg installed
    When tinypkg is built
    Then it is refused with the size, the budget and its largest part."""
    with pytest.raises(ModelRejected) as refused:
        build_of("tinypkg==1.0\n", wheels, tmp_path, max_bytes=100)
    assert "over the 0 MB budget (LAMBDASERVE_ENV_MAX_BYTES)" in refused.value.message
    assert "the largest: tinypkg" in refused.value.message


def test_what_the_image_has_is_left_to_the_image():
    """Given requirements naming the image's numpy (allowed) and tinypkg
    When what the image does not have is asked for
    Then only tinypkg is left to install."""
    requirements = parse_requirements(b"numpy>=2\ntinypkg\n", "requirements.txt")
    check_pins(requirements, TARGET)
    assert beyond_image(requirements, TARGET).lines == ("tinypkg",)


def test_two_pins_give_two_environments_that_import_their_own_version(wheels: Path, tmp_path: Path):
    """Given environments built for tinypkg==1.0 and tinypkg==2.0, and a model cache whose
    budget holds one tarball
    When each is fetched through the cache, and the hook is asked for its directory
    Then each directory imports its own tinypkg in a child Python; a rebuild is the same
    bytes; the first's unpacked copy is removed once the cache evicted its tarball."""
    built = {}
    for version in ("1.0", "2.0"):
        answer = build_of(f"tinypkg=={version}\n", wheels, tmp_path / version)
        assert answer["packages"] == [f"tinypkg=={version}"]
        again = build_of(f"tinypkg=={version}\n", wheels, tmp_path / f"{version}-again")
        assert again["sha256"] == answer["sha256"]
        built[f"environments/{version}.tar.gz"] = tmp_path / version / "environment.tar.gz"
        answer["key"], answer["size"] = f"environments/{version}.tar.gz", answer["bytes"]
        built[version] = answer
    cache = ArtifactCache(
        tmp_path / "cache",
        max(built["1.0"]["size"], built["2.0"]["size"]),
        lambda key, target: shutil.copyfile(built[key], target),
    )
    hook = EnvironmentDirectories.beside(cache)
    directories = {}
    for version in ("1.0", "2.0"):
        cached = environment_file(built[version])
        assert cached is not None
        [directories[version]] = hook("m", 1, cache.materialize([cached]))
        done = subprocess.run(
            [sys.executable, "-c", "import tinypkg; print(tinypkg.VERSION)"],
            env={"PYTHONPATH": str(directories[version]), "PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            check=True,
        )
        assert done.stdout.strip() == version
    assert not cache.has_blob(built["1.0"]["sha256"])
    assert not directories["1.0"].exists() and directories["2.0"].is_dir()


@pytest.mark.parametrize("kind", ["symlink", "parent"])
def test_an_environment_tarball_with_a_link_or_a_way_out_is_not_unpacked(tmp_path: Path, kind: str):
    """Given an environment tarball holding a symlink, or a member under ..
    When it is unpacked where it serves
    Then it is refused and nothing is left unpacked."""
    tarball = tmp_path / "abc.tar.gz"
    with tarfile.open(tarball, "w:gz") as archive:
        info = tarfile.TarInfo("pkg/link" if kind == "symlink" else "../escape.py")
        if kind == "symlink":
            info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
            archive.addfile(info)
        else:
            info.size = 2
            archive.addfile(info, io.BytesIO(b"x\n"))
    directories = EnvironmentDirectories(tmp_path / "environments")
    with pytest.raises(ModelNotReady, match="not a plain file"):
        directories.unpacked(tarball)
    assert not (tmp_path / "escape.py").exists()
    assert list((tmp_path / "environments").iterdir()) == [tmp_path / "environments/abc.lock"]


def test_a_mar_manifest_names_its_requirements_file(tmp_path: Path):
    """Given an unpacked .mar whose manifest names requirementsFile, and one naming a file
    it does not hold
    When its requirements are looked for
    Then the named file is read; the missing one is refused with how to build it."""
    (tmp_path / "MAR-INF").mkdir()
    manifest = tmp_path / "MAR-INF/MANIFEST.json"
    manifest.write_text('{"model": {"requirementsFile": "reqs.txt"}}')
    (tmp_path / "reqs.txt").write_text("tinypkg==2.0\n")
    found = requirements_of(tmp_path, "MAR-INF/MANIFEST.json")
    assert found is not None and found.lines == ("tinypkg==2.0",) and found.source == "reqs.txt"
    manifest.write_text('{"model": {"requirementsFile": "../other.txt"}}')
    with pytest.raises(ModelRejected, match="--requirements-file"):
        requirements_of(tmp_path, "MAR-INF/MANIFEST.json")
    assert requirements_of(tmp_path, "model.onnx") is None


def test_version_items_written_before_environments_still_read():
    """Given a version item as written before versions had environments
    When it is read
    Then it has none; one with an environment reads back the same."""
    record = VersionRecord(model="m", version=1, environment={"digest": "d", "packages": []})
    item = {k: v for k, v in version_to_item(record).items()}
    from lambdaserve.catalog.items import plain

    fields = plain(item)
    assert version_from_item(fields).environment == {"digest": "d", "packages": []}
    del fields["environment"]
    assert version_from_item(fields).environment == {}


def test_a_conda_pack_tarball_gives_its_site_packages_less_the_images(tmp_path: Path):
    """Given a conda-pack tarball (links and libraries outside site-packages, tinypkg 3.0
    and the image's own numpy version inside)
    When its site-packages are taken
    Then tinypkg is there and importable, numpy is left to the image, nothing else came."""
    packed = conda_pack(tmp_path / "env.tar.gz", TARGET.python_version, NUMPY)
    site = tmp_path / "site"
    unpacked = site_packages_of(packed, "env.tar.gz", TARGET, site, 10**9)
    assert sorted(p.name for p in site.iterdir()) == ["tinypkg", "tinypkg-3.0.dist-info"]
    assert unpacked == sum(p.stat().st_size for p in site.rglob("*") if p.is_file())
    done = subprocess.run(
        [sys.executable, "-c", "import numpy, tinypkg; print(tinypkg.VERSION, numpy.__version__)"],
        env={"PYTHONPATH": f"{site}{os.pathsep}{os.pathsep.join(sys.path[1:])}"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.split() == ["3.0", NUMPY]


@pytest.mark.parametrize(
    ("python", "numpy", "link_inside", "said"),
    [
        ("3.10", NUMPY, False, "is an environment for Python 3.10"),
        (TARGET.python_version, "1.26.4", False, "has numpy 1.26.4; the serving image pins"),
        (TARGET.python_version, NUMPY, True, "site-packages/escape is a link"),
    ],
)
def test_a_conda_pack_tarball_that_cannot_serve_here_is_refused(
    tmp_path: Path, python: str, numpy: str, link_inside: bool, said: str
):
    """Given a conda-pack tarball for another Python, with another numpy, or with a link
    inside its site-packages
    When its site-packages are taken
    Then it is refused saying which and why."""
    packed = conda_pack(tmp_path / "env.tar.gz", python, numpy, link_inside=link_inside)
    with pytest.raises(ModelRejected, match=re.escape(said)):
        site_packages_of(packed, "env.tar.gz", TARGET, tmp_path / "site", 10**9)


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("/opt/envs/env.tar.gz", "name a conda-pack tarball beside the model"),
        ("$$TRITON_MODEL_DIRECTORY/../other/env.tar.gz", "points outside the model directory"),
    ],
)
def test_execution_env_path_must_be_beside_the_model(value: str, said: str):
    """Given EXECUTION_ENV_PATH naming a path elsewhere on a server, or outside the model
    When the bucket key is derived
    Then it is refused; the documented form names models/<m>/env.tar.gz."""
    config = ModelConfig(name="m", parameters=((PARAMETER, value),))
    with pytest.raises(ModelRejected, match=re.escape(said)):
        execution_env_key(config, "models/")
    good = ModelConfig(name="m", parameters=((PARAMETER, "$$TRITON_MODEL_DIRECTORY/env.tar.gz"),))
    assert execution_env_key(good, "models/") == "models/m/env.tar.gz"


def test_the_code_validator_function_builds_an_environment(wheels: Path, tmp_path: Path):
    """Given the code-validator function's event for an environment build (as the manage
    function's FunctionBuilder sends it), and one that is not
    When the function handles them
    Then the first is built in its credential-less child; the second answers an error."""
    from lambdaserve.handlers import code_validator

    request = BuildRequest(
        requirements="tinypkg==2.0\n",
        python_version=TARGET.python_version,
        platforms=list(TARGET.platforms),
        constraints=TARGET.constraints(),
        pinned=[name for name, _ in TARGET.pins],
        index_url=str(wheels),
        max_bytes=10**9,
        output=str(tmp_path / "environment.tar.gz"),
    )
    answer = code_validator.handler({"environment": request.model_dump()})
    assert answer["packages"] == ["tinypkg==2.0"]
    assert answer["bytes"] == (tmp_path / "environment.tar.gz").stat().st_size
    refused = code_validator.handler({"environment": {"requirements": "x"}})
    assert refused["error"].startswith("not an environment build event")


def test_a_private_index_token_never_reaches_a_reason():
    """Given a private index URL carrying a token (CodeArtifact's https://aws:<token>@...)
    When pip's failure becomes the version's reason
    Then the reason names the index without the token."""
    index = "https://aws:SECRET-TOKEN@d-1.codeartifact.us-east-1.amazonaws.com/pypi/r/simple/"
    output = (
        f"ERROR: Could not fetch {index}nothere/\nERROR: No matching distribution found for nothere"
    )
    reason = pip_reason(output, "3.11", index, {})
    assert "SECRET-TOKEN" not in reason
    assert "(https://d-1.codeartifact.us-east-1.amazonaws.com/pypi/r/simple/)" in reason
