"""Model code in worker processes: TorchServe handlers and workflows, Triton Python models and
Paddle pipelines imported, initialized and run in a child process per worker, so a segfault,
a hang or a leak stays in its model. The serving process keeps HTTP/gRPC, batching and the
catalog; this room owns the children (spawn, restart with backoff, timeout kill, describe),
the shared-memory areas tensors cross by, the framing of the small headers sent beside them,
the relays that bring a worker's calls to other models back (BLS, a workflow's model nodes),
and the child's main. It imports the runtimes (the child loads with them), config, tensors,
metrics and errors; serving and the doors import it.
"""
