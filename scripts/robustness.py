"""Robustness figures (issue: hardening) against the real local stack, in one run.

    .venv/bin/python scripts/robustness.py [--requests 2000] [--poisoned 0.05]

Starts `lambdaserve dev`'s stack in this process on free ports (moto server, event pumps,
both APIs) and a `lambdaserve serve` front door beside it, then reports:
  async burst    N async requests with a share of poisoned members (their stored body deleted
                 before the batcher runs): innocent failures and lost requests (goal 0, 0)
  injections     envelope fields put into async HTTP bodies that took effect (goal 0)
  bad inputs     hand-made hostile requests through both doors and the management API that
                 answered 5xx (goal 0)
  bad uploads    hostile versions that did not end READY or UNAVAILABLE (goal 0)
  bad configs    broken configs uploaded over serving models: served versions lost (goal 0)
  kill -9        `lambdaserve serve` killed mid-download of a large model, then restarted:
                 leftovers in the cache and wrong answers (goal 0, 0)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import numpy as np
import onnx
from onnx import TensorProto, helper

from lambdaserve.local.demo import demo_mlp_bytes
from lambdaserve.local.dev import DevStack
from lambdaserve.local.dev_options import DevOptions
from lambdaserve.local.emulator import free_port
from lambdaserve.processes.background import BackgroundServer
from lambdaserve.processes.serve import build_serving_app

ROW = [{"name": "INPUT__0", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]
DEEP = b"[" * 5000 + b"]" * 5000


def wait(probe: Any, timeout_s: float) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.1)
    return None


def state(api: httpx.Client, model: str, version: int) -> str | None:
    for entry in api.post("/v2/repository/index").json():
        if entry["name"] == model and entry["version"] == str(version):
            return str(entry["state"])
    return None


def binary_request(row: np.ndarray) -> tuple[bytes, str]:
    """A binary v2 request, as tritonclient writes it."""
    import tritonclient.http as triton

    tensor = triton.InferInput("INPUT__0", list(row.shape), "FP32")
    tensor.set_data_from_numpy(row, binary_data=True)
    body, header_length = triton.InferenceServerClient.generate_request_body([tensor])
    return body, str(header_length)


def async_burst(stack: DevStack, api: httpx.Client, url: str, n: int, share: float) -> dict:
    stack.stop_event_pumps()  # requests accumulate, as behind a busy batcher
    rng = np.random.default_rng(0)

    def submit(_: int) -> str:
        body, length = binary_request(rng.random((1, 4), dtype=np.float32))
        with httpx.Client(base_url=url, timeout=60) as client:
            response = client.post(
                "/v2/models/mlp/infer",
                content=body,
                headers={"Prefer": "respond-async", "Inference-Header-Content-Length": length},
            )
        assert response.status_code == 202, response.text
        return str(response.json()["id"])

    started = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        ids = list(pool.map(submit, range(n)))
    submitted_s = time.monotonic() - started
    from lambdaserve.settings import get_settings
    from lambdaserve.wiring.aws import AwsClients

    s3 = AwsClients(get_settings()).s3
    poisoned = set(ids[:: max(1, round(1 / share))]) if share > 0 else set()
    for request_id in poisoned:
        s3.delete_object(Bucket=get_settings().bucket, Key=f"requests/{request_id}")
    stack.start_event_pumps()
    outcomes: dict[str, int] = {}
    deadline = time.monotonic() + 600
    with httpx.Client(base_url=url, timeout=60) as client:
        while len(outcomes) < n and time.monotonic() < deadline:
            for request_id in ids:
                if request_id not in outcomes:
                    status = client.get(f"/v2/requests/{request_id}").status_code
                    if status != 202:
                        outcomes[request_id] = status
            time.sleep(0.5)
    innocent = [i for i in ids if i not in poisoned]
    return {
        "requests": n,
        "poisoned": len(poisoned),
        "submit_s": round(submitted_s, 1),
        "drain_s": round(time.monotonic() - started - submitted_s, 1),
        "innocent_failures": sum(1 for i in innocent if outcomes.get(i, 200) != 200),
        "poisoned_answered_400": sum(1 for i in poisoned if outcomes.get(i) == 400),
        "lost": n - len(outcomes),
    }


def injections(url: str) -> dict:
    fields = {
        "reply_to": "https://sqs.us-east-1.amazonaws.com/000000000000/lambdaserve-repository-events",
        "payload_key": "requests/someone-elses",
        "model_version": 77,
        "model_name": "other",
        "deadline_ms": 1,
        "header_length": 3,
        "unknown_field": 1,
    }
    took_effect = []
    with httpx.Client(base_url=url, timeout=30) as client:
        for field, value in fields.items():
            response = client.post(
                "/v2/models/mlp/infer",
                json={"inputs": ROW, field: value},
                headers={"Prefer": "respond-async"},
            )
            if response.status_code != 400:
                took_effect.append(field)
    return {"tried": len(fields), "took_effect": took_effect}


def bad_inputs(urls: list[str], management: str) -> dict:
    def body(**change: Any) -> bytes:
        return json.dumps({"inputs": [{**ROW[0], **change}]}).encode()

    infer_cases: list[tuple[bytes, dict[str, Any]]] = [
        (b"", {}),
        (b"{", {}),
        (b"[]", {}),
        (b'{"inputs": {}}', {}),
        (b'{"inputs": [1]}', {}),
        (body(shape=[1] * 70), {}),
        (body(shape=[-1, 4]), {}),
        (body(shape=[10**12, 10**12]), {}),
        (body(shape="x"), {}),
        (body(datatype="FP128"), {}),
        (body(datatype="BF16"), {}),
        (body(data=[1, None, 3, 4]), {}),
        (body(data=[1, "x", 3, 4]), {}),
        (body(data=[[[[1, 2, 3, 4]]]]), {}),
        (body(data={"a": 1}), {}),
        (body(name=""), {}),
        (body(name=7), {}),
        (body(parameters=[1]), {}),
        (
            b'{"inputs":[{"name":"INPUT__0","datatype":"BYTES","shape":[1],"data":'
            + b"[" * 990
            + b'"x"'
            + b"]" * 990
            + b"}]}",
            {},
        ),
        (b'{"inputs": ' + DEEP + b"}", {}),
        (body(), {"Inference-Header-Content-Length": "²".encode()}),
        (body(), {"Inference-Header-Content-Length": b"9" * 5000}),
        (body(), {"Inference-Header-Content-Length": b"0"}),
        (body(), {"Inference-Header-Content-Length": b"-1"}),
        (body(parameters={"binary_data_size": 10**15}), {"Inference-Header-Content-Length": b"10"}),
        (json.dumps({"inputs": ROW, "outputs": [{"name": 5}]}).encode(), {}),
        (json.dumps({"inputs": ROW, "outputs": "x"}).encode(), {}),
        (
            json.dumps({"inputs": ROW, "parameters": {"timeout": "x"}}).encode(),
            {"Prefer": "respond-async"},
        ),
        (
            json.dumps({"inputs": ROW, "parameters": {"timeout": -1}}).encode(),
            {"Prefer": "respond-async"},
        ),
    ]
    paths = [
        "/v2/models/mlp/infer",
        "/v2/models/mlp/versions/1/infer",
        "/v2/models/mlp/versions/0/infer",
        "/v2/models/mlp/versions/99999999999999999999/infer",
        "/v2/models/..%2F..%2Fetc/infer",
        "/predictions/mlp",
    ]
    management_cases = [
        ("PUT", "/models/mlp", b'{"max_batch_size": ' + DEEP + b"}"),
        ("PUT", "/models/mlp", b'{"max_batch_size": "x"}'),
        ("PUT", "/models/mlp", b'{"version_policy": {"specific": {"versions": [-1]}}}'),
        ("POST", "/v2/repository/index", b'{"ready": ' + DEEP + b"}"),
        ("POST", "/v2/repository/index", b'{"ready": "yes"}'),
        ("POST", "/v2/repository/models/mlp/load", b'{"parameters": [1]}'),
        ("POST", "/v2/repository/models/mlp/load", b'{"parameters": "x"}'),
        ("POST", "/v2/repository/models/mlp/load", b'{"parameters": 5}'),
        (
            "POST",
            "/v2/repository/models/mlp/load",
            json.dumps({"parameters": {"config": "[" * 5000 + "]" * 5000}}).encode(),
        ),
        ("GET", "/models?limit=0", b""),
        ("GET", "/models?limit=x", b""),
        ("GET", "/models?next_page_token=%%%", b""),
        ("GET", "/models/mlp/abc", b""),
    ]
    fives: list[str] = []
    total = 0
    for url in urls:
        with httpx.Client(base_url=url, timeout=30) as client:
            for path in paths:
                for content, headers in infer_cases:
                    total += 1
                    response = client.post(path, content=content, headers=headers)
                    if response.status_code >= 500:
                        fives.append(f"{url}{path} {content[:60]!r} -> {response.status_code}")
    with httpx.Client(base_url=management, timeout=30) as client:
        for method, path, content in management_cases:
            total += 1
            response = client.request(method, path, content=content)
            if response.status_code >= 500:
                fives.append(f"{method} {path} {content[:60]!r} -> {response.status_code}")
    return {"requests": total, "5xx": len(fives), "examples": fives[:10]}


def bad_uploads(stack: DevStack, api: httpx.Client) -> dict:
    from lambdaserve.settings import get_settings
    from lambdaserve.wiring.aws import AwsClients

    s3, bucket = AwsClients(get_settings()).s3, get_settings().bucket
    mlp = demo_mlp_bytes()
    nul = _external_data_model("w\x00.bin")
    sample = json.dumps({"inputs": [{**ROW[0], "shape": [1, 3], "data": [1, 2, 3]}]}).encode()
    uploads: dict[str, dict[str, bytes]] = {
        "junk": {"model.onnx": b"<html>" * 100},
        "empty": {"model.onnx": b""},
        "long-name": {"model.onnx": mlp, "w" * 300 + ".bin": b"x"},
        "nul-external": {"model.onnx": nul},
        "missing-external": {"model.onnx": _external_data_model("w.bin")},
        "escaping-external": {"model.onnx": _external_data_model("../../etc/passwd")},
        "bad-warmup": {"model.onnx": mlp, "warmup/a.json": b"{"},
        "wrong-warmup": {"model.onnx": mlp, "warmup/a.json": sample},
        "huge-dims": {"model.onnx": _identity([1, 10**12])},
        "two-models": {"model.onnx": mlp, "model.pt": b"PK"},
        "pickle": {"model.pt": b"\x80\x04K\x01."},
        "no-model": {"labels.txt": b"a\nb\n"},
    }
    for name, files in uploads.items():
        for path, content in files.items():
            s3.put_object(Bucket=bucket, Key=f"models/bad-{name}/1/{path}", Body=content)
    stuck = []
    for name in uploads:
        final = wait(lambda n=name: state(api, f"bad-{n}", 1) in ("READY", "UNAVAILABLE"), 120)
        if not final:
            stuck.append(f"bad-{name}: {state(api, f'bad-{name}', 1)}")
    reasons = {
        e["name"]: e["reason"][:100]
        for e in api.post("/v2/repository/index").json()
        if e["name"].startswith("bad-")
    }
    leaks = [n for n, r in reasons.items() if "/tmp" in r or "validate-" in r]
    return {"uploads": len(uploads), "not_ending_in_a_state": stuck, "path_leaks": leaks}


def bad_configs(api: httpx.Client) -> dict:
    from lambdaserve.settings import get_settings
    from lambdaserve.wiring.aws import AwsClients

    s3, bucket = AwsClients(get_settings()).s3, get_settings().bucket
    configs = {
        "typo": b"max_batch_size: 8\ninptu [{ name: 'x' }]",
        "not-text": b"\xff\xfe\x00",
        "wrong-dims": b"max_batch_size: 8\n"
        b'input [{ name: "INPUT__0", data_type: TYPE_FP32, dims: [5] }]',
        "wrong-rank": b'input [{ name: "INPUT__0", data_type: TYPE_FP32, dims: [4] }]',
        "wrong-type": b'input [{ name: "INPUT__0", data_type: TYPE_INT64, dims: [-1, 4] }]',
        "wrong-name": b'input [{ name: "pixels", data_type: TYPE_FP32, dims: [-1, 4] }]',
        "wrong-platform": b'platform: "tensorrt_plan"',
        "unsupported": b'backend: "python"',
        "negative-batch": b"max_batch_size: -1",
        "bad-policy": b"version_policy: { specific: { versions: [] } }",
        "other-name": b'name: "someone-else"',
    }
    for name in configs:
        s3.put_object(Bucket=bucket, Key=f"models/cfg-{name}/1/model.onnx", Body=demo_mlp_bytes())
    for name in configs:
        assert wait(lambda n=name: state(api, f"cfg-{n}", 1) == "READY", 60)
    for name, body in configs.items():
        s3.put_object(Bucket=bucket, Key=f"models/cfg-{name}/config.pbtxt", Body=body)
    time.sleep(3)  # the events are handled
    noted = wait(
        lambda: all(
            "rejected" in e["reason"]
            for e in api.post("/v2/repository/index").json()
            if e["name"].startswith("cfg-")
        ),
        60,
    )
    lost = [n for n in configs if state(api, f"cfg-{n}", 1) != "READY"]
    return {"configs": len(configs), "served_versions_lost": lost, "all_shown": bool(noted)}


def kill_mid_download(stack: DevStack, megabytes: int = 150) -> dict:
    import os
    import signal
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    import onnxruntime as ort

    from lambdaserve.settings import get_settings
    from lambdaserve.wiring.aws import AwsClients

    side = int((megabytes * 1024 * 1024 / 4) ** 0.5)
    weight = np.random.default_rng(0).random((side, side), np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"])],
        "big",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", weight.shape[0]])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", side])],
        initializer=[onnx.numpy_helper.from_array(weight, "W")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    body = model.SerializeToString()
    settings = get_settings()
    AwsClients(settings).s3.put_object(
        Bucket=settings.bucket, Key="models/big/1/model.onnx", Body=body
    )
    with httpx.Client(base_url=f"http://127.0.0.1:{stack.options.management_port}") as api:
        assert wait(lambda: state(api, "big", 1) == "READY", 300), "big never became READY"
    work = Path(tempfile.mkdtemp())
    env = {**os.environ, "LAMBDASERVE_WORK_DIR": str(work)}

    def start() -> tuple[subprocess.Popen[bytes], str]:
        port = free_port()
        process = subprocess.Popen(
            [sys.executable, "-m", "lambdaserve.cli", "serve", "--port", str(port)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        url = f"http://127.0.0.1:{port}"
        assert wait(lambda: _answers(url), 60), "serve did not start"
        return process, url

    process, url = start()
    loader = ThreadPoolExecutor(1).submit(
        lambda: httpx.get(f"{url}/v2/models/big/ready", timeout=300)
    )
    blobs = work / "cache" / "blobs"
    partial = wait(lambda: list(blobs.glob("*.part")) if blobs.exists() else [], 120)
    partial_bytes = sum(p.stat().st_size for p in partial or [])
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    left_after_kill = len(list(blobs.glob("*.part")))
    with contextlib.suppress(Exception):  # the connection died with the server
        loader.result(timeout=10)
    process, url = start()
    try:
        x = np.random.default_rng(1).random((2, weight.shape[0]), dtype=np.float32)
        request = {
            "inputs": [
                {
                    "name": "x",
                    "datatype": "FP32",
                    "shape": list(x.shape),
                    "data": x.ravel().tolist(),
                }
            ]
        }
        answer = httpx.post(f"{url}/v2/models/big/infer", json=request, timeout=300)
        assert answer.status_code == 200, answer.text[:500]
        got = np.array(answer.json()["outputs"][0]["data"], np.float32).reshape(2, side)
        expected = ort.InferenceSession(body).run(None, {"x": x})[0]
        corrupt = int(not np.allclose(got, expected, rtol=1e-4, atol=1e-3))
    finally:
        process.terminate()
        process.wait(30)
    return {
        "model_mb": megabytes,
        "partial_bytes_when_killed": partial_bytes,
        "partial_files_after_kill": left_after_kill,
        "partial_files_after_restart": len(list(blobs.glob("*.part"))),
        "corrupt_answers": corrupt,
    }


def _answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}/v2/health/live", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _identity(shape: list[int]) -> bytes:
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "i",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return bytes(model.SerializeToString())


def _external_data_model(location: str) -> bytes:
    weight = onnx.numpy_helper.from_array(np.ones((4, 4), np.float32), name="W")
    weight.ClearField("raw_data")
    weight.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", "64")):
        entry = weight.external_data.add()
        entry.key, entry.value = key, value
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"])],
        "e",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        initializer=[weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return bytes(model.SerializeToString())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--poisoned", type=float, default=0.05)
    args = parser.parse_args()
    options = DevOptions(
        inference_port=free_port(),
        management_port=free_port(),
        aws_port=free_port(),
        demo=False,
    )
    stack = DevStack(options).start()
    inference = f"http://127.0.0.1:{options.inference_port}"
    management = f"http://127.0.0.1:{options.management_port}"
    serve = BackgroundServer(build_serving_app(True), "127.0.0.1", free_port()).start()
    try:
        from lambdaserve.settings import get_settings
        from lambdaserve.wiring.aws import AwsClients

        AwsClients(get_settings()).s3.put_object(
            Bucket=get_settings().bucket, Key="models/mlp/1/model.onnx", Body=demo_mlp_bytes()
        )
        with httpx.Client(base_url=management, timeout=30) as api:
            assert wait(lambda: state(api, "mlp", 1) == "READY", 60), "mlp never became READY"
            report = {
                "injections": injections(inference),
                "bad_inputs": bad_inputs([inference, serve.url], management),
                "bad_uploads": bad_uploads(stack, api),
                "bad_configs": bad_configs(api),
                "kill_mid_download": kill_mid_download(stack),
                "async_burst": async_burst(stack, api, inference, args.requests, args.poisoned),
            }
        print(json.dumps(report, indent=2))
    finally:
        serve.stop()
        stack.stop()


if __name__ == "__main__":
    main()
