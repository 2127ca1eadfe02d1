"""Where moto's IAM checks differ from AWS's, made to match, and every denial recorded.

moto checks a signed call against the caller's policies once its "initial no-auth"
allowance is spent, and for S3 and SQS it resolves the resource ARN (measured on moto
5.2.5: a GetObject outside ``models/*`` and a SendMessage to another queue are denied).
Elsewhere it differs from AWS, which this module corrects while ``aws_authorization()``
is entered:
- DynamoDB: moto checks every call against ``*`` (a policy naming the table denies it) and
  a transaction as one action, where AWS authorizes each item (``TransactWriteItems`` needs
  ``ConditionCheckItem``, ``UpdateItem``... on its table): checked here item by item on the
  table's (or index's) ARN, with moto's own policy evaluation;
- every call's action as AWS's Service Authorization Reference names it, whatever moto calls
  it (iam_actions: ``s3:ListObjectsV2`` is ``s3:ListBucket``, a DeleteObjects is
  ``s3:DeleteObject`` on each key, ``lambda:Invoke`` is ``lambda:InvokeFunction``...);
- Lambda: an Invoke is checked against ``*``: here on the function's ARN, with its qualifier;
- SQS: a GetQueueUrl is checked against ``*``: here on the queue it names;
- S3: a presigned URL (no Authorization header) fails inside moto: here the signer's
  permission is checked (the URL's own signature is not);
- EventBridge: a PutEvents is checked against ``*``: here on the event bus it names;
- a ``dynamodb:LeadingKeys`` condition, which moto ignores, is evaluated (moto_conditions).

The switch and the patches are process-wide: enforce in a process of its own.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any
from unittest import mock
from urllib.parse import parse_qs, unquote, urlparse

from lambdaserve.local.iam_actions import authorizations
from lambdaserve.local.lambda_service import function_arn
from lambdaserve.local.moto_conditions import leading_keys, mentions_leading_keys, permitted

_ITEM_ACTIONS = {
    "ConditionCheck": "ConditionCheckItem",
    "Put": "PutItem",
    "Update": "UpdateItem",
    "Delete": "DeleteItem",
    "Get": "GetItem",
}


@dataclass(frozen=True)
class Denial:
    principal: str  # the caller's ARN: an assumed role's names its session (the function)
    action: str
    resource: str

    def __str__(self) -> str:
        return f"{self.principal} was denied {self.action} on {self.resource}"


@contextmanager
def aws_authorization(
    record: Callable[[Denial], None], allowed: Callable[[str], None] = lambda principal: None
) -> Iterator[None]:
    """Every call to any moto server of this process authorized as AWS would, each denial
    passed to ``record`` (and answered 403) while inside; each allowed call's principal to
    ``allowed`` (make test-grants learns which journeys each role takes part in)."""
    from moto import settings
    from moto.awslambda.responses import LambdaResponse
    from moto.core.authorization import ActionAuthenticatorMixin
    from moto.dynamodb.responses import DynamoHandler
    from moto.events.responses import EventsHandler
    from moto.iam.access_control import IAMRequestBase
    from moto.sqs.responses import SQSResponse

    check = IAMRequestBase.check_action_permitted
    queue_of = SQSResponse._determine_resource

    def recorded(request: Any, resource: str) -> None:
        # each action AWS authorizes for the call (iam_actions' table), on its own resource
        pairs = authorizations(request._action, resource, request._headers, request._body)
        principal = str(getattr(request._access_key, "arn", "?"))
        for action, arn in pairs:
            request._action = action
            try:
                check(request, arn)
                _check_leading_keys(request, arn)
            except Exception:
                record(Denial(principal, action, arn))
                raise
        allowed(principal)

    def named_queue(handler: Any) -> str:
        name = handler._get_param("QueueName")
        if name and not handler._get_param("QueueUrl"):
            found = handler.sqs_backend.queues.get(name)
            return str(found.queue_arn) if found else "*"
        return str(queue_of(handler))

    authorize = ActionAuthenticatorMixin._authenticate_and_authorize_action

    def presigned_too(handler: Any, iam_request_cls: type, resource: str = "*") -> None:
        query = parse_qs(urlparse(handler.uri).query)
        signer = _presigned_by(query, handler.region)
        if "Authorization" in handler.headers or signer is None:
            authorize(handler, iam_request_cls, resource)
            return
        # a presigned URL: the signer's permission counts, as in AWS (moto reads only an
        # Authorization header); its signature is the URL's own, not checked here
        headers = dict(handler.headers)
        headers["Authorization"] = f"AWS4-HMAC-SHA256 Credential={signer}, Signature=-"
        for token in ("X-Amz-Security-Token", "x-amz-security-token"):
            if token in query:
                headers["X-Amz-Security-Token"] = query[token][0]
        _request(iam_request_cls, handler, headers, handler._get_action()).check_action_permitted(
            resource
        )

    with ExitStack() as patches:
        patches.enter_context(mock.patch.object(settings, "INITIAL_NO_AUTH_ACTION_COUNT", 0))
        patches.enter_context(mock.patch.object(ActionAuthenticatorMixin, "request_count", 0))
        patches.enter_context(
            mock.patch.object(
                ActionAuthenticatorMixin, "_authenticate_and_authorize_action", presigned_too
            )
        )
        patches.enter_context(mock.patch.object(IAMRequestBase, "check_action_permitted", recorded))
        patches.enter_context(mock.patch.object(SQSResponse, "_determine_resource", named_queue))
        patches.enter_context(
            mock.patch.object(LambdaResponse, "_determine_resource", _invoked, create=True)
        )
        patches.enter_context(
            mock.patch.object(DynamoHandler, "_authenticate_and_authorize_normal_action", _per_item)
        )
        patches.enter_context(
            mock.patch.object(EventsHandler, "_determine_resource", _event_bus, create=True)
        )
        yield


def _presigned_by(query: Mapping[str, list[str]], region: str) -> str | None:
    """A presigned URL's credential scope (SigV4's, or one made for SigV2's key), or None."""
    if "X-Amz-Credential" in query:
        return query["X-Amz-Credential"][0]
    if "AWSAccessKeyId" in query:
        return f"{query['AWSAccessKeyId'][0]}/19700101/{region}/s3/aws4_request"
    return None


