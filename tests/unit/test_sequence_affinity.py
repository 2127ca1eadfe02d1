"""A sequence stays on the instance it started on (Triton's direct slot) in a pool of tensor
runtime instances: state a model keeps in its own memory sees every step."""

from __future__ import annotations

import threading
import time

import numpy as np

from lambdaserve.runtimes.sequence_requests import SEQUENCE_END, SEQUENCE_START, in_sequences
from lambdaserve.serving.instances import InstancePool


class Counting:
    """An instance that says which one it is, and holds each run a moment (so runs overlap)."""

    made = 0

    def __init__(self) -> None:
        self.index = Counting.made
        Counting.made += 1
        self.device = "cpu"

    def run(self, inputs, outputs):
        time.sleep(0.002)
        return {"INSTANCE": np.array([self.index])}


def test_each_sequences_steps_run_on_the_instance_its_start_ran_on():
    # Given a pool of three instances
    Counting.made = 0
    pool = InstancePool(Counting, 3)
    seen: dict[int, list[int]] = {}

    def sequence(correlation_id: int) -> None:
        for step in range(10):
            flags = (SEQUENCE_START if step == 0 else 0) | (SEQUENCE_END if step == 9 else 0)
            with in_sequences([(correlation_id, flags)]):
                ran_on = int(pool.run({}, ["INSTANCE"])["INSTANCE"][0])
            seen.setdefault(correlation_id, []).append(ran_on)

    # When eight sequences run their steps at once, with runs outside any sequence beside them
    threads = [threading.Thread(target=sequence, args=(i + 1,)) for i in range(8)]
    loose = [threading.Thread(target=pool.run, args=({}, ["INSTANCE"])) for _ in range(20)]
    for thread in threads + loose:
        thread.start()
    for thread in threads + loose:
        thread.join(30)
    # Then every step of a sequence ran on one instance, and the sequences used more than one
    assert all(len(set(steps)) == 1 and len(steps) == 10 for steps in seen.values()), seen
    assert len({steps[0] for steps in seen.values()}) > 1


def test_a_sequence_whose_instance_was_scaled_away_moves_to_another():
    # Given a sequence started on the first of two instances
    Counting.made = 0
    pool = InstancePool(Counting, 2)
    with in_sequences([(5, SEQUENCE_START)]):
        started_on = int(pool.run({}, ["INSTANCE"])["INSTANCE"][0])
    # When the pool scales to one instance, and the idle first one leaves
    pool.scale(1)
    # Then the sequence's next step runs on the instance that is left, without waiting
    with in_sequences([(5, 0)]):
        now_on = int(pool.run({}, ["INSTANCE"])["INSTANCE"][0])
    assert (started_on, now_on) == (0, 1)
