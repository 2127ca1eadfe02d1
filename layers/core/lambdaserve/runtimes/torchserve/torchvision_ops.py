"""torchvision where its C++ operators did not load: its Python (transforms, models) still serves.

PyPI's Linux torchvision wheels are CUDA builds. Installed beside the CPU torch that the
infer images and ``torch==2.13.0`` CPU installs carry, torchvision's ``_C`` extension does not
load (it links CUDA libraries that are not there); torchvision notices that (``_has_ops()`` is
then false) and its detection operators raise its own "Couldn't load custom C++ ops" error
when called. But its import still registers fake kernels for ``torchvision::nms`` and
``qnms``, and that fails with "operator torchvision::nms does not exist", so nothing of
torchvision imports, and TorchServe's built-in vision handlers (which need only its
transforms) fail to load.

``import_torchvision`` declares those two operator schemas (schemas only: no kernels, so
calling them still fails with torchvision's own words) and imports again. It runs only after
the import failed that way, and says so once in the log; with a matching build (PyTorch's CPU
index) it does nothing.
"""

from __future__ import annotations

import logging
import sys
import threading
from importlib import metadata
from types import ModuleType

logger = logging.getLogger(__name__)

# What torchvision's _meta_registrations registers fakes for without checking _has_ops().
_UNGUARDED_SCHEMAS = (
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms(Tensor qdets, Tensor scores, float iou_threshold) -> Tensor",
)
_lock = threading.Lock()
_declared: list[object] = []  # the torch.library.Library must outlive the call


def missing_operators(error: BaseException) -> bool:
    """Whether ``error`` is torchvision's import failing on its own C++ operators."""
    text = str(error)
    return isinstance(error, RuntimeError) and "torchvision::" in text and "does not exist" in text


def import_torchvision() -> ModuleType:
    """``import torchvision``, declaring its operator schemas first if its C++ ops are missing."""
    try:
        import torchvision
    except RuntimeError as error:
        if not missing_operators(error):
            raise
        _declare_schemas()
        _forget_partial_import()
        import torchvision
    module: ModuleType = torchvision
    return module


def _declare_schemas() -> None:
    import torch

    with _lock:
        if _declared:
            return
        library = torch.library.Library("torchvision", "DEF")
        for schema in _UNGUARDED_SCHEMAS:
            library.define(schema)
        _declared.append(library)
    logger.warning(
        "torchvision %s could not load its C++ operators beside torch %s (a CUDA build of "
        "torchvision beside the CPU torch?): its transforms and models serve, its detection "
        "operators (nms, roi_align, ...) raise when called. Install torchvision from "
        "PyTorch's CPU index to have them.",
        metadata.version("torchvision"),
        torch.__version__,
    )


def _forget_partial_import() -> None:
    """Modules a failed import left behind, so the next import runs them again in order."""
    for name in [n for n in sys.modules if n == "torchvision" or n.startswith("torchvision.")]:
        if name != "torchvision.extension":
            sys.modules.pop(name, None)
