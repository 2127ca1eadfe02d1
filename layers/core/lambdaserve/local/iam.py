"""IAM as deployed, in the embedded emulator: each function and task under its own role.

A missing permission shows up only in AWS unless every call the stack makes is checked
against the role it runs under. moto checks signed calls against the caller's policies once
its "initial no-auth" allowance is spent, and for S3 and SQS it resolves the resource ARN
(measured on moto 5.2.5: a GetObject outside ``models/*`` and a SendMessage to another queue
are denied). For DynamoDB it checks every call against ``*``, so a policy naming the table
denies everything; and a transaction is one action to moto where AWS authorizes each item
(``TransactWriteItems`` needs ``ConditionCheckItem``, ``UpdateItem``... on its table). So
DynamoDB calls are checked here, item by item, against the table's (or index's) ARN, with
moto's own policy evaluation; a Lambda invoke likewise on the function's ARN (with its
qualifier), where moto checks ``*``, and a GetQueueUrl on the queue it names. Every denial is recorded, naming the role session (the
function or task), the action and the resource, so a journey can fail with all three.

moto's switch is process-wide: enforce in a process of its own (``make test-deployed``).
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from lambdaserve.errors import LambdaServeError
from lambdaserve.local.lambda_service import function_arn
from lambdaserve.local.stack_shape import Role

# The AWS managed policies the template's function and task roles attach. Those whose
# grants nothing exercises through the emulator are named with what they grant; the SQS
# execution role's grants are what an event source mapping polls with, so they are
# reproduced as AWS documents them. Any other managed policy is refused: its grants would
# be a permission the harness cannot see.
_NOT_EXERCISED = {
    "arn:aws:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole": "CloudWatch Logs",
    "arn:aws:iam::aws:policy/AWSXrayWriteOnlyAccess": "X-Ray segments",
    "arn:aws:iam::aws:policy/service-role/AWSLambdaVPCAccessExecutionRole": "VPC ENIs",
}
_REPRODUCED = {
    "arn:aws:iam::aws:policy/service-role/AWSLambdaSQSQueueExecutionRole": {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Action": ["sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes"],
                "Resource": "*",
            }
        ],
    }
}
PLATFORM_POLICIES = set(_NOT_EXERCISED) | set(_REPRODUCED)
_TRUST = {"lambda.amazonaws.com", "ecs-tasks.amazonaws.com"}
# IAM's action where it is not the API operation's name: SQS authorizes a batch call as
# its single action (AWS's SQS developer guide), Lambda's Invoke is lambda:InvokeFunction
_IAM_ACTIONS = {
    "lambda:Invoke": "lambda:InvokeFunction",
    "sqs:DeleteMessageBatch": "sqs:DeleteMessage",
    "sqs:SendMessageBatch": "sqs:SendMessage",
    "sqs:ChangeMessageVisibilityBatch": "sqs:ChangeMessageVisibility",
}
_ITEM_ACTIONS = {
    "ConditionCheck": "ConditionCheckItem",
    "Put": "PutItem",
    "Update": "UpdateItem",
    "Delete": "DeleteItem",
    "Get": "GetItem",
}


class IamSetupError(LambdaServeError):
    """A role of the template cannot be reproduced in the emulator."""


@dataclass(frozen=True)
class Credentials:
    access_key: str
    secret_key: str
    session_token: str = ""

    def environment(self) -> dict[str, str]:
        """What a Lambda function or ECS task finds in its environment."""
        found = {"AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key}
        return found | ({"AWS_SESSION_TOKEN": self.session_token} if self.session_token else {})


@dataclass(frozen=True)
class Denial:
    principal: str  # the role session's ARN: it names the function or task
    action: str
    resource: str

    def __str__(self) -> str:
        return f"{self.principal} was denied {self.action} on {self.resource}"


class Enforcement:
    """The emulator's IAM: an administrator for the harness, a role per function or task,
    and (inside ``enforced()``) every call checked, denials recorded."""

    def __init__(self, endpoint: str, region: str, bootstrap: Credentials) -> None:
        """``bootstrap``: any keys the emulator takes before enforcement starts."""
        self.endpoint = endpoint
        self.region = region
        self.denials: list[Denial] = []
        self._lock = threading.Lock()
        self.admin = self._administrator(bootstrap)

    def client(self, service: str, credentials: Credentials | None = None) -> Any:
        """A client of the emulator signed with ``credentials`` (the administrator's)."""
        import boto3

        signer = credentials or self.admin
        return boto3.session.Session().client(
            service,  # type: ignore[call-overload]
            endpoint_url=self.endpoint,
            region_name=self.region,
            aws_access_key_id=signer.access_key,
            aws_secret_access_key=signer.secret_key,
            aws_session_token=signer.session_token or None,
        )

    def _administrator(self, bootstrap: Credentials) -> Credentials:
        """Keys of a user allowed everything: the harness's own setup and inspection."""
        iam = self.client("iam", bootstrap)
        # moto's accounts outlive a server in the process: a user of this enforcement's own
        name = f"lambdaserve-harness-{uuid.uuid4().hex[:8]}"
        iam.create_user(UserName=name)
        document = {"Version": "2012-10-17", "Statement": [_allow_all()]}
        iam.put_user_policy(
            UserName=name, PolicyName="everything", PolicyDocument=json.dumps(document)
        )
        key = iam.create_access_key(UserName=name)["AccessKey"]
        self._admin_arn = str(iam.get_user(UserName=name)["User"]["Arn"])
        return Credentials(key["AccessKeyId"], key["SecretAccessKey"])

    def assume(self, role: Role, session: str) -> Credentials:
        """``role`` created with its inline policies, assumed as ``session`` (the function's
        or task's logical id, which every denial then names)."""
        unknown = sorted(set(role.managed) - set(PLATFORM_POLICIES))
        if unknown:
            raise IamSetupError(
                f"{role.logical} attaches {', '.join(unknown)}: the deployed-shape harness "
                f"cannot evaluate a managed policy's grants; write them inline"
            )
        trusted = sorted(set(role.trusted) & _TRUST)
        if not trusted:
            raise IamSetupError(f"{role.logical} trusts neither Lambda nor ECS tasks")
        # the harness plays Lambda or ECS assuming the role: the emulator's trust names it
        trust = {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Principal": {"AWS": self._admin_arn},
                    "Action": "sts:AssumeRole",
                }
            ],
        }
        name = role.logical[:64]
        iam = self.client("iam")
        try:
            arn = iam.get_role(RoleName=name)["Role"]["Arn"]
        except iam.exceptions.NoSuchEntityException:
            arn = iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(trust))[
                "Role"
            ]["Arn"]
        policies = dict(role.policies) | {
            arn.rsplit("/", 1)[1]: document
            for arn, document in _REPRODUCED.items()
            if arn in role.managed
        }
        for stale in set(iam.list_role_policies(RoleName=name)["PolicyNames"]) - set(policies):
            iam.delete_role_policy(RoleName=name, PolicyName=stale)
        for policy, document in policies.items():
            # SAM writes its inline policies without a Version (AWS then reads them as
            # 2008-10-17, the same grants without policy variables); moto refuses that
            versioned = {"Version": "2012-10-17", **document}
            iam.put_role_policy(
                RoleName=name, PolicyName=policy, PolicyDocument=json.dumps(versioned)
            )
        found = self.client("sts").assume_role(RoleArn=arn, RoleSessionName=session[:64])[
            "Credentials"
        ]
        return Credentials(found["AccessKeyId"], found["SecretAccessKey"], found["SessionToken"])

    @contextmanager
    def enforced(self) -> Iterator[Enforcement]:
        """Every call to any emulator of this process checked while inside (moto's switch is
        process-wide); the switch and the patches undone on the way out."""
        from moto import settings
        from moto.awslambda.responses import LambdaResponse
        from moto.core.authorization import ActionAuthenticatorMixin
        from moto.dynamodb.responses import DynamoHandler
        from moto.iam.access_control import IAMRequestBase
        from moto.sqs.responses import SQSResponse

        saved = settings.INITIAL_NO_AUTH_ACTION_COUNT, ActionAuthenticatorMixin.request_count
        check = IAMRequestBase.check_action_permitted
        authorize = DynamoHandler._authenticate_and_authorize_normal_action
        enforcement = self

        def recorded(request: Any, resource: str) -> None:
            request._action = _IAM_ACTIONS.get(request._action, request._action)
            try:
                check(request, resource)
            except Exception:
                principal = str(getattr(request._access_key, "arn", "?"))
                with enforcement._lock:
                    enforcement.denials.append(Denial(principal, request._action, resource))
                raise

        def per_item(handler: Any, resource: str = "*") -> None:
            from moto.iam.access_control import IAMRequest

            target = str(handler.headers.get("X-Amz-Target", ""))
            operation = target.rsplit(".", 1)[-1]
            raw = handler.body  # moto has parsed DynamoDB's JSON already, or not yet
            body = raw if isinstance(raw, dict) else json.loads(raw or "{}")
            table = f"arn:aws:dynamodb:{handler.region}:{handler.current_account}:table/"
            for action, arn in dynamodb_authorizations(operation, body, table):
                request = IAMRequest(
                    account_id=handler.current_account,
                    method=handler.method,
                    path=handler.raw_path,
                    data=handler.data,
                    body=handler.raw_body,
                    headers=handler.headers,
                    action=action,
                )
                request.check_signature()
                request.check_action_permitted(arn)

        def invoked_function(handler: Any) -> str:  # moto checks an invoke against "*"
            name = unquote(handler.path.rsplit("/", 2)[-2]) if "/functions/" in handler.path else ""
            if not name:
                return "*"
            qualifier = handler.querystring.get("Qualifier", [None])[0]
            return function_arn(handler.region, handler.current_account, name, qualifier)

        queue_of = SQSResponse._determine_resource

        def named_queue(handler: Any) -> str:  # moto reads a QueueUrl only, not GetQueueUrl's
            name = handler._get_param("QueueName")
            if name and not handler._get_param("QueueUrl"):
                found = handler.sqs_backend.queues.get(name)
                return str(found.queue_arn) if found else "*"
            return str(queue_of(handler))

        settings.INITIAL_NO_AUTH_ACTION_COUNT = 0
        SQSResponse._determine_resource = named_queue
        LambdaResponse._determine_resource = invoked_function
        IAMRequestBase.check_action_permitted = recorded
        DynamoHandler._authenticate_and_authorize_normal_action = per_item
        try:
            yield self
        finally:
            settings.INITIAL_NO_AUTH_ACTION_COUNT, ActionAuthenticatorMixin.request_count = saved
            IAMRequestBase.check_action_permitted = check
            DynamoHandler._authenticate_and_authorize_normal_action = authorize
            del LambdaResponse._determine_resource
            SQSResponse._determine_resource = queue_of


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


def _allow_all() -> dict[str, Any]:
    return {"Effect": "Allow", "Action": "*", "Resource": "*"}
