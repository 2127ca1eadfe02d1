"""TorchServe's archives as its users have them: built by torch-model-archiver from a
BaseHandler subclass, an eager model and a helper module, uploaded as ``models/<name>.mar``,
served by TorchServe's own worker code; hostile archives refused with the reason; a handler
that fails to load is never READY."""

from __future__ import annotations

import io
import json
import os
import shutil
import tarfile
import zipfile

import pytest

from lambdaserve.catalog import version_policy
from lambdaserve.errors import InvalidInput, ModelNotReady
from lambdaserve.metrics.custom import CUSTOM_METRICS
from lambdaserve.publishing.events import EventBatch
from lambdaserve.serving.raw_predictions import RawRequest, explain_raw, predict_raw
from lambdaserve.wiring.inference import build_model_server
from tests import builders
from tests.torchserve_archives import HANDLERS, archive, expected, workflow_archive

torch = pytest.importorskip("torch")
pytest.importorskip("ts")
pytestmark = pytest.mark.torch


@pytest.fixture
def enabled(model_code_enabled):
    return model_code_enabled


def upload(aws, key: str, body: bytes) -> None:
    aws.put(key, body)
    EventBatch(aws.services.registrar, aws.services.uploads).on_object_event(key)


@pytest.mark.parametrize("fmt", ["default", "tgz"])
def test_an_uploaded_mar_serves_its_handler_under_its_model_version(enabled, tmp_path, fmt):
    # Given an archive built by torch-model-archiver (BaseHandler subclass, eager model.py
    # with its state dict, a helper module, model-config.yaml)
    mar = archive(tmp_path, "tiny", "1.0", fmt)
    # When it is uploaded beside the models, as `aws s3 cp tiny.mar s3://<bucket>/models/`
    upload(enabled, f"models/{mar.name}", mar.read_bytes())
    # Then the model its manifest names has a READY version labelled with its modelVersion
    record = enabled.services.catalog.get_version("tiny", 1)
    assert (record.state, record.runtime) == (version_policy.READY, "torchserve_handler")
    assert enabled.services.catalog.get_model("tiny").version_labels == {"1.0": 1}
    # When a request reaches it, as TorchServe's /predictions/tiny/1.0 would send it
    server = build_model_server(enabled.settings, enabled.clients)
    body = json.dumps({"values": [0.5, -1.0, 2.0, 0.25]}).encode()
    answer = predict_raw(server, "tiny", 1, RawRequest((("body", json.loads(body)),), {}))
    # Then the answer is the eager model's, as computed by hand
    assert json.loads(answer.body) == expected(tmp_path, [[0.5, -1.0, 2.0, 0.25]])[0]
    # And TorchServe's context carries model-config.yaml's batchSize and handler section
    context = server.load(server.resolver.resolve("tiny", 1))._session.handler_context
    assert context.system_properties["batch_size"] == 4
    assert context.model_yaml_config["handler"] == {"scale": 2.0}
    # And the handler's custom metric reached this process's metrics
    families = {f.name: f for f in CUSTOM_METRICS.collect()}
    assert families["TinyRows"].samples[0].value >= 1


def test_the_same_upload_delivered_twice_is_one_version(enabled, tmp_path):
    mar = archive(tmp_path, "tiny").read_bytes()
    upload(enabled, "models/tiny.mar", mar)
    upload(enabled, "models/tiny.mar", mar)
    assert [v.version for v in enabled.services.catalog.versions("tiny")] == [1]


def test_a_function_handler_is_initialized_with_none_at_load(enabled, tmp_path):
    # Given a module-level handle(data, context), as TorchServe's docs show
    upload(enabled, "models/function.mar", archive(tmp_path, "function", "2.1").read_bytes())
    assert enabled.services.catalog.get_model("function").version_labels == {"2.1": 1}
    server = build_model_server(enabled.settings, enabled.clients)
    # When it is called, it was initialized first with handle(None, context)
    answer = predict_raw(server, "function", None, RawRequest((("body", b"abc"),), {}))
    assert json.loads(answer.body)["initialized_for"] == "function"


