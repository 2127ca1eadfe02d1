"""lambdaserve side by side with TorchServe and Triton: one run, this machine, ratios.

Same model for all (MLP 784->256->10, seeded; ONNX opset 17 with a dynamic batch for
lambdaserve and Triton, its TorchScript twin for TorchServe), the same request (one row of
784 floats as JSON_HEADERS), max batch 8, batching delay 0 and 5 ms, concurrency 1, 8, 32. Each
peer is installed into its own venv under bench/peers/, bound to 127.0.0.1, and stopped by
process group. Load comes from wrk (Debian package) when installed, else a bounded Python
generator; every point checks a sample answer against onnxruntime run directly.

    python scripts/bench_peers.py [--seconds 10] [--peers ours,torchserve,triton]

Writes bench/results/peers-<time>.json and bench/results/peers.png (copied to
docs/bench-peers.png for the README).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import boto3
import numpy as np
import onnx
import onnxruntime as ort
from bench_batching import JSON_HEADERS, load_python, load_wrk, start_stack
from cpu_cost import CpuMeter
from onnx import numpy_helper

from lambdaserve.local.demo import demo_mlp_bytes
from lambdaserve.local.emulator import free_port

ROOT = Path(__file__).resolve().parents[1]
PEERS_DIR = ROOT / "bench" / "peers"
RESULTS = ROOT / "bench" / "results"
HERE = Path(__file__).resolve().parent / "peers"
CONCURRENCY = (1, 8, 32)
DELAYS_MS = (0, 5)
OTHER_CPU_LIMIT = 0.3  # cores used by anything else before a point is repeated


@dataclass(frozen=True)
class Call:
    """One way to ask: a body and its headers (JSON, or Triton's binary tensor extension)."""

    body: bytes
    headers: dict[str, str]


@dataclass
class Running:
    """A started server: its process group, what to send where, how to read answers."""

    name: str
    process: subprocess.Popen[bytes]
    port: int
    path: str
    calls: dict[str, Call]
    answer: Callable[[bytes], np.ndarray]
    extra: dict[str, object] = field(default_factory=dict)
    spawned_at: float = field(default_factory=time.monotonic)  # built right after spawning


# ----------------------------------------------------------------------------- the model


def build_models(work: Path) -> tuple[Path, Path, np.ndarray, np.ndarray]:
    """ONNX and TorchScript twins with the same weights; a row and its expected output."""
    import torch

    onnx_bytes = demo_mlp_bytes(inputs=784, hidden=256, outputs=10, seed=0)
    onnx_path = work / "mlp.onnx"
    onnx_path.write_bytes(onnx_bytes)
    weights = {
        t.name: torch.from_numpy(numpy_helper.to_array(t).copy())
        for t in onnx.load_from_string(onnx_bytes).graph.initializer
    }

    class MLP(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            for name, value in weights.items():
                self.register_buffer(name, value)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            hidden = torch.relu(x @ self.W1 + self.b1)
            return torch.softmax(hidden @ self.W2 + self.b2, dim=-1)

    module = torch.jit.script(MLP().eval())
    torchscript_path = work / "mlp.pt"
    module.save(str(torchscript_path))
    row = np.random.default_rng(0).random((1, 784), dtype=np.float32)
    expected = ort.InferenceSession(onnx_bytes).run(None, {"INPUT__0": row})[0]
    twin = module(torch.from_numpy(row)).numpy()
    np.testing.assert_allclose(twin, expected, rtol=1e-4, atol=1e-6)
    return onnx_path, torchscript_path, row, expected


def v2_body(row: np.ndarray) -> bytes:
    tensor = {
        "name": "INPUT__0",
        "datatype": "FP32",
        "shape": [1, 784],
        "data": row.ravel().tolist(),
    }
    return json.dumps({"inputs": [tensor]}).encode()


def v2_binary_call(row: np.ndarray) -> Call:
    """Triton's binary tensor extension: a JSON header, then the raw FP32 row."""
    tensor = row.astype("<f4").tobytes()
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT__0",
                    "datatype": "FP32",
                    "shape": [1, 784],
                    "parameters": {"binary_data_size": len(tensor)},
                }
            ],
            "outputs": [{"name": "OUTPUT__0", "parameters": {"binary_data": False}}],
        }
    ).encode()
    return Call(
        header + tensor,
        {
            "Content-Type": "application/octet-stream",
            "Inference-Header-Content-Length": str(len(header)),
        },
    )


