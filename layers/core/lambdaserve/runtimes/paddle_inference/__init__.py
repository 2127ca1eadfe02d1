"""Paddle Inference: Paddle's own predictor (the optional ``paddle`` extra) for the Paddle
models OpenVINO does not read (``runtime``); a program's signature, operators and parameters
read without paddle (``program``); OpenVINO or Paddle Inference for a ``model.pdmodel``,
chosen at publish (``choice``). Paddle Serving's pipelines live apart, in ``paddle_serving``.
"""
