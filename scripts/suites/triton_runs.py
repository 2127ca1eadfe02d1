"""What runs of Triton's suites, how each counts, and why some are skipped or fail by design.

An outcome is passed, failed, skipped (the test needs what a remote HTTP server cannot be
given: a GPU, a server flag, a proxy) or expected (lambdaserve refuses it by design:
registering shared memory; or the suite's stand-in models cannot serve it: the sequence
examples; a pass still counts as passed).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
SEQUENCE = (
    "this suite's stand-ins for the sequence models are identities without the control inputs "
    "(UNAVAILABLE at publish, saying so); tests/integration/test_sequence_clients.py drives "
    "real sequence models with tritonclient as these examples do"
)
IMAGE_ARGS = ["-i", "http", "-m", "densenet_onnx", "-s", "INCEPTION", "-c", "1", "-b", "1"]
SHM = "by design: CUDA shared memory is refused (no GPU IPC here)"


@dataclass
class Outcome:
    name: str
    status: str  # passed | failed | skipped | expected
    reason: str = ""


@dataclass
class Example:
    name: str
    args: list[str]
    expected: str = ""  # by-design reason, when it fails
    skip: str = ""
    must_fail: str = ""  # the run must exit non-zero and print this


def client_examples(image: Path) -> list[Example]:
    """test.sh's Python client runs (HTTP), in its order; model control last."""
    return [
        Example("simple_http_health_metadata.py", ["-v"]),
        Example("simple_http_aio_infer_client.py", ["-v"]),
        Example("simple_http_infer_client.py", ["-v"]),
        Example("simple_http_async_infer_client.py", ["-v"]),
        Example(
            "image_client.py (async)",
            [*IMAGE_ARGS, "-a", str(image)],
        ),
        Example(
            "image_client.py",
            [*IMAGE_ARGS, str(image)],
        ),
        Example(
            "ensemble_image_client.py",
            ["-i", "http", "-c", "1", str(image.parent)],
            skip="needs preprocess_inception_ensemble (DALI preprocessing + Inception); "
            "test.sh has it commented out",
        ),
        Example("simple_http_shm_string_client.py", ["-v"]),
        Example("simple_http_shm_client.py", ["-v"]),
        Example("simple_http_cudashm_client.py", ["-v"], skip="not applicable (CUDA)"),
        Example("simple_http_string_infer_client.py", ["-v"]),
        Example("simple_http_sequence_sync_infer_client.py", ["-v"], expected=SEQUENCE),
        Example("simple_http_sequence_sync_infer_client.py (-d)", ["-v", "-d"], expected=SEQUENCE),
        Example("reuse_infer_objects_client.py", ["-v"], expected=SHM),
        Example(
            "simple_http_infer_client.py (base path)",
            ["-u", "localhost:8000/base_path", "-v"],
            must_fail="POST /base_path/v2/models/simple/infer",
        ),
        Example("simple_http_model_control.py", ["-v"]),
    ]


def run_example(python: str, examples_dir: Path, example: Example, log_dir: Path) -> Outcome:
    if example.skip:
        return Outcome(example.name, "skipped", example.skip)
    script = examples_dir / example.name.split(" ")[0]
    try:
        done = subprocess.run(
            [python, str(script), *example.args],
            check=False,
            cwd=examples_dir,
            capture_output=True,
            text=True,
            timeout=120,
        )
        output, code = done.stdout + done.stderr, done.returncode
    except subprocess.TimeoutExpired as exc:
        output, code = f"{exc.stdout or ''}{exc.stderr or ''}\ntimed out after 120 s", -1
    safe = example.name.replace(" ", "_").replace("(", "").replace(")", "")
    (log_dir / f"{safe}.log").write_text(output)
    if example.must_fail:
        ok = code != 0 and example.must_fail in output
    else:
        ok = code == 0 and ("PASS" in output or "model_control" not in example.name)
    if ok:
        return Outcome(example.name, "passed")
    lines = [ln for ln in output.strip().splitlines() if ln.strip() and "warn" not in ln.lower()]
    reason = f"exit {code}: " + (lines[-1][:300] if lines else "no output")
    if example.expected:
        return Outcome(example.name, "expected", f"{example.expected} ({reason})")
    return Outcome(example.name, "failed", reason)


