"""The deployed shape's check of DynamoDB's dynamodb:LeadingKeys condition (moto ignores
it): a statement granting items by partition-key prefix applies to those items only."""

from __future__ import annotations

import json

from lambdaserve.local.moto_conditions import leading_keys, permitted

TABLE = "arn:aws:dynamodb:us-east-1:123456789012:table/catalog"


def policy(*statements: dict) -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": list(statements)})


SEQUENCES = {
    "Effect": "Allow",
    "Action": ["dynamodb:GetItem", "dynamodb:PutItem"],
    "Resource": TABLE,
    "Condition": {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["SEQUENCE#*"]}},
}


def test_a_leading_keys_statement_grants_its_prefix_and_nothing_else():
    # Given a role whose only PutItem is on SEQUENCE# items
    policies = [policy(SEQUENCES)]
    # When an item call names a partition key / Then the prefix decides
    sequence = leading_keys("PutItem", {"Item": {"pk": {"S": "SEQUENCE#m#1"}}}, "pk")
    model = leading_keys("PutItem", {"Item": {"pk": {"S": "MODEL#m"}}}, "pk")
    assert sequence == ["SEQUENCE#m#1"] and model == ["MODEL#m"]
    assert permitted(policies, "dynamodb:PutItem", TABLE, sequence)
    assert not permitted(policies, "dynamodb:PutItem", TABLE, model)
    assert not permitted(policies, "dynamodb:UpdateItem", TABLE, sequence)


def test_an_unconditioned_statement_still_grants_every_item():
    plain = {"Effect": "Allow", "Action": "dynamodb:PutItem", "Resource": TABLE}
    keys = leading_keys("GetItem", {"Key": {"pk": {"S": "MODEL#m"}}}, "pk")
    assert permitted([policy(SEQUENCES, plain)], "dynamodb:PutItem", TABLE, keys)
    assert leading_keys("Query", {"KeyConditionExpression": "pk = :p"}, "pk") is None


def test_a_string_not_like_statement_grants_every_item_but_its_prefix():
    # Given a role granted the catalog's items but the INFLIGHT# slots (template.yaml)
    catalog = {
        "Effect": "Allow",
        "Action": "dynamodb:UpdateItem",
        "Resource": TABLE,
        "Condition": {"ForAllValues:StringNotLike": {"dynamodb:LeadingKeys": ["INFLIGHT#*"]}},
    }
    model = leading_keys("UpdateItem", {"Key": {"pk": {"S": "MODEL#m"}}}, "pk")
    slots = leading_keys("UpdateItem", {"Key": {"pk": {"S": "INFLIGHT#m#1"}}}, "pk")
    # Then a model's item is granted and a slot item is not
    assert permitted([policy(catalog)], "dynamodb:UpdateItem", TABLE, model)
    assert not permitted([policy(catalog)], "dynamodb:UpdateItem", TABLE, slots)
