"""The HTTP API's routes as template.yaml deploys them, and API Gateway's choice among them.

Read from the transformed template, both ways SAM writes a route: an
``AWS::ApiGatewayV2::Route`` whose integration names a function's alias, and the paths SAM
puts in the API's OpenAPI body for a function's ``HttpApi`` events. API Gateway picks the
most specific match: a full path before a greedy ``{proxy+}``, a named method before
``ANY``; a request no route matches is its 404 ``{"message":"Not Found"}``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_FUNCTION_ARN = re.compile(r"\$\{(\w+)\.Arn\}")


@dataclass(frozen=True)
class HttpRoute:
    method: str  # "ANY" or an HTTP method
    path: str  # "/v2/{proxy+}"
    function: str  # the logical id of the function it invokes

    @property
    def key(self) -> str:
        return f"{self.method} {self.path}"

    def match(self, method: str, path: str) -> dict[str, str] | None:
        """The path parameters when this route takes ``method`` ``path``, else None."""
        if self.method not in ("ANY", method.upper()):
            return None
        found = re.fullmatch(_pattern(self.path), path)
        return None if found is None else dict(found.groupdict())

    def specificity(self) -> tuple[int, int, int]:
        greedy = "+}" in self.path
        literal = len(re.sub(r"\{[^}]*\}", "", self.path))
        return (0 if greedy else 1, literal, 0 if self.method == "ANY" else 1)


def _pattern(template: str) -> str:
    pattern = ""
    for part in re.split(r"(\{[^}]+\})", template):
        if part.startswith("{"):
            name = part[1:-1]
            greedy = name.endswith("+")
            group = re.sub(r"\W", "_", name.rstrip("+"))
            pattern += f"(?P<{group}>.+)" if greedy else f"(?P<{group}>[^/]+)"
        else:
            pattern += re.escape(part)
    return pattern


def http_routes(transformed: Mapping[str, Any]) -> tuple[HttpRoute, ...]:
    """Every route of the template's HTTP APIs, with the function each invokes."""
    resources: Mapping[str, Any] = transformed["Resources"]
    found: list[HttpRoute] = []
    for resource in resources.values():
        properties = resource.get("Properties", {})
        if resource["Type"] == "AWS::ApiGatewayV2::Route":
            target = properties.get("Target", {})
            integration = str(target.get("Fn::Sub", "")).removeprefix("integrations/${")[:-1]
            uri = resources.get(integration, {}).get("Properties", {}).get("IntegrationUri", {})
            alias = uri.get("Ref", "") if isinstance(uri, dict) else ""
            function = _function_of_alias(resources, alias)
            if function:
                method, _, path = properties["RouteKey"].partition(" ")
                found.append(HttpRoute(method, path, function))
        elif resource["Type"] == "AWS::ApiGatewayV2::Api" and "Body" in properties:
            for path, methods in properties["Body"].get("paths", {}).items():
                for method, operation in methods.items():
                    uri = operation.get("x-amazon-apigateway-integration", {}).get("uri", {})
                    named = _FUNCTION_ARN.search(str(uri.get("Fn::Sub", "")))
                    if named:
                        verb = "ANY" if method == "x-amazon-apigateway-any-method" else method
                        found.append(HttpRoute(verb.upper(), path, named.group(1)))
    return tuple(found)


def _function_of_alias(resources: Mapping[str, Any], alias: str) -> str:
    properties = resources.get(alias, {}).get("Properties", {})
    if resources.get(alias, {}).get("Type") != "AWS::Lambda::Alias":
        return ""
    name = properties.get("FunctionName", {})
    return str(name.get("Ref", "")) if isinstance(name, dict) else ""


def choose(
    routes: tuple[HttpRoute, ...], method: str, path: str
) -> tuple[HttpRoute, dict[str, str]] | None:
    """The route API Gateway sends ``method`` ``path`` to, with its path parameters."""
    matched = [(r, p) for r in routes if (p := r.match(method, path)) is not None]
    if not matched:
        return None
    return max(matched, key=lambda pair: pair[0].specificity())
