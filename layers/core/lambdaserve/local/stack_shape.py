"""What ``sam deploy`` makes of template.yaml, read as data: each function and task's shape.

The local stack and the deployed-shape journeys must start every Lambda function and ECS
container from what the template says, not from a second hand-written list: its handler or
command, its environment, its limits, its event source mappings and its role's policies. So
the template goes through SAM's own translator (what CloudFormation runs at deploy), the
stack's rules and conditions are evaluated for a parameter set, and every intrinsic is
resolved against the names and ARNs the emulated resources have (``Names``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lambdaserve.local.template import Resolver, TemplateError


@dataclass(frozen=True)
class Role:
    """An IAM role: its inline policy documents (resolved) and its managed policies' ARNs."""

    logical: str
    policies: Mapping[str, dict[str, Any]]
    managed: tuple[str, ...] = ()
    trusted: tuple[str, ...] = ()  # the service principals that may assume it


@dataclass(frozen=True)
class QueueSource:
    """An SQS event source mapping: which queue feeds a function, and how."""

    queue: str  # the queue's logical id
    batch_size: int
    window_s: int
    max_concurrency: int | None
    reports_item_failures: bool


@dataclass(frozen=True)
class FunctionShape:
    """A Lambda function as deployed."""

    logical: str
    handler: str  # "app.api_handler": the image's command, or the zip's handler
    source: str  # the Dockerfile an image is built from, or the zip's code directory
    environment: Mapping[str, str]
    timeout_s: int
    memory_mb: int
    ephemeral_mb: int
    reserved_concurrency: int | None
    sources: tuple[QueueSource, ...]
    role: Role
    literal: frozenset[str] = frozenset()  # variables the template writes as plain text
    tracing: str = "PassThrough"  # Lambda's TracingConfig mode (PassThrough when unset)


@dataclass(frozen=True)
class TaskShape:
    """An ECS task definition's container as deployed."""

    logical: str
    container: str
    command: tuple[str, ...]
    environment: Mapping[str, str]
    role: Role
    port_mappings: tuple[int, ...] = ()
    literal: frozenset[str] = frozenset()  # variables the template writes as plain text


@dataclass(frozen=True)
class StackShape:
    functions: Mapping[str, FunctionShape]
    tasks: Mapping[str, TaskShape]
    parameters: Mapping[str, str] = field(default_factory=dict)

    def function(self, logical: str) -> FunctionShape:
        if logical not in self.functions:
            raise TemplateError(f"template.yaml deploys no function {logical}")
        return self.functions[logical]

    def task(self, logical: str) -> TaskShape:
        if logical not in self.tasks:
            raise TemplateError(
                f"template.yaml deploys no task {logical} with these parameters "
                f"(its condition is false?)"
            )
        return self.tasks[logical]


@dataclass(frozen=True)
class Names:
    """What the stack's resources are called where it runs (the emulator's names).

    ``refs`` gives a logical id's ``Ref`` value (a bucket's name, a queue's URL) and
    ``attributes`` a ``GetAtt`` value; anything else a shape needs gets a name of the
    stack's own (``<stack>-<logical>``), or an ARN built from it for roles and functions.
    """

    stack: str
    region: str
    account: str
    refs: Mapping[str, str] = field(default_factory=dict)
    attributes: Mapping[tuple[str, str], str] = field(default_factory=dict)


def read_shape(
    cloudformation: Mapping[str, Any], parameters: Mapping[str, str], names: Names
) -> StackShape:
    """Every function and task ``cloudformation`` deploys with ``parameters``, resolved."""
    resources: Mapping[str, Any] = cloudformation["Resources"]
    resolver = Resolver(cloudformation, *_values(resources, parameters, names))
    _check_rules(cloudformation.get("Rules", {}), resolver)
    present = {
        logical: resource
        for logical, resource in resources.items()
        if "Condition" not in resource or resolver.condition(resource["Condition"])
    }
    roles = {
        logical: _role(logical, resource, resolver)
        for logical, resource in present.items()
        if resource["Type"] == "AWS::IAM::Role"
    }
    sources: dict[str, list[QueueSource]] = {}
    for resource in present.values():
        if resource["Type"] == "AWS::Lambda::EventSourceMapping":
            function, source = _queue_source(resource["Properties"], resolver)
            sources.setdefault(function, []).append(source)
    functions = {
        logical: _function(logical, resource, resolver, roles, sources.get(logical, []))
        for logical, resource in present.items()
        if resource["Type"] == "AWS::Lambda::Function"
    }
    tasks = {
        logical: _task(logical, resource, resolver, roles)
        for logical, resource in present.items()
        if resource["Type"] == "AWS::ECS::TaskDefinition"
    }
    return StackShape(functions, tasks, dict(parameters))


