"""template.yaml's ``Tracing`` parameter: each function's Lambda tracing mode, the X-Ray
write policy SAM adds to its role, and the switch that keeps Powertools' Tracer off, read
from the transform CloudFormation runs with the parameter's values."""

from __future__ import annotations

from typing import Any

import pytest

from lambdaserve.local.template import load_template
from tests.unit.test_template import TEMPLATE, _NoManagedPolicies, packaged, resources_of

XRAY_POLICY = "arn:aws:iam::aws:policy/AWSXrayWriteOnlyAccess"


def _transformed(tracing: str) -> dict[str, Any]:
    from samtranslator.translator.transform import transform

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AWS_DEFAULT_REGION", "us-east-1")
        template = packaged(load_template(TEMPLATE))
        return dict(transform(template, {"Tracing": tracing}, _NoManagedPolicies()))


@pytest.mark.parametrize("tracing", ["Active", "PassThrough"])
def test_a_tracing_function_may_write_segments(tracing):
    # Given the stack transformed with Tracing on
    cfn = _transformed(tracing)
    roles = resources_of(cfn, "AWS::IAM::Role")
    # Then every function traces in that mode, its role may send segments (xray:PutTrace-
    # Segments, PutTelemetryRecords), and Powertools' Tracer is on
    for name, function in resources_of(cfn, "AWS::Lambda::Function").items():
        assert function["Properties"]["TracingConfig"] == {"Mode": {"Ref": "Tracing"}}
        assert XRAY_POLICY in roles[f"{name}Role"]["Properties"]["ManagedPolicyArns"], name
    for function in resources_of(cfn, "AWS::Lambda::Function").values():
        switch = function["Properties"]["Environment"]["Variables"]["POWERTOOLS_TRACE_DISABLED"]
        assert switch == {"Fn::If": ["TracingDisabled", "true", "false"]}
    assert cfn["Conditions"]["TracingDisabled"] == {"Fn::Equals": [{"Ref": "Tracing"}, "Disabled"]}


def test_disabled_tracing_leaves_no_tracing_config_and_no_xray_grant():
    # Given the stack transformed with Tracing: Disabled
    cfn = _transformed("Disabled")
    roles = resources_of(cfn, "AWS::IAM::Role")
    # Then no function traces and no role may write segments
    for name, function in resources_of(cfn, "AWS::Lambda::Function").items():
        assert "TracingConfig" not in function["Properties"]
        assert XRAY_POLICY not in roles[f"{name}Role"]["Properties"].get("ManagedPolicyArns", [])