def _invoked(handler: Any) -> str:
    name = unquote(handler.path.rsplit("/", 2)[-2]) if "/functions/" in handler.path else ""
    if not name:
        return "*"
    qualifier = handler.querystring.get("Qualifier", [None])[0]
    return function_arn(handler.region, handler.current_account, name, qualifier)


def _event_bus(handler: Any) -> str:
    """The event bus a call names (PutEvents: its first entry's), as an ARN."""
    raw = handler.body
    body = raw if isinstance(raw, dict) else json.loads(raw or "{}")
    entries = body.get("Entries") or [{}]
    bus = str(entries[0].get("EventBusName") or body.get("EventBusName") or "default")
    if bus.startswith("arn:"):
        return bus
    return f"arn:aws:events:{handler.region}:{handler.current_account}:event-bus/{bus}"


def _request(iam_request_cls: type, handler: Any, headers: Any, action: str) -> Any:
    """moto's IAM request for ``handler``'s call, as ``action`` under ``headers``."""
    return iam_request_cls(
        account_id=handler.current_account,
        method=handler.method,
        path=handler.raw_path,
        data=handler.data,
        body=handler.raw_body,
        headers=headers,
        action=action,
    )


def _per_item(handler: Any, resource: str = "*") -> None:
    from moto.iam.access_control import IAMRequest

    operation = str(handler.headers.get("X-Amz-Target", "")).rsplit(".", 1)[-1]
    raw = handler.body  # moto has parsed DynamoDB's JSON already, or not yet
    body = raw if isinstance(raw, dict) else json.loads(raw or "{}")
    table = f"arn:aws:dynamodb:{handler.region}:{handler.current_account}:table/"
    for action, arn in dynamodb_authorizations(operation, body, table):
        request = _request(IAMRequest, handler, handler.headers, action)
        request.check_signature()
        request.leading_keys = leading_keys(operation, body, _hash_key(handler, body))
        request.check_action_permitted(arn)


def _hash_key(handler: Any, body: Mapping[str, Any]) -> str:
    try:
        return str(handler.dynamodb_backend.get_table(body.get("TableName", "")).hash_key_attr)
    except Exception:
        return ""  # no such table: DynamoDB itself answers that


def _check_leading_keys(request: Any, resource: str) -> None:
    """The item's partition key against the caller's dynamodb:LeadingKeys conditions
    (moto_conditions), where the call names one item and a policy has such a condition."""
    keys = getattr(request, "leading_keys", None)
    if keys is None:
        return
    policies = request._access_key.collect_policies()
    if mentions_leading_keys(policies) and not permitted(policies, request._action, resource, keys):
        request._raise_access_denied()


def dynamodb_authorizations(
    operation: str, body: Mapping[str, Any], table_arn_prefix: str
) -> list[tuple[str, str]]:
    """The (action, resource ARN) pairs AWS authorizes for one DynamoDB call.

    A transaction is authorized item by item (each item's own action on its table), a
    batch as the batch action on each table it names, a query or scan of an index on the
    index's ARN, anything else on the table it names (or ``*`` when it names none).
    """

    def arn(table: str, index: str | None = None) -> str:
        return table_arn_prefix + table + (f"/index/{index}" if index else "")

    if operation in ("TransactWriteItems", "TransactGetItems"):
        return [
            (_ITEM_ACTIONS[kind], arn(spec["TableName"]))
            for item in body.get("TransactItems", [])
            for kind, spec in item.items()
        ]
    if operation in ("BatchWriteItem", "BatchGetItem"):
        return [(operation, arn(table)) for table in body.get("RequestItems", {})]
    if "TableName" in body:
        return [(operation, arn(body["TableName"], body.get("IndexName")))]
    return [(operation, "*")]
