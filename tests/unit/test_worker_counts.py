"""How many workers a version gets and its timeout, from what the model ships and where it
runs."""

from __future__ import annotations

import json

from lambdaserve.config.model_config import build
from lambdaserve.settings import Settings
from lambdaserve.workers.options import WorkerOptions, counts_for
from lambdaserve.workers.start import runs_in_workers


def test_a_handlers_model_config_yaml_sets_its_workers_and_timeout(tmp_path):
    """Given a bare handler with model-config.yaml minWorkers 2, maxWorkers 4, responseTimeout 7,
    When its counts are read for `serve` and for Lambda (one worker per version),
    Then serve gets 2..4 and a 7 s timeout, Lambda exactly one worker with the same timeout."""
    (tmp_path / "handler.py").write_text("def handle(data, context):\n    return data\n")
    (tmp_path / "model-config.yaml").write_text(
        "minWorkers: 2\nmaxWorkers: 4\nresponseTimeout: 7\n"
    )
    served = counts_for("torchserve_handler", tmp_path / "handler.py", 1, WorkerOptions())
    assert (served.min_workers, served.max_workers, served.timeout_s) == (2, 4, 7.0)
    in_lambda = counts_for(
        "torchserve_handler", tmp_path / "handler.py", 1, WorkerOptions(per_version=1)
    )
    assert (in_lambda.min_workers, in_lambda.max_workers, in_lambda.timeout_s) == (1, 1, 7.0)


def test_a_python_models_instance_group_count_is_its_worker_count(tmp_path):
    """Given a Python model's config with instance_group [{count: 3, kind: KIND_CPU}],
    When it is built and its counts read,
    Then it asks for three workers, and its JSON form keeps the count."""
    config = build({"backend": "python", "instance_group": [{"count": 3, "kind": "KIND_CPU"}]}, "m")
    assert config.instance_count == 3
    assert config.to_triton_json()["instance_group"] == [{"kind": "KIND_CPU", "count": 3}]
    assert build(config.to_triton_json(), "m").instance_count == 3
    counts = counts_for("python", tmp_path / "model.py", config.instance_count, WorkerOptions())
    assert (counts.min_workers, counts.max_workers, counts.timeout_s) == (3, 3, 120.0)


def test_the_settings_say_whether_workers_run_and_whether_this_is_lambda():
    """Given the environment of a Lambda function, with workers left at the default,
    When the settings are read, and again with LAMBDASERVE_CODE_WORKERS=0 (or false, off),
    Then workers are on by default, the timeout is the one given and the process knows it
    is Lambda; the opt-out turns them off."""
    settings = Settings.from_env(
        {"LAMBDASERVE_WORKER_TIMEOUT_S": "30", "AWS_LAMBDA_FUNCTION_NAME": "infer"}
    )
    assert settings.code_workers and settings.in_lambda and settings.worker_timeout_s == 30
    assert Settings.from_env({"LAMBDASERVE_CODE_WORKERS": "1"}).code_workers
    for off in ("0", "false", "OFF", "no"):
        assert not Settings.from_env({"LAMBDASERVE_CODE_WORKERS": off}).code_workers


def _unpacked_war(directory, spec: str):
    (directory / "WAR-INF").mkdir()
    manifest = {"workflow": {"workflowName": "w", "specFile": "spec.yaml", "handler": "h.py"}}
    (directory / "WAR-INF" / "MANIFEST.json").write_text(json.dumps(manifest))
    (directory / "spec.yaml").write_text(spec)
    (directory / "h.py").write_text("def pre(data, context):\n    return data\n")
    return directory / "WAR-INF" / "MANIFEST.json"


def test_a_workflow_runs_in_workers_with_a_timeout_its_dag_can_run_in(tmp_path):
    """Given an unpacked .war whose two nodes may each take 100 s, tried twice,
    When its counts are read and whether it runs in workers is asked,
    Then its worker timeout is the DAG's 400 s (not the 120 s default, which would kill a
    legal run), and it runs in workers exactly when workers are on, as a Paddle pipeline does."""
    spec = "models:\n  retry-attempts: 1\n  timeout-ms: 100000\n  m:\n    url: m.mar\n"
    manifest = _unpacked_war(tmp_path, spec + "dag:\n  pre: [m]\n")
    counts = counts_for("torchserve_handler", manifest, 1, WorkerOptions())
    assert (counts.min_workers, counts.max_workers, counts.timeout_s) == (1, 1, 400.0)
    config = build({"backend": "python"}, "w")
    on, off = WorkerOptions(enabled=True), WorkerOptions()
    for backend, path in (
        ("torchserve_handler", manifest),
        ("paddle_pipeline", tmp_path / "web_service.py"),
    ):
        assert runs_in_workers(backend, path, config, on)
        assert not runs_in_workers(backend, path, config, off)
        assert runs_in_workers(backend, path, config, off, own_environment=True)
