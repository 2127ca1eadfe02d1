"""The deploy path a newcomer follows (docs/deploy.md): the samconfig.toml profile of each
scenario, the exact overrides the page gives, and the deployer's IAM policy, checked
against template.yaml and CloudFormation's own registry of what each resource type needs."""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

import pytest

from lambdaserve.local.template import load_template

ROOT = Path(__file__).resolve().parents[2]
PROFILES = ("onnx-lambda", "torchserve", "gpu-server", "mixed-team")
POLICIES = ("docs/deployer-policy.json", "docs/deployer-policy-resources.json")
# Account-wide settings an ECS cluster's update handler may change; this stack sets none.
NOT_NEEDED = {"ecs:PutAccountSetting", "ecs:PutAccountSettingDefault"}
# The resource type's namespace in CloudFormation -> its IAM service prefix
SERVICE = {
    "ApiGatewayV2": "apigateway",
    "ApplicationAutoScaling": "application-autoscaling",
    "AutoScaling": "autoscaling",
    "CloudWatch": "cloudwatch",
    "Cognito": "cognito-idp",
    "DynamoDB": "dynamodb",
    "EC2": "ec2",
    "ECR": "ecr",
    "ECS": "ecs",
    "ElasticLoadBalancingV2": "elasticloadbalancing",
    "Events": "events",
    "IAM": "iam",
    "Lambda": "lambda",
    "Logs": "logs",
    "S3": "s3",
    "SQS": "sqs",
}


@pytest.fixture(scope="module")
def cfn() -> dict[str, Any]:
    from samtranslator.translator.transform import transform

    from tests.unit.test_template import TEMPLATE, _NoManagedPolicies, packaged

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AWS_DEFAULT_REGION", "us-east-1")
        return dict(transform(packaged(load_template(TEMPLATE)), {}, _NoManagedPolicies()))


def _overrides(profile: str) -> dict[str, str]:
    config = tomllib.loads((ROOT / "samconfig.toml").read_text())
    text = config[profile]["deploy"]["parameters"]["parameter_overrides"]
    return dict(item.split("=", 1) for item in shlex.split(text))


def _true(cfn: dict[str, Any], node: Any, values: dict[str, str]) -> bool:
    """A rule's or condition's truth for ``values`` (the template's own functions)."""

    def value(item: Any) -> str:
        if isinstance(item, dict) and "Ref" in item:
            return values[item["Ref"]]
        if isinstance(item, dict) and "Fn::Join" in item:
            separator, parts = item["Fn::Join"]
            return value(parts) if isinstance(parts, dict) else separator.join(map(value, parts))
        return str(item)

    (function, args), *_ = node.items()
    if function in ("Condition", "Fn::Condition"):
        return _true(cfn, cfn["Conditions"][args], values)
    if function == "Fn::Equals":
        return value(args[0]) == value(args[1])
    if function == "Fn::Not":
        return not _true(cfn, args[0], values)
    if function == "Fn::And":
        return all(_true(cfn, a, values) for a in args)
    if function == "Fn::Or":
        return any(_true(cfn, a, values) for a in args)
    raise AssertionError(f"unexpected {function}")


@pytest.mark.parametrize("profile", PROFILES)
def test_each_scenario_profile_names_only_template_parameters_and_passes_its_rules(cfn, profile):
    """Given a scenario's samconfig.toml profile (`sam deploy --config-env <profile>`)
    Then it parses, names only parameters the template has, with values they allow, and
    the template's rules (what needs what) all hold for it."""
    config = tomllib.loads((ROOT / "samconfig.toml").read_text())
    deploy = config[profile]["deploy"]["parameters"]
    assert config[profile]["global"]["parameters"]["stack_name"].startswith("lambdaserve")
    assert deploy["capabilities"] == "CAPABILITY_IAM" and deploy["resolve_image_repos"]
    parameters = cfn["Parameters"]
    overrides = _overrides(profile)
    unknown = sorted(set(overrides) - set(parameters))
    assert not unknown, f"{profile} names parameters the template lacks: {unknown}"
    for name, given in overrides.items():
        spec = parameters[name]
        if "AllowedValues" in spec:
            assert given in [str(v) for v in spec["AllowedValues"]], (name, given)
        if "AllowedPattern" in spec:
            assert re.fullmatch(spec["AllowedPattern"], given), (name, given)
        if spec["Type"] == "Number":
            assert given.isdigit(), (name, given)
    values = {k: str(v.get("Default", "")) for k, v in parameters.items()} | overrides
    for name, rule in cfn["Rules"].items():
        if "RuleCondition" in rule and not _true(cfn, rule["RuleCondition"], values):
            continue
        for assertion in rule["Assertions"]:
            assert _true(cfn, assertion["Assert"], values), (profile, name, assertion)


