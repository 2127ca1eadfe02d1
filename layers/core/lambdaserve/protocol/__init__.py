"""Wire protocols: KServe v2 / Open Inference Protocol (with Triton's binary extension)
and TorchServe-style predictions. No HTTP framework here: bytes and headers in and out."""
