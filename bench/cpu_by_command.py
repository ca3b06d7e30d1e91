#!/usr/bin/env python3
"""CPU of the evoq processes on this machine, by command, every 2 seconds.

Run it beside `evoq bench --workload exascale` (or any run of evoq
processes): each line is the seconds since it started, the machine's busy
cores, and the cores used by each evoq command (broker, controller, worker,
status...) over the last 2 seconds, from the user and system time in
/proc/PID/stat. docs/BENCHMARKS.md reads the exascale run's first wave with
it. Linux only; stop it with Ctrl-C.
"""
import os
import sys
import time

HZ = os.sysconf("SC_CLK_TCK")
PERIOD = 2.0


def machine():
    v = list(map(int, open("/proc/stat").readline().split()[1:]))
    return sum(v), v[3] + v[4]  # all, idle + iowait


def evoq_processes():
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
            if not os.path.basename(cmd[0]).startswith(b"evoq"):  # evoq, or a copy named evoq-*
                continue
            stat = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
            out[pid] = (cmd[1].decode() if len(cmd) > 1 else "?", int(stat[11]) + int(stat[12]))
        except (OSError, IndexError, ValueError):
            pass  # gone meanwhile
    return out


def main():
    start = time.time()
    total0, idle0 = machine()
    before = evoq_processes()
    while True:
        time.sleep(PERIOD)
        total, idle = machine()
        now = evoq_processes()
        by = {}
        for pid, (command, ticks) in now.items():
            by[command] = by.get(command, 0) + ticks - before.get(pid, (command, 0))[1]
        cores = os.cpu_count() or 1
        busy = (1 - (idle - idle0) / (total - total0)) * cores if total > total0 else 0
        used = " ".join(f"{c}={t / HZ / PERIOD:.2f}" for c, t in sorted(by.items()))
        print(f"{time.time() - start:6.0f}s busy={busy:.2f} cores {used}", flush=True)
        total0, idle0, before = total, idle, now


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(0)
