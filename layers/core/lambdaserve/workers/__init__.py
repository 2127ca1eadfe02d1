"""Model code in worker processes: TorchServe handlers and workflows, Triton Python models and
Paddle pipelines imported, initialized and run in a child process per worker, so a segfault,
a hang or a leak stays in its model. The serving process keeps HTTP/gRPC, batching and the
catalog; this room owns the children: which versions run in workers and starting them
(``start``, with ``options``: counts, timeout, environment paths), the runtime over the
workers (``worker_model``) and the workers of one version it has (``workforce``: spawn,
restart with backoff, timeout kill, describe; its free ones in ``idle_workers``, where a
sequence's step waits for its own worker), one child seen from the serving side (``process``), a
request's own deadline (``deadline``), the shared-memory areas tensors cross by
(``shared_area``), the framing of the small headers sent beside them (``channel``), the
worker protocol: every op, kind and reply key (``messages``), the child's port for calls to
other models, BLS and a workflow's model nodes (``call_relay``), and the child's main
(``child``). It imports the runtimes (the
child loads with them), config, tensors, metrics and errors; serving and the doors import it.
"""
