"""Paddle's ``local_predictor`` for a pipeline Op: the model folder its config.yml names
(``local_service_conf.model_config``), served by the runtime a standalone Paddle model of the
same layout gets (``runtimes.paddle_inference.choice``):

- ``__model__`` (Paddle 1.x: Paddle Serving's uci_housing_model, one file per parameter or
  ``__params__``): Paddle Inference;
- ``*.pdmodel`` + ``.pdiparams``: OpenVINO, or Paddle Inference where OpenVINO refuses it
  (``mul`` and the other operators its Paddle frontend cannot convert; OpenVINO missing).

At publish (``check``) nothing needs paddle: a Paddle Inference folder's program is read and
its parameters checked, as for a standalone model; paddle loads it where the Op serves.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lambdaserve.config.model_config import ModelConfig
from lambdaserve.errors import ModelRejected
from lambdaserve.runtimes.base import LoadOptions
from lambdaserve.runtimes.paddle_inference.runtime import PaddleInferenceRuntime, read_checked
from lambdaserve.tensors.encoding import numpy_dtype
from lambdaserve.tensors.signature import Signature

logger = logging.getLogger(__name__)
PADDLE_1X_PROGRAM = "__model__"


def check(folder: Path) -> None:
    """What publishing checks of an Op's model folder: OpenVINO compiles a ``*.pdmodel``
    it reads; Paddle Inference's program (and its parameters) is read without paddle."""
    _open(folder, load=False)


class LocalPredictor:
    """Paddle's ``local_predictor`` client: ``predict(feed, fetch, batch)``, names as
    ``serving_server_conf.prototxt`` aliases them, feeds cast to the model's input types
    (as Paddle Serving's casts them to each feed_var's feed_type)."""

    def __init__(self, model: Any, signature: Signature, aliases: dict[str, str]) -> None:
        self._model = model
        self._types = {spec.name: spec.datatype for spec in signature.inputs}
        self._outputs = [spec.name for spec in signature.outputs]
        self._aliases = aliases  # alias_name -> the model's own name

    @classmethod
    def open(cls, folder: Path) -> LocalPredictor:
        predictor = _open(folder, load=True)
        assert predictor is not None
        return predictor

    def predict(
        self,
        feed: Mapping[str, Any],
        fetch: Sequence[str] | None = None,
        batch: bool = True,
        log_id: int = 0,
    ) -> dict[str, np.ndarray[Any, Any]]:
        inputs = {}
        for alias, value in feed.items():
            if alias.endswith(".lod"):
                continue
            name = self._aliases.get(alias, alias)
            array = np.asarray(value)
            datatype = self._types.get(name)
            if datatype is not None and datatype != "BYTES":
                # numpy parses text into float64: Paddle's predictor takes the program's type
                array = array.astype(numpy_dtype(datatype), copy=False)
            inputs[name] = array
        results = self._model.run(inputs, self._outputs)
        if not fetch:
            return dict(results)
        real = [self._aliases.get(name, name) for name in fetch]
        if all(name in results for name in real):
            return {name: results[own] for name, own in zip(fetch, real, strict=True)}
        # Paddle's local predictor falls back to the outputs' order
        return {name: results[self._outputs[i]] for i, name in enumerate(fetch)}


def _open(folder: Path, load: bool) -> LocalPredictor | None:
    if not folder.is_dir():
        raise ModelRejected(f"model_config folder {folder.name!r} is not in the version")
    aliases = _aliases(folder / "serving_server_conf.prototxt")
    if (folder / PADDLE_1X_PROGRAM).is_file():
        return _paddle_inference(folder / PADDLE_1X_PROGRAM, aliases, load)
    models = sorted(p for p in folder.glob("*.pdmodel") if p.is_file())
    if not models or not models[0].with_suffix(".pdiparams").is_file():
        raise ModelRejected(
            f"model_config folder {folder.name!r} holds no Paddle inference model: upload "
            "Paddle 1.x's __model__ with its parameters, or inference.pdmodel with "
            "inference.pdiparams (paddle.jit.save, or paddle.static.save_inference_model)"
        )
    from lambdaserve.runtimes.openvino.readers import read_paddle
    from lambdaserve.runtimes.openvino.runtime import compile_file

    try:
        model, signature = compile_file(read_paddle, models[0])
    except ModelRejected as refused:  # as a standalone model.pdmodel OpenVINO refuses
        try:
            predictor = _paddle_inference(models[0], aliases, load)
        except ModelRejected as exc:
            raise ModelRejected(
                f"{refused.message}; Paddle Inference cannot serve it either: {exc.message}"
            ) from exc
        logger.info("%s: served by Paddle Inference: %s", folder.name, refused.message)
        return predictor
    return LocalPredictor(model, signature, aliases)


def _paddle_inference(program: Path, aliases: dict[str, str], load: bool) -> LocalPredictor | None:
    """Paddle Inference's predictor over ``program``: read and checked without paddle at
    publish (None), loaded with it where the Op serves."""
    signature = read_checked(program).signature
    if not load:
        return None
    runtime = PaddleInferenceRuntime()
    config = ModelConfig(program.parent.name, backend=runtime.name)
    model = runtime.load(program, config, signature, LoadOptions(device="cpu"))
    return LocalPredictor(model, signature, aliases)


_VAR = re.compile(r"(feed|fetch)_var\s*\{(?P<body>[^}]*)\}", re.S)
_FIELD = re.compile(r'\b(name|alias_name)\s*:\s*"([^"]*)"')


def _aliases(prototxt: Path) -> dict[str, str]:
    if not prototxt.is_file():
        return {}
    aliases = {}
    for match in _VAR.finditer(prototxt.read_text(errors="replace")):
        fields = dict(_FIELD.findall(match["body"]))
        if "name" in fields and "alias_name" in fields:
            aliases[fields["alias_name"]] = fields["name"]
    return aliases
