"""TorchServe's model code: handlers and `.mar` archives run by TorchServe's own worker code
(the ``ts`` package), workflows, the handler context and torchvision's CPU fallback."""
