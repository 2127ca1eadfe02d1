"""The first hour locally: the model-repository folder mirror, the command line's flags,
progress while a large version validates, text logs and the access log."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from lambdaserve import cli
from lambdaserve.local.mirror import RepositoryMirror
from lambdaserve.processes.asgi.access_log import AccessLog
from lambdaserve.processes.logs import use_text_logs
from lambdaserve.serving.residency.progress import TransferProgress, human_bytes
from tests import builders


def keys(aws) -> set[str]:
    listed = aws.clients.s3.list_objects_v2(Bucket=aws.settings.bucket, Prefix="models/")
    return {o["Key"] for o in listed.get("Contents", [])}


def write(path: Path, body: bytes, age_s: float = 5.0) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(body)
    old = time.time() - age_s  # settled: not being written any more
    os.utime(path, (old, old))


def test_the_folder_is_mirrored_into_the_bucket(aws, tmp_path: Path):
    root = tmp_path / "repo"
    write(root / "mlp" / "config.pbtxt", b"max_batch_size: 8")
    write(root / "mlp" / "1" / "model.onnx", builders.onnx_mlp())
    write(root / "mlp" / "1" / ".model.onnx.swp", b"editor junk")
    write(root / ".git" / "HEAD", b"ref")
    mirror = RepositoryMirror(root, aws.clients.s3, aws.settings.bucket)
    # When the mirror syncs at start
    first = mirror.sync()
    # Then the layout is in the bucket, configs first, hidden and temporary files left out
    assert first.uploaded == ("mlp/config.pbtxt", "mlp/1/model.onnx")
    assert keys(aws) == {"models/mlp/config.pbtxt", "models/mlp/1/model.onnx"}
    # And an unchanged folder uploads nothing
    assert mirror.sync().uploaded == ()
    # When a version is added, a file changed and another version deleted
    write(root / "mlp" / "2" / "model.onnx", builders.onnx_mlp(4, 2))
    write(root / "mlp" / "config.pbtxt", b"max_batch_size: 4")
    (root / "mlp" / "1" / "model.onnx").unlink()
    second = mirror.sync()
    assert set(second.uploaded) == {"mlp/2/model.onnx", "mlp/config.pbtxt"}
    assert second.deleted == ("mlp/1/model.onnx",)
    body = aws.clients.s3.get_object(Bucket=aws.settings.bucket, Key="models/mlp/config.pbtxt")
    assert body["Body"].read() == b"max_batch_size: 4"


def test_objects_of_models_the_folder_never_held_are_left_alone(aws, tmp_path: Path):
    aws.put("models/uploaded-by-hand/1/model.onnx", builders.onnx_mlp())
    root = tmp_path / "repo"
    write(root / "mlp" / "1" / "model.onnx", builders.onnx_mlp())
    RepositoryMirror(root, aws.clients.s3, aws.settings.bucket).sync()
    assert "models/uploaded-by-hand/1/model.onnx" in keys(aws)


def test_a_file_still_being_written_waits_for_the_next_pass(aws, tmp_path: Path):
    root = tmp_path / "repo"
    (root / "big" / "1").mkdir(parents=True)
    (root / "big" / "1" / "model.onnx").write_bytes(b"half a model")  # modified just now
    mirror = RepositoryMirror(root, aws.clients.s3, aws.settings.bucket, settle_s=30)
    result = mirror.sync()
    assert result.uploaded == () and result.settling == ("big/1/model.onnx",)


def test_the_watcher_publishes_what_changes(aws, tmp_path: Path):
    root = tmp_path / "repo"
    root.mkdir()
    mirror = RepositoryMirror(root, aws.clients.s3, aws.settings.bucket, settle_s=0.2)
    mirror.resync_s = 1.0  # whether or not the notification arrives, a resync finds it
    thread, stop = mirror.start()
    try:
        target = root / "mlp" / "1" / "model.onnx"
        target.parent.mkdir(parents=True)
        target.write_bytes(builders.onnx_mlp())
        deadline = time.monotonic() + 20
        while "models/mlp/1/model.onnx" not in keys(aws):
            assert time.monotonic() < deadline, "the watcher never published the new file"
            time.sleep(0.1)
    finally:
        stop.set()
        thread.join(10)


@pytest.mark.parametrize("value", ["0", "21", "x"])
def test_worker_poll_wait_is_range_checked(value, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["worker", "--poll-wait", value])
    assert exit_.value.code == 2
    assert "--poll-wait" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["dev", "serve", "worker", "reconcile"])
def test_every_flag_says_its_default(command, capsys):
    with pytest.raises(SystemExit):
        cli.main([command, "--help"])
    text = capsys.readouterr().out
    assert "(default:" in text
    if command == "reconcile":
        assert "--aws-endpoint" in text
    if command == "dev":
        assert "--model-repository" in text and "--log-level" in text


def test_reconcile_takes_the_endpoint_flag(monkeypatch):
    seen = {}

    def fake(settings):
        seen["endpoint"] = settings.endpoint_url

        class Services:
            class registrar:
                @staticmethod
                def reconcile_all() -> int:
                    return 0

        return Services

    from lambdaserve import settings
    from lambdaserve.wiring import manage

    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.setattr(manage, "build_manage_services", fake)
    settings.get_settings.cache_clear()
    try:
        assert cli.main(["reconcile", "--aws-endpoint", "http://127.0.0.1:4599"]) == 0
    finally:
        settings.get_settings.cache_clear()
        os.environ.pop("AWS_ENDPOINT_URL", None)
    assert seen["endpoint"] == "http://127.0.0.1:4599"


def _big_onnx(megabytes: int) -> bytes:
    weight = np.ones((megabytes * 1024 * 256 // 4, 4), np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"])],
        "big",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", weight.shape[0]])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 4])],
        initializer=[numpy_helper.from_array(weight, "W")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return bytes(model.SerializeToString())


def test_a_large_version_says_how_its_validation_goes(aws, monkeypatch, caplog):
    reasons: list[str] = []
    catalog = aws.services.catalog
    real = catalog.set_loading_reason

    def recording(record, reason):
        reasons.append(reason)
        assert catalog.get_version(record.model, record.version).state == "LOADING"
        return real(record, reason)

    monkeypatch.setattr(catalog, "set_loading_reason", recording)
    monkeypatch.setattr(aws.services.registrar._validator, "_max_bytes", 64 * 1024**2)
    aws.put("models/big/1/model.onnx", _big_onnx(20))
    caplog.set_level(logging.INFO, logger="lambdaserve")
    aws.services.registrar.on_version_change("big", 1)
    # Then the LOADING reason told the download (size, rate) and the validation
    assert any(r.startswith("downloading 20.0 MB") and "/s" in r for r in reasons), reasons
    assert "validating 20.0 MB with onnxruntime" in reasons
    assert catalog.get_version("big", 1).state == "READY"
    assert "big version 1 is READY" in caplog.text


def test_transfer_progress_reports_sizes_and_rates():
    now = [0.0]
    lines: list[str] = []
    progress = TransferProgress("downloading", 100 * 1024**2, lines.append, clock=lambda: now[0])
    now[0] = 2.0
    progress(50 * 1024**2)
    assert lines == ["downloading 100.0 MB: 50% (50.0 MB) at 25.0 MB/s"]
    progress(1)  # within the second: no new line
    assert len(lines) == 1
    assert human_bytes(562) == "562 B" and human_bytes(3 * 1024**3) == "3.0 GB"


@pytest.fixture
def restore_logging():
    """use_text_logs reconfigures the process's loggers; other tests expect the defaults."""
    names = ["lambdaserve", *logging.root.manager.loggerDict]
    saved = {
        name: (list(lg.handlers), lg.propagate, lg.level)
        for name in names
        if name.startswith("lambdaserve")
        and isinstance(lg := logging.getLogger(name), logging.Logger)
    }
    captured = logging.getLogger("py.warnings")
    saved_captured = (list(captured.handlers), captured.propagate)
    yield
    for name, (handlers, propagate, level) in saved.items():
        logger = logging.getLogger(name)
        logger.handlers[:] = handlers
        logger.propagate, logger.level = propagate, level
    logging.captureWarnings(False)
    captured.handlers[:], captured.propagate = saved_captured


