"""What ``lambdaserve dev`` prints when it is up: where everything is, and what to try."""

from __future__ import annotations

from lambdaserve.local.demo import DEMO_MODEL
from lambdaserve.local.dev_options import DevOptions
from lambdaserve.settings import Settings


def dev_banner(opts: DevOptions, settings: Settings, endpoint: str, serve_pid: int | None) -> str:
    management = f"http://{opts.host}:{opts.management_port}"
    inference = f"http://{opts.host}:{opts.inference_port}"
    lines = [
        "lambdaserve dev is running",
        f"  AWS endpoint      {endpoint}  (region {settings.region}, credentials test/test)",
        f"  model bucket      s3://{settings.bucket}/{settings.models_prefix}",
        f"  catalog table     {settings.table}",
        f"  inference API     {inference}/v2"
        "  (KServe v2 + Triton extensions; /predictions/<model>; /docs)",
        f"  management API    {management}/models  (/docs)",
    ]
    if opts.grpc_port:
        lines.append(
            f"  gRPC              {opts.host}:{opts.grpc_port}  (KServe v2/Triton, TF Serving,"
            " TorchServe, Paddle; grpc.health.v1)"
        )
    if opts.server_mode_port:
        from lambdaserve.local.deployed_api import banner_lines

        lines += banner_lines(opts.host, opts.server_mode_port, opts.http_api_port, serve_pid)
    if opts.metrics_port:
        lines.append(
            f"  metrics           http://{opts.host}:{opts.metrics_port}/metrics (TorchServe's"
            f" names); Triton's at {inference}/metrics"
        )
    if opts.model_repository is not None:
        lines.append(
            f"  model repository  {opts.model_repository}  (uploaded, and watched: add, "
            "change or delete files to publish, update or retire versions)"
        )
    if not opts.aws_endpoint:
        where = (
            "the model repository folder, and the labels, defaults and overrides set "
            "through the management API (in its .lambdaserve/catalog.json)"
            if opts.model_repository is not None
            else "nothing: use --model-repository DIR to keep models across restarts"
        )
        lines.append(
            f"  persistence       the embedded emulator keeps nothing; what survives: {where}"
        )
    lines += [
        "  for the aws CLI   export AWS_ENDPOINT_URL="
        f"{endpoint} AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test "
        f"AWS_DEFAULT_REGION={settings.region}",
        f"  publish a model   aws s3 cp model.onnx s3://{settings.bucket}/"
        f"{settings.models_prefix}<model>/1/model.onnx",
        f"  then              curl -s -X POST {management}/v2/repository/index",
    ]
    if opts.demo:
        lines.append(f"  demo model        {DEMO_MODEL} (version 1, published on start)")
        lines.append(
            f"  try               curl -s -X POST {inference}/predictions/{DEMO_MODEL} "
            "-d '[0.1, 0.2, 0.3, 0.4]'"
        )
    lines.append("Ctrl-C stops everything.")
    return "\n".join(lines)
