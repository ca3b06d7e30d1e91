"""A test evaluator whose designs train their own number of epochs (the
gene epochs, 1 to 9), reporting after each along x * (1 - exp(-step / 1.5)),
for early stopping at a design's end. A mutant reads its parent's
checkpoint and says it inherited; every design saves one.

argv[1] is how it says which report is its last:
  helper       evoq_eval, one-shot: the helper marks it when train_fn returns
  helper-last  evoq_eval, report(..., last=True) (for --persistent)
  raw-last     its own report lines, the last with "last": true
  raw          its own report lines, none marked (the run's --max-step-gene)
"""
import json
import math
import os
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "python"))
import evoq_eval  # noqa: E402

MODE = sys.argv[1]
STEP_S = 0.02  # an epoch: long beside a stop decision's round trip


def curve(x, step):
    return x * (1 - math.exp(-step / 1.5)) / (1 - math.exp(-6))


def train(design):
    g = design["genome"]
    x, epochs = float(g["x"]), int(g["epochs"])
    if evoq_eval.parent_checkpoint():
        evoq_eval.load_parent()  # records inherited
    fit = 0.0
    for step in range(1, epochs + 1):
        time.sleep(STEP_S)
        fit = curve(x, step)
        last = {"last": True} if MODE == "helper-last" and step == epochs else {}
        if not evoq_eval.report(step, fit, **last):
            break
    evoq_eval.save({"x": x})
    return fit, {"epochs": epochs}


def raw():
    d = json.load(sys.stdin)
    g = d["genome"]
    x, epochs = float(g["x"]), int(g["epochs"])
    stopped = []
    signal.signal(signal.SIGTERM, lambda *_: stopped.append(True))
    metrics = {"epochs": epochs}
    parent = os.environ.get("EVOQ_PARENT_CHECKPOINT")
    if parent:
        with open(parent, "rb") as f:
            json.loads(f.read())
        metrics["inherited"] = True
    fit = 0.0
    for step in range(1, epochs + 1):
        time.sleep(STEP_S)
        if stopped:
            break
        fit = curve(x, step)
        rep = {"step": step, "fitness": fit}
        if MODE == "raw-last" and step == epochs:
            rep["last"] = True
        print(json.dumps({"report": rep}), flush=True)
    out = os.environ.get("EVOQ_CHECKPOINT_OUT")
    if out:
        with open(out, "w") as f:
            json.dump({"x": x}, f)
    # Stopped or not, its metrics: a stopped design keeps them.
    print(json.dumps({"fitness": fit, "metrics": metrics}), flush=True)


if MODE.startswith("raw"):
    raw()
else:
    evoq_eval.main(train)
