"""Triton's qa/L0_model_queue test methods (model_queue_test.py, unchanged) on the trials of
its custom model, over HTTP and gRPC. Its ensemble trials are left out: an ensemble's steps
here run in the ensemble's own execution (pipelines/bls.py: calls between models never wait
in a batcher's lane, where a model could wait on itself), not queued in the composing model's
scheduler as Triton's ensemble scheduler queues them, so the step model's queue policy does
not see them. Run as ``python qa_custom_trials.py <test method>`` with the qa's common/ and
L0_model_queue/ on PYTHONPATH."""

from __future__ import annotations

import sys
import unittest

import model_queue_test  # type: ignore[import-not-found]


class CustomTrials(model_queue_test.ModelQueueTest):  # type: ignore[misc]
    def setUp(self) -> None:
        super().setUp()
        self.trials_ = [trial for trial in self.trials_ if trial["base"] == "custom"]


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0], f"CustomTrials.{sys.argv[1]}"])
