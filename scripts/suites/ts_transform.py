"""How TorchServe's Postman suites are adapted to lambdaserve, row by row, in memory.

The upstream files are read and never written. Each change is a ``Plan`` that says what
was changed and why, and how the result counts:

- ``refused``: a call lambdaserve refuses by design (registration from a URL, scaling
  workers); the expected status becomes our 400 and the answer must say why (``marker``).
  Where TorchServe would have registered a model, the equivalent model is published by
  upload first (``publish``), so the requests after it find the model.
- ``na``: an assertion that needs what lambdaserve cannot have here (the upstream weights).
- ``as-is``: unchanged; passes or fails on its own.
"""

from __future__ import annotations

import copy
import json
import urllib.parse
from dataclasses import dataclass
from typing import Any

SCALING = ("min_worker", "max_worker", "number_gpu", "synchronous", "timeout")
REFUSED_REGISTRATION = "Publish by upload"
REFUSED_SCALING = "no workers to scale"
REFUSED_EMPTY_PUT = "request body is empty"
# Runs in newman before the request: publish by upload through the local helper.
PUBLISH_SCRIPT = [
    "const name = pm.iterationData.get('ls_publish');",
    "if (name) {",
    "  pm.sendRequest({url: pm.environment.get('ls-helper') + '/publish?model=' +",
    "      encodeURIComponent(name), method: 'POST'}, function (err, res) {",
    "    if (err || res.code !== 200) {",
    "      throw new Error('publishing ' + name + ' failed: ' + (err || res.text()));",
    "    }",
    "  });",
    "}",
]
WEIGHTS = (
    "the expected values are the upstream .mar's outputs (real weights downloaded from "
    "torchserve.pytorch.org); the published stand-in handler has no weights"
)


@dataclass(frozen=True)
class Plan:
    kind: str  # "as-is" | "refused" | "na"
    why: str = ""
    marker: str = ""  # what a refused answer must contain
    publish: str = ""  # model published by upload before the request


def _query(path: str) -> dict[str, str]:
    return {k: v[0] for k, v in urllib.parse.parse_qs(urllib.parse.urlsplit(path).query).items()}


def plan_management_row(row: dict[str, Any]) -> Plan:
    method, path = row["METHOD"].upper(), row["path"]
    expected = int(row.get("status_code", 200))
    query = _query(path)
    route = urllib.parse.urlsplit(path).path.rstrip("/")
    if method == "POST" and route == "models" and "url" in path:
        if expected == 400:
            return Plan("as-is")
        publish = query.get("model_name", "") if expected == 200 else ""
        why = f"TorchServe answers {expected}; registering from a URL is refused by design (400)"
        if publish:
            why += f"; the equivalent model {publish!r} is published by upload before it"
        if "handler" in query and publish:
            why += f" (handler={query['handler']} has no upload equivalent: a valid one is)"
        return Plan("refused", why, REFUSED_REGISTRATION, publish)
    is_scaling = any(key in query for key in SCALING)
    if (
        method == "PUT"
        and (is_scaling or (route.count("/") == 1 and not query))
        and expected
        not in (
            400,
            404,
        )
    ):
        if not is_scaling:
            why = "scaling with no parameters: PUT /models/{m} takes model-config JSON here"
            return Plan("refused", why, REFUSED_EMPTY_PUT)
        why = f"TorchServe answers {expected}; no workers to scale (400 naming the equivalent)"
        return Plan("refused", why, REFUSED_SCALING)
    return Plan("as-is")


def management_rows(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[Plan]]:
    out, plans = [], []
    for row in rows:
        plan = plan_management_row(row)
        new = dict(row)
        if plan.kind == "refused":
            new["status_code"] = 400
        if plan.publish:
            new["ls_publish"] = plan.publish
        out.append(new)
        plans.append(plan)
    return out, plans


def management_collection(collection: dict[str, Any]) -> dict[str, Any]:
    """The one data-driven request, with the publish hook before it."""
    new = copy.deepcopy(collection)
    for item in new["item"]:
        item.setdefault("event", []).insert(0, _prerequest())
    return new


def _prerequest() -> dict[str, Any]:
    return {"listen": "prerequest", "script": {"type": "text/javascript", "exec": PUBLISH_SCRIPT}}


# -- inference collection ------------------------------------------------------------------

REGISTER = "Model Zoo - Register Model"
INFER = "Model Zoo - Inference Model"
ADDED_PUT = "[added] Inference Model - PUT the file (curl -T)"
ADDED_MULTIPART = "[added] Inference Model - multipart data=@file"


def inference_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [dict(row, ls_publish=row["model_name"]) for row in rows]


def inference_collection(
    collection: dict[str, Any], shapes: bool
) -> tuple[dict[str, Any], list[str]]:
    """Register → refused + publish by upload; optionally two added request shapes."""
    new = copy.deepcopy(collection)
    notes: list[str] = []
    items = new["item"]
    for item in items:
        if item["name"] == REGISTER:
            item["event"].insert(0, _prerequest())
            for event in item["event"]:
                if event["listen"] == "test":
                    event["script"]["exec"] = [
                        line.replace("oneOf([200])", "oneOf([400])")
                        for line in event["script"]["exec"]
                    ]
            notes.append(
                f"{REGISTER}: expects our 400 (registration from a URL is refused by design); "
                "the model named by the row is published by upload before it"
            )
    if shapes:
        at = next(i for i, item in enumerate(items) if item["name"] == INFER) + 1
        items[at:at] = [
            _added(items[at - 1], "PUT", "file"),
            _added(items[at - 1], "POST", "formdata"),
        ]
        notes.append(f"added after {INFER}: {ADDED_PUT!r} and {ADDED_MULTIPART!r} (counted apart)")
    return new, notes


def _added(infer: dict[str, Any], method: str, mode: str) -> dict[str, Any]:
    key = "body" if mode == "file" else "data"  # TorchServe's data row: raw body, or the field
    request = copy.deepcopy(infer["request"])
    request["method"] = method
    if mode == "formdata":
        request["body"] = {
            "mode": "formdata",
            "formdata": [{"key": "data", "type": "file", "src": "{{file}}"}],
        }
    test = [
        "pm.test('Successful request', function () {",
        "    pm.expect(pm.response.code).to.be.oneOf([200]);",
        "    const field = pm.response.json().fields;",  # the stand-in's echo of the fields
        f"    pm.expect(Object.keys(field)).to.eql([{json.dumps(key)}]);",
        "});",
    ]
    return {
        "name": ADDED_PUT if method == "PUT" else ADDED_MULTIPART,
        "event": [{"listen": "test", "script": {"type": "text/javascript", "exec": test}}],
        "request": request,
        # the upstream request sends no Content-Type (a raw file); multipart needs its own
        "protocolProfileBehavior": {}
        if mode == "formdata"
        else infer.get("protocolProfileBehavior", {}),
    }


METRICS = "Model Zoo - Model Metrics"
METRICS_DIAGNOSIS = (
    'TorchServe\'s metrics API (port 8082, frontend metric Requests2XX{Level="Host"}) does not '
    "exist here: lambdaserve's /metrics is on the inference port with Triton's names "
    "(nv_inference_request_success{model,version})"
)


def inference_plan(item: str, assertion: str) -> Plan:
    if item == REGISTER:
        return Plan("refused", "registration from a URL is refused by design", REFUSED_REGISTRATION)
    if item == INFER and assertion.startswith("Test expected"):
        return Plan("na", WEIGHTS)
    if item == METRICS:
        return Plan("as-is", METRICS_DIAGNOSIS)
    return Plan("as-is")
