"""template.yaml: lint-clean, transforms to CloudFormation, and wires what the system needs.

The SAM transform is the one CloudFormation runs (`samtranslator`), on the template as
`sam package` leaves it (code and images as S3/ECR URIs); the assertions read its output.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
from cfnlint.api import lint

from lambdaserve.catalog.store import MODELS_INDEX
from lambdaserve.local.template import load_template
from lambdaserve.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "template.yaml"


class _NoManagedPolicies:
    def load(self) -> dict[str, str]:
        return {}


def packaged(template: dict[str, Any]) -> dict[str, Any]:
    """What `sam package` leaves: local paths replaced by artifact URIs."""
    template = copy.deepcopy(template)
    for resource in template["Resources"].values():
        properties = resource.get("Properties", {})
        if resource["Type"] == "AWS::Serverless::Function":
            if properties.get("PackageType") == "Image":
                properties["ImageUri"] = "123456789012.dkr.ecr.us-east-1.amazonaws.com/infer:1"
            else:
                properties["CodeUri"] = f"s3://artifacts/{properties['CodeUri']}.zip"
        elif resource["Type"] == "AWS::Serverless::LayerVersion":
            properties["ContentUri"] = "s3://artifacts/layer.zip"
    return template


@pytest.fixture(scope="module")
def sam() -> dict[str, Any]:
    return load_template(TEMPLATE)


@pytest.fixture(scope="module")
def cfn(sam: dict[str, Any]) -> dict[str, Any]:
    from samtranslator.translator.transform import transform

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AWS_DEFAULT_REGION", "us-east-1")
        return dict(transform(packaged(sam), {}, _NoManagedPolicies()))


def resources_of(cfn: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in cfn["Resources"].items() if v["Type"] == kind}


def test_cfn_lint_finds_nothing():
    matches = lint(TEMPLATE.read_text(), regions=["us-east-1"])
    assert [str(m) for m in matches] == []


def test_the_transform_produces_every_function_with_its_role(cfn):
    functions = resources_of(cfn, "AWS::Lambda::Function")
    assert set(functions) == {
        "ManageEventsFunction",
        "ReconcileFunction",
        "RolloutsFunction",
        "ManageApiFunction",
        "BatcherFunction",
        "InferFunction",
        "InferBatchFunction",
        "CodeValidatorFunction",
    }
    for name, function in functions.items():
        assert function["Properties"]["Role"] == {"Fn::GetAtt": [f"{name}Role", "Arn"]}
        assert function["Properties"]["TracingConfig"] == {"Mode": {"Ref": "Tracing"}}


def test_queues_feed_their_functions_with_partial_batch_failures(cfn):
    mappings = {
        m["Properties"]["FunctionName"]["Ref"]: m["Properties"]
        for m in resources_of(cfn, "AWS::Lambda::EventSourceMapping").values()
    }
    assert mappings["ManageEventsFunction"]["EventSourceArn"] == {
        "Fn::GetAtt": ["RepositoryEventsQueue", "Arn"]
    }
    assert mappings["BatcherFunction"]["EventSourceArn"] == {"Fn::GetAtt": ["RequestsQueue", "Arn"]}
    assert mappings["BatcherFunction"]["BatchSize"] == {"Ref": "BatcherBatchSize"}
    assert mappings["BatcherFunction"]["MaximumBatchingWindowInSeconds"] == {
        "Ref": "BatcherBatchingWindowSeconds"
    }
    for mapping in mappings.values():
        assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]


def test_every_consumed_queue_has_a_dlq_with_an_alarm(cfn):
    queues = resources_of(cfn, "AWS::SQS::Queue")
    alarmed = {
        a["Properties"]["Dimensions"][0]["Value"]["Fn::GetAtt"][0]
        for a in resources_of(cfn, "AWS::CloudWatch::Alarm").values()
        if a["Properties"].get("MetricName") == "ApproximateNumberOfMessagesVisible"
        and "Dlq" in str(a["Properties"]["Dimensions"])
    }
    for name in ("RepositoryEventsQueue", "RequestsQueue", "GpuRequestsQueue"):
        redrive = queues[name]["Properties"]["RedrivePolicy"]
        dlq = redrive["deadLetterTargetArn"]["Fn::GetAtt"][0]
        assert dlq in queues and dlq in alarmed
        assert redrive["maxReceiveCount"] == {"Ref": "MaxReceiveCount"}


def test_the_bucket_notifies_the_repository_events_queue_of_model_changes(cfn):
    bucket = cfn["Resources"]["ModelBucket"]
    configurations = bucket["Properties"]["NotificationConfiguration"]["QueueConfigurations"]
    assert {c["Event"] for c in configurations} == {"s3:ObjectCreated:*", "s3:ObjectRemoved:*"}
    for configuration in configurations:
        assert configuration["Queue"] == {"Fn::GetAtt": ["RepositoryEventsQueue", "Arn"]}
        assert configuration["Filter"]["S3Key"]["Rules"] == [{"Name": "prefix", "Value": "models/"}]
    assert bucket["DependsOn"] == "RepositoryEventsQueuePolicy"
    policy = cfn["Resources"]["RepositoryEventsQueuePolicy"]["Properties"]["PolicyDocument"]
    (statement,) = policy["Statement"]
    assert statement["Principal"] == {"Service": "s3.amazonaws.com"}
    assert "aws:SourceArn" in statement["Condition"]["ArnLike"]


def test_the_bucket_is_encrypted_private_and_tls_only(cfn):
    properties = cfn["Resources"]["ModelBucket"]["Properties"]
    assert all(properties["PublicAccessBlockConfiguration"].values())
    encryption = properties["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]
    assert encryption["ServerSideEncryptionByDefault"]["SSEAlgorithm"] == {
        "Fn::If": ["UseKms", "aws:kms", "AES256"]
    }
    (statement,) = cfn["Resources"]["ModelBucketPolicy"]["Properties"]["PolicyDocument"][
        "Statement"
    ]
    assert statement["Effect"] == "Deny"
    assert statement["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}


def test_the_catalog_table_is_what_the_catalog_code_queries(cfn):
    table = cfn["Resources"]["CatalogTable"]["Properties"]
    assert table["BillingMode"] == "PAY_PER_REQUEST"
    assert table["KeySchema"] == [
        {"AttributeName": "pk", "KeyType": "HASH"},
        {"AttributeName": "sk", "KeyType": "RANGE"},
    ]
    assert [i["IndexName"] for i in table["GlobalSecondaryIndexes"]] == [MODELS_INDEX]
    assert table["TimeToLiveSpecification"] == {"AttributeName": "expires_at", "Enabled": True}
    assert table["PointInTimeRecoverySpecification"]["PointInTimeRecoveryEnabled"] is True


def _routes_in_body(cfn: dict[str, Any]) -> dict[str, Any]:
    return dict(cfn["Resources"]["HttpApi"]["Properties"]["Body"]["paths"])


def test_management_routes_are_iam_authorised(cfn):
    paths = _routes_in_body(cfn)
    assert set(paths) == {
        "/models",
        "/models/{proxy+}",
        "/v2/repository/{proxy+}",
        "/workflows",
        "/workflows/{proxy+}",
    }
    for path in paths.values():
        operation = path["x-amazon-apigateway-any-method"]
        assert operation["security"] == [{"AWS_IAM": []}]
        assert "ManageApiFunction.Arn" in json.dumps(operation["x-amazon-apigateway-integration"])


def test_inference_routes_take_their_authorisation_from_the_parameter(cfn):
    routes = resources_of(cfn, "AWS::ApiGatewayV2::Route")
    keys = {r["Properties"]["RouteKey"] for r in routes.values()}
    assert keys == {
        "ANY /v2/{proxy+}",
        "GET /v2",
        "ANY /predictions/{proxy+}",  # TorchServe's POST and curl -T's PUT
        "ANY /explanations/{proxy+}",  # TorchServe's explanations API
        "ANY /wfpredict/{proxy+}",  # TorchServe's workflow inference API
        "GET /ping",
        "ANY /v1/{proxy+}",  # TF Serving's REST API
        "POST /{name}/prediction",  # Paddle Serving's pipeline HTTP API
    }
    for route in routes.values():
        assert route["Properties"]["AuthorizationType"] == {"Ref": "InferenceAuth"}
    integration = cfn["Resources"]["InferIntegration"]["Properties"]
    assert integration["IntegrationUri"] == {"Ref": "InferFunctionAliaslive"}
    assert integration["PayloadFormatVersion"] == "2.0"


def test_the_api_is_throttled(cfn):
    stage = cfn["Resources"]["HttpApiApiGatewayDefaultStage"]["Properties"]
    assert stage["DefaultRouteSettings"]["ThrottlingRateLimit"] == {"Ref": "ThrottlingRateLimit"}


def _statements(role: dict[str, Any]) -> list[dict[str, Any]]:
    found = []
    for declared in role["Properties"].get("Policies", []):
        policy = declared["Fn::If"][1] if "Fn::If" in declared else declared
        found += policy["PolicyDocument"]["Statement"]
    return found


def test_roles_are_least_privilege(cfn):
    roles = resources_of(cfn, "AWS::IAM::Role")
    assert roles
    for name, role in roles.items():
        for statement in _statements(role):
            actions = statement["Action"]
            actions = [actions] if isinstance(actions, str) else actions
            for action in actions:
                assert action != "*" and not action.endswith(":*"), (name, action)
            assert statement.get("Resource") not in ("*", ["*"]), (name, statement)
            # a statement's only choices: whether a conditional queue exists (the GPU
            # service's, priority levels 2 and 3)
            chosen = set(re.findall(r'"Fn::If": \["(\w+)"', json.dumps(statement)))
            assert chosen <= {"GpuService", "PriorityLevel2", "PriorityLevel3"}, (name, chosen)


def test_each_function_reaches_only_this_stacks_resources(cfn):
    roles = resources_of(cfn, "AWS::IAM::Role")
    for name in ("ManageEventsFunctionRole", "BatcherFunctionRole", "InferFunctionRole"):
        text = json.dumps(_statements(roles[name]))
        assert "ModelBucket" in text or "CatalogTable" in text, name
    batcher = json.dumps(_statements(roles["BatcherFunctionRole"]))
    assert "InferBatchFunction" in batcher and "lambda:InvokeFunction" in batcher
    infer = _statements(roles["InferBatchFunctionRole"])
    assert "sqs:" not in json.dumps(infer)
    writes = [s for s in infer if "s3:PutObject" in json.dumps(s["Action"])]
    # the batch path reads; it writes only answers too large for the invoke, under results/,
    # the payloads its models capture (data_capture), under captures/, and sequences' states
    # too large for their DynamoDB item, under sequence-state/
    assert sorted(json.dumps(s["Resource"]) for s in writes) == [
        '{"Fn::Sub": "${ModelBucket.Arn}/captures/*"}',
        '{"Fn::Sub": "${ModelBucket.Arn}/results/*"}',
        '{"Fn::Sub": "${ModelBucket.Arn}/sequence-state/*"}',
    ]


def test_manage_roles_touch_only_the_model_repository_and_the_catalog_calls_made(cfn):
    roles = resources_of(cfn, "AWS::IAM::Role")
    manage = ("ManageEventsFunctionRole", "ReconcileFunctionRole", "ManageApiFunctionRole")
    for name in manage:
        statements = _statements(roles[name])
        text = json.dumps(statements)
        # Given the code's calls: GetItem, PutItem, UpdateItem, Query, and the revision check
        # of its state transactions; S3 reads under models/
        assert "requests/" not in text and "results/" not in text, name
        for forbidden in ("DeleteItem", "Scan", "BatchWriteItem", "BatchGetItem"):
            assert forbidden not in text, (name, forbidden)
        # only the events function writes under models/ (an uploaded TorchServe archive
        # unpacked into a version directory); each validates, so each writes model
        # environments (and signs their upload URL) under environments/ alone
        writes = [s for s in statements if "s3:PutObject" in json.dumps(s["Action"])]
        environments = '{"Fn::Sub": "${ModelBucket.Arn}/environments/*"}'
        expected = ['{"Fn::Sub": "${ModelBucket.Arn}/models/*"}', environments]
        assert [json.dumps(s["Resource"]) for s in writes] == (
            expected if name == "ManageEventsFunctionRole" else [environments]
        ), name
        dynamo = {a for s in statements for a in s["Action"] if a.startswith("dynamodb:")}
        assert dynamo == {
            "dynamodb:GetItem",
            "dynamodb:PutItem",
            "dynamodb:UpdateItem",
            "dynamodb:Query",
            "dynamodb:ConditionCheckItem",
        }, name
        listing = [s for s in statements if s["Action"] == ["s3:ListBucket"]]
        assert listing and listing[0]["Condition"] == {
            "StringLike": {"s3:prefix": ["models/*", "environments/*"]}
        }
    deletes = json.dumps(_statements(roles["ManageApiFunctionRole"]))
    assert "s3:DeleteObject" in deletes and "ModelBucket.Arn}/models/*" in deletes


def test_the_manage_events_function_is_sized_for_the_largest_version(cfn):
    function = resources_of(cfn, "AWS::Lambda::Function")["ManageEventsFunction"]["Properties"]
    queue = resources_of(cfn, "AWS::SQS::Queue")["RepositoryEventsQueue"]["Properties"]
    assert function["Timeout"] >= 300 and function["MemorySize"] >= 6144
    assert function["EphemeralStorage"]["Size"] >= 2 * 2048 + 1024  # a 2 GiB version, twice
    assert queue["VisibilityTimeout"] >= function["Timeout"]  # Lambda requires it


def test_async_reply_queues_are_allow_listed_to_what_the_batcher_may_send_to(cfn):
    infer = resources_of(cfn, "AWS::Lambda::Function")["InferFunction"]["Properties"]
    allowed = json.dumps(infer["Environment"]["Variables"]["LAMBDASERVE_REPLY_TO_ALLOWED"])
    assert "${AWS::StackName}-reply-*" in allowed
    batcher = json.dumps(_statements(resources_of(cfn, "AWS::IAM::Role")["BatcherFunctionRole"]))
    assert "${AWS::StackName}-reply-*" in batcher


def test_zip_functions_share_the_core_layer_and_images_use_none(cfn):
    functions = resources_of(cfn, "AWS::Lambda::Function")
    for name, function in functions.items():
        properties = function["Properties"]
        if properties.get("PackageType") == "Image":
            assert "Layers" not in properties
            snapstart_size = {"Fn::If": ["HasSnapStart", 512, {"Ref": "InferEphemeralStorage"}]}
            assert properties["EphemeralStorage"]["Size"] in (
                {"Ref": "InferEphemeralStorage"},
                snapstart_size,
                10240,  # the manage functions: a 2 GiB version, downloaded and loaded
                2048,  # the code validator: one model.py, or one model environment's build
                512,  # the rollouts judge: it reads the catalog, downloads nothing
            )
        else:
            assert properties["Runtime"] == "python3.12"
            (layer,) = properties["Layers"]
            assert layer["Ref"].startswith("CoreLayer"), name


def test_validation_runs_in_an_image_with_the_runtimes_that_serve(sam):
    # OpenVINO does not fit a zip function beside the package: the manage functions are
    # images, built with the same runtime extras as the infer image
    def extras(dockerfile: str) -> set[str]:
        text = (ROOT / dockerfile).read_text()
        default = re.search(r"^ARG EXTRAS=(\S+)$", text, re.M)
        spec = re.search(r'"/build\[([^\]]+)\]"', text)
        assert spec, dockerfile
        names = spec.group(1).replace("${EXTRAS}", default.group(1) if default else "")
        return set(names.split(","))

    resources = sam["Resources"]
    for name in ("ManageEventsFunction", "ReconcileFunction", "ManageApiFunction"):
        assert resources[name]["Properties"]["PackageType"] == "Image", name
        assert resources[name]["Metadata"]["Dockerfile"] == "functions/manage/Dockerfile"
    manage = extras("functions/manage/Dockerfile")
    assert "openvino" in manage
    assert manage <= extras("functions/infer/Dockerfile")


def test_the_http_infer_function_can_have_provisioned_concurrency(cfn):
    alias = cfn["Resources"]["InferFunctionAliaslive"]["Properties"]
    assert alias["ProvisionedConcurrencyConfig"]["Fn::If"][0] == "HasProvisionedConcurrency"


def test_cold_start_modes_are_one_parameter_with_snapstart_and_provisioned_exclusive(cfn):
    # Given the transformed template
    assert cfn["Parameters"]["InferColdStart"]["AllowedValues"] == [
        "none",
        "snapstart",
        "provisioned",
    ]
    infer = cfn["Resources"]["InferFunction"]["Properties"]
    # Then SnapStart applies to published versions only with InferColdStart=snapstart, with
    # the 512 MB ephemeral storage a snapshot takes and the cache sized within it
    assert infer["SnapStart"] == {
        "Fn::If": ["HasSnapStart", {"ApplyOn": "PublishedVersions"}, {"Ref": "AWS::NoValue"}]
    }
    assert cfn["Conditions"]["HasSnapStart"] == {
        "Fn::Equals": [{"Ref": "InferColdStart"}, "snapstart"]
    }
    assert cfn["Conditions"]["HasProvisionedConcurrency"] == {
        "Fn::Equals": [{"Ref": "InferColdStart"}, "provisioned"]
    }
    variables = infer["Environment"]["Variables"]
    assert variables["LAMBDASERVE_COLD_START"] == {"Ref": "InferColdStart"}
    assert variables["LAMBDASERVE_CACHE_BYTES"]["Fn::If"][1] == str(384 * 1024**2)
    # and the rules refuse provisioned concurrency outside InferColdStart=provisioned
    rules = cfn["Rules"]
    assert rules["SnapStartExcludesProvisioned"]["Assertions"][0]["Assert"] == {
        "Fn::Equals": [{"Ref": "InferProvisionedConcurrency"}, 0]
    }
    assert "ProvisionedNeedsInstances" in rules


def test_functions_are_configured_with_the_stacks_resource_names(cfn):
    for function in resources_of(cfn, "AWS::Lambda::Function").values():
        variables = function["Properties"]["Environment"]["Variables"]
        assert variables["LAMBDASERVE_BUCKET"] == {"Ref": "ModelBucket"}
        assert variables["LAMBDASERVE_TABLE"] == {"Ref": "CatalogTable"}
        assert variables["LAMBDASERVE_REQUESTS_QUEUE"] == {
            "Fn::GetAtt": ["RequestsQueue", "QueueName"]
        }
        assert variables["POWERTOOLS_SERVICE_NAME"].startswith("lambdaserve-")
    batcher = cfn["Resources"]["BatcherFunction"]["Properties"]["Environment"]["Variables"]
    assert batcher["LAMBDASERVE_INFER_FUNCTION"] == {"Ref": "InferBatchFunction"}


def test_the_schedules_run_the_full_reconcile_and_the_rollouts_judge(cfn):
    rules = {
        rule["Properties"]["Targets"][0]["Arn"]["Fn::GetAtt"][0]: rule["Properties"]
        for rule in resources_of(cfn, "AWS::Events::Rule").values()
    }
    assert rules["ReconcileFunction"]["ScheduleExpression"] == {"Ref": "ReconcileSchedule"}
    assert rules["RolloutsFunction"]["ScheduleExpression"] == {"Ref": "RolloutSchedule"}
    assert len(rules) == 2


def test_the_gpu_service_is_optional_scales_from_zero_and_asks_for_a_gpu(cfn):
    gpu = {k: v for k, v in cfn["Resources"].items() if k.startswith("Gpu")}
    assert gpu and all(v.get("Condition") == "GpuService" for v in gpu.values())
    container = gpu["GpuTaskDefinition"]["Properties"]["ContainerDefinitions"][0]
    assert container["ResourceRequirements"] == [{"Type": "GPU", "Value": "1"}]
    assert container["Command"] == ["lambdaserve", "worker"]
    environment = {e["Name"]: e["Value"] for e in container["Environment"]}
    assert environment["LAMBDASERVE_REQUESTS_QUEUE"] == {
        "Fn::GetAtt": ["GpuRequestsQueue", "QueueName"]
    }
    assert gpu["GpuService"]["Properties"]["DesiredCount"] == 0
    assert gpu["GpuScalableTarget"]["Properties"]["MinCapacity"] == 0
    assert gpu["GpuAutoScalingGroup"]["Properties"]["MinSize"] == "0"
    assert gpu["GpuBacklogAlarm"]["Properties"]["AlarmActions"] == [{"Ref": "GpuScaleOutPolicy"}]
    assert gpu["GpuIdleAlarm"]["Properties"]["AlarmActions"] == [{"Ref": "GpuScaleInPolicy"}]
    managed = gpu["GpuCapacityProvider"]["Properties"]["AutoScalingGroupProvider"]
    assert managed["ManagedScaling"]["Status"] == "ENABLED"


def test_the_outputs_say_where_everything_is(cfn):
    assert {"ApiUrl", "ModelBucketName", "CatalogTableName", "RequestsQueueUrl"} <= set(
        cfn["Outputs"]
    )


def _handler_module(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(f"function_{path.parent.name}", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_handler_resolves_to_a_callable(sam):
    functions = {
        k: v["Properties"]
        for k, v in sam["Resources"].items()
        if v["Type"] == "AWS::Serverless::Function"
    }
    for name, properties in functions.items():
        if properties.get("PackageType") == "Image":
            dockerfile = ROOT / sam["Resources"][name]["Metadata"]["Dockerfile"]
            assert dockerfile.is_file()
            app = re.search(r"COPY (functions/\w+/app\.py)", dockerfile.read_text())
            assert app, dockerfile
            module_path, (handler,) = ROOT / app.group(1), properties["ImageConfig"]["Command"]
        else:
            module_path, handler = ROOT / properties["CodeUri"] / "app.py", properties["Handler"]
        module_name, attribute = handler.rsplit(".", 1)
        assert module_path.stem == module_name, name
        assert callable(getattr(_handler_module(module_path), attribute)), name


def test_the_layer_installs_what_the_package_needs_and_no_more():
    def names(requirements: list[str]) -> set[str]:
        return {re.split(r"[\[<>=~ ]", r.strip(), maxsplit=1)[0].lower() for r in requirements}

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    layer = [
        line
        for line in (ROOT / "locks/layer.in").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert names(layer) == names(project) - {"boto3"}  # the Lambda runtime ships boto3


def test_the_runtime_defaults_match_the_template(sam):
    parameters = sam["Parameters"]
    assert Settings().max_receive_count == parameters["MaxReceiveCount"]["Default"]
    assert Settings().results_ttl_s == parameters["ResultsTtlSeconds"]["Default"]


def test_the_http_api_writes_an_access_log(cfn):
    [stage] = resources_of(cfn, "AWS::ApiGatewayV2::Stage").values()
    settings = stage["Properties"]["AccessLogSettings"]
    assert settings["DestinationArn"] == {"Fn::GetAtt": ["ApiAccessLogs", "Arn"]}
    for field in ("$context.status", "$context.path", "$context.responseLatency"):
        assert field in settings["Format"]
    group = resources_of(cfn, "AWS::Logs::LogGroup")["ApiAccessLogs"]["Properties"]
    assert group["RetentionInDays"] == {"Ref": "AccessLogRetentionDays"}


def test_python_models_are_off_unless_the_deployment_enables_them(cfn, sam):
    assert sam["Parameters"]["EnablePythonModels"]["Default"] == "false"
    for name, function in resources_of(cfn, "AWS::Lambda::Function").items():
        variables = function["Properties"].get("Environment", {}).get("Variables", {})
        if name.startswith(("Infer", "Manage", "Reconcile")):
            assert variables["LAMBDASERVE_PYTHON_MODELS"] == {"Ref": "EnablePythonModels"}, name


def test_server_mode_is_reached_only_through_its_load_balancer(cfn):
    resources = cfn["Resources"]
    # Given EnableServerMode: everything below is conditional on it
    for name in (
        "ServerModeLoadBalancer",
        "ServerModeService",
        "ServerModeTaskDefinition",
        "InferFunctionSecurityGroup",
    ):
        assert resources[name]["Condition"] in ("ServerMode", "ServerModeTls"), name
    # The ALB takes connections only from the infer function; the tasks only from the ALB
    alb_in, *direct = resources["ServerModeLoadBalancerSecurityGroup"]["Properties"][
        "SecurityGroupIngress"
    ]
    assert alb_in["SourceSecurityGroupId"] == {"Ref": "InferFunctionSecurityGroup"}
    assert "CidrIp" not in alb_in
    # and direct clients only where ServerModeClientCidr names them (HTTPS and gRPC)
    for rule in direct:
        condition, allowed, otherwise = rule["Fn::If"]
        assert (condition, otherwise) == ("ServerModeDirectClients", {"Ref": "AWS::NoValue"})
        assert allowed["CidrIp"] == {"Ref": "ServerModeClientCidr"}
        assert allowed["FromPort"] in (443, 50051)
    task_in, metrics = resources["ServerModeTaskSecurityGroup"]["Properties"][
        "SecurityGroupIngress"
    ]
    assert task_in["SourceSecurityGroupId"] == {"Ref": "ServerModeLoadBalancerSecurityGroup"}
    assert (task_in["FromPort"], task_in["ToPort"]) == (8000, 8001)
    # and TorchServe's metrics port only from the scrapers ServerModeMetricsCidr names
    condition, allowed, otherwise = metrics["Fn::If"]
    assert (condition, otherwise) == ("ServerModeMetrics", {"Ref": "AWS::NoValue"})
    assert allowed["CidrIp"] == {"Ref": "ServerModeMetricsCidr"}
    assert (allowed["FromPort"], allowed["ToPort"]) == (8082, 8082)
    assert resources["ServerModeLoadBalancer"]["Properties"]["Scheme"] == {
        "Ref": "ServerModeScheme"
    }
    # The infer function joins the VPC and is told where the service is
    infer = resources["InferFunction"]["Properties"]
    assert "ServerMode" in json.dumps(infer["VpcConfig"])
    url = json.dumps(infer["Environment"]["Variables"]["LAMBDASERVE_SERVER_URL"])
    assert "ServerModeLoadBalancer.DNSName" in url


def test_server_mode_targets_check_readiness_and_carry_grpc_over_https(cfn):
    resources = cfn["Resources"]
    http = resources["ServerModeHttpTargets"]["Properties"]
    assert (http["Port"], http["HealthCheckPath"], http["TargetType"]) == (
        8000,
        "/v2/health/ready",
        "ip",
    )
    grpc = resources["ServerModeGrpcTargets"]
    assert grpc["Condition"] == "ServerModeTls"
    assert grpc["Properties"]["ProtocolVersion"] == "GRPC"
    assert grpc["Properties"]["HealthCheckPath"] == "/grpc.health.v1.Health/Check"
    assert grpc["Properties"]["Matcher"] == {"GrpcCode": "0"}
    listener = resources["ServerModeGrpcListener"]
    assert listener["Condition"] == "ServerModeTls"
    assert listener["Properties"]["Protocol"] == "HTTPS"
    assert listener["Properties"]["Certificates"] == [
        {"CertificateArn": {"Ref": "ServerModeCertificateArn"}}
    ]
    # the infer function's hop: plain HTTP inside the VPC (the certificate names your domain)
    assert resources["ServerModeHttpListener"]["Condition"] == "ServerMode"
    url = resources["InferFunction"]["Properties"]["Environment"]["Variables"]
    assert url["LAMBDASERVE_SERVER_URL"]["Fn::If"][1] == {
        "Fn::Sub": "http://${ServerModeLoadBalancer.DNSName}"
    }


def test_direct_clients_of_the_alb_present_bearer_tokens_the_alb_checks(cfn):
    resources = cfn["Resources"]
    # Given InferenceAuth=JWT and a certificate: both direct listeners check the token first
    for name, targets in (
        ("ServerModeHttpsListener", "ServerModeHttpTargets"),
        ("ServerModeGrpcListener", "ServerModeGrpcTargets"),
    ):
        condition, checked, plain = resources[name]["Properties"]["DefaultActions"]["Fn::If"]
        assert condition == "ServerModeJwt"
        validate, forward = checked
        assert (validate["Type"], validate["Order"]) == ("jwt-validation", 1)
        config = validate["JwtValidationConfig"]
        assert config["Issuer"] == {
            "Fn::If": [
                "CreateInferenceUserPool",
                {"Fn::GetAtt": ["InferenceUserPool", "ProviderURL"]},
                {"Ref": "InferenceJwtIssuer"},
            ]
        }
        assert config["JwksEndpoint"]["Fn::If"][2]["Fn::If"][2] == {
            "Fn::Sub": "${InferenceJwtIssuer}/.well-known/jwks.json"
        }
        assert forward == {"Type": "forward", "Order": 2, "TargetGroupArn": {"Ref": targets}}
        assert plain == [{"Type": "forward", "TargetGroupArn": {"Ref": targets}}]
    assert cfn["Conditions"]["ServerModeJwt"] == {
        "Fn::And": [{"Fn::Condition": "ServerModeTls"}, {"Fn::Condition": "InferenceJwt"}]
    }
    # And direct clients cannot be let in without a certificate and tokens
    rule = cfn["Rules"]["DirectClientsNeedTokens"]
    asserts = json.dumps(rule["Assertions"])
    assert "ServerModeCertificateArn" in asserts and '"JWT"' in asserts
    assert cfn["Parameters"]["ServerModeClientCidr"]["Default"] == ""


def test_server_mode_scales_between_its_bounds_and_from_zero_on_the_gpu_queue(cfn):
    resources = cfn["Resources"]
    target = resources["ServerModeScalableTarget"]["Properties"]
    assert target["MinCapacity"] == {"Ref": "ServerModeMinTasks"}
    assert target["MaxCapacity"] == {"Ref": "ServerModeMaxTasks"}
    assert cfn["Parameters"]["ServerModeMinTasks"]["Default"] == 0
    tracking = resources["ServerModeRequestTracking"]["Properties"]
    metric = tracking["TargetTrackingScalingPolicyConfiguration"]["PredefinedMetricSpecification"]
    assert metric["PredefinedMetricType"] == "ALBRequestCountPerTarget"
    alarm = resources["ServerModeBacklogAlarm"]["Properties"]
    assert alarm["Dimensions"][0]["Value"] == {"Fn::GetAtt": ["GpuRequestsQueue", "QueueName"]}
    assert alarm["AlarmActions"] == [{"Ref": "ServerModeFromZero"}]
    service = resources["ServerModeService"]["Properties"]
    assert service["NetworkConfiguration"]["AwsvpcConfiguration"]["AssignPublicIp"] == "DISABLED"
    commands = resources["ServerModeTaskDefinition"]["Properties"]["ContainerDefinitions"][0][
        "Command"
    ]
    condition, with_metrics, command = commands["Fn::If"]
    assert condition == "ServerModeMetrics"
    assert with_metrics == [*command, "--metrics-port", "8082"]
    assert command[:2] == ["lambdaserve", "serve"] and "--grpc-port" in command
    # one worker process unless asked (`--workers auto`: one per vCPU of the task)
    assert command[-2:] == ["--workers", {"Ref": "ServerModeWorkers"}]
    assert cfn["Parameters"]["ServerModeWorkers"]["Default"] == "1"


def test_the_server_mode_task_reads_models_and_the_catalog_only(cfn):
    role = cfn["Resources"]["ServerModeTaskRole"]
    serve, respond_async, _kms = role["Properties"]["Policies"]
    text = json.dumps(serve)
    assert "requests/" not in text and "results/" not in text and "sqs:" not in text
    assert "DeleteItem" not in text
    assert "models/*" in text
    # its only writes to the bucket: sequences' states too large for their DynamoDB item,
    # and the payloads its models capture (data_capture)
    writes = [s for s in serve["PolicyDocument"]["Statement"] if "s3:PutObject" in s["Action"]]
    assert [json.dumps(s["Resource"]) for s in writes] == [
        '{"Fn::Sub": "${ModelBucket.Arn}/sequence-state/*"}',
        '{"Fn::Sub": "${ModelBucket.Arn}/captures/*"}',
    ]
    # Prefer: respond-async: the PENDING result, its body, and the two queues it may pick
    text = json.dumps(respond_async)
    assert "models/" not in text and "DeleteItem" not in text and "DeleteObject" not in text
    assert '"sqs:SendMessage", "sqs:GetQueueUrl"' in text and "ReceiveMessage" not in text


def test_model_code_runs_at_publish_only_in_a_function_that_can_read_nothing(cfn):
    """Given the SAM template, compiled
    Then the code validator's role allows nothing of the stack's, and the functions that
    validate versions may invoke it only where model code is enabled, and the infer function
    (to load model code and Paddle Inference versions where they serve before READY) always,
    and nothing else."""
    role = cfn["Resources"]["CodeValidatorFunctionRole"]
    assert _statements(role) == []
    assert cfn["Resources"]["CodeValidatorFunction"]["Condition"] == "PythonModels"
    # The functions that validate versions invoke it, only where model code is enabled
    for name in ("ManageEventsFunction", "ReconcileFunction", "ManageApiFunction"):
        function = cfn["Resources"][name]["Properties"]
        assert function["Environment"]["Variables"]["LAMBDASERVE_CODE_VALIDATOR_FUNCTION"] == {
            "Fn::If": ["PythonModels", {"Ref": "CodeValidatorFunction"}, ""]
        }
        # the infer function's load check: always (Paddle Inference versions need it too)
        assert function["Environment"]["Variables"]["LAMBDASERVE_SERVING_CHECK_FUNCTION"] == {
            "Ref": "InferFunctionAliaslive"
        }
        policies = cfn["Resources"][f"{name}Role"]["Properties"]["Policies"]
        invoke = [p for p in policies if "Fn::If" in p and p["Fn::If"][0] == "PythonModels"]
        statement = invoke[0]["Fn::If"][1]["PolicyDocument"]["Statement"]
        assert statement == [
            {
                "Effect": "Allow",
                "Action": ["lambda:InvokeFunction"],
                "Resource": {"Fn::GetAtt": ["CodeValidatorFunction", "Arn"]},
            },
        ]
        always = [
            s
            for p in policies
            if "PolicyDocument" in p
            for s in p["PolicyDocument"]["Statement"]
            if "lambda:InvokeFunction" in s["Action"]
        ]
        assert always == [
            {
                "Effect": "Allow",
                "Action": ["lambda:InvokeFunction"],
                "Resource": {"Ref": "InferFunctionAliaslive"},
            }
        ]


def test_inference_takes_a_bearer_token_where_jwt_is_chosen(cfn, sam):
    # InferenceAuth=JWT: one JWT authorizer on the Authorization header, used by every
    # inference route; AWS_IAM and NONE leave routes without one
    authorizer = cfn["Resources"]["InferenceJwtAuthorizer"]
    assert authorizer["Condition"] == "InferenceJwt"
    properties = authorizer["Properties"]
    assert properties["AuthorizerType"] == "JWT"
    assert properties["IdentitySource"] == ["$request.header.Authorization"]
    # with an issuer, the deployer's; without one, the stack's own Cognito pool and client
    assert properties["JwtConfiguration"] == {
        "Issuer": {
            "Fn::If": [
                "CreateInferenceUserPool",
                {"Fn::GetAtt": ["InferenceUserPool", "ProviderURL"]},
                {"Ref": "InferenceJwtIssuer"},
            ]
        },
        "Audience": {
            "Fn::If": [
                "CreateInferenceUserPool",
                [{"Ref": "InferenceMachineClient"}],
                {"Ref": "InferenceJwtAudience"},
            ]
        },
    }
    routes = resources_of(cfn, "AWS::ApiGatewayV2::Route")
    inference = {n: r for n, r in routes.items() if n.startswith("Infer")}
    assert len(inference) >= 6
    for route in inference.values():
        assert route["Properties"]["AuthorizationType"] == {"Ref": "InferenceAuth"}
        assert route["Properties"]["AuthorizerId"] == {
            "Fn::If": ["InferenceJwt", {"Ref": "InferenceJwtAuthorizer"}, {"Ref": "AWS::NoValue"}]
        }
    assert "JWT" in sam["Parameters"]["InferenceAuth"]["AllowedValues"]
    assert "JwtIssuerNeedsAnAudience" in sam["Rules"]


def test_one_argument_chooses_the_images_variant():
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "image_variant", ROOT / "scripts" / "image_variant.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text = TEMPLATE.read_text()
    # cpu: the template as it is (the Dockerfiles' defaults)
    assert module.variant_template("cpu", text) == text
    for variant in ("torch", "torchserve"):
        template = yaml_of(module.variant_template(variant, text))
        images = {
            name: r["Metadata"]
            for name, r in template["Resources"].items()
            if r.get("Properties", {}).get("PackageType") == "Image"
        }
        assert len(images) == 7
        for name, metadata in images.items():
            extras = metadata["DockerBuildArgs"]["EXTRAS"]
            assert "torch" in extras and "openvino" in extras, name
            assert metadata["DockerBuildArgs"]["TORCH_INDEX"].endswith("/whl/cpu"), name
            assert metadata["DockerTag"].endswith(f"-{variant}"), name
    infer = yaml_of(module.variant_template("torchserve", text))["Resources"]["InferFunction"]
    assert infer["Metadata"]["DockerBuildArgs"]["EXTRAS"] == "images,openvino,torchserve"
    # paddle: Paddle Inference in the images that serve; the manage image reads Paddle
    # programs without it
    # and tensorflow: TensorFlow there too; the manage image reads SavedModels without it
    for variant in ("paddle", "tensorflow"):
        resources = yaml_of(module.variant_template(variant, text))["Resources"]
        for name, resource in resources.items():
            if resource.get("Properties", {}).get("PackageType") != "Image":
                continue
            args = resource["Metadata"].get("DockerBuildArgs", {})
            if resource["Metadata"]["Dockerfile"] == "functions/infer/Dockerfile":
                # no PyTorch index; the variant's own lock
                assert args == {"EXTRAS": f"images,openvino,{variant}", "LOCK": f"infer-{variant}"}
            else:
                assert not args, name


def yaml_of(text: str) -> dict[str, Any]:
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as handle:
        handle.write(text)
        handle.flush()
        return load_template(Path(handle.name))


def _holds(cfn: dict[str, Any], condition: str, parameters: dict[str, str]) -> bool:
    """Whether ``condition`` holds for ``parameters`` (defaults for the rest)."""
    values = {k: str(v.get("Default", "")) for k, v in cfn["Parameters"].items()} | parameters

    def value(node: Any) -> Any:
        if isinstance(node, dict) and "Ref" in node:
            return values[node["Ref"]]
        if isinstance(node, dict) and "Fn::Join" in node:
            return node["Fn::Join"][0].join(str(value(v)) for v in node["Fn::Join"][1])
        return node

    def holds(node: Any) -> bool:
        (function, args), *_ = node.items()
        if function == "Condition":
            return holds(cfn["Conditions"][args])
        if function == "Fn::Condition":
            return holds(cfn["Conditions"][args])
        if function == "Fn::Equals":
            return str(value(args[0])) == str(value(args[1]))
        if function == "Fn::Not":
            return not holds(args[0])
        if function == "Fn::And":
            return all(holds(a) for a in args)
        if function == "Fn::Or":
            return any(holds(a) for a in args)
        raise AssertionError(f"unexpected {function}")

    return holds(cfn["Conditions"][condition])


@pytest.mark.parametrize("kind", ["cpu", "gpu"])
def test_server_mode_of_either_kind_starts_a_first_task_from_zero(cfn, kind):
    """Given server mode of either kind at its default of zero tasks (gpu with its service)
    When a request finds no task behind the ALB (which answers it 503)
    Then an alarm on the ALB's 503s starts one task, through a policy that exists too."""
    parameters = {"EnableServerMode": "true", "ServerModeKind": kind, "EnableGpuService": "true"}
    resources = cfn["Resources"]

    def deployed(name: str) -> bool:
        condition = resources[name].get("Condition")
        return condition is None or _holds(cfn, condition, parameters)

    alarms = {
        name: r["Properties"]
        for name, r in resources_of(cfn, "AWS::CloudWatch::Alarm").items()
        if deployed(name) and r["Properties"]["AlarmActions"] == [{"Ref": "ServerModeFromZero"}]
    }
    no_targets = [a for a in alarms.values() if a["MetricName"] == "HTTPCode_ELB_503_Count"]
    assert no_targets, f"no from-zero alarm for ServerModeKind={kind}: {sorted(alarms)}"
    [alarm] = no_targets
    assert alarm["Namespace"] == "AWS/ApplicationELB"
    assert alarm["Dimensions"] == [
        {
            "Name": "LoadBalancer",
            "Value": {"Fn::GetAtt": ["ServerModeLoadBalancer", "LoadBalancerFullName"]},
        }
    ]
    assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (0, "GreaterThanThreshold")
    assert deployed("ServerModeFromZero")
    policy = resources["ServerModeFromZero"]["Properties"]["StepScalingPolicyConfiguration"]
    assert policy["StepAdjustments"] == [{"MetricIntervalLowerBound": 0, "ScalingAdjustment": 1}]
    # one task at a time: no second start while the first still warms up
    assert policy["Cooldown"] == {"Ref": "ServerModeWarmUpSeconds"}


