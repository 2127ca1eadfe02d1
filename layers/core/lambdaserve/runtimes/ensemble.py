"""Ensembles (Triton's ``platform: "ensemble"``): a DAG of models, run in one process.

Steps whose inputs are ready run together (parallel branches, as Paddle's pipeline DAG
runs them); tensors pass in memory; each step is an ordinary call of the model server, so
each step model's statistics count it, and the ensemble's own count the whole.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextvars import copy_context
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lambdaserve.config.model_config import EnsembleStep, ModelConfig
from lambdaserve.config.runtime_names import ENSEMBLE_RUNTIME, RuntimeName
from lambdaserve.errors import InferenceError, LambdaServeError, ModelNotReady, ModelRejected
from lambdaserve.runtimes import model_calls
from lambdaserve.runtimes.base import LoadOptions
from lambdaserve.runtimes.sequence_requests import passed_sequence
from lambdaserve.tensors.signature import Arrays, Signature, TensorSpec

Arrays_ = dict[str, np.ndarray[Any, Any]]  # step tensors by name
# the process's port's infer: (model, version or None, inputs, requested outputs) -> outputs
StepRunner = Callable[..., Arrays_]


@dataclass(frozen=True)
class Wave:
    """Steps that can run together: all their inputs exist before the wave starts."""

    steps: tuple[int, ...]


def plan(config: ModelConfig) -> tuple[Wave, ...]:
    """The order the steps run in, or ModelRejected naming what is wrong with the graph."""
    available = {t.name for t in config.inputs}
    produced_by: dict[str, int] = {}
    for index, step in enumerate(config.ensemble_steps):
        for _, tensor in step.output_map:
            if tensor in available or tensor in produced_by:
                raise ModelRejected(
                    f"ensemble tensor {tensor!r} is produced twice (step {index}, "
                    f"{step.model_name!r})"
                )
            produced_by[tensor] = index
    waves, done = [], set()
    pending = list(range(len(config.ensemble_steps)))
    while pending:
        ready = [
            i for i in pending if all(t in available for _, t in config.ensemble_steps[i].input_map)
        ]
        if not ready:
            names = ", ".join(repr(config.ensemble_steps[i].model_name) for i in pending)
            missing = sorted(
                {t for i in pending for _, t in config.ensemble_steps[i].input_map} - available
            )
            reason = (
                "a cycle"
                if all(t in produced_by for t in missing)
                else f"tensors nothing produces: {missing}"
            )
            raise ModelRejected(f"ensemble steps {names} can never run: {reason}")
        waves.append(Wave(tuple(ready)))
        for i in ready:
            available |= {t for _, t in config.ensemble_steps[i].output_map}
        done |= set(ready)
        pending = [i for i in pending if i not in done]
    for spec in config.outputs:
        if spec.name not in available:
            raise ModelRejected(f"ensemble output {spec.name!r} is produced by no step")
    consumed = {t for step in config.ensemble_steps for _, t in step.input_map}
    for spec in config.inputs:
        if spec.name not in consumed:
            raise ModelRejected(f"ensemble input {spec.name!r} is consumed by no step")
    return tuple(waves)


def check_steps(config: ModelConfig, signatures: Sequence[Signature]) -> None:
    """Each step's tensors exist in its model and agree with the ensemble's on datatype and
    shape wherever both are known."""
    declared = {t.name: t for t in (*config.inputs, *config.outputs)}
    for index, (step, signature) in enumerate(zip(config.ensemble_steps, signatures, strict=True)):
        where = f"step {index} ({step.model_name!r})"
        for role, mapping, specs in (
            ("input", step.input_map, signature.inputs),
            ("output", step.output_map, signature.outputs),
        ):
            by_name = {s.name: s for s in specs}
            for step_tensor, ensemble_tensor in mapping:
                spec = by_name.get(step_tensor)
                if spec is None:
                    raise ModelRejected(
                        f"{where}: the model has no {role} {step_tensor!r}; "
                        f"it has {sorted(by_name)}"
                    )
                other = declared.get(ensemble_tensor)
                if other is not None:
                    _agree(where, ensemble_tensor, spec, other)
                declared.setdefault(ensemble_tensor, spec)


def _agree(where: str, tensor: str, step: TensorSpec, ensemble: TensorSpec) -> None:
    if step.datatype != ensemble.datatype:
        raise ModelRejected(
            f"{where}: tensor {tensor!r} is {ensemble.datatype} in the ensemble but "
            f"{step.datatype} in the step's model"
        )
    fits = len(step.shape) == len(ensemble.shape) and all(
        -1 in (a, b) or a == b for a, b in zip(step.shape, ensemble.shape, strict=True)
    )
    if not fits:
        raise ModelRejected(
            f"{where}: tensor {tensor!r} has shape {list(ensemble.shape)} in the ensemble but "
            f"{list(step.shape)} in the step's model"
        )


def step_version(step: EnsembleStep) -> int | None:
    return step.model_version if step.model_version > 0 else None


class EnsembleRuntime:
    """The runtime of ``platform: "ensemble"``: no file, the config is the model."""

    name: RuntimeName = ENSEMBLE_RUNTIME

    def inspect(self, model_path: Path, config: ModelConfig) -> Signature:
        plan(config)
        return Signature(config.inputs, config.outputs)

    def load(
        self, model_path: Path, config: ModelConfig, signature: Signature, options: LoadOptions
    ) -> EnsembleModel:
        calls = model_calls.current()
        if calls is None:
            raise ModelNotReady("ensembles run only inside a serving process")
        waves = plan(config)
        for index, step in enumerate(config.ensemble_steps):
            try:
                calls.signature(step.model_name, step_version(step))
            except LambdaServeError as exc:
                raise ModelNotReady(
                    f"ensemble step {index} ({step.model_name!r}) cannot serve: {exc.message}"
                ) from None
        return EnsembleModel(config, waves, calls.infer)


class EnsembleModel:
    device = "cpu"

    def __init__(self, config: ModelConfig, waves: tuple[Wave, ...], runner: StepRunner) -> None:
        self._steps = config.ensemble_steps
        self._waves = waves
        self._runner = runner
        widest = max(len(wave.steps) for wave in waves)
        self._pool = ThreadPoolExecutor(max_workers=widest) if widest > 1 else None

    def run(self, inputs: Mapping[str, np.ndarray[Any, Any]], outputs: Sequence[str]) -> Arrays:
        tensors: Arrays_ = dict(inputs)
        for wave in self._waves:
            if self._pool is None or len(wave.steps) == 1:
                results = [self._run_step(i, tensors) for i in wave.steps]
            else:
                # each step in the caller's context: a warm-up's steps stay uncounted
                futures = [
                    self._pool.submit(copy_context().run, self._run_step, i, tensors)
                    for i in wave.steps
                ]
                results = [f.result() for f in futures]
            for produced in results:
                tensors.update(produced)
        missing = [name for name in outputs if name not in tensors]
        if missing:
            raise InferenceError(f"the ensemble produced no {missing[0]!r}")
        return {name: tensors[name] for name in outputs}

    def _run_step(self, index: int, tensors: Arrays_) -> Arrays_:
        step = self._steps[index]
        # an optional input the request left out (or a step did not produce) is left out of
        # the step too, as Triton's ensembles do; a required one is refused by the step model
        step_inputs = {inner: tensors[outer] for inner, outer in step.input_map if outer in tensors}
        wanted = [inner for inner, _ in step.output_map]
        # the ensemble's request's sequence goes on to each step's, as Triton passes it: a
        # composing sequence model runs the step of that sequence
        sequence = passed_sequence()
        try:
            produced = self._runner(
                step.model_name,
                step_version(step),
                step_inputs,
                wanted,
                **({"parameters": sequence} if sequence else {}),
            )
        except LambdaServeError as exc:
            raise type(exc)(f"ensemble step {index} ({step.model_name!r}): {exc.message}") from None
        return {outer: produced[inner] for inner, outer in step.output_map if inner in produced}
