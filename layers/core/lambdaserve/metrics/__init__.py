"""What was served, counted: per-version statistics in Triton's shape (``stats``), metrics
model code records (``custom``), and their renderings: Prometheus with Triton's names
(``prometheus``), summed over the processes of ``serve --workers N`` (``shared``),
TorchServe's metrics API (``torchserve``), CloudWatch EMF per Lambda invocation (``emf``),
payload capture's records captured, dropped and failed on ``/metrics`` (``capture_counts``),
a long-running server's CPU seconds per model (``cpu_cost``), a judged version's tallies
for its rollout's analysis (``tallies``), each load's cold-start phases (``cold_starts``).

Imports ``errors`` only; serving records into it, apps render it.
"""
