#!/usr/bin/python3
"""Dask baseline for `evoq bench --vs-dask`: the seed's loop, measured the way evoq measures.

Before evoq, searches ran on a Dask loop: `client.map` over an initial
population, then `as_completed`, and for every finished evaluation exactly one
new design submitted. Designs in flight therefore stay equal to the initial
population for the whole run, whatever the number of slots. With 92 slots and
an initial population of 5, as in the incident, about 5% of the slots are
busy. This script runs that loop on a local Dask cluster and reports the same
figures as `evoq run --json`, so the two can be set side by side.

Run it with Debian's Python, which has dask and distributed:

    /usr/bin/python3 bench/dask_baseline.py --workload sim --slots 92 --procs 2 \\
        --budget 1500 --sim-mean 0.2 --sim-fail 0.3 [--init 5] [--json]

The cluster is a `LocalCluster` with `--procs` worker processes of
`--slots / --procs` threads each, so `--slots` threads in all; a slot is one
worker thread. `--slots` must be divisible by `--procs`. The cluster is started
and all its workers have joined before the clock starts, so startup is not
counted. Designs are numbered from 0 in the order they are submitted. The loop
submits the first `--init` designs (default: `--slots`, or `--budget` if that
is smaller), then one new design per finished one until `--budget` designs
have been submitted, and waits for all of them to finish.

Workloads, evaluated in the Dask worker thread:

  noop  returns at once; it measures the loop's own cost.
  sim   the same time distribution as evoq's sim evaluator: with probability
        `--sim-fail` the design is infeasible and returns at once; otherwise it
        sleeps a lognormal time with mean `--sim-mean` seconds and sigma 0.8,
        exp(mu + 0.8 z) with mu = ln(mean) - 0.8^2/2 and z standard normal. The
        draws come from a generator seeded with the design number, so a run is
        reproducible.

Each evaluation measures itself inside the task with time.time(): its start,
its stop, and its slot, which is the pair (worker address, thread id). The
figures are computed from these as evoq computes them:

  evaluations  finished evaluations; equal to --budget.
  wall_s       from the first submit to the last result received by the
               client; evals_per_s is evaluations / wall_s.
  slots        --slots; slots_used is the number of distinct slots seen.
  util_steady  busy slot-time over slots x window, where the window runs from
               the earliest start to the latest start (the moment the last
               design was handed to a slot, so the drain at the end does not
               count) and each evaluation's busy time is its stop - start with
               the stop clipped to the window's end; 0 if the window is empty.
  gap_p50_ms,  on each slot, with its evaluations sorted by start, the gap is
  gap_p99_ms   an evaluation's start minus the previous one's stop (the first
               on a slot has none); the quantiles are nearest-rank (the value
               at rank ceil(q n) of the n sorted gaps), in milliseconds.

Rounding follows evoq: wall_s to 3 decimals, evals_per_s to 1, util_steady to
4, gaps to 3. With --json the last line of stdout is one JSON object holding
these figures, the ok and infeasible counts, the settings, `system: "dask"`
and `dask_version`; without it a short table. Dask logs only warnings and
errors, on stderr. Any failure prints one line to stderr and exits 1; bad
arguments exit 2. --timeout bounds the measured run (default: no bound).
"""

import argparse
import json
import logging
import math
import random
import signal
import sys
import threading
import time

SIM_SIGMA = 0.8


def evaluate(design, workload, sim_mean, sim_fail):
    """Evaluate one design in a Dask worker thread and report its own timing."""
    from distributed import get_worker

    start = time.time()
    status = "ok"
    if workload == "sim":
        r = random.Random(design)
        if r.random() < sim_fail:
            status = "infeasible"
        else:
            mu = math.log(sim_mean) - SIM_SIGMA * SIM_SIGMA / 2
            time.sleep(math.exp(mu + SIM_SIGMA * r.gauss(0.0, 1.0)))
    stop = time.time()
    return {
        "design": design,
        "start": start,
        "stop": stop,
        "worker": get_worker().address,
        "thread": threading.get_ident(),
        "status": status,
    }


