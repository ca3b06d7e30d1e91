#!/usr/bin/env python3
"""Compare searches with --inherit against searches from scratch, per slot-second.

Reads `evoq export --format jsonl` files in pairs, one pair per seed: the
run from scratch, then the run with --inherit. Prints, per seed, the
slot-seconds the --inherit run needed to first hold an ok design at least
as good as the scratch run's best, as a share of the slot-seconds the
scratch run needed to find that best; then the median share over seeds.

Slot-seconds here are counted in store order: the sum of stop - start over
every result up to the first one that reaches the target, so that slot time
spent in parallel on designs still running is not counted (unlike
compare.py, which integrates over wall time). Lost results are skipped, as
in compare.py: they hold no evaluation's time.

    python3 inherit_compare.py scratch-1.jsonl inherit-1.jsonl [scratch-2.jsonl inherit-2.jsonl ...]
"""
import json
import statistics
import sys

from compare import ts


def results(path):
    """The run's results in store order: (seconds, ok and counted, fitness, result)."""
    out = []
    for line in open(path):
        r = json.loads(line)
        if r.get("status") == "lost":
            continue
        good = r.get("status") == "ok" and r.get("counted") and r.get("fitness") is not None
        out.append((max(0.0, ts(r["stop"]) - ts(r["start"])), good, r.get("fitness"), r))
    return out


def best(res):
    vals = [f for _, good, f, _ in res if good]
    return max(vals) if vals else None


def slot_s_to(res, target):
    """Slot-seconds until the first counted ok result at least target, or None."""
    spent = 0.0
    for secs, good, f, _ in res:
        spent += secs
        if good and f >= target:
            return spent
    return None


def inherited(res):
    """How many of the run's mutants inherited, and how many mutants there were."""
    mutants = [r for *_, r in res if r.get("design", {}).get("origin") == "mutant"]
    return sum(1 for r in mutants if (r.get("metrics") or {}).get("inherited") is True), len(mutants)


def compare(scratch_path, inherit_path):
    """The share for one seed (inf when not reached), after printing its line."""
    scratch, inh = results(scratch_path), results(inherit_path)
    target = best(scratch)
    if target is None:
        print(f"{scratch_path}: no ok result, nothing to reach")
        return None
    need = slot_s_to(scratch, target)
    got = slot_s_to(inh, target)
    n, of = inherited(inh)
    total = sum(s for s, *_ in inh)
    share = got / need if got is not None else float("inf")
    reached = f"{share:.3f} of that" if got is not None else "not reached"
    b = best(inh)
    b = f"{b:.4f}" if b is not None else "none"
    print(f"{inherit_path}: scratch best {target:.4f} at {need:.1f} slot-s; --inherit: {reached}, "
          f"best {b} in {total:.1f} slot-s, {n} of {of} mutants inherited")
    return share


def main(paths):
    if not paths or len(paths) % 2:
        sys.exit("usage: inherit_compare.py scratch.jsonl inherit.jsonl [scratch.jsonl inherit.jsonl ...]")
    shares = [s for s in (compare(paths[i], paths[i + 1]) for i in range(0, len(paths), 2)) if s is not None]
    if shares:
        m = statistics.median(shares)
        missed = sum(1 for s in shares if s == float("inf"))
        note = f" ({missed} of {len(shares)} not reached)" if missed else ""
        print(f"median share over {len(shares)} seeds: " + (f"{m:.3f}" if m != float("inf") else "not reached") + note)


if __name__ == "__main__":
    main(sys.argv[1:])