def test_a_handler_failing_to_load_is_never_ready_and_says_why(enabled, tmp_path):
    """Given a handler whose initialize raises (code never runs in the manage function)
    When it is uploaded
    Then the catalog never says READY: the serving side loaded it first and the version is
    UNAVAILABLE with the handler's own error, naming where it was checked
    And a request is refused with that error."""
    states = []
    catalog = enabled.services.catalog
    put_version = catalog.put_version

    def watched(record):  # every state the catalog is told, from the moment of upload
        states.append(record.state)
        return put_version(record)

    catalog.put_version = watched
    upload(enabled, "models/broken.mar", archive(tmp_path, "broken").read_bytes())
    record = catalog.get_version("broken", 1)
    assert version_policy.READY not in states
    assert record.state == version_policy.UNAVAILABLE
    assert "the tokenizer file is missing" in record.reason
    assert "failed to load where it serves (the infer process" in record.reason
    server = build_model_server(enabled.settings, enabled.clients)
    with pytest.raises(ModelNotReady, match="tokenizer"):
        predict_raw(server, "broken", None, RawRequest((("body", b"x"),), {}))


def test_a_handler_failing_at_its_first_request_load_is_checked_again_on_reupload(
    enabled, tmp_path, caplog
):
    """Given a version that loaded at publish but failed where a request loaded it later
    When the identical archive is uploaded again
    Then it is validated and loaded again (and the log says so), not deduplicated."""
    mar = archive(tmp_path, "function", "2.1").read_bytes()
    upload(enabled, "models/function.mar", mar)
    catalog = enabled.services.catalog
    record = catalog.get_version("function", 1)
    assert record.state == version_policy.READY
    assert catalog.record_load_failure("function", 1, record.fingerprint, "it broke there")
    enabled.services.registrar.apply_policy("function")
    assert catalog.get_version("function", 1).state == version_policy.UNAVAILABLE
    with caplog.at_level("INFO", logger="lambdaserve"):
        upload(enabled, "models/function.mar", mar)
    assert catalog.get_version("function", 1).state == version_policy.READY
    assert "validating again (last time: it broke there)" in caplog.text


def _zip(entries: dict[str, bytes], links: tuple[str, ...] = ()) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as out:
        for name, data in entries.items():
            info = zipfile.ZipInfo(name)
            if name in links:
                info.external_attr = 0o120777 << 16
            out.writestr(info, data, zipfile.ZIP_DEFLATED)
    return buffer.getvalue()


MANIFEST = json.dumps(
    {"model": {"modelName": "hostile", "modelVersion": "1.0", "handler": "handler.py"}}
).encode()
HANDLER = (HANDLERS / "function" / "handler.py").read_bytes()


@pytest.mark.parametrize(
    ("entries", "links", "why"),
    [
        (
            {"MAR-INF/MANIFEST.json": MANIFEST, "handler.py": HANDLER, "../escape.py": b"x"},
            (),
            "points outside the archive",
        ),
        (
            {"MAR-INF/MANIFEST.json": MANIFEST, "handler.py": HANDLER, "/etc/passwd": b"x"},
            (),
            "points outside the archive",
        ),
        (
            {"MAR-INF/MANIFEST.json": MANIFEST, "handler.py": HANDLER, "link": b"/etc/passwd"},
            ("link",),
            "link or special file",
        ),
        (
            {"MAR-INF/MANIFEST.json": MANIFEST, "handler.py": HANDLER, "zeros": bytes(50 << 20)},
            (),
            "decompression bomb",
        ),
        ({"MAR-INF/MANIFEST.json": MANIFEST}, (), "names 'handler.py', which the archive"),
        ({"handler.py": HANDLER}, (), "has no MAR-INF/MANIFEST.json"),
    ],
)
def test_hostile_archives_are_unavailable_with_the_reason(enabled, entries, links, why):
    # When a crafted .mar is uploaded
    upload(enabled, "models/hostile.mar", _zip(entries, links))
    # Then nothing was unpacked, and the index shows the archive's rejection
    assert enabled.services.repository.versions("hostile") == []
    [record] = enabled.services.catalog.versions("hostile")
    assert record.state == version_policy.UNAVAILABLE
    assert record.reason.startswith("archive hostile.mar: ") and why in record.reason