def _check_rules(rules: Mapping[str, Any], resolver: Resolver) -> None:
    """The template's Rules, as CloudFormation checks them before it creates anything: a
    parameter set that breaks one is refused with the rule's own description."""
    for name, rule in rules.items():
        if "RuleCondition" in rule and not resolver.resolve(rule["RuleCondition"]):
            continue
        for assertion in rule.get("Assertions", []):
            if not resolver.resolve(assertion["Assert"]):
                said = assertion.get("AssertDescription", "")
                raise TemplateError(f"template.yaml's rule {name} refuses these parameters: {said}")


def _values(
    resources: Mapping[str, Any], parameters: Mapping[str, str], names: Names
) -> tuple[dict[str, str], dict[tuple[str, str], str]]:
    """Ref and GetAtt values: the given names first, then names of the stack's own."""
    arn = f"{names.region}:{names.account}"
    refs = {
        "AWS::Partition": "aws",
        "AWS::Region": names.region,
        "AWS::AccountId": names.account,
        "AWS::StackName": names.stack,
        "AWS::URLSuffix": "amazonaws.com",
        **parameters,
    }
    attributes: dict[tuple[str, str], str] = {}
    for logical, resource in resources.items():
        kind = resource["Type"]
        # a name given for a resource is also what its ARN is built from
        own = names.attributes.get((logical, "QueueName")) or f"{names.stack}-{logical}"
        if kind in ("AWS::S3::Bucket", "AWS::DynamoDB::Table"):  # their Ref is their name
            own = names.refs.get(logical, own)
        refs[logical] = own
        if kind == "AWS::IAM::Role":
            attributes[(logical, "Arn")] = f"arn:aws:iam::{names.account}:role/{own}"
        elif kind == "AWS::Lambda::Function":
            attributes[(logical, "Arn")] = f"arn:aws:lambda:{arn}:function:{own}"
        elif kind == "AWS::SQS::Queue":
            attributes[(logical, "QueueName")] = own
            attributes[(logical, "Arn")] = f"arn:aws:sqs:{arn}:{own}"
        elif kind == "AWS::S3::Bucket":
            attributes[(logical, "Arn")] = f"arn:aws:s3:::{own}"
        elif kind == "AWS::DynamoDB::Table":
            attributes[(logical, "Arn")] = f"arn:aws:dynamodb:{arn}:table/{own}"
        elif kind == "AWS::Logs::LogGroup":
            attributes[(logical, "Arn")] = f"arn:aws:logs:{arn}:log-group:{own}:*"
        elif kind == "AWS::ElasticLoadBalancingV2::LoadBalancer":
            attributes[(logical, "DNSName")] = f"{own}.local"
    for logical, resource in resources.items():  # a version's or alias's Ref is its ARN
        properties = resource.get("Properties", {})
        if resource["Type"] in ("AWS::Lambda::Alias", "AWS::Lambda::Version"):
            function = refs[properties["FunctionName"]["Ref"]]
            qualifier = properties.get("Name", "1")
            refs[logical] = f"arn:aws:lambda:{arn}:function:{function}:{qualifier}"
    refs |= names.refs
    attributes |= names.attributes
    return refs, attributes


def _role(logical: str, resource: Mapping[str, Any], resolver: Resolver) -> Role:
    properties = resolver.resolve(resource.get("Properties", {}))
    policies = {
        policy["PolicyName"]: policy["PolicyDocument"] for policy in properties.get("Policies", [])
    }
    trusted = tuple(
        service
        for statement in properties.get("AssumeRolePolicyDocument", {}).get("Statement", [])
        for service in _listed(statement.get("Principal", {}).get("Service", []))
    )
    return Role(logical, policies, tuple(properties.get("ManagedPolicyArns", [])), trusted)


