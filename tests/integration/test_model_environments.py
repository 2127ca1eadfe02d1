"""Model environments through the emulator over HTTP: built by the sandbox (a child process
without credentials) and stored through a presigned PUT, reused by digest, fetched through
the model file cache where they serve; and a model's requirements file published by upload
through the local stack."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from lambdaserve.errors import ModelRejected
from lambdaserve.publishing.environments.builders import IsolatedBuilder
from lambdaserve.publishing.environments.requirements import image_target, parse_requirements
from lambdaserve.publishing.environments.store import EnvironmentOptions, Environments
from lambdaserve.serving.cache import ArtifactCache
from lambdaserve.serving.residency.environments import EnvironmentDirectories, environment_file
from tests.torchserve_archives import _model_archiver
from tests.wheelhouse import build_wheelhouse, conda_pack

ADD_SUB = Path(__file__).parent.parent / "fixtures" / "python_models" / "add_sub"
TARGET = image_target()
NUMPY = TARGET.pinned()["numpy"]
HANDLER = b"def handle(data, context):\n    return [{'ok': True} for _ in data or []]\n"


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheelhouse(tmp_path_factory.mktemp("wheelhouse"))


@pytest.fixture
def wheel_index(wheels: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The stack's package index: the local wheelhouse (set before the stack reads settings)."""
    monkeypatch.setenv("LAMBDASERVE_PACKAGE_INDEX_URL", str(wheels))
    return wheels