def nearest_rank(sorted_values, q):
    """The q-quantile of sorted_values by nearest rank; 0 when empty."""
    n = len(sorted_values)
    if n == 0:
        return 0.0
    rank = max(int(math.ceil(q * n)), 1)
    return sorted_values[min(rank, n) - 1]


def figures(records, slots, wall):
    """The run's figures from the per-evaluation records, as evoq computes them."""
    n = len(records)
    first_start = min(r["start"] for r in records) if records else 0.0
    last_start = max(r["start"] for r in records) if records else 0.0
    window = last_start - first_start
    util = 0.0
    if window > 0 and slots >= 1:
        busy = sum(max(min(r["stop"], last_start) - r["start"], 0.0) for r in records)
        util = busy / (slots * window)

    by_slot = {}
    for r in records:
        by_slot.setdefault((r["worker"], r["thread"]), []).append(r)
    gaps = []
    for tasks in by_slot.values():
        tasks.sort(key=lambda r: r["start"])
        for prev, cur in zip(tasks, tasks[1:]):
            gaps.append(cur["start"] - prev["stop"])
    gaps.sort()

    return {
        "evaluations": n,
        "ok": sum(1 for r in records if r["status"] == "ok"),
        "infeasible": sum(1 for r in records if r["status"] == "infeasible"),
        "wall_s": round(wall, 3),
        "evals_per_s": round(n / wall, 1) if wall > 0 else 0.0,
        "slots": slots,
        "slots_used": len(by_slot),
        "util_steady": round(util, 4),
        "gap_p50_ms": round(nearest_rank(gaps, 0.50) * 1000, 3),
        "gap_p99_ms": round(nearest_rank(gaps, 0.99) * 1000, 3),
    }


def run_loop(client, args):
    """The seed's loop: map the initial population, then one new design per result.

    Returns the records of all evaluations and the wall time from the first
    submit to the last result received.
    """
    from distributed import as_completed

    params = (args.workload, args.sim_mean, args.sim_fail)
    records = []
    t0 = time.perf_counter()
    initial = client.map(
        evaluate, range(args.init), *[[p] * args.init for p in params], pure=False
    )
    submitted = args.init
    ac = as_completed(initial)
    del initial
    for future in ac:
        records.append(future.result())
        del future
        if submitted < args.budget:
            ac.add(client.submit(evaluate, submitted, *params, pure=False))
            submitted += 1
    wall = time.perf_counter() - t0
    return records, wall


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="dask_baseline.py",
        description="Run the seed's Dask loop (one new design per finished one) and "
        "report evoq's figures.",
    )
    p.add_argument("--workload", choices=("noop", "sim"), required=True,
                   help="noop: return at once; sim: evoq's sim evaluator times")
    p.add_argument("--slots", type=int, required=True,
                   help="worker threads in all")
    p.add_argument("--procs", type=int, required=True,
                   help="worker processes; --slots must be divisible by it")
    p.add_argument("--budget", type=int, required=True,
                   help="evaluations to run")
    p.add_argument("--init", type=int, default=None,
                   help="initial population, and so designs in flight (default: --slots, at most --budget)")
    p.add_argument("--sim-mean", type=float, default=0.2,
                   help="sim: mean evaluation time in seconds (lognormal, sigma 0.8; default 0.2)")
    p.add_argument("--sim-fail", type=float, default=0.3,
                   help="sim: share of infeasible designs, which return at once (default 0.3)")
    p.add_argument("--timeout", type=float, default=0,
                   help="give up after this many seconds of measured run (default 0: no limit)")
    p.add_argument("--json", action="store_true",
                   help="print the figures as one JSON object on the last line of stdout")
    args = p.parse_args(argv)

    if args.slots < 1:
        p.error(f"--slots must be at least 1, got {args.slots}")
    if args.procs < 1:
        p.error(f"--procs must be at least 1, got {args.procs}")
    if args.slots % args.procs != 0:
        p.error(f"--slots ({args.slots}) must be divisible by --procs ({args.procs})")
    if args.budget < 1:
        p.error(f"--budget must be at least 1, got {args.budget}")
    if args.init is None:
        args.init = min(args.slots, args.budget)
    if args.init < 1:
        p.error(f"--init must be at least 1, got {args.init}")
    if args.init > args.budget:
        p.error(f"--init ({args.init}) must not exceed --budget ({args.budget})")
    if not (math.isfinite(args.sim_mean) and args.sim_mean > 0):
        p.error(f"--sim-mean must be a positive number of seconds, got {args.sim_mean}")
    if not (0 <= args.sim_fail <= 1):
        p.error(f"--sim-fail must be between 0 and 1, got {args.sim_fail}")
    if not (math.isfinite(args.timeout) and args.timeout >= 0):
        p.error(f"--timeout must be 0 or a positive number of seconds, got {args.timeout}")
    return args