def test_server_mode_health_checks_use_readiness_and_liveness_with_a_warm_up_grace(cfn):
    """Given the server-mode service
    Then the ALB checks readiness (models warm), the container check only liveness (a task
    warming up or draining is not killed), ECS waits ServerModeWarmUpSeconds before acting
    on failed checks, and SIGTERM's drain fits inside the ALB's deregistration delay."""
    resources = cfn["Resources"]
    assert resources["ServerModeHttpTargets"]["Properties"]["HealthCheckPath"] == (
        "/v2/health/ready"
    )
    service = resources["ServerModeService"]["Properties"]
    assert service["HealthCheckGracePeriodSeconds"] == {"Ref": "ServerModeWarmUpSeconds"}
    [container] = resources["ServerModeTaskDefinition"]["Properties"]["ContainerDefinitions"]
    check = container["HealthCheck"]
    assert check["Command"][0] == "CMD" and "/v2/health/live" in check["Command"][-1]
    env = {e["Name"]: float(e["Value"]) for e in container["Environment"] if "DRAIN" in e["Name"]}
    grpc_grace_s = 10.0  # apps.grpc.server.GrpcOptions.grace_s
    drain_s = env["LAMBDASERVE_DRAIN_DELAY_S"] + env["LAMBDASERVE_DRAIN_TIMEOUT_S"] + grpc_grace_s
    delays = [
        int(a["Value"])
        for a in resources["ServerModeHttpTargets"]["Properties"]["TargetGroupAttributes"]
        if a["Key"] == "deregistration_delay.timeout_seconds"
    ]
    assert drain_s <= delays[0] < container["StopTimeout"]