def imported_version(directory: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-c", "import tinypkg; print(tinypkg.VERSION)"],
        env={"PYTHONPATH": str(directory), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def test_identical_requirements_build_once_and_each_version_imports_its_own(
    wheel_index: Path, stack, tmp_path: Path
):
    """Given the manage side's environments, building in a credential-less child that
    stores through a presigned URL
    When tinypkg==1.0 is prepared twice and tinypkg==2.0 once
    Then two builds ran, the second 1.0 reused the stored one, and each environment,
    fetched through the model file cache and unpacked, imports its own tinypkg."""
    s3, bucket = stack.clients.s3, stack.settings.bucket
    environments = Environments(
        s3, bucket, IsolatedBuilder(), EnvironmentOptions(index_url=str(wheel_index))
    )
    one = environments.prepare(parse_requirements(b"tinypkg==1.0\n", "requirements.txt"))
    again = environments.prepare(parse_requirements(b"tinypkg == 1.0\n", "requirements.txt"))
    two = environments.prepare(parse_requirements(b"tinypkg==2.0\n", "requirements.txt"))
    assert environments.builds == 2
    assert again == one and one["digest"] != two["digest"]
    assert one["key"] == f"environments/{one['digest']}.tar.gz"
    assert one["packages"] == ["tinypkg==1.0"] and one["unpacked_bytes"] > 0
    cache = ArtifactCache(
        tmp_path / "cache",
        10**9,
        lambda key, target: s3.download_file(bucket, key, str(target)),
    )
    directories = EnvironmentDirectories(tmp_path / "environments")
    for record, version in ((one, "1.0"), (two, "2.0")):
        cached = environment_file(record)
        assert cached is not None
        view = cache.materialize([cached])
        [directory] = directories("m", 1, view)
        assert imported_version(directory) == version
    assert cache.downloads == 2 and cache.bytes_used() == one["size"] + two["size"]


def test_a_refused_build_stores_nothing(wheel_index: Path, stack):
    """Given an sdist-only requirement
    When it is prepared
    Then it is refused with the reason and nothing is stored under environments/."""
    s3, bucket = stack.clients.s3, stack.settings.bucket
    environments = Environments(
        s3, bucket, IsolatedBuilder(), EnvironmentOptions(index_url=str(wheel_index))
    )
    with pytest.raises(ModelRejected, match="only a source distribution"):
        environments.prepare(parse_requirements(b"sdonly\n", "requirements.txt"))
    listed = s3.list_objects_v2(Bucket=bucket, Prefix="environments/")
    assert listed.get("KeyCount", 0) == 0


def test_a_published_handler_records_its_environment_and_a_bad_one_is_unavailable(
    wheel_index: Path, stack
):
    """Given a handler uploaded with requirements.txt (tinypkg==2.0), and another whose
    requirements.txt names an sdist-only package
    When the stack publishes them
    Then the first is READY and its describe shows the environment's digest and packages;
    the second is UNAVAILABLE saying which requirement and why."""
    # requirements first: every validation that sees the handler sees them
    stack.put("models/envy/1/requirements.txt", b"tinypkg==2.0\n")
    stack.put("models/envy/1/handler.py", HANDLER)
    stack.wait_state("envy", 1, "READY", timeout_s=120)
    [described] = stack.api.get("/models/envy/1").json()
    environment = described["environment"]
    assert environment["packages"] == ["tinypkg==2.0"]
    assert environment["key"] == f"environments/{environment['digest']}.tar.gz"
    stored = stack.clients.s3.head_object(Bucket=stack.settings.bucket, Key=environment["key"])
    assert stored["ContentLength"] == environment["size"]

    stack.put("models/sdonly_model/1/requirements.txt", b"sdonly==1.0\n")
    stack.put("models/sdonly_model/1/handler.py", HANDLER)
    reason = stack.wait_state("sdonly_model", 1, "UNAVAILABLE", timeout_s=120)
    assert "requirement sdonly==1.0: only a source distribution" in reason


def test_a_python_models_execution_env_path_becomes_its_environment(stack, tmp_path: Path):
    """Given a Python model whose config sets EXECUTION_ENV_PATH to a conda-pack tarball
    uploaded beside it
    When the stack publishes it
    Then it is READY with an environment from that tarball, which, fetched through the
    model file cache, imports the env's tinypkg; the same tarball stored again is reused."""
    packed = conda_pack(tmp_path / "env.tar.gz", TARGET.python_version, NUMPY)
    config = (ADD_SUB / "config.pbtxt").read_text().replace('name: "add_sub"', 'name: "envpy"')
    config += (
        '\nparameters: { key: "EXECUTION_ENV_PATH", '
        'value: { string_value: "$$TRITON_MODEL_DIRECTORY/env.tar.gz" } }\n'
    )
    stack.put("models/envpy/env.tar.gz", packed.read_bytes())
    stack.put("models/envpy/config.pbtxt", config.encode())
    stack.put("models/envpy/1/model.py", (ADD_SUB / "1" / "model.py").read_bytes())
    stack.wait_state("envpy", 1, "READY", timeout_s=120)
    [described] = stack.api.get("/models/envpy/1").json()
    environment = described["environment"]
    assert environment["source"] == "EXECUTION_ENV_PATH"
    assert environment["packages"] == ["tinypkg==3.0"]
    s3, bucket = stack.clients.s3, stack.settings.bucket
    cache = ArtifactCache(
        tmp_path / "cache", 10**9, lambda key, target: s3.download_file(bucket, key, str(target))
    )
    cached = environment_file(environment)
    assert cached is not None
    [directory] = EnvironmentDirectories(tmp_path / "environments")(
        "envpy", 1, cache.materialize([cached])
    )
    assert imported_version(directory) == "3.0"
    environments = Environments(s3, bucket, IsolatedBuilder())
    assert environments.prepare_packed("models/envpy/env.tar.gz") == environment
    assert environments.builds == 0


def test_a_mar_built_with_a_requirements_file_gets_its_environment(
    wheel_index: Path, stack, tmp_path: Path
):
    """Given a .mar built by torch-model-archiver --requirements-file (tinypkg==1.0)
    When it is uploaded under models/
    Then the version it becomes is READY with the environment its manifest's
    requirementsFile names."""
    handler = tmp_path / "handler.py"
    handler.write_bytes(HANDLER)
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("tinypkg==1.0\n")
    export = _model_archiver(
        tmp_path,
        [
            "--model-name", "envmar", "--version", "1.0", "--handler", str(handler),
            "--requirements-file", str(requirements),
        ],
    )  # fmt: skip
    stack.put("models/envmar.mar", (export / "envmar.mar").read_bytes())
    stack.wait_state("envmar", 1, "READY", timeout_s=120)
    [described] = stack.api.get("/models/envmar/1").json()
    assert described["environment"]["packages"] == ["tinypkg==1.0"]


VERSION_HANDLER = (
    b"import tinypkg\n\n"
    b"def handle(data, context):\n"
    b"    return [{'tinypkg': tinypkg.VERSION} for _ in data or []]\n"
)


def test_two_models_pinning_different_versions_of_one_package_answer_side_by_side(
    wheel_index: Path, stack
):
    """Given two handlers that import tinypkg, one published with tinypkg==1.0 and one with
    tinypkg==2.0 (a package the serving environment does not have)
    When both are READY and each is asked in turn, in one serving process
    Then each answers with its own tinypkg: their code runs in worker processes with
    their own environment first on the path."""
    for model, pin in (("pin_one", "1.0"), ("pin_two", "2.0")):
        stack.put(f"models/{model}/1/requirements.txt", f"tinypkg=={pin}\n".encode())
        stack.put(f"models/{model}/1/handler.py", VERSION_HANDLER)
    for model in ("pin_one", "pin_two"):
        stack.wait_state(model, 1, "READY", timeout_s=120)
    for _ in range(2):
        for model, pin in (("pin_one", "1.0"), ("pin_two", "2.0")):
            answer = stack.inference.post(f"/predictions/{model}", content=b"{}")
            assert answer.status_code == 200, answer.text
            assert answer.json() == {"tinypkg": pin}
    workers = stack.api.get("/models/pin_one/1").json()[0]["workers"]
    assert workers and workers[0]["pid"] > 0


def test_the_serving_environments_pins_hold_not_the_manage_sides(
    wheel_index: Path, stack, tmp_path: Path
):
    """Given a serving environment with tinypkg 2.0 installed, where the sandbox runs (as
    the code validator runs the infer image), while this manage process has no tinypkg
    When tinypkg==1.0 is prepared, then tinypkg>=1.0
    Then 1.0 is refused as conflicting with the serving image's tinypkg 2.0, and >=1.0
    needs no environment: the serving image already has a tinypkg it allows."""
    serving = tmp_path / "serving-site-packages"
    subprocess.run(
        [
            *(sys.executable, "-m", "pip", "--isolated", "install", "--quiet", "--no-index"),
            *("--find-links", str(wheel_index), "--target", str(serving), "tinypkg==2.0"),
        ],
        check=True,
        capture_output=True,
    )
    assert "tinypkg" not in TARGET.pinned()  # the manage side's own pins know nothing of it
    environments = Environments(
        stack.clients.s3,
        stack.settings.bucket,
        IsolatedBuilder(site_dirs=(str(serving),)),
        EnvironmentOptions(index_url=str(wheel_index)),
    )
    assert environments.target.pinned()["tinypkg"] == "2.0"
    assert environments.target.pinned()["numpy"] == NUMPY
    with pytest.raises(ModelRejected, match="conflicts with the serving image's tinypkg 2.0"):
        environments.prepare(parse_requirements(b"tinypkg==1.0\n", "requirements.txt"))
    assert environments.prepare(parse_requirements(b"tinypkg>=1.0\n", "requirements.txt")) == {}
    assert environments.builds == 0
