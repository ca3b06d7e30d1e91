#!/usr/bin/env python3
"""Compare early-stopping runs with full training, per slot-second.

Reads `evoq export --format jsonl` files, one per run (full training first),
and prints, per rule run: the slot-seconds it needed to first hold an ok
design at least as good as the full run's best (as a share of the full run's
slot-seconds), and its best ok fitness once it had spent as many
slot-seconds as the full run. A slot-second is one second of one slot inside
an evaluation (a result's start to stop), as in `evoq bench --workload
fidelity`.

    python3 compare.py full.jsonl asha.jsonl [median.jsonl ...]
"""
import json
import sys
from datetime import datetime


def ts(s):
    # Go writes RFC 3339 with up to nanoseconds; keep microseconds.
    s = s.replace("Z", "+00:00")
    head, _, tz = s.partition("+")
    if "." in head:
        base, frac = head.split(".")
        head = base + "." + frac[:6]
    return datetime.fromisoformat(head + "+" + tz).timestamp()


def spans(path):
    out = []
    for line in open(path):
        r = json.loads(line)
        if r.get("status") == "lost":
            continue
        out.append((ts(r["start"]), ts(r["stop"]), r["status"], r.get("fitness"), r.get("counted")))
    t0 = min(s for s, *_ in out)
    return [(s - t0, e - t0, st, f, c) for s, e, st, f, c in out]


def slot_s(sp, t):
    return sum(max(0.0, min(e, t) - s) for s, e, *_ in sp if s < t)


def time_at(sp, want):
    lo, hi = 0.0, max(e for _, e, *_ in sp)
    if slot_s(sp, hi) < want:
        return hi, True
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if slot_s(sp, mid) < want else (lo, mid)
    return hi, False


def best_until(sp, t):
    vals = [f for s, e, st, f, c in sp if st == "ok" and c and e <= t]
    return max(vals) if vals else None


def first_reached(sp, target):
    ends = sorted(e for s, e, st, f, c in sp if st == "ok" and c and f is not None and f >= target)
    return ends[0] if ends else None


def main(paths):
    full = spans(paths[0])
    full_slot = slot_s(full, float("inf"))
    full_best = best_until(full, float("inf"))
    print(f"full: best {full_best:.4f}, {full_slot:.1f} slot-s")
    for p in paths[1:]:
        sp = spans(p)
        t = first_reached(sp, full_best)
        reached = f"{slot_s(sp, t) / full_slot:.3f}" if t is not None else "not reached"
        te, short = time_at(sp, full_slot)
        b = best_until(sp, te)
        note = " (run ended first)" if short else ""
        print(f"{p}: reached full's best at {reached} of its slot-s; best at equal slot-s {b:.4f}{note}")


if __name__ == "__main__":
    main(sys.argv[1:])