def test_a_tar_with_a_symlink_is_refused(enabled):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as out:
        for name, data in (("MAR-INF/MANIFEST.json", MANIFEST), ("handler.py", HANDLER)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            out.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("weights.pt")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/shadow"
        out.addfile(link)
    upload(enabled, "models/hostile.tar.gz", buffer.getvalue())
    [record] = enabled.services.catalog.versions("hostile")
    assert "link or special file" in record.reason


def test_an_unpacked_archive_in_a_version_directory_serves_too(enabled, tmp_path):
    # Given TorchServe's no-archive format: the archive's files, MAR-INF included
    unpacked = tmp_path / "unpacked"
    with zipfile.ZipFile(archive(tmp_path, "tiny")) as mar:
        mar.extractall(unpacked)
    for path in sorted(p for p in unpacked.rglob("*") if p.is_file()):
        enabled.put(f"models/tiny/3/{path.relative_to(unpacked).as_posix()}", path.read_bytes())
    enabled.services.registrar.reconcile_model("tiny")
    assert enabled.services.catalog.get_version("tiny", 3).state == version_policy.READY
    server = build_model_server(enabled.settings, enabled.clients)
    rows = [[1.0, 2.0, 3.0, 4.0]]
    answer = predict_raw(server, "tiny", 3, RawRequest((("body", {"values": rows[0]}),), {}))
    assert json.loads(answer.body) == expected(tmp_path, rows)[0]
    shutil.rmtree(unpacked)
    assert os.environ.get("TORCH_FORCE_WEIGHTS_ONLY_LOAD") == "1"


def test_explanations_reach_the_handlers_explain_handle(enabled, tmp_path):
    # Given an archive whose handler defines get_insights (BaseHandler's explain_handle)
    upload(enabled, "models/tiny.mar", archive(tmp_path, "tiny").read_bytes())
    server = build_model_server(enabled.settings, enabled.clients)
    row = [0.5, -1.0, 2.0, 0.25]
    # When TorchServe's explanations API is asked, for target class 2
    fields = (("data", {"values": row}), ("target", 2))  # TorchServe's rows: one key per field
    answer = explain_raw(server, "tiny", None, RawRequest(fields, {"explain": "True"}))
    # Then the answer is input x gradient of that class's logit, as computed by hand
    weights = torch.load(tmp_path / "tiny.pt", weights_only=True)["layer.weight"]
    scaled = torch.tensor(row) * 2.0
    assert json.loads(answer.body) == pytest.approx((weights[2] * scaled).tolist(), rel=1e-5)


def test_explanations_of_a_tensor_model_say_where_they_apply(aws):
    aws.put("models/mlp/1/model.onnx", builders.onnx_mlp())
    aws.services.registrar.reconcile_model("mlp")
    server = build_model_server(aws.settings, aws.clients)
    with pytest.raises(InvalidInput, match="explanations reach TorchServe handlers"):
        explain_raw(server, "mlp", None, RawRequest((("body", b"{}"),), {}))


def test_a_workflow_runs_its_function_nodes_around_its_model(enabled, tmp_path):
    # Given tiny.mar and a .war whose dag is pre_processing -> tiny -> post_processing
    upload(enabled, "models/tiny.mar", archive(tmp_path, "tiny").read_bytes())
    upload(enabled, "models/pipeline.war", workflow_archive(tmp_path).read_bytes())
    assert enabled.services.catalog.get_version("pipeline", 1).state == version_policy.READY
    server = build_model_server(enabled.settings, enabled.clients)
    # When a request reaches the workflow (TorchServe's /wfpredict/pipeline)
    row = [0.25, 0.5, -2.0, 1.0]
    answer = predict_raw(server, "pipeline", None, RawRequest((("body", {"raw": row}),), {}))
    # Then the function nodes ran around the model, as computed by hand
    by_hand = expected(tmp_path, [row])[0]
    labels = ["cat", "dog", "bird"]
    assert json.loads(answer.body) == {
        "label": labels[by_hand["class"]],
        "p": max(by_hand["probabilities"]),
    }


def test_a_workflow_naming_an_unknown_node_is_refused(enabled, tmp_path):
    war = workflow_archive(tmp_path)
    with zipfile.ZipFile(war) as original:
        files = {i.filename: original.read(i) for i in original.infolist()}
    files["spec.yaml"] = files["spec.yaml"].replace(b"[post_processing]", b"[missing_step]")
    upload(enabled, "models/pipeline.war", _zip(files))
    record = enabled.services.catalog.get_version("pipeline", 1)
    assert record.state == version_policy.UNAVAILABLE
    assert "dag node 'missing_step' is neither a model" in record.reason


BASE_HANDLER = b"""
import torch
from ts.torch_handler.base_handler import BaseHandler


class DoublingHandler(BaseHandler):
    def preprocess(self, data):
        return torch.tensor([row["body"] for row in data], dtype=torch.float32)

    def postprocess(self, output):
        model = self.manifest["model"]
        version, file = model["modelVersion"], model["serializedFile"]
        return [{"out": r.tolist(), "modelVersion": version, "file": file} for r in output]
"""


class _Doubling(torch.nn.Module):
    def forward(self, x):
        return x * 2


def test_a_bare_base_handler_subclass_gets_the_manifest_the_archiver_writes(enabled, tmp_path):
    """Given <v>/handler.py, a BaseHandler subclass (TorchServe's custom_service.md shape),
    beside a TorchScript model.pt, and no MAR-INF/MANIFEST.json
    When it is published and called
    Then BaseHandler.initialize found context.manifest as torch-model-archiver writes it
    (serializedFile, modelVersion "1.0") and loaded the model: it answers."""
    scripted = tmp_path / "model.pt"
    torch.jit.script(_Doubling()).save(str(scripted))
    enabled.put("models/doubler/1/model.pt", scripted.read_bytes())
    upload(enabled, "models/doubler/1/handler.py", BASE_HANDLER)
    record = enabled.services.catalog.get_version("doubler", 1)
    assert record.state == version_policy.READY, record.reason
    server = build_model_server(enabled.settings, enabled.clients)
    answer = predict_raw(server, "doubler", None, RawRequest((("body", [1.0, 2.5]),), {}))
    assert json.loads(answer.body) == {
        "out": [2.0, 5.0],
        "modelVersion": "1.0",
        "file": "model.pt",
    }


@pytest.mark.parametrize("model", ["tiny", "served_as"])
def test_a_mar_dropped_into_a_version_directory_serves_as_that_version(enabled, tmp_path, model):
    """Given an archive built by torch-model-archiver
    When it is uploaded into a version directory, as Triton lays versions out
    (models/<model>/3/tiny.mar; the directory's model may differ from the manifest's)
    Then that version serves the archive's handler, and the packed file itself is not part of
    what is downloaded where it serves."""
    mar = archive(tmp_path, "tiny", "1.0")
    upload(enabled, f"models/{model}/3/tiny.mar", mar.read_bytes())
    record = enabled.services.catalog.get_version(model, 3)
    assert (record.state, record.runtime) == (version_policy.READY, "torchserve_handler"), (
        record.reason
    )
    assert "tiny.mar" not in {f["path"] for f in record.files}
    server = build_model_server(enabled.settings, enabled.clients)
    row = [0.5, -1.0, 2.0, 0.25]
    answer = predict_raw(server, model, 3, RawRequest((("body", {"values": row}),), {}))
    assert json.loads(answer.body) == expected(tmp_path, [row])[0]
    # the same upload delivered again unpacks nothing again
    before = enabled.clients.s3.list_objects_v2(Bucket=enabled.settings.bucket)["KeyCount"]
    upload(enabled, f"models/{model}/3/tiny.mar", mar.read_bytes())
    assert enabled.clients.s3.list_objects_v2(Bucket=enabled.settings.bucket)["KeyCount"] == before
    assert enabled.services.catalog.get_version(model, 3).state == version_policy.READY


def test_an_archive_needing_a_missing_package_serves_after_install_and_load(
    enabled, tmp_path, monkeypatch
):
    """Given an archive whose handler imports a package this environment lacks
    When it is uploaded
    Then it is never READY: the reason names the missing package
    When the package is installed and Triton's load is called (no restart, no re-upload)
    Then it is checked again, serves, and its modelVersion label addresses it."""
    from tests.torchserve_archives import _model_archiver

    package = "tokenizers_for_this_test"
    handler = tmp_path / "handler.py"
    handler.write_text(
        f"import {package}\n\n\ndef handle(data, context):\n"
        f"    return [{package}.PREFIX + 'ok' for _ in data or []]\n"
    )
    args = ["--model-name", "needs", "--version", "3.1", "--handler", str(handler)]
    mar = _model_archiver(tmp_path, args) / "needs.mar"
    upload(enabled, "models/needs.mar", mar.read_bytes())
    record = enabled.services.catalog.get_version("needs", 1)
    assert record.state == version_policy.UNAVAILABLE
    assert f"No module named '{package}'" in record.reason
    assert enabled.services.catalog.get_model("needs").version_labels == {}
    site = tmp_path / "site"
    site.mkdir()
    (site / f"{package}.py").write_text("PREFIX = '>'\n")
    monkeypatch.syspath_prepend(str(site))
    enabled.services.manager.load("needs")
    assert enabled.services.catalog.get_version("needs", 1).state == version_policy.READY
    assert enabled.services.catalog.get_model("needs").version_labels == {"3.1": 1}
    server = build_model_server(enabled.settings, enabled.clients)
    answer = predict_raw(server, "needs", 1, RawRequest((("body", b"x"),), {}))
    assert answer.body == b">ok"