def test_text_logs_replace_json_locally(capfd, restore_logging):
    from lambdaserve.handlers import infer  # its Powertools logger writes JSON

    use_text_logs("info")
    logging.getLogger("lambdaserve.serving.model_server").info("loaded %s", "mlp")
    infer.logger.info("from the handler")
    err = capfd.readouterr().err
    assert "lambdaserve.serving.model_server  loaded mlp" in err
    assert "from the handler" in err and '"level"' not in err


def test_a_librarys_warning_is_a_line_of_the_same_log(capfd, restore_logging):
    import warnings

    use_text_logs("info")
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.warn("a library's note", UserWarning, stacklevel=1)
    err = capfd.readouterr().err
    line = next(line for line in err.splitlines() if "a library's note" in line)
    assert "py.warnings" in line and "WARNING" in line


def test_the_access_log_names_model_version_status_and_latency(caplog):
    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send(
            {"type": "http.response.body", "body": b'{"model_name":"mlp","model_version":"3"}'}
        )

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        return None

    caplog.set_level(logging.INFO, logger="lambdaserve.access")
    scope = {"type": "http", "method": "POST", "path": "/v2/models/mlp/infer"}
    loop = asyncio.new_event_loop()  # private: asyncio.run would unset the thread's loop
    try:
        loop.run_until_complete(AccessLog(app)(scope, receive, send))
    finally:
        loop.close()
    [line] = [r.getMessage() for r in caplog.records if r.name == "lambdaserve.access"]
    assert line.startswith("POST /v2/models/mlp/infer 200 ") and line.endswith(
        " ms model=mlp version=3"
    )


def test_dev_no_lambda_limits_lifts_both_of_lambdas_6_mb_limits():
    from lambdaserve.local.dev import UNLIMITED_REQUEST_BYTES, lift_lambda_limits

    environ: dict[str, str] = {}
    lift_lambda_limits(environ)
    assert environ["LAMBDASERVE_MAX_RESPONSE_BYTES"] == "0"
    assert int(environ["LAMBDASERVE_MAX_REQUEST_BYTES"]) == UNLIMITED_REQUEST_BYTES
    # a limit the user set stays theirs
    chosen = {"LAMBDASERVE_MAX_REQUEST_BYTES": "1000"}
    lift_lambda_limits(chosen)
    assert chosen["LAMBDASERVE_MAX_REQUEST_BYTES"] == "1000"
