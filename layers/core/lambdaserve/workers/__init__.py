"""Model code in worker processes: TorchServe handlers and Triton Python models imported,
initialized and run in a child process per worker, so a segfault, a hang or a leak stays in
its model. The serving process keeps HTTP/gRPC, batching and the catalog; this room owns the
children (spawn, restart with backoff, timeout kill, describe), the shared-memory areas
tensors cross by, the framing of the small headers sent beside them, and the child's main.
It imports the runtimes (the child loads with them), config, tensors, metrics and errors;
serving and the doors import it.
"""