def test_a_shared_response_cache_is_reached_on_its_port_alone(cfn):
    """Given ResponseCacheVpcId (a Redis/Valkey the user gives, in a VPC)
    Then the infer functions join that VPC, their group reaches the cache on its port and AWS
    APIs over HTTPS only, and the cache's group admits that group on that port alone."""
    resources = cfn["Resources"]
    client = resources["ResponseCacheClientSecurityGroup"]
    ingress = resources["ResponseCacheIngress"]
    assert client["Condition"] == ingress["Condition"] == "SharedResponseCacheInVpc"
    to_cache, to_apis = client["Properties"]["SecurityGroupEgress"]
    port = {"Ref": "ResponseCacheRedisPort"}
    assert to_cache["DestinationSecurityGroupId"] == {"Ref": "ResponseCacheSecurityGroupId"}
    assert (to_cache["FromPort"], to_cache["ToPort"]) == (port, port)
    assert (to_apis["FromPort"], to_apis["ToPort"], to_apis["IpProtocol"]) == (443, 443, "tcp")
    rule = ingress["Properties"]
    assert rule["GroupId"] == {"Ref": "ResponseCacheSecurityGroupId"}
    assert rule["SourceSecurityGroupId"] == {"Ref": "ResponseCacheClientSecurityGroup"}
    assert (rule["FromPort"], rule["ToPort"], rule["IpProtocol"]) == (port, port, "tcp")
    assert "CidrIp" not in rule
    for name in ("InferFunction", "InferBatchFunction"):
        properties = resources[name]["Properties"]
        assert "ResponseCacheClientSecurityGroup" in json.dumps(properties["VpcConfig"]), name
        variables = properties["Environment"]["Variables"]
        assert variables["LAMBDASERVE_REDIS_HOST"] == {"Ref": "ResponseCacheRedisHost"}
        assert variables["LAMBDASERVE_REDIS_TLS"] == {"Ref": "ResponseCacheRedisTls"}


