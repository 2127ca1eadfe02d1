"""OpenVINO: IR, ONNX under ``backend: "openvino"``, and Paddle inference models it reads."""
