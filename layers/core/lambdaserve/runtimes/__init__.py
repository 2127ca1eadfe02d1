"""Model runtimes behind one small Protocol (``base``), one module or subpackage per backend:
ONNX Runtime (``onnx``), TorchScript (``torchscript``), OpenVINO (``openvino``), Paddle
Inference (``paddle_inference``: the runtime, a program read without paddle over
``protobuf_wire``, and the choice of OpenVINO or it), TensorFlow (``tensorflow``: every
signature of a SavedModel, read without TensorFlow at publish, warm-up records, and the
choice of OpenVINO or it), Triton Python models
(``triton_python``), TorchServe handlers (``torchserve``), Paddle Serving pipelines
(``paddle_serving``), ensembles (``ensemble``). ``registry`` names the runtime for a file or a
catalog record; heavy imports stay inside each backend, imported on first use. What model
code shares: ``model_calls`` (the one port for calls to other models: BLS, ensemble steps,
workflow nodes), ``model_code`` (read without running it), ``code_errors`` (its exceptions
logged), ``sequence_requests`` (the sequence each request of a call is a step of),
``request_parameters`` (each request's own parameters and timeout, as model code reads them),
``sequence_affinity`` (the instance each live sequence stays on) and
``op_threads`` (timed calls on reused threads).

Imports ``config``, ``tensors``, ``metrics`` (what model code records) and ``errors``; knows
nothing of the catalog or serving.
"""
