#!/usr/bin/env python3
"""The train20 workload's yardsticks: Optuna's TPE sampler without a
pruner, with its HyperbandPruner and with its MedianPruner, on the same
training as evoq's runs (train20.py, imported from beside this file), as a
user of Optuna would set it up: one trial at a time in one process.

One study per call. The study runs trials until they have spent
--slot-seconds seconds (the trial running then finishes): a trial's
seconds are from just after its parameters are suggested to its end, its
training and its pruning checks, as evoq's slot-seconds are a worker's
time inside an evaluation; and the process's start, from its first line
to its first trial (importing torch and Optuna, making the data), counts
as spent, as the start of evoq's persistent evaluator process counts in
the slot-seconds of each slot's first design. Each trial trains with a
torch seed drawn from the seed and its number.

Needs Debian's python3-optuna and python3-torch, python3-sklearn. Prints
one JSON object as its last line: startup_s, the process's start, and
the trials in order, each with its
state (complete or pruned), its value (a pruned trial's last reported
accuracy), its seconds and the epochs it trained.
"""
import time

BEGAN = time.perf_counter()  # the process's start, as near as the script sees it

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train20  # noqa: E402  (found through the path above)

PRUNERS = ("none", "hyperband", "median")


def pruner(name, min_step, eta, epochs):
    """The pruner, set as evoq's rules are: Hyperband with evoq asha's
    first rung, ratio and full training; the median rule from evoq's
    first rung on (Optuna's default 5 startup trials)."""
    import optuna
    if name == "hyperband":
        return optuna.pruners.HyperbandPruner(min_resource=min_step, max_resource=epochs, reduction_factor=eta)
    if name == "median":
        return optuna.pruners.MedianPruner(n_warmup_steps=min_step - 1)
    return optuna.pruners.NopPruner()


def study(a):
    import optuna
    import torch
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    torch.set_num_threads(1)
    train20.data()
    st = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=a.seed),
                             pruner=pruner(a.pruner, a.min_step, a.eta, a.epochs))
    trials, spent, startup = [], 0.0, [0.0]

    def objective(trial):
        g = {"width": trial.suggest_int("width", 16, 256, log=True), "depth": trial.suggest_int("depth", 1, 3),
             "lr": trial.suggest_float("lr", 1e-4, 3e-2, log=True),
             "weight_decay": trial.suggest_float("weight_decay", 1e-6, 1e-2, log=True),
             "dropout": trial.suggest_float("dropout", 0.0, 0.5),
             "batch": trial.suggest_categorical("batch", [32, 64, 128, 256])}
        began, state = time.perf_counter(), {"pruned": False, "value": None}
        if not trials:
            startup[0] = began - BEGAN

        def report(epoch, acc, last):
            state["value"] = acc
            trial.report(acc, epoch)
            if not last and trial.should_prune():
                state["pruned"] = True
                return False
            return True

        acc, epochs, _, _ = train20.train(g, train20.seed_of("optuna-%d-%d" % (a.seed, trial.number)), report,
                                          epochs=a.epochs)
        seconds = time.perf_counter() - began
        trials.append({"number": trial.number, "state": "pruned" if state["pruned"] else "complete",
                       "value": acc, "seconds": round(seconds, 4), "epochs": epochs})
        if state["pruned"]:
            raise optuna.TrialPruned()
        return acc

    def enough(study, trial):
        nonlocal spent
        spent = startup[0] + sum(t["seconds"] for t in trials)
        if spent >= a.slot_seconds or len(trials) >= a.max_trials:
            study.stop()

    st.optimize(objective, n_trials=a.max_trials, callbacks=[enough])
    return startup[0], trials


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pruner", choices=PRUNERS, required=True)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--slot-seconds", type=float, required=True, help="stop once the trials have spent this long")
    ap.add_argument("--max-trials", type=int, default=100000, help="stop after this many trials in any case")
    ap.add_argument("--epochs", type=int, default=train20.EPOCHS)
    ap.add_argument("--min-step", type=int, default=3, help="the pruners' first epoch")
    ap.add_argument("--eta", type=int, default=3, help="Hyperband's reduction factor")
    a = ap.parse_args()
    if a.slot_seconds <= 0 or a.max_trials < 1 or a.epochs < 2 or not 1 <= a.min_step < a.epochs or a.eta < 2:
        sys.exit("want --slot-seconds > 0, --max-trials >= 1, --epochs >= 2, 1 <= --min-step < --epochs, --eta >= 2")
    began = time.time()
    startup, trials = study(a)
    import optuna
    print(json.dumps({"pruner": a.pruner, "seed": a.seed, "optuna": optuna.__version__,
                      "startup_s": round(startup, 4), "trials": trials,
                      "wall_s": round(time.time() - began, 2)}))


if __name__ == "__main__":
    main()
