"""Every refusal names its fix: a config typo gets "did you mean" from Triton's own field
and enum names; a corrupt or foreign archive says what it is and the archiver's command;
a missing package's hint leads with the flag for that artifact; OpenVINO's absence names
`make dev OPENVINO=1`, which exists."""

from __future__ import annotations

import gzip
import subprocess
from pathlib import Path

import pytest

from lambdaserve.catalog import version_policy
from lambdaserve.config.documents import parse_document, parse_overrides
from lambdaserve.errors import InvalidInput
from lambdaserve.publishing.events import EventBatch
from lambdaserve.runtimes.openvino.runtime import MISSING
from lambdaserve.serving.residency.load_check import with_fix

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("filename", "body", "suggested"),
    [
        ("config.pbtxt", b"max_batch_sise: 8", '"max_batch_size"'),
        ("config.pbtxt", b"instance_group [{ kind: KIND_CPUU }]", '"KIND_CPU"'),
        ("config.pbtxt", b'input [{ name: "x" data_type: TYPE_FP3 dims: [1] }]', '"TYPE_FP32"'),
        (
            "config.pbtxt",
            b"dynamic_batching { max_queue_delay_microsecond: 5 }",
            '"max_queue_delay_microseconds"',
        ),
        ("config.json", b'{"maxBatchSise": 8}', '"maxBatchSize"'),
        ("config.json", b'{"input": [{"name": "x", "data_type": "TYPE_FP3"}]}', '"TYPE_FP32"'),
    ],
)
def test_a_config_typo_gets_did_you_mean(filename, body, suggested):
    """Given a config with a misspelt field or enum value, When it is parsed at publish,
    Then the refusal suggests Triton's own name for it."""
    with pytest.raises(InvalidInput) as refused:
        parse_document(filename, body)
    assert f"did you mean {suggested}?" in refused.value.message
    assert "Available Fields" not in refused.value.message


def test_an_override_typo_gets_did_you_mean_and_nonsense_gets_no_guess():
    with pytest.raises(InvalidInput) as refused:
        parse_overrides({"max_batch_sise": 4})
    assert 'did you mean "max_batch_size"?' in refused.value.message
    with pytest.raises(InvalidInput) as refused:
        parse_document("config.pbtxt", b"zzzz: 1")
    assert "did you mean" not in refused.value.message


@pytest.mark.parametrize(
    ("body", "said"),
    [
        (b"PK\x03\x04" + b"\x00" * 40, "a damaged zip"),
        (gzip.compress(b"x" * 1000, mtime=0)[:30], "a damaged gzip"),
        (b"<!DOCTYPE html><html>Access denied</html>", "HTML or XML page"),
        (b"version https://git-lfs.github.com/spec/v1\noid sha256:ab\n", "Git LFS pointer"),
        (b"\x07\x08garbage" * 10, "bytes of neither zip nor tar"),
    ],
)
def test_a_corrupt_or_foreign_archive_says_what_it_is_and_how_to_rebuild_it(aws, body, said):
    """Given a .mar upload that is no archive, When it is published,
    Then its version is UNAVAILABLE saying what the bytes are and torch-model-archiver's
    command, without tarfile's internal attempts."""
    aws.put("models/broken.mar", body)
    EventBatch(aws.services.registrar, aws.services.uploads).on_object_event("models/broken.mar")
    [record] = aws.services.catalog.versions("broken")
    assert record.state == version_policy.UNAVAILABLE
    assert said in record.reason and "torch-model-archiver --model-name" in record.reason
    assert "method gz" not in record.reason and "ReadError" not in record.reason


def test_the_missing_package_hint_leads_with_the_flag_for_the_artifact():
    """Given a load that failed on a missing torch, Then a TorchServe archive or handler is
    told TORCHSERVE=1 first, a TorchScript model TORCH=1."""
    missing = "ModuleNotFoundError: No module named 'torch'"
    assert (
        with_fix(missing, "torchserve_handler")
        .split("; ", 1)[1]
        .startswith("PyTorch is not installed where it serves: run `make dev TORCHSERVE=1`")
    )
    assert "`make dev TORCH=1`" in with_fix(missing, "torchscript")
    assert "`make dev TORCHSERVE=1`" in with_fix("No module named 'ts'", "torchserve_handler")


def test_openvinos_absence_names_make_dev_openvino_which_exists():
    """Given OpenVINO missing where it serves, Then the reason names `make dev OPENVINO=1`,
    and make knows that flag (its install target, in make's dry run)."""
    assert "`make dev OPENVINO=1`" in MISSING
    dry = subprocess.run(  # -B: as on a fresh clone, whatever this venv already holds
        ["make", "-n", "-B", "dev", "OPENVINO=1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert "-r locks/dev-openvino.txt" in dry.stdout  # the openvino extra's lock
    assert "openvino==" in (ROOT / "locks/dev-openvino.txt").read_text()
