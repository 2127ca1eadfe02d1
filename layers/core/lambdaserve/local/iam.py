"""IAM as deployed, in the embedded emulator: each function and task under its own role.

A missing permission shows up only in AWS unless every call the stack makes is checked
against the role it runs under: here each function or task gets its role (the template's
inline policies, resolved) and that role's credentials, and every call is authorized as
AWS would (``local.moto_authorization``), each denial recorded with the role session (the
function or task), the action and the resource, so a journey can fail naming all three.

moto's switch is process-wide: enforce in a process of its own (``make test-deployed``).
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from lambdaserve.errors import LambdaServeError
from lambdaserve.local.moto_authorization import Denial, aws_authorization
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


class Enforcement:
    """The emulator's IAM: an administrator for the harness, a role per function or task,
    and (inside ``enforced()``) every call checked, denials recorded."""

    def __init__(self, endpoint: str, region: str, bootstrap: Credentials) -> None:
        """``bootstrap``: any keys the emulator takes before enforcement starts."""
        self.endpoint = endpoint
        self.region = region
        self.denials: list[Denial] = []
        self.listeners: list[Callable[[str], None]] = []  # each allowed call's principal
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
        try:  # moto's accounts outlive a server: a role made before trusts another harness
            arn = iam.get_role(RoleName=name)["Role"]["Arn"]
            iam.update_assume_role_policy(RoleName=name, PolicyDocument=json.dumps(trust))
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
        process-wide); undone on the way out."""

        def record(denial: Denial) -> None:
            with self._lock:
                self.denials.append(denial)

        def allowed(principal: str) -> None:
            for listener in self.listeners:
                listener(principal)

        with aws_authorization(record, allowed):
            yield self


def _allow_all() -> dict[str, Any]:
    return {"Effect": "Allow", "Action": "*", "Resource": "*"}
