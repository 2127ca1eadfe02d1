"""Model runtimes behind one small Protocol (``base``), one module per backend: ONNX
Runtime, TorchScript, OpenVINO, Triton Python models, TorchServe handlers, ensembles.
``registry`` names the runtime for a file or a catalog record; heavy imports stay inside
each backend, imported on first use.

Imports ``config``, ``tensors`` and ``errors``; knows nothing of the catalog or serving.
"""