def v2_calls(row: np.ndarray) -> dict[str, Call]:
    return {"json": Call(v2_body(row), JSON_HEADERS), "binary": v2_binary_call(row)}


def v2_answer(raw: bytes) -> np.ndarray:
    return np.asarray(json.loads(raw)["outputs"][0]["data"], np.float32)


def v2_server(
    name: str,
    process: subprocess.Popen[bytes],
    port: int,
    row: np.ndarray,
    extra: dict[str, object],
) -> Running:
    """A server speaking KServe v2 (JSON and binary tensors) at the usual infer path."""
    return Running(name, process, port, "/v2/models/mlp/infer", v2_calls(row), v2_answer, extra)


# ----------------------------------------------------------------------------- peers


def _venv(name: str, packages: list[str]) -> Path:
    venv = PEERS_DIR / name
    stamp = venv / ".installed"
    wanted = " ".join(packages)
    if stamp.exists() and stamp.read_text() == wanted:
        return venv
    if not (venv / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    print(f"installing {name}: {wanted}", flush=True)
    subprocess.run(
        [str(venv / "bin" / "pip"), "install", "-q", "--disable-pip-version-check", *packages],
        check=True,
    )
    stamp.write_text(wanted)
    return venv


def pytriton_env(python: Path, home: Path) -> dict[str, str]:
    """The environment a pytriton server needs to start from ``python``'s venv."""
    libdir = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_config_var('LIBDIR'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    return {
        **os.environ,
        # the backend stub must load this interpreter's libpython, not another one
        "LD_LIBRARY_PATH": f"{libdir}:{os.environ.get('LD_LIBRARY_PATH', '')}",
        "TMPDIR": str(home),
        "HOME": str(home),
    }


def _spawn(command: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    handle = log.open("wb")
    return subprocess.Popen(
        command, env=env, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True
    )


def _wait_answering(running: Running, expected: np.ndarray, timeout_s: float = 180) -> None:
    started = time.monotonic()
    deadline = started + timeout_s
    last: object = None
    while time.monotonic() < deadline:
        if running.process.poll() is not None:
            raise RuntimeError(f"{running.name} exited ({running.process.returncode})")
        try:
            check(running, expected, next(iter(running.calls)))
            return
        except (OSError, AssertionError, KeyError, ValueError, http.client.HTTPException) as exc:
            last = exc
            time.sleep(0.25)
    raise TimeoutError(f"{running.name} did not answer in {timeout_s}s: {last}")


def check(running: Running, expected: np.ndarray, protocol: str = "json") -> None:
    call = running.calls[protocol]
    connection = http.client.HTTPConnection("127.0.0.1", running.port, timeout=10)
    connection.request("POST", running.path, call.body, call.headers)
    response = connection.getresponse()
    raw = response.read()
    assert response.status == 200, (response.status, raw[:200])
    np.testing.assert_allclose(running.answer(raw), expected.ravel(), rtol=1e-4, atol=1e-6)


def start_torchserve(
    work: Path, torchscript: Path, delay_ms: int, row: np.ndarray, workers: int = 2
) -> Running:
    venv = _venv(
        "torchserve",
        ["torchserve==0.12.0", "torch-model-archiver==0.12.0", "pyyaml", "torch==2.13.0", "numpy"],
    )
    home = work / "torchserve"
    store = home / "model-store"
    if home.exists():
        shutil.rmtree(home)
    store.mkdir(parents=True)
    (home / "tmp").mkdir()
    subprocess.run(
        [
            str(venv / "bin" / "torch-model-archiver"),
            "--model-name=mlp",
            "--version=1.0",
            f"--serialized-file={torchscript}",
            f"--handler={HERE / 'torchserve_handler.py'}",
            f"--export-path={store}",
        ],
        check=True,
    )
    ports = {k: free_port() for k in ("inference", "management", "metrics", "grpc", "grpc_m")}
    models = {
        "mlp": {
            "1.0": {
                "defaultVersion": True,
                "marName": "mlp.mar",
                "minWorkers": workers,
                "maxWorkers": workers,
                "batchSize": 8,
                # TorchServe reads 0 as "unset" and waits its default 100 ms: 1 ms is its least
                "maxBatchDelay": max(delay_ms, 1),
                "responseTimeout": 120,
            }
        }
    }
    log4j = home / "log4j2.xml"
    log4j.write_text(
        '<Configuration status="WARN"><Appenders><Console name="C" target="SYSTEM_OUT">'
        '<PatternLayout pattern="%m%n"/></Console></Appenders><Loggers>'
        '<Root level="warn"><AppenderRef ref="C"/></Root></Loggers></Configuration>'
    )
    (home / "config.properties").write_text(
        "\n".join(
            [
                f"inference_address=http://127.0.0.1:{ports['inference']}",
                f"management_address=http://127.0.0.1:{ports['management']}",
                f"metrics_address=http://127.0.0.1:{ports['metrics']}",
                "grpc_inference_address=127.0.0.1",
                "grpc_management_address=127.0.0.1",
                f"grpc_inference_port={ports['grpc']}",
                f"grpc_management_port={ports['grpc_m']}",
                f"model_store={store}",
                "load_models=mlp.mar",
                f"models={json.dumps(models)}",
                "disable_system_metrics=true",
                "async_logging=true",
                f"vmargs=-Xmx1g -Djava.io.tmpdir={home / 'tmp'} "
                f"-Dlog4j.configurationFile=file://{log4j}",
            ]
        )
        + "\n"
    )
    env = {
        **os.environ,
        "TMPDIR": str(home / "tmp"),
        "LOG_LOCATION": str(home / "logs"),
        "METRICS_LOCATION": str(home / "logs"),
        "TS_DISABLE_TOKEN_AUTHORIZATION": "true",
        # one torch thread per worker: two workers on two cores, not four threads fighting
        "OMP_NUM_THREADS": "1",
        "PATH": f"{venv / 'bin'}:{os.environ['PATH']}",
    }
    process = _spawn(
        [
            str(venv / "bin" / "torchserve"),
            "--start",
            "--foreground",
            "--ncs",
            "--disable-token-auth",
            "--enable-model-api",
            f"--ts-config={home / 'config.properties'}",
            f"--model-store={store}",
        ],
        env,
        home / "torchserve.out",
    )
    return Running(
        "torchserve",
        process,
        ports["inference"],
        "/predictions/mlp",
        {"json": Call(json.dumps({"data": row.ravel().tolist()}).encode(), JSON_HEADERS)},
        lambda raw: np.asarray(json.loads(raw), np.float32).ravel(),
        extra={"workers": workers},
    )


def start_triton(
    work: Path, model: Path, delay_ms: int, row: np.ndarray, instances: int = 2
) -> Running:
    venv = _venv("triton", ["nvidia-pytriton==0.7.0", "onnxruntime", "numpy"])
    home = work / "triton"
    home.mkdir(exist_ok=True)
    http_port, grpc_port = free_port(), free_port()
    python = venv / "bin" / "python"
    env = pytriton_env(python, home)
    process = _spawn(
        [
            str(python),
            str(HERE / "pytriton_server.py"),
            str(model),
            str(http_port),
            str(grpc_port),
            str(free_port()),
            str(delay_ms * 1000),
            str(instances),
        ],
        env,
        home / "triton.out",
    )
    extra = {"instances": instances, "grpc_port": grpc_port}
    return v2_server("triton", process, http_port, row, extra)


class Ours:
    """`lambdaserve serve` against the local stack (moto), the model published by upload."""

    def __init__(self, model: Path) -> None:
        self._stack, self._endpoint = start_stack()
        try:
            self._publish(model)
        except BaseException:
            self.close()
            raise

    def _publish(self, model: Path) -> None:
        self._s3 = boto3.client(
            "s3",
            endpoint_url=self._endpoint,
            region_name="us-east-1",
            aws_access_key_id="test",
            aws_secret_access_key="test",
        )
        self._s3.put_object(
            Bucket="lambdaserve-models", Key="models/mlp/1/model.onnx", Body=model.read_bytes()
        )

    def start(
        self, work: Path, delay_ms: int, row: np.ndarray, workers: int, http: str = "uvicorn"
    ) -> Running:
        """``serve --workers``; ``http="granian"``: the same app under granian instead."""
        config = (
            "max_batch_size: 8\n"
            f"dynamic_batching {{ max_queue_delay_microseconds: {delay_ms * 1000} }}\n"
        )
        self._s3.put_object(
            Bucket="lambdaserve-models", Key="models/mlp/config.pbtxt", Body=config.encode()
        )
        time.sleep(3)  # the event pump reconciles the config into the catalog
        port, grpc_port = free_port(), free_port()
        env = {
            **os.environ,
            "AWS_ENDPOINT_URL": self._endpoint,
            "AWS_ACCESS_KEY_ID": "test",
            "AWS_SECRET_ACCESS_KEY": "test",
            "AWS_DEFAULT_REGION": "us-east-1",
            "LAMBDASERVE_WORK_DIR": str(work / "ours"),
            "POWERTOOLS_METRICS_DISABLED": "true",
            "POWERTOOLS_LOG_LEVEL": "WARNING",
        }
        command = [sys.executable, "-m", "lambdaserve.cli", "serve", "--port", str(port)]
        command += ["--workers", str(workers), "--grpc-port", str(grpc_port)]
        if http == "granian":  # serve's app factory, as its worker processes build it
            env["LAMBDASERVE_SERVE_GRPC"] = f"127.0.0.1:{grpc_port}:0"
            command = [str(Path(sys.executable).with_name("granian")), "--interface", "asgi"]
            command += ["--factory", "--port", str(port), "--workers", str(workers)]
            command += ["--http", "1", "--no-ws", "--loop", "uvloop", "--log-level", "warning"]
            command.append("lambdaserve.processes.serve:serving_app_from_env")
        process = _spawn(command, env, work / "ours.out")
        extra = {"workers": workers, "grpc_port": grpc_port, "http": http}
        return v2_server("lambdaserve", process, port, row, extra)

    def close(self) -> None:
        self._stack.send_signal(signal.SIGINT)
        try:
            self._stack.wait(30)
        except subprocess.TimeoutExpired:  # a loaded machine: the results are kept all the same
            self._stack.terminate()
            self._stack.wait(30)


def stop(running: Running) -> None:
    try:
        os.killpg(running.process.pid, signal.SIGTERM)
        running.process.wait(20)
    except subprocess.TimeoutExpired:
        os.killpg(running.process.pid, signal.SIGKILL)
        running.process.wait(10)
    except ProcessLookupError:
        pass


# ----------------------------------------------------------------------------- measuring


def _tree(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, pending = [], [root]
    while pending:
        pid = pending.pop()
        found.append(pid)
        pending.extend(children.get(pid, []))
    return found


def rss_mb(root: int) -> float:
    total = 0
    for pid in _tree(root):
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return round(total / 1024, 1)


def _busy_jiffies() -> int:
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return sum(fields) - fields[3] - fields[4]  # all but idle and iowait


def _tree_jiffies(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            # own time and that of waited-for children (wrk, once it has exited)
            total += sum(int(v) for v in fields[11:15])
        except OSError:
            continue
    return total


def measure(running: Running, protocol: str, concurrency: int, seconds: int) -> dict[str, float]:
    """One point, with the CPU that neither the server nor the load used (other work)."""
    server_before = _tree(running.process.pid)
    busy = _busy_jiffies()
    accounted = _tree_jiffies(server_before) + _tree_jiffies(_tree(os.getpid()))
    started = time.monotonic()
    meter = CpuMeter(running.process.pid)
    result = load(running, protocol, concurrency, seconds)
    elapsed = time.monotonic() - started
    result.update(meter.cost(float(result["req_s"]) * elapsed))
    server_after = _tree(running.process.pid)
    accounted_now = _tree_jiffies(server_after) + _tree_jiffies(_tree(os.getpid()))
    other = (_busy_jiffies() - busy) - (accounted_now - accounted)
    result["other_cpu_cores"] = round(max(other, 0) / os.sysconf("SC_CLK_TCK") / elapsed, 2)
    return result


def load(running: Running, protocol: str, concurrency: int, seconds: int) -> dict[str, float]:
    """wrk when installed (it is faster than what it measures), else the Python generator."""
    call = running.calls[protocol]
    generator = load_wrk if shutil.which("wrk") else load_python
    return generator(
        running.port, call.body, concurrency, seconds, path=running.path, headers=call.headers
    )


def run_server(
    start: Callable[[], Running], expected: np.ndarray, seconds: int
) -> list[dict[str, object]]:
    running = start()
    points: list[dict[str, object]] = []
    try:
        _wait_answering(running, expected)
        startup = round(time.monotonic() - running.spawned_at, 2)
        for protocol in running.calls:
            check(running, expected, protocol)
            load(running, protocol, 4, 2)  # warm-up
            for concurrency in CONCURRENCY:
                result = measure(running, protocol, concurrency, seconds)
                repeated = 0
                while float(result["other_cpu_cores"]) > OTHER_CPU_LIMIT and repeated < 2:
                    repeated += 1
                    result = measure(running, protocol, concurrency, seconds)
                check(running, expected, protocol)
                points.append(
                    {
                        "server": running.name,
                        "protocol": protocol,
                        "concurrency": concurrency,
                        **result,
                        "repeated": repeated,
                        "rss_mb": rss_mb(running.process.pid),
                        "startup_s": startup,
                        **running.extra,
                    }
                )
                print(json.dumps(points[-1]), flush=True)
    finally:
        stop(running)
    return points


# ----------------------------------------------------------------------------- report


def available_cores() -> int:
    """The cores this process may run on (its affinity, not the host's count)."""
    return len(os.sched_getaffinity(0))


def worker_counts(points: list[dict[str, object]]) -> str:
    """Each server's worker processes or instances, for the table's header."""
    counts: dict[str, object] = {}
    for point in points:
        counts.setdefault(str(point["server"]), point.get("workers", point.get("instances", "?")))
    return ", ".join(f"{server} {count}" for server, count in counts.items())


def table(results: dict[int, list[dict[str, object]]]) -> str:
    lines = []
    for delay, points in results.items():
        lines.append(f"\nbatching delay {delay} ms (max batch 8), one row per request")
        lines.append(
            f"workers/instances: {worker_counts(points)} ({available_cores()} cores available)"
        )
        lines.append(
            f"{'server':<12}{'proto':>7}{'c':>4}{'req/s':>9}{'p50 ms':>9}{'p99 ms':>9}{'err':>5}"
            f"{'RSS MB':>8}{'start s':>8}{'other':>7}{'cpu s/1k':>9}{'load s/1k':>10}"
            f"{'req/s/core':>11}{'ours/peer req/s':>17}{'p50':>7}{'cpu/req':>8}"
        )
        ours = {
            (p["protocol"], p["concurrency"]): p for p in points if p["server"] == "lambdaserve"
        }
        for point in points:
            mine = ours.get((point["protocol"], point["concurrency"]))
            ratio = p50 = cpu = ""
            if mine and point["server"] != "lambdaserve":
                ratio = f"{float(mine['req_s']) / float(point['req_s']):.2f}x"
                p50 = f"{float(mine['p50_ms']) / float(point['p50_ms']):.2f}x"
                ours_cpu, peer_cpu = (
                    mine.get("server_cpu_s_per_1k"),
                    point.get("server_cpu_s_per_1k"),
                )
                if ours_cpu and peer_cpu:
                    cpu = f"{float(ours_cpu) / float(peer_cpu):.2f}x"
            lines.append(
                f"{point['server']:<12}{point['protocol']:>7}{point['concurrency']:>4}{float(point['req_s']):>9.0f}"
                f"{float(point['p50_ms']):>9.2f}{float(point['p99_ms']):>9.2f}"
                f"{int(point['errors']):>5}{float(point['rss_mb']):>8.0f}"
                f"{float(point['startup_s']):>8.1f}{float(point['other_cpu_cores']):>7.2f}"
                f"{float(point.get('server_cpu_s_per_1k', 0)):>9.3f}"
                f"{float(point.get('load_cpu_s_per_1k', 0)):>10.3f}"
                f"{float(point.get('req_s_per_core', 0)):>11.0f}"
                f"{ratio:>17}{p50:>7}{cpu:>8}"
            )
    return "\n".join(lines)


def chart(results: dict[int, list[dict[str, object]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(2, len(results), figsize=(6 * len(results), 7), squeeze=False)
    for column, (delay, points) in enumerate(results.items()):
        series = sorted({(str(p["server"]), str(p["protocol"])) for p in points})
        for server, protocol in series:
            mine = [p for p in points if (p["server"], p["protocol"]) == (server, protocol)]
            xs = [int(p["concurrency"]) for p in mine]
            label = f"{server} ({protocol})"
            style = "--" if protocol == "binary" else "-"
            axes[0][column].plot(
                xs, [float(p["req_s"]) for p in mine], style, marker="o", label=label
            )
            axes[1][column].plot(
                xs, [float(p["p99_ms"]) for p in mine], style, marker="o", label=label
            )
        axes[0][column].set_title(f"throughput, batching delay {delay} ms")
        axes[0][column].set_ylabel("req/s")
        axes[1][column].set_title(f"p99 latency, batching delay {delay} ms")
        axes[1][column].set_ylabel("ms (log)")
        axes[1][column].set_yscale("log")
        for axis in (axes[0][column], axes[1][column]):
            axis.set_xscale("log", base=2)
            axis.set_xticks(list(CONCURRENCY), [str(c) for c in CONCURRENCY])
            axis.set_xlabel("concurrent clients")
            axis.legend()
            axis.grid(alpha=0.3)
    figure.suptitle("MLP 784-256-10, one row per request, max batch 8, 2-core machine, one run")
    figure.tight_layout()
    figure.savefig(path, dpi=100)


def lambda_path(row: np.ndarray) -> float:
    """The Lambda warm path's p50 (µs) for the same model and request, beside the servers."""
    from bench_infer import lambda_warm_path_us
    from moto import mock_aws

    model = demo_mlp_bytes(inputs=784, hidden=256, outputs=10, seed=0)
    with tempfile.TemporaryDirectory() as work, mock_aws():
        return lambda_warm_path_us(model, v2_body(row), 2000, work)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--peers", default="lambdaserve,torchserve,triton")
    parser.add_argument("--delays", default=",".join(str(d) for d in DELAYS_MS))
    parser.add_argument(
        "--workers",
        type=int,
        default=available_cores(),
        help="TorchServe workers and Triton instances (default: the cores available)",
    )
    parser.add_argument(
        "--ours-workers",
        type=int,
        default=None,
        help="lambdaserve serve --workers (default: --workers, the same cores as the peers)",
    )
    args = parser.parse_args()
    if args.ours_workers is None:
        args.ours_workers = args.workers
    wanted = args.peers.split(",")
    RESULTS.mkdir(parents=True, exist_ok=True)
    results: dict[int, list[dict[str, object]]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        onnx_path, torchscript_path, row, expected = build_models(work)
        ours = Ours(onnx_path) if "lambdaserve" in wanted else None
        try:
            for delay in (int(d) for d in args.delays.split(",")):
                starters: dict[str, Callable[[], Running]] = {}
                if ours is not None:
                    starters["lambdaserve"] = lambda d=delay: ours.start(
                        work, d, row, args.ours_workers
                    )
                if "torchserve" in wanted:
                    starters["torchserve"] = lambda d=delay: start_torchserve(
                        work, torchscript_path, d, row, args.workers
                    )
                if "triton" in wanted:
                    starters["triton"] = lambda d=delay: start_triton(
                        work, onnx_path, d, row, args.workers
                    )
                results[delay] = []
                for start in starters.values():
                    results[delay] += run_server(start, expected, args.seconds)
        finally:
            if ours is not None:
                ours.close()
    lambda_us = lambda_path(row)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    document = {"points": results, "lambda_warm_path_p50_us": round(lambda_us, 1)}
    (RESULTS / f"peers-{stamp}.json").write_text(json.dumps(document, indent=1))
    print(table(results))
    print(
        f"\nLambda warm path (infer api_handler in-process, API Gateway v2 event, JSON row): "
        f"p50 {lambda_us:.0f} us; no peer has an equivalent (they are servers)"
    )
    try:
        chart(results, RESULTS / "peers.png")
        docs = ROOT / "docs"
        docs.mkdir(exist_ok=True)
        shutil.copy(RESULTS / "peers.png", docs / "bench-peers.png")
        print(f"chart: {RESULTS / 'peers.png'} (and docs/bench-peers.png)")
    except ImportError:
        print("chart: matplotlib is not installed (pip install matplotlib)")


if __name__ == "__main__":
    main()