def _container_environment(cfn: dict[str, Any], task: str) -> dict[str, Any]:
    [container] = cfn["Resources"][task]["Properties"]["ContainerDefinitions"]
    return {e["Name"]: e["Value"] for e in container["Environment"]}


def test_the_ecs_tasks_get_what_their_code_reads(cfn):
    """Given the GPU queue worker and the server-mode task
    Then the worker may run model code where the functions may (the GPU queue delivers it,
    server mode queues it there), and serve shares the response cache and queues
    `Prefer: respond-async` on the stack's own queues, as the infer function does."""
    gpu = _container_environment(cfn, "GpuTaskDefinition")
    assert gpu["LAMBDASERVE_PYTHON_MODELS"] == {"Ref": "EnablePythonModels"}
    infer = cfn["Resources"]["InferFunction"]["Properties"]["Environment"]["Variables"]
    serve = _container_environment(cfn, "ServerModeTaskDefinition")
    for name in ("LAMBDASERVE_REDIS_HOST", "LAMBDASERVE_REDIS_PORT", "LAMBDASERVE_REDIS_TLS"):
        assert serve[name] == infer[name], name
    assert serve["LAMBDASERVE_REQUESTS_QUEUE"] == {"Fn::GetAtt": ["RequestsQueue", "QueueName"]}
    assert "GpuRequestsQueue" in json.dumps(serve["LAMBDASERVE_GPU_REQUESTS_QUEUE"])
    groups = cfn["Resources"]["ServerModeService"]["Properties"]["NetworkConfiguration"][
        "AwsvpcConfiguration"
    ]["SecurityGroups"]
    assert "ResponseCacheClientSecurityGroup" in json.dumps(groups)
    # reply_to delivery from the GPU worker: only to this stack's reply queues
    worker = json.dumps(cfn["Resources"]["GpuTaskRole"]["Properties"]["Policies"])
    assert "${AWS::StackName}-reply-*" in worker and "gpu-worker-kms" in worker


