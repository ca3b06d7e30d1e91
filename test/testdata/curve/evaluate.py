"""A test evaluator with a learning curve, for early stopping: design x
in [0, 1] reaches fitness x after 9 steps, along x * (1 - exp(-step / 3)),
so that a design's rank at every rung is its final rank. One-shot or
persistent (EVOQ_PERSISTENT=1), through the evoq_eval helper."""
import math
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "python"))
import evoq_eval  # noqa: E402

STEPS = 9


def train(design):
    x = float(design["genome"]["x"])
    fit = 0.0
    for step in range(1, STEPS + 1):
        time.sleep(0.01)
        fit = x * (1 - math.exp(-step / 3)) / (1 - math.exp(-STEPS / 3))
        if not evoq_eval.report(step, fit, loss=1 - fit):
            return fit
    return fit, {"steps": STEPS}


evoq_eval.main(train)