def _queue_source(properties: Mapping[str, Any], resolver: Resolver) -> tuple[str, QueueSource]:
    function = properties["FunctionName"]
    source = properties["EventSourceArn"]
    if not (isinstance(function, dict) and "Ref" in function):
        raise TemplateError(f"an event source mapping's FunctionName is not a Ref: {function}")
    if not (isinstance(source, dict) and "Fn::GetAtt" in source):
        raise TemplateError(f"an event source mapping's EventSourceArn is not a GetAtt: {source}")
    resolved = resolver.resolve(dict(properties))
    scaling = resolved.get("ScalingConfig", {})
    return function["Ref"], QueueSource(
        queue=source["Fn::GetAtt"][0],
        batch_size=int(resolved.get("BatchSize", 10)),
        window_s=int(resolved.get("MaximumBatchingWindowInSeconds", 0)),
        max_concurrency=_optional_int(scaling.get("MaximumConcurrency")),
        reports_item_failures="ReportBatchItemFailures"
        in resolved.get("FunctionResponseTypes", []),
    )


def _function(
    logical: str,
    resource: Mapping[str, Any],
    resolver: Resolver,
    roles: Mapping[str, Role],
    sources: list[QueueSource],
) -> FunctionShape:
    raw = resource["Properties"]
    properties = resolver.resolve({k: v for k, v in raw.items() if k != "Role"})
    command = properties.get("ImageConfig", {}).get("Command", [])
    handler = command[0] if command else properties.get("Handler", "")
    return FunctionShape(
        logical=logical,
        handler=str(handler),
        source=str(resource.get("Metadata", {}).get("LocalSource", "")),
        environment=_strings(properties.get("Environment", {}).get("Variables", {})),
        timeout_s=int(properties.get("Timeout", 3)),
        memory_mb=int(properties.get("MemorySize", 128)),
        ephemeral_mb=int(properties.get("EphemeralStorage", {}).get("Size", 512)),
        reserved_concurrency=_optional_int(properties.get("ReservedConcurrentExecutions")),
        sources=tuple(sources),
        role=roles[_role_of(raw["Role"], logical)],
        literal=frozenset(
            name
            for name, value in raw.get("Environment", {}).get("Variables", {}).items()
            if isinstance(value, str)
        ),
        tracing=str(properties.get("TracingConfig", {}).get("Mode", "PassThrough")),
    )


def _task(
    logical: str, resource: Mapping[str, Any], resolver: Resolver, roles: Mapping[str, Role]
) -> TaskShape:
    raw = resource["Properties"]
    properties = resolver.resolve({k: v for k, v in raw.items() if not k.endswith("RoleArn")})
    (container,) = properties["ContainerDefinitions"]  # one container a task, as deployed
    return TaskShape(
        logical=logical,
        container=str(container["Name"]),
        command=tuple(str(part) for part in container.get("Command", [])),
        environment=_strings({e["Name"]: e["Value"] for e in container.get("Environment", [])}),
        role=roles[_role_of(raw["TaskRoleArn"], logical)],
        port_mappings=tuple(int(p["ContainerPort"]) for p in container.get("PortMappings", [])),
        literal=frozenset(
            e["Name"]
            for raw_container in raw["ContainerDefinitions"]
            for e in raw_container.get("Environment", [])
            if isinstance(e["Value"], str)
        ),
    )


def _role_of(reference: Any, owner: str) -> str:
    if isinstance(reference, dict) and "Fn::GetAtt" in reference:
        return str(reference["Fn::GetAtt"][0])
    raise TemplateError(f"{owner}: its role is not a role of the template ({reference})")


def _strings(variables: Mapping[str, Any]) -> dict[str, str]:
    return {name: str(value) for name, value in variables.items()}


def _listed(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def _optional_int(value: Any) -> int | None:
    return None if value in (None, "") else int(value)