def test_server_mode_flags_are_wired_or_refused_at_deploy(cfn):
    rules = cfn["Rules"]
    assert "ServerModeWorkers" in json.dumps(rules["ServerModeMetricsNeedOneWorker"])
    refused = rules["ServerModeManagementIsRefused"]
    assert refused["RuleCondition"] == {
        "Fn::Not": [{"Fn::Equals": [{"Ref": "ServerModeManagement"}, "off"]}]
    }
    assert cfn["Parameters"]["ServerModeManagement"]["Default"] == "off"
    assert "--management-port" not in json.dumps(cfn["Resources"]["ServerModeTaskDefinition"])


def test_jwt_without_an_issuer_creates_a_pool_and_a_machine_client(cfn):
    resources = cfn["Resources"]
    created = {
        "InferenceUserPool": "AWS::Cognito::UserPool",
        "InferenceUserPoolDomain": "AWS::Cognito::UserPoolDomain",
        "InferenceResourceServer": "AWS::Cognito::UserPoolResourceServer",
        "InferenceMachineClient": "AWS::Cognito::UserPoolClient",
    }
    for name, kind in created.items():
        assert resources[name]["Type"] == kind
        assert resources[name]["Condition"] == "CreateInferenceUserPool"
    client = resources["InferenceMachineClient"]["Properties"]
    assert client["AllowedOAuthFlows"] == ["client_credentials"] and client["GenerateSecret"]
    assert client["AllowedOAuthScopes"] == ["lambdaserve/infer"]
    assert cfn["Conditions"]["CreateInferenceUserPool"] == {
        "Fn::And": [
            {"Fn::Condition": "InferenceJwt"},
            {"Fn::Equals": [{"Ref": "InferenceJwtIssuer"}, ""]},
        ]
    }
    assert {"InferenceTokenUrl", "InferenceClientId"} <= set(cfn["Outputs"])


def test_the_deploy_guide_counts_the_templates_parameters(cfn):
    # docs/deploy.md says how many questions `sam deploy --guided` asks: one per parameter
    said = re.search(r"asks (\d+) questions", (ROOT / "docs/deploy.md").read_text())
    assert said, "docs/deploy.md no longer says how many questions --guided asks"
    assert int(said[1]) == len(cfn["Parameters"])