def test_the_deploy_page_gives_each_profiles_exact_overrides():
    """Given docs/deploy.md
    Then each scenario's `--parameter-overrides` there is its profile's, word for word."""
    page = (ROOT / "docs" / "deploy.md").read_text()
    config = tomllib.loads((ROOT / "samconfig.toml").read_text())
    for profile in PROFILES:
        text = config[profile]["deploy"]["parameters"]["parameter_overrides"]
        assert f"--config-env {profile}" in page
        written = re.findall(r"--parameter-overrides ((?:[^\n\\]|\\\n)+)", page)
        flattened = [" ".join(w.replace("\\\n", " ").split()) for w in written]
        assert text in flattened, f"docs/deploy.md lacks {profile}'s overrides: {text}"


def _statements() -> list[dict[str, Any]]:
    found = []
    for name in POLICIES:
        document = json.loads((ROOT / name).read_text())
        assert document["Version"] == "2012-10-17"
        # IAM's limit for one managed policy, whitespace not counted
        assert len(json.dumps(document, separators=(",", ":"))) <= 6144, name
        found += document["Statement"]
    return found


def _as_list(value: str | list[str]) -> list[str]:
    return [value] if isinstance(value, str) else value


def _registry_permissions(kind: str) -> set[str]:
    """What CloudFormation's registry says its handlers call for ``kind`` (cfn-lint ships
    the registry's schemas), in the type's own service."""
    import cfnlint

    schemas = Path(os.path.dirname(cfnlint.__file__)) / "data" / "schemas"
    index = json.loads((schemas / "providers" / "us-east-1.json").read_text())
    schema = json.loads((schemas / "resources" / f"{index[kind]}.json").read_text())
    service = SERVICE[kind.split("::")[1]]
    return {
        permission
        for operation in ("create", "read", "update", "delete")
        for permission in schema.get("handlers", {}).get(operation, {}).get("permissions", [])
        if permission.split(":")[0] == service and "*" not in permission
    }


def test_the_deployer_policy_allows_what_each_resource_type_of_the_template_needs(cfn):
    """Given every resource type template.yaml creates (after SAM's transform, every
    condition) and the ECR repositories `sam deploy` adds for the images
    Then the deployer's policies allow each type's create, read, update and delete calls
    (CloudFormation's registry lists them), the SAM transform, and passing the stack's roles."""
    statements = [s for s in _statements() if s["Effect"] == "Allow"]
    allowed = [pattern for s in statements for pattern in _as_list(s["Action"])]
    kinds = {r["Type"] for r in cfn["Resources"].values()} | {"AWS::ECR::Repository"}
    missing = {
        kind: sorted(
            p
            for p in _registry_permissions(kind) - NOT_NEEDED
            if not any(fnmatch.fnmatchcase(p, a) for a in allowed)
        )
        for kind in sorted(kinds)
    }
    assert not {k: v for k, v in missing.items() if v}, missing
    for kind in kinds:
        assert SERVICE[kind.split("::")[1]]  # every type's service is known and checked
    transform = "arn:aws:cloudformation:*:aws:transform/Serverless-2016-10-31"
    assert any(
        "cloudformation:CreateChangeSet" in _as_list(s["Action"])
        and transform in _as_list(s["Resource"])
        for s in statements
    )
    passing = [s for s in statements if "iam:PassRole" in _as_list(s["Action"])]
    assert passing and all(
        r.startswith("arn:aws:iam::*:role/lambdaserve") or ":instance-profile/" in r
        for s in passing
        for r in _as_list(s["Resource"])
    )


def test_the_deployer_policy_grants_nothing_broad_on_everything():
    """Given the deployer's policies
    Then no statement allows every action, a whole service, or any write wildcard on every
    resource ("*"); only reads (Describe*, Get*, List*) may be wildcards there, and the
    resources only CloudFormation creates are allowed only through CloudFormation."""
    for statement in _statements():
        assert "NotAction" not in statement and "NotResource" not in statement
        actions = _as_list(statement["Action"])
        assert "*" not in actions
        if "*" not in _as_list(statement["Resource"]):
            continue
        for action in actions:
            _, name = action.split(":")
            assert "*" not in name or re.fullmatch(r"(Describe|Get|List)\*", name), (
                statement["Sid"],
                action,
            )
        if any(
            a.split(":")[0] in ("ec2", "ecs", "lambda", "elasticloadbalancing") for a in actions
        ) and any(re.match(r"[a-z-]+:(Create|Delete|Put|Update|Run)", a) for a in actions):
            condition = statement.get("Condition", {}).get("ForAnyValue:StringEquals", {})
            assert condition.get("aws:CalledVia") == ["cloudformation.amazonaws.com"]
