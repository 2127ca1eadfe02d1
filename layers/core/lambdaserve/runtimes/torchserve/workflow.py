"""TorchServe workflows (``.war``, torch-workflow-archiver): a spec YAML whose ``dag`` joins
model nodes (``models: {m1: {url: m1.mar}}``) and function nodes (functions of the workflow
handler file, ``def pre(data, context)``), run as TorchServe's frontend runs them.

As in TorchServe's DagExecutor: the start nodes get the request's fields and headers; a node's
answer (bytes) reaches a child with one parent as ``{"body": bytes}`` and a child with several
as ``{parent_name: bytes}``; one leaf's answer is the workflow's, several leaves answer a JSON
object by leaf name. Per-node ``retry-attempts`` and ``timeout-ms`` apply (the spec's
top-level values are the defaults). A model node calls the model its ``url`` names (the
archive's stem: ``m1.mar`` -> model ``m1``, published by its own upload), through the same
server as any request; TorchServe registers it privately as ``<workflow>__m1`` instead.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from lambdaserve.errors import InferenceError, LambdaServeError, ModelRejected
from lambdaserve.runtimes import model_calls
from lambdaserve.runtimes.model_code import new_module, outline
from lambdaserve.runtimes.torchserve.context import Answer, Context

WORKFLOW_MANIFEST = "WAR-INF/MANIFEST.json"
_DEFAULT_TIMEOUT_MS = 60_000


def run_node(model: str, fields: tuple[tuple[str, Any], ...], headers: Mapping[str, str]) -> Answer:
    """One model node's call, through the process's port (``runtimes.model_calls``): the
    serving process's data plane, or, in a worker, the relay back to it."""
    calls = model_calls.current()
    if calls is None:
        raise InferenceError("workflows run only where models serve")
    return calls.run_node(model, fields, headers)


@dataclass(frozen=True)
class Node:
    name: str
    model: str = ""  # empty for a function node
    retries: int = 0
    timeout_ms: int = _DEFAULT_TIMEOUT_MS


@dataclass(frozen=True)
class Spec:
    name: str
    handler: str
    nodes: dict[str, Node]
    children: dict[str, tuple[str, ...]]
    parents: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def order(self) -> list[str]:
        """The nodes in an order where every parent runs before its children."""
        waiting = {n: len(self.parents.get(n, ())) for n in self.nodes}
        ready = sorted(n for n, count in waiting.items() if count == 0)
        ordered: list[str] = []
        while ready:
            name = ready.pop(0)
            ordered.append(name)
            for child in self.children.get(name, ()):
                waiting[child] -= 1
                if waiting[child] == 0:
                    ready.append(child)
        if len(ordered) != len(self.nodes):
            raise ModelRejected("the workflow's dag has a cycle; a workflow must be acyclic")
        return ordered


def read_spec(manifest_path: Path, *, parse_handler: bool = True) -> Spec:
    """The workflow's manifest and spec, checked without running anything (at publish the
    handler file is parsed for its functions; where it serves, its import finds them)."""
    root = manifest_path.parent.parent
    name, spec_file, handler = _manifest(manifest_path, root)
    document = _document(root / spec_file)
    models = document.get("models") or {}
    defaults = {k: v for k, v in models.items() if not isinstance(v, dict)}
    children = _children(document["dag"], spec_file)
    names = set(children) | {k for kids in children.values() for k in kids}
    functions = _functions(root / handler) if handler and parse_handler else None
    nodes = {n: _node(n, models.get(n), defaults, functions, spec_file) for n in sorted(names)}
    parents: dict[str, list[str]] = {}
    for parent, kids in children.items():
        for kid in kids:
            parents.setdefault(kid, []).append(parent)
    spec = Spec(name, handler, nodes, children, {k: tuple(v) for k, v in parents.items()})
    spec.order()
    return spec


def _manifest(manifest_path: Path, root: Path) -> tuple[str, str, str]:
    try:
        manifest = orjson.loads(manifest_path.read_bytes())["workflow"]
        name, spec_file = manifest["workflowName"], manifest["specFile"]
        handler = manifest.get("handler") or ""
    except (orjson.JSONDecodeError, KeyError, TypeError):
        raise ModelRejected(
            f"{WORKFLOW_MANIFEST} is not a workflow manifest; build the archive with "
            "torch-workflow-archiver"
        ) from None
    if not (root / spec_file).is_file():
        raise ModelRejected(f"the workflow's spec file {spec_file!r} is not in the archive")
    return str(name), str(spec_file), str(handler)


