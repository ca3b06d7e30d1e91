#!/usr/bin/env python3
"""The nb201 workload's yardsticks: Optuna's TPE sampler and random search
(Optuna's RandomSampler) on the NAS-Bench-201 ImageNet16-120 table, each
edge of the cell a categorical choice of 5 operations, as a user of Optuna
would set it up: the samplers' defaults, one trial at a time.

For each seed it runs one study of max(budgets) trials and reports, at
each budget, the true accuracy of the trial with the best observed value
among the first `budget` trials. With --noise, each trial observes the
table's accuracy plus normal noise of that standard deviation, drawn from
the seed and the trial's number.

Needs Debian's python3-optuna. Prints one JSON object as its last line.
"""
import argparse
import json
import random
import sys
import time

OPS = ["none", "skip_connect", "nor_conv_1x1", "nor_conv_3x3", "avg_pool_3x3"]
EDGES = ["edge_1_0", "edge_2_0", "edge_2_1", "edge_3_0", "edge_3_1", "edge_3_2"]


def arch(p):
    o = [p[e] for e in EDGES]
    return "|%s~0|+|%s~0|%s~1|+|%s~0|%s~1|%s~2|" % tuple(o)


def load(path):
    acc = {}
    with open(path) as f:
        head = f.readline().strip()
        if head != "arch,test_accuracy":
            sys.exit("%s: header %r, want arch,test_accuracy" % (path, head))
        for line in f:
            a, v = line.strip().split(",")
            acc[a] = float(v)
    return acc


def study(sampler_name, seed, budgets, noise, acc):
    import optuna
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = {"tpe": lambda: optuna.samplers.TPESampler(seed=seed),
               "random": lambda: optuna.samplers.RandomSampler(seed=seed)}[sampler_name]()
    st = optuna.create_study(direction="maximize", sampler=sampler)
    rng = random.Random(seed * 1_000_003 + 7)

    def objective(trial):
        p = {e: trial.suggest_categorical(e, OPS) for e in EDGES}
        a = arch(p)
        trial.set_user_attr("arch", a)
        return acc[a] + (rng.gauss(0, noise) if noise > 0 else 0.0)

    st.optimize(objective, n_trials=max(budgets))
    out, best, best_true = {}, None, None
    for t in st.trials:
        if best is None or t.value > best:
            best, best_true = t.value, acc[t.user_attrs["arch"]]
        if t.number + 1 in budgets:
            out[str(t.number + 1)] = best_true
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--table", required=True, help="the nb201 table, arch,test_accuracy")
    ap.add_argument("--sampler", choices=["tpe", "random"], required=True)
    ap.add_argument("--budgets", default="100,300", help="trial counts to report at, comma-separated")
    ap.add_argument("--seeds", type=int, default=10, help="seeds 1..N")
    ap.add_argument("--noise", type=float, default=0.0, help="standard deviation of the observation noise, accuracy points")
    ap.add_argument("--json", action="store_true", help="print the figures as one JSON line (always the last line)")
    a = ap.parse_args()
    budgets = sorted({int(b) for b in a.budgets.split(",")})
    if budgets[0] < 1 or a.seeds < 1 or a.noise < 0:
        sys.exit("--budgets, --seeds must be >= 1 and --noise >= 0")
    acc = load(a.table)
    began = time.time()
    seeds = []
    for s in range(1, a.seeds + 1):
        seeds.append({"seed": s, "best": study(a.sampler, s, budgets, a.noise, acc)})
    import optuna
    print(json.dumps({"sampler": a.sampler, "optuna": optuna.__version__, "noise": a.noise,
                      "budgets": budgets, "seeds": seeds, "wall_s": round(time.time() - began, 2)}))


if __name__ == "__main__":
    main()
