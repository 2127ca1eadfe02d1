"""Routes and servicers over the data plane: the inference API (``inference``: v2 with
Triton's extensions; ``predictions``: TorchServe's; ``tfserving``, with ``tf_signatures``
which its gRPC servicer shares; ``paddle_pipeline``; ``generate``: Triton's generate;
``workflows``; ``triton_extras``: shared memory, logging; ``trace_settings``: Triton's trace
settings over the plane's tracer; ``one_url``: the repository extension on the inference
port), the one v2 infer door every transport calls (``v2_calls``), the management API
(``management``, ``torchserve_management``, ``worker_scaling``, ``rollout_routes``), metrics routes
(``metrics_route``), OpenAPI (``openapi``, ``openapi_parameters``, ``docs_page``), request
and answer helpers (``json_body``, ``response_limit``, ``errors``: the exception handlers;
``door_context``: each HTTP request's headers shared, the answering version said back),
and the gRPC servicers (``grpc``).

Imports the domain rooms (``serving``, ``queued``, ``publishing``, ``batching``, ``metrics``,
``protocol``, ``tracing``) and below; never ``handlers``, ``wiring``, ``processes`` or
``local``."""
