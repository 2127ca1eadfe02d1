"""What was served, counted: per-version statistics in Triton's shape (``stats``), and
their renderings: Prometheus with Triton's names (``prometheus``), TorchServe's metrics API
(``torchserve``), CloudWatch EMF per Lambda invocation (``emf``).

Imports ``errors`` only; serving records into it, apps render it.
"""
