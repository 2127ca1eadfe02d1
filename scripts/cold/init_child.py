"""bench_cold's init child: one cold import of ``functions/<f>/app.py``, then settings,
``AwsClients(settings)`` and the singletons the handler builds on first use (its clients).

    python -X importtime scripts/cold/init_child.py infer|manage|batcher

``##BEGIN``/``##END`` on stderr bracket the handler's import in ``-X importtime``'s output;
one ``##RESULT {json}`` line on stdout carries the timings (seconds). Only modules the
interpreter loads at start-up are imported before the handler, so none of its imports hide.
"""

from __future__ import annotations

import os
import sys
import time

# what each function's handler builds on first use, from the process object
BUILDERS = {"infer": "server", "manage": "manage", "batcher": "consumer"}


def main(function: str) -> None:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.path.insert(0, os.path.join(root, "functions", function))
    clock = time.perf_counter
    sys.stderr.write("##BEGIN\n")
    sys.stderr.flush()
    start = clock()
    __import__("app")
    imported = clock()
    sys.stderr.write("##END\n")
    sys.stderr.flush()

    from lambdaserve.settings import get_settings
    from lambdaserve.wiring.aws import AwsClients

    started = clock()
    settings = get_settings()
    read = clock()
    AwsClients(settings)
    session = clock()
    clients: dict[str, float] = {}
    original = AwsClients.client

    def timed_client(self: AwsClients, service: str) -> object:
        begin = clock()
        try:
            return original(self, service)
        finally:
            clients[service] = clients.get(service, 0.0) + clock() - begin

    AwsClients.client = timed_client  # type: ignore[method-assign]
    from lambdaserve.wiring.process import current

    built_object = getattr(current(), BUILDERS[function])
    if callable(built_object):
        built_object()
    built = clock()

    import json

    result = {
        "import_s": imported - start,
        "settings_s": read - started,
        "aws_clients_s": session - read,
        "handler_build_s": built - session,
        "handler_clients_s": clients,
    }
    print("##RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
