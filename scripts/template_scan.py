"""checkov over template.yaml as CloudFormation receives it: zero findings, or each skipped
with a written reason (SKIPS, by check and resource). `make lint` runs it.

checkov reads CloudFormation, not SAM, and evaluates each resource's Condition from the
parameters' defaults, so the template is transformed with SAM's own translator and scanned
twice: with the defaults, and with every option on (server mode, GPU workers, Python models,
JWT with the stack's Cognito pool, a shared response cache, KMS), so the optional resources
are scanned too. checkov lives in its own venv (Makefile CHECKOV_VENV): its pinned
dependencies are not the project's.

Usage: python scripts/template_scan.py PATH_TO_CHECKOV
"""

from __future__ import annotations

import fnmatch
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from lambdaserve.local.sam_translation import transformed as sam_transformed
from lambdaserve.local.template import load_template

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "template.yaml"
# Every option on (values only need the parameters' patterns; nothing is deployed)
EVERYTHING_ON = {
    "EnableGpuService": "true",
    "GpuImageUri": "123456789012.dkr.ecr.us-east-1.amazonaws.com/gpu:1",
    "GpuSubnetIds": "subnet-0a,subnet-0b",
    "EnableServerMode": "true",
    "ServerModeImageUri": "123456789012.dkr.ecr.us-east-1.amazonaws.com/gpu:1",
    "ServerModeVpcId": "vpc-0a",
    "ServerModeSubnetIds": "subnet-0a,subnet-0b",
    "ServerModeCertificateArn": "arn:aws:acm:us-east-1:123456789012:certificate/x",
    "ServerModeClientCidr": "10.0.0.0/8",
    "ServerModeMetricsCidr": "10.0.0.0/16",
    "InferenceAuth": "JWT",
    "EnablePythonModels": "true",
    "ModelBucketKmsKeyArn": "arn:aws:kms:us-east-1:123456789012:key/x",
    "ResponseCacheRedisHost": "cache.example",
    "ResponseCacheVpcId": "vpc-0a",
    "ResponseCacheSubnetIds": "subnet-0a,subnet-0b",
    "ResponseCacheSecurityGroupId": "sg-0a",
}

