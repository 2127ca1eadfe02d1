"""Model runtimes behind one small Protocol (``base``), one module or subpackage per backend:
ONNX Runtime (``onnx``), TorchScript (``torchscript``), OpenVINO (``openvino``), Paddle
Inference (``paddle_inference``, with ``paddle_program`` reading a program without paddle,
over ``protobuf_wire``, and ``paddle_choice`` picking OpenVINO or it), Triton Python models
(``triton_python``), TorchServe handlers (``torchserve``), Paddle Serving pipelines
(``paddle``), ensembles (``ensemble``). ``registry`` names the runtime for a file or a
catalog record; heavy imports stay inside each backend, imported on first use. What model
code shares: ``model_code`` (read without running it), ``code_errors`` (its exceptions
logged) and ``op_threads`` (timed calls on reused threads).

Imports ``config``, ``tensors``, ``metrics`` (what model code records) and ``errors``; knows
nothing of the catalog or serving.
"""
