"""The stoplatency workload's evaluator: persistent, through the evoq_eval
helper, with a learning curve of STEPS steps of STEP_S seconds each.

    python3 stoplatency.py HELPER_DIR OUT_DIR STEP_S STEPS

It times each evoq_eval.report() call with time.perf_counter, from just
before the call to its return: in persistent mode report() prints the
report line and blocks until the worker's answer, which at a rung is the
controller's decision and elsewhere comes once the report is stored. The
times go to OUT_DIR/waits-<pid>.jsonl, one JSON line per report, written
when the design ends: {"design", "step", "ms", "continue"}. Not in the
result's metrics: a stopped design's result is made by the worker from its
last report, so the wait for the stop answer itself, the figure the
workload is for, would never reach the store.
"""
import hashlib
import json
import math
import os
import sys
import time

HELPER, OUT, STEP_S, STEPS = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
sys.dont_write_bytecode = True  # no __pycache__ left beside the helper, in the source tree
sys.path.insert(0, HELPER)
import evoq_eval  # noqa: E402  (found through the path above)

_log = open(os.path.join(OUT, f"waits-{os.getpid()}.jsonl"), "a", encoding="utf-8")


def _unit(key, salt):
    """A number in [0, 1) drawn from the genome: the same design always
    learns the same curve."""
    h = hashlib.sha256((salt + key).encode()).digest()
    return int.from_bytes(h[:8], "big") / 2**64


def train(design):
    key = json.dumps(design["genome"], sort_keys=True)
    final = 0.5 + 0.5 * _unit(key, "final")
    tau = 0.05 + 0.3 * _unit(key, "tau")  # time constant, as a share of training
    waits, fit = [], 0.0
    try:
        for step in range(1, STEPS + 1):
            time.sleep(STEP_S)
            x = step / STEPS
            fit = final * (1 - math.exp(-x / tau)) / (1 - math.exp(-1 / tau))
            began = time.perf_counter()
            go = evoq_eval.report(step, fit)
            waits.append({"design": design["id"], "step": step,
                          "ms": (time.perf_counter() - began) * 1000, "continue": go})
            if not go:
                break
    finally:
        _log.write("".join(json.dumps(w) + "\n" for w in waits))
        _log.flush()
    return fit


evoq_eval.main(train)