STATUSES = ("passed", "failed", "expected", "skipped")
_LIMIT = "http_input_size_limit_test.InferSizeLimitTest."
# qa/L0_http test ids (module[.Class.test]) in two phases: the aio test counts the
# repository's models, so it runs with the examples' seven; SKIPS and EXPECTED by test id.
QA_INDEXED_IDS = ["python_http_aio_test"]
QA_MAIN_IDS = [
    "http_client_plugin_test",
    "http_test",
    *(
        _LIMIT + t
        for t in (
            "test_default_limit_raw_binary",
            "test_default_limit_json",
            "test_large_string_in_json",
            "test_default_limit_compressed",
            "test_no_leak_on_invalid_inference_header_length",
            # listed as skipped (SKIPS): /generate, and the --http-max-input-size server
            "test_json_dtype_size_expansion_exceeds_limit_error",
            "test_large_input_raw_binary",
            "test_large_input_json",
            "test_large_input_compressed",
        )
    ),
    "http_request_many_chunks",
]
_FLAG = "needs the server flag --http-max-input-size=2**27 (test.sh starts a second server)"
SKIPS = {
    "http_basic_auth_test": "needs test.sh's nginx proxy with basic auth on port 8004",
    "http_restricted_api_test": "needs --http-restricted-api server flags",
    "generate_endpoint_test": "generate/LLM endpoints (decoupled Python models)",
    "http_test.HttpTest.test_loading_large_invalid_model": (
        "builds a 2.9 GB request body in the client (about 9 GB of client memory)"
    ),
    _LIMIT + "test_json_dtype_size_expansion_exceeds_limit_error": "posts to /generate",
    _LIMIT + "test_large_input_raw_binary": _FLAG,
    _LIMIT + "test_large_input_json": _FLAG,
    _LIMIT + "test_large_input_compressed": _FLAG,
    "http_request_many_chunks.HTTPRequestManyChunksTest."
    "test_chunked_infer_over_max_chunks_reject_with_bounded_rss_growth": (
        "101 requests of a million chunks, measuring the server's RSS; the dev stack's one "
        "process also holds the AWS emulator and the management API"
    ),
}
_SIX_MB = (
    "by design: the request limit is Lambda's 6 MB (LAMBDASERVE_MAX_REQUEST_BYTES), answered "
    "413; the test assumes Triton's 64 MB default and its wording"
)
EXPECTED = {
    _LIMIT + "test_default_limit_raw_binary": _SIX_MB,
    _LIMIT + "test_default_limit_json": _SIX_MB,
    _LIMIT + "test_large_string_in_json": _SIX_MB,
    _LIMIT + "test_default_limit_compressed": _SIX_MB,
    "http_test.HttpTest.test_negative_dimensions": (
        "by design: hostile values are 400s, never 500s (Triton answers 500)"
    ),
    "http_test.HttpTest.test_load_oversized_file_parameter": (
        "by design: Triton's file: overrides are refused with 400 (models are published by "
        "upload); Triton answers 500, its TODO TRI-958 says 400"
    ),
    "http_test.HttpTest.test_json_recursion_depth_limit": (
        "by design: BYTES JSON data may nest no deeper than the shape (contract, limits), so "
        "the depth-50 case the test expects to pass is a 400"
    ),
    "http_test.HttpTest.test_repository_index_deeply_nested_json": (
        "by design: the 64-level JSON nesting guard answers the 400 before 'ready' is read "
        "(Triton's wording names the field)"
    ),
    "http_test.HttpTest.test_content_encoding_chunked_manually": (
        "by design (HTTP layer): requests sends Content-Length beside Transfer-Encoding: "
        "chunked, and uvicorn refuses that pair (a request-smuggling guard RFC 9112 allows)"
    ),
    "http_request_many_chunks.HTTPRequestManyChunksTest."
    "test_chunked_infer_rejected_over_max_chunks": (
        "by design: no chunk-count limit (the body's byte limit bounds it); the request is "
        "answered on its merits (Triton's raw-request 400) instead of Triton's chunk error"
    ),
    "python_http_aio_test.TestHttpAioClient.test_load_model": (
        "by design: explicit load/unload is always allowed (Triton's default "
        "model-control mode refuses it)"
    ),
    "python_http_aio_test.TestHttpAioClient.test_unload_model": (
        "by design: explicit load/unload is always allowed (Triton's default "
        "model-control mode refuses it)"
    ),
}


def prepare_qa(server_dir: Path, into: Path) -> Path:
    """A private copy of qa/L0_http and qa/common: the tests write test_results.txt."""
    for part in ("L0_http", "common"):
        shutil.copytree(server_dir / "qa" / part, into / "qa" / part, dirs_exist_ok=True)
    return into / "qa" / "L0_http"


def run_qa(
    python: str, qa_dir: Path, ids: list[str], env: dict[str, str], log: Path
) -> list[Outcome]:
    """Run test ids under unittest_json.py; SKIPS inside them are skipped with their reason."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as out:
        result_path = Path(out.name)
    env = {**os.environ, **env, "TRITON_SUITES_SKIP": json.dumps(SKIPS)}
    with log.open("a") as log_file:
        subprocess.run(
            [python, str(HERE / "unittest_json.py"), str(result_path), *ids],
            check=False,
            cwd=qa_dir,
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            timeout=1800,
        )
    results = json.loads(result_path.read_text() or "{}")
    result_path.unlink()
    outcomes = []
    for test_id, result in sorted(results.items()):
        status, reason = result["status"], result["reason"]
        if status == "error":
            status = "failed"
        if status == "failed" and test_id in EXPECTED:
            status, reason = "expected", f"{EXPECTED[test_id]} ({reason})"
        outcomes.append(Outcome(test_id, status, reason))
    return outcomes


def skipped_files(server_dir: Path) -> list[Outcome]:
    """The qa/L0_http Python files not run at all, each with its reason."""
    present = {p.stem for p in (server_dir / "qa" / "L0_http").glob("*.py")}
    return [Outcome(f"{m}.py", "skipped", SKIPS[m]) for m in sorted(present) if m in SKIPS]
