"""Synchronous requests for models server mode serves (``KIND_GPU``), forwarded from the
infer function to ``lambdaserve serve`` behind its load balancer, or queued when it has no
capacity (``forwarder``). Imports ``queued`` (the queue it falls back to), ``protocol`` and
``tracing`` (the caller's trace context, passed on)."""
