"""DynamoDB's ``dynamodb:LeadingKeys`` condition, which moto does not evaluate (it ignores
any condition operator but ``StringEquals``, and knows no DynamoDB condition keys): checked
here, so a policy that grants items by their partition key (the sequence records'
``SEQUENCE#*``; the catalog's items but the ``INFLIGHT#*`` slots, ``StringNotLike``) is
enforced as AWS enforces it, and a wrong pattern fails a journey.

AWS's rule: a statement whose conditions do not hold does not apply (it neither allows nor
denies). A call moto permitted is denied here when no Allow statement that matches its
action and resource has conditions that hold for the item's partition key. Conditions on
other keys are taken to hold, as moto takes them.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

LEADING_KEYS = "dynamodb:LeadingKeys"
_ITEM_OPERATIONS = ("GetItem", "PutItem", "UpdateItem", "DeleteItem")


def leading_keys(operation: str, body: Mapping[str, Any], hash_key: str) -> list[str] | None:
    """The partition key values a single-item call names (None: not a single-item call)."""
    if operation not in _ITEM_OPERATIONS:
        return None
    item = body.get("Key") or body.get("Item") or {}
    value = item.get(hash_key, {})
    return [str(next(iter(value.values())))] if value else []


def permitted(policies: Iterable[Any], action: str, resource: str, keys: Sequence[str]) -> bool:
    """True when an Allow statement matching ``action`` on ``resource`` applies to an item
    whose partition key is ``keys`` (its LeadingKeys conditions hold, if it has any)."""
    from moto.iam.access_control import IAMPolicy, IAMPolicyStatement

    for policy in policies:
        document = IAMPolicy(policy)._policy_json
        statements = document["Statement"]
        for statement in statements if isinstance(statements, list) else [statements]:
            if statement.get("Effect") != "Allow" or "Action" not in statement:
                continue
            checker = IAMPolicyStatement(statement)
            if not checker._check_element_matches("Action", action):
                continue
            if not checker._check_element_matches("Resource", resource):
                continue
            if _holds(statement.get("Condition", {}), keys):
                return True
    return False


def mentions_leading_keys(policies: Iterable[Any]) -> bool:
    from moto.iam.access_control import IAMPolicy

    return any(LEADING_KEYS in json.dumps(IAMPolicy(p)._policy_json) for p in policies)


def _holds(conditions: Mapping[str, Mapping[str, Any]], keys: Sequence[str]) -> bool:
    for operator, tests in conditions.items():
        if LEADING_KEYS not in tests:
            continue
        expected = tests[LEADING_KEYS]
        patterns = [expected] if isinstance(expected, str) else list(expected)
        like = operator.endswith(("StringLike", "StringNotLike"))
        negated = operator.endswith(("StringNotLike", "StringNotEquals"))
        if not operator.startswith("ForAllValues:") and not keys:
            return False  # a single-valued test of a key the request lacks fails in AWS
        for key in keys:
            matched = any(fnmatch.fnmatchcase(key, p) if like else key == p for p in patterns)
            if matched == negated:
                return False
    return True