class Stop(Exception):
    """Raised in the main thread by SIGTERM or the --timeout alarm."""


def main(argv):
    args = parse_args(argv)

    import dask
    import distributed
    from distributed import Client, LocalCluster

    def on_signal(signum, frame):
        raise Stop(f"stopped by signal {signal.Signals(signum).name}")

    def on_alarm(signum, frame):
        raise Stop(f"--timeout of {args.timeout:g} s reached")

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGALRM, on_alarm)

    threads = args.slots // args.procs
    cluster = client = None
    code = 0
    try:
        cluster = LocalCluster(
            n_workers=args.procs,
            threads_per_worker=threads,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
            # No dashboard, but the scheduler still serves its health routes:
            # on a free port, not on 8787, where another cluster may be.
            scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},
            silence_logs=logging.WARNING,
        )
        client = Client(cluster)
        client.wait_for_workers(args.procs, timeout=120)

        if args.timeout > 0:
            signal.setitimer(signal.ITIMER_REAL, args.timeout)
        records, wall = run_loop(client, args)
        signal.setitimer(signal.ITIMER_REAL, 0)

        out = {"system": "dask", "dask_version": dask.__version__,
               "distributed_version": distributed.__version__}
        out.update(figures(records, args.slots, wall))
        out.update({
            "workload": args.workload, "procs": args.procs,
            "threads_per_worker": threads, "init": args.init, "budget": args.budget,
            "sim_mean": args.sim_mean, "sim_fail": args.sim_fail,
        })
        print_result(out, args.json)
    except (Exception, Stop, KeyboardInterrupt) as e:
        signal.setitimer(signal.ITIMER_REAL, 0)
        msg = str(e) or type(e).__name__
        print(f"dask_baseline: {type(e).__name__}: {msg}".splitlines()[0], file=sys.stderr)
        code = 1
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for closer in (client, cluster):
            if closer is not None:
                try:
                    closer.close(timeout=20)
                except Exception as e:
                    print(f"dask_baseline: closing {type(closer).__name__}: {e}".splitlines()[0],
                          file=sys.stderr)
    return code


def print_result(out, as_json):
    if as_json:
        sys.stdout.write(json.dumps(out, separators=(",", ":")) + "\n")
        sys.stdout.flush()
        return
    settings = (f"{out['workload']}, {out['slots']} slots in {out['procs']} processes "
                f"x {out['threads_per_worker']} threads, init {out['init']}, budget {out['budget']}")
    if out["workload"] == "sim":
        settings += f", sim mean {out['sim_mean']:g} s, fail {out['sim_fail']:g}"
    rows = [
        ("system", f"dask {out['dask_version']}"),
        ("settings", settings),
        ("evaluations", f"{out['evaluations']} ({out['ok']} ok, {out['infeasible']} infeasible)"),
        ("wall", f"{out['wall_s']:.3f} s"),
        ("rate", f"{out['evals_per_s']:.1f} evaluations/s"),
        ("slots", f"{out['slots']} ({out['slots_used']} used)"),
        ("util_steady", f"{out['util_steady']:.4f}"),
        ("gap p50", f"{out['gap_p50_ms']:.3f} ms"),
        ("gap p99", f"{out['gap_p99_ms']:.3f} ms"),
    ]
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")
    sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