# (check, resources it is skipped for (fnmatch), why): each one a decision, not a silence.
SKIPS: list[tuple[str, str, str]] = [
    (
        "CKV_AWS_115",
        "*Function",
        "no reserved concurrency by default: a reservation takes capacity from the account's "
        "pool and caps scale-out; API Gateway's throttling (ThrottlingBurstLimit/RateLimit) "
        "bounds the inference functions, the queues bound the rest",
    ),
    (
        "CKV_AWS_116",
        "*Function",
        "a Lambda DLQ catches asynchronous invocations only: these are invoked synchronously "
        "(API Gateway, the manage functions' serving check, the batcher) or by SQS mappings, "
        "whose DLQs are the queues' redrive policies (alarmed); the scheduled reconcile "
        "reruns on its next tick (tests/unit/test_template_invariants.py)",
    ),
    (
        "CKV_AWS_117",
        "*Function",
        "the functions call only AWS APIs over TLS with their roles; a VPC would add NAT or "
        "endpoint costs and cold-start time and protect nothing more. The infer functions "
        "join a VPC where server mode or the shared response cache needs one",
    ),
    (
        "CKV_AWS_119",
        "CatalogTable",
        "encrypted at rest with DynamoDB's AWS managed key (SSESpecification); the catalog "
        "holds model names, versions and digests, no users' data",
    ),
    (
        "CKV_AWS_158",
        "*",
        "CloudWatch Logs encrypts every log group at rest; a customer managed key needs a key "
        "policy for the logs service in each region, and the logs hold no secrets",
    ),
    (
        "CKV_AWS_173",
        "*Function",
        "Lambda encrypts environment variables at rest with its service key; they hold resource "
        "names and settings only (no Redis password is passed)",
    ),
    (
        "CKV_AWS_18",
        "ModelBucket",
        "S3 server access logs would need a second bucket per stack; CloudTrail's S3 data "
        "events audit the model bucket where an account wants it",
    ),
    (
        "CKV_AWS_19",
        "ModelBucket",
        "a false finding: BucketEncryption is always set (SSE-S3, or SSE-KMS with "
        "ModelBucketKmsKeyArn) through Fn::If, which checkov does not evaluate",
    ),
    (
        "CKV_AWS_21",
        "ModelBucket",
        "versioning is the deployer's choice (ModelBucketVersioning): it keeps every deleted "
        "multi-GB model file, billed, and the catalog already records each version",
    ),
    (
        "CKV_AWS_27",
        "*Queue",
        "a false finding: every queue sets SqsManagedSseEnabled (SSE-SQS); checkov looks for "
        "a KMS key only",
    ),
    (
        "CKV_AWS_27",
        "*Dlq",
        "a false finding: every queue sets SqsManagedSseEnabled (SSE-SQS); checkov looks for "
        "a KMS key only",
    ),
    (
        "CKV_AWS_2",
        "ServerModeHttpListener",
        "port 80 is the infer function's way in, inside the VPC, admitted from its security "
        "group alone; the certificate names the deployer's domain, not the ALB's DNS name the "
        "function calls. Direct clients get HTTPS (443) and gRPC over TLS (50051) only",
    ),
    (
        "CKV_AWS_103",
        "ServerModeHttpListener",
        "the same listener: plain HTTP from the infer function's security group only (see "
        "CKV_AWS_2); the HTTPS listeners use ELBSecurityPolicy-TLS13-1-2-2021-06",
    ),
    (
        "CKV_AWS_23",
        "ServerMode*SecurityGroup",
        "a false finding: every rule has a Description; the optional ones (direct clients, "
        "the metrics scrapers) sit inside Fn::If, which checkov does not evaluate",
    ),
    (
        "CKV_AWS_91",
        "ServerModeLoadBalancer",
        "ALB access logs need a log bucket with the region's ELB principal in its policy; the "
        "ALB's request counts, 5xx and target response times are in CloudWatch, and the "
        "infer function's API Gateway access log records every request it forwards",
    ),
]


def transformed(overrides: dict[str, str]) -> dict[str, Any]:
    """The template as SAM deploys it (``local.sam_translation``, as the deployed-shape
    tests read it), with ``overrides`` as the parameters' defaults checkov reads."""
    cfn = sam_transformed(load_template(TEMPLATE), "us-east-1")
    for name, value in overrides.items():
        cfn["Parameters"][name]["Default"] = value
    return cfn


def skipped_because(check: str, resource: str) -> str | None:
    for skip_check, pattern, reason in SKIPS:
        if skip_check == check and fnmatch.fnmatchcase(resource, pattern):
            return reason
    return None


def main(checkov: str) -> int:
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as folder:
        for name, overrides in (("defaults", {}), ("everything-on", EVERYTHING_ON)):
            path = Path(folder) / f"{name}.json"
            path.write_text(json.dumps(transformed(overrides), default=str))
        run = subprocess.run(
            [checkov, "-d", folder, "--framework", "cloudformation", "-o", "json", "--quiet"],
            capture_output=True,
            text=True,
            check=False,
        )
    reports = json.loads(run.stdout or "[]")
    reports = reports if isinstance(reports, list) else [reports]
    findings, skipped, errors = [], set(), 0
    for report in reports:
        errors += report.get("summary", {}).get("parsing_errors", 0)
        for failed in report.get("results", {}).get("failed_checks", []):
            resource = failed["resource"].split(".")[-1]
            if skipped_because(failed["check_id"], resource) is None:
                what = f"{failed['check_id']} {failed['resource']}: {failed['check_name']}"
                findings.append(what)
            else:
                skipped.add((failed["check_id"], resource))
    if run.returncode not in (0, 1) or errors or not reports:
        print(f"checkov did not scan (exit {run.returncode}): {run.stderr[-2000:]}")
        return 1
    seconds = time.monotonic() - started
    counts = f"{len(findings)} findings, {len(skipped)} skipped with reasons"
    print(f"checkov: {counts}, {seconds:.0f} s")
    for finding in sorted(findings):
        print(f"  {finding}")
    return 1 if findings else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))
