"""The embedded local stack of ``lambdaserve dev`` (``dev``, its options ``dev_options`` and
banner ``dev_banner``): the AWS emulator (``emulator``), resources from the template
(``template``, ``resources``), the repository mirror (``mirror``) and the catalog's facts
kept across restarts (``catalog_state``), API Gateway events from local HTTP
(``http_api_event``), the deployed synchronous path of ``--server-mode`` (``deployed_api``),
the demo model (``demo``), the rollouts judge's loop (``rollout_loop``); and the stack as
deployed: each function's and task's shape from template.yaml through SAM's translator
(``sam_translation``, ``stack_shape``), IAM enforced in the emulator (``iam``,
``moto_authorization``, ``moto_conditions``, with each call's action as AWS names it:
``iam_actions``), Lambda's
Invoke answered by the stack's functions (``lambda_service``), each function in an
execution environment of its own (``function_process``) with Lambda's part of X-Ray
(``lambda_tracing``), the stack itself (``deployed_stack``, started by ``deploy_locally``,
on ``stack_plumbing``), the HTTP API's routes (``http_routes``), and ``dev --deployed``
running it (``deployed_dev``).

The top room under the CLI: it may import every other.
"""
