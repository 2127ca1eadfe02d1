"""A TorchServe handler's load (``load_service``: TorchServe's loader importing a BaseHandler
subclass and calling ``initialize``), each in a fresh interpreter as a worker process does,
three ways on this machine:

- ``openvino-unasked``: OpenVINO installed, the model does not ask for it (what ships: its
  torch backend kept out of BaseHandler's import);
- ``openvino-imported``: OpenVINO installed and its torch backend imported by BaseHandler (as
  before, and as for a model whose model-config.yaml says ``pt2: {backend: openvino}``);
- ``no-openvino``: OpenVINO not importable (as without it installed).

    python scripts/bench_handler_load.py [--runs 5]

Prints the median and range of each, in seconds.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HANDLER = """
from ts.torch_handler.base_handler import BaseHandler


class Handler(BaseHandler):
    def initialize(self, context):
        self.initialized = True

    def handle(self, data, context):
        return ["ok" for _ in data]
"""
LOAD = """
import sys, time
from pathlib import Path
if {block_all}:
    sys.modules["openvino"] = None
started = time.perf_counter()
from lambdaserve.runtimes.torchserve.manifest import synthesized_manifest
from lambdaserve.runtimes.torchserve.worker import load_service
model_dir = Path({model_dir!r})
load_service(synthesized_manifest("h", model_dir), model_dir, 1)
print(time.perf_counter() - started)
"""
WAYS = {
    "openvino-unasked": ("minWorkers: 1\n", False),
    "openvino-imported": ("pt2:\n  backend: openvino\n", False),
    "no-openvino": ("minWorkers: 1\n", True),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs
    with tempfile.TemporaryDirectory() as scratch:
        for way, (yaml, block_all) in WAYS.items():
            model_dir = Path(scratch) / way
            model_dir.mkdir()
            (model_dir / "handler.py").write_text(HANDLER)
            (model_dir / "model-config.yaml").write_text(yaml)
            code = LOAD.format(block_all=block_all, model_dir=str(model_dir))
            times = [
                float(
                    subprocess.run(
                        [sys.executable, "-c", code], capture_output=True, text=True, check=True
                    ).stdout.split()[-1]
                )
                for _ in range(runs)
            ]
            print(
                f"{way:18s} median {statistics.median(times):.2f} s "
                f"(min {min(times):.2f}, max {max(times):.2f}, {runs} runs)"
            )


if __name__ == "__main__":
    main()
