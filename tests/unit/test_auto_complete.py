"""Triton's auto_complete_config at publish: run where it can read nothing else (a child
process without credentials locally, the code-validator function deployed), with
python_backend's rules for what it may change."""

from __future__ import annotations

import io
import json
import time

import pytest

from lambdaserve.errors import ModelRejected
from lambdaserve.handlers import code_validator
from lambdaserve.publishing.auto_complete import IsolatedProcess, ValidatorFunction
from lambdaserve.runtimes.triton_python.pb_utils import ModelConfig

SNOOPING = b"""
import os


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        config.as_dict()["seen"] = {
            "environment": sorted(os.environ),
            "directory": sorted(os.listdir(".")),
        }
        config.add_input({"name": "x", "data_type": "TYPE_FP32", "dims": [2]})
        return config
"""


def test_auto_complete_runs_without_credentials_beside_only_its_model_py(monkeypatch):
    # Given a process holding AWS credentials and lambdaserve's settings
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "token")
    monkeypatch.setenv("LAMBDASERVE_TABLE", "catalog")
    # When a model's auto_complete_config runs
    completed = IsolatedProcess().complete(SNOOPING, {"name": "m", "input": [], "output": []})
    # Then it saw none of them, and no file but its own
    seen = completed["seen"]
    assert not [k for k in seen["environment"] if k.startswith(("AWS_", "LAMBDASERVE_"))]
    assert seen["directory"] == ["model.py"]
    assert completed["input"] == [{"name": "x", "data_type": "TYPE_FP32", "dims": [2]}]


def model_py(body: str) -> bytes:
    return (
        "class TritonPythonModel:\n    @staticmethod\n"
        f"    def auto_complete_config(c):\n        {body}\n"
    ).encode()


def test_a_failing_auto_complete_is_a_rejection_with_its_error():
    source = model_py("raise ValueError('no dims for you')")
    with pytest.raises(
        ModelRejected, match="auto_complete_config of model.py failed: ValueError: no dims for you"
    ):
        IsolatedProcess().complete(source, {"name": "m"})


def test_an_endless_auto_complete_is_stopped():
    source = model_py("while True: pass")
    with pytest.raises(ModelRejected, match="ran over"):
        IsolatedProcess(timeout_s=2).complete(source, {"name": "m"})


def test_the_rules_are_python_backends():
    config = ModelConfig(
        {
            "name": "m",
            "max_batch_size": 8,
            "input": [{"name": "a", "data_type": "TYPE_INT32", "dims": [4]}],
        }
    )
    with pytest.raises(
        ValueError,
        match="configuration expects datatype TYPE_INT32 for input 'a', model provides TYPE_FP32",
    ):
        config.add_input({"name": "a", "data_type": "TYPE_FP32", "dims": [4]})
    with pytest.raises(ValueError, match="configuration specified max_batch_size 8, but"):
        config.set_max_batch_size(4)
    with pytest.raises(ValueError, match="contains property other than"):
        config.add_output({"name": "y", "data_type": "TYPE_FP32", "dims": [1], "format": "x"})
    config.add_input({"name": "a", "data_type": "TYPE_INT32", "dims": [4]})  # agreeing: kept
    config.set_model_transaction_policy({"decoupled": True})
    with pytest.raises(ValueError, match="trying to change decoupled property"):
        config.set_model_transaction_policy({"decoupled": False})
    assert len(config.as_dict()["input"]) == 1


class InvokedLambda:
    """The Lambda service's invoke, answering with the code-validator handler itself."""

    def __init__(self) -> None:
        self.invoked: list[str] = []

    def invoke(self, FunctionName: str, Payload: bytes) -> dict:
        self.invoked.append(FunctionName)
        answer = code_validator.handler(json.loads(Payload))
        return {"StatusCode": 200, "Payload": io.BytesIO(json.dumps(answer).encode())}


def test_deployed_the_manage_function_asks_the_code_validator_function():
    lam = InvokedLambda()
    completed = ValidatorFunction(lam, "stack-CodeValidator").complete(SNOOPING, {"name": "m"})
    assert lam.invoked == ["stack-CodeValidator"]
    assert completed["input"][0]["name"] == "x"
    failing = model_py("return None")
    with pytest.raises(ModelRejected, match="must return the ModelConfig it was given"):
        ValidatorFunction(lam, "f").complete(failing, {"name": "m"})
    assert (
        "not a code-validator event"
        in code_validator.handler({"model_py": "%%%", "config": {}})["error"]
    )


def test_what_model_code_starts_during_auto_complete_ends_with_it(tmp_path):
    # Given auto_complete_config that starts a process meant to outlive it
    marker = tmp_path / "alive"
    later = f"import time, pathlib; time.sleep(2); pathlib.Path({str(marker)!r}).touch()"
    source = (
        "import subprocess, sys\n"
        "class TritonPythonModel:\n"
        "    @staticmethod\n"
        "    def auto_complete_config(c):\n"
        f"        subprocess.Popen([sys.executable, '-c', {later!r}])\n"
        "        return c\n"
    ).encode()
    # When it completes
    IsolatedProcess().complete(source, {"name": "m"})
    # Then nothing it started is left to run later
    time.sleep(3)
    assert not marker.exists()