def _document(path: Path) -> dict[str, Any]:
    import yaml

    try:
        document = yaml.safe_load(path.read_bytes())
    except yaml.YAMLError as exc:
        raise ModelRejected(f"{path.name} is not YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(document, dict) or not isinstance(document.get("dag"), dict):
        raise ModelRejected(f"{path.name} has no dag: mapping each node to its children")
    return document


def _children(dag: dict[Any, Any], spec_file: str) -> dict[str, tuple[str, ...]]:
    children: dict[str, tuple[str, ...]] = {}
    for parent, kids in dag.items():
        listed = kids or []
        if not isinstance(listed, list):
            raise ModelRejected(f"{spec_file}: dag {parent!r} must list its children")
        children[str(parent)] = tuple(str(k) for k in listed)
    return children


def _node(
    name: str,
    settings: Any,
    defaults: dict[str, Any],
    functions: set[str] | None,
    spec_file: str,
) -> Node:
    if isinstance(settings, dict):
        url = str(settings.get("url") or "")
        if not url.endswith(".mar"):
            raise ModelRejected(f"{spec_file}: model {name!r} needs url: <name>.mar")
        merged = {**defaults, **settings}
        model = url[: -len(".mar")].rsplit("/", 1)[-1]
    elif functions is None or name in functions:
        merged, model = defaults, ""
    else:
        raise ModelRejected(
            f"{spec_file}: dag node {name!r} is neither a model under models: nor a function "
            "of the workflow handler"
        )
    return Node(
        name,
        model=model,
        retries=int(merged.get("retry-attempts", 0) or 0),
        timeout_ms=int(merged.get("timeout-ms", _DEFAULT_TIMEOUT_MS) or 0),
    )


def _functions(path: Path) -> set[str]:
    if not path.is_file():
        raise ModelRejected(f"the workflow handler {path.name!r} is not in the archive")
    return set(outline(path).functions)


class WorkflowSession:
    """One workflow, loaded: its handler module's functions, and the DAG to run per request."""

    def __init__(self, spec: Spec, root: Path, context: Context) -> None:
        self._spec = spec
        self._order = spec.order()
        self.handler_context = context
        self._functions: dict[str, Any] = {}
        if spec.handler:
            module, loader = new_module(root / spec.handler, spec.name)
            loader.exec_module(module)
            self._functions = {
                n: getattr(module, n, None) for n, node in spec.nodes.items() if not node.model
            }
        missing = [
            n
            for n, node in spec.nodes.items()
            if not node.model and not callable(self._functions.get(n))
        ]
        if missing:  # the runtime reports it as the version's load failure
            raise TypeError(
                f"the workflow handler {spec.handler or '(none)'} defines no function "
                f"{missing[0]!r}, which the dag names"
            )
        self._pool = concurrent.futures.ThreadPoolExecutor(4, thread_name_prefix="workflow")
        self.overrun = ""  # a function node left running past its timeout-ms

    def begin(self, headers: list[Mapping[str, str]]) -> None:
        self.handler_context.begin(headers)

    def call(self, rows: list[dict[str, Any]], context: Any) -> list[Any]:
        return [self._run(row, context.get_all_request_header(i)) for i, row in enumerate(rows)]

    def answer(self, idx: int, result: Any) -> Answer:
        answer: Answer = result
        return answer

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _run(self, row: dict[str, Any], headers: Mapping[str, str]) -> Answer:
        inputs: dict[str, dict[str, Any]] = {}
        answers: dict[str, Answer] = {}
        for name in self._order:
            parents = self._spec.parents.get(name, ())
            if not parents:
                fields = dict(row)
            elif len(parents) == 1:
                fields = {"body": answers[parents[0]].body}
            else:
                fields = {p: answers[p].body for p in parents}
            inputs[name] = fields
            answers[name] = self._node(self._spec.nodes[name], fields, headers)
        leaves = [n for n in self._order if not self._spec.children.get(n)]
        if len(leaves) == 1:
            return answers[leaves[0]]
        body = {leaf: _decoded(answers[leaf].body) for leaf in leaves}
        return Answer(orjson.dumps(body), "application/json")

    def _node(self, node: Node, fields: dict[str, Any], headers: Mapping[str, str]) -> Answer:
        last: Exception | None = None
        for _ in range(node.retries + 1):
            future = self._pool.submit(self._invoke, node, fields, headers)
            try:
                return future.result(timeout=node.timeout_ms / 1000 if node.timeout_ms else None)
            except concurrent.futures.TimeoutError:
                last = InferenceError(f"node {node.name!r} took over {node.timeout_ms} ms")
                if not node.model:  # the user's code, still running: only a process ends it
                    self.overrun = (
                        f"the workflow's function node {node.name!r} ran past its timeout-ms "
                        f"of {node.timeout_ms}"
                    )
            except LambdaServeError as exc:
                last = exc
            except Exception as exc:
                last = InferenceError(f"node {node.name!r} raised {type(exc).__name__}: {exc}")
        message = getattr(last, "message", str(last))
        raise InferenceError(
            f"workflow {self._spec.name!r} failed at node {node.name!r} after "
            f"{node.retries + 1} attempt(s): {message}"
        )

    def _invoke(self, node: Node, fields: dict[str, Any], headers: Mapping[str, str]) -> Answer:
        if node.model:
            return run_node(node.model, tuple(fields.items()), headers)
        result = self._functions[node.name]([fields], self.handler_context)
        if not isinstance(result, list) or len(result) != 1:
            raise InferenceError(f"function {node.name!r} must return a list of one answer")
        return self.handler_context.answer(0, result[0])


def _decoded(body: bytes) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        return body.decode(errors="replace")
