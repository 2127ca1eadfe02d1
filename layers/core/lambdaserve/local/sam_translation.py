"""template.yaml as ``sam deploy`` hands it to CloudFormation: through SAM's own translator,
with a parameter set's values (a samconfig profile's overrides, else the defaults)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from lambdaserve.local.template import TemplateError


def parameter_values(template: Mapping[str, Any], given: Mapping[str, str]) -> dict[str, str]:
    """Each parameter's value: ``given`` (a samconfig's overrides), else its default."""
    declared = template.get("Parameters", {})
    unknown = sorted(set(given) - set(declared))
    if unknown:
        raise TemplateError(f"template.yaml has no parameter {', '.join(unknown)}")
    values = {name: str(spec.get("Default", "")) for name, spec in declared.items()}
    return values | dict(given)


def transformed(template: Mapping[str, Any], region: str) -> dict[str, Any]:
    """The template as SAM's translator turns it into CloudFormation (what deploy runs).

    ``sam build`` would fill each function's code location; here each gets a placeholder,
    and the source it is built from is kept in the function's metadata (``LocalSource``).
    """
    import boto3
    from samtranslator.parser.parser import Parser
    from samtranslator.translator.translator import Translator

    document = copy.deepcopy(dict(template))
    for logical, resource in document["Resources"].items():
        properties = resource.setdefault("Properties", {})
        if resource["Type"] == "AWS::Serverless::Function":
            metadata = resource.setdefault("Metadata", {})
            if properties.get("PackageType") == "Image":
                metadata["LocalSource"] = metadata.get("Dockerfile", "")
                properties["ImageUri"] = f"local/{logical.lower()}:latest"
            else:
                metadata["LocalSource"] = str(properties.get("CodeUri", ""))
                properties["CodeUri"] = f"s3://local/{logical}.zip"
        elif resource["Type"] == "AWS::Serverless::LayerVersion":
            properties["ContentUri"] = f"s3://local/{logical}.zip"
    # the region from the session given, never from the machine's AWS configuration
    translator = Translator(None, Parser(), boto_session=boto3.session.Session(region_name=region))
    try:
        result: dict[str, Any] = translator.translate(
            document, parameter_values={}, get_managed_policy_map=dict
        )
    except Exception as error:  # the translator's own errors name the resource at fault
        raise TemplateError(f"SAM could not transform template.yaml: {error}") from error
    return result
