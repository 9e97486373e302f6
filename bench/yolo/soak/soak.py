#!/usr/bin/env python3
"""Memory, file descriptors and threads of a long run, sampled as it goes (issue 40, part 4).

    soak.py [--results runs/train/soak/results.csv] [--interval 0.5] [--out FILE.jsonl] -- COMMAND ...

Samples the process itself (not loader processes it may start) every --interval seconds: VmRSS,
open file descriptors, threads. With --results (a
training run's results.csv, one row per finished epoch), each sample is tagged with the epochs
finished at that moment, and the summary compares the state at the end of epoch 10 with the end
of the epoch before the last (the last is followed by the run's final validation and saving,
reported apart as rss_final_mb); without it (val, detect), the state at 10 % of the run's time with the last
sample. Prints the summary as one JSON line: rss_mb at both points and their ratio, fds and
threads at both points, and the peak."""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time


def proc_state(pid):
    state = {"rss_mb": 0.0, "threads": 0}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    state["rss_mb"] = int(line.split()[1]) / 1024
                elif line.startswith("Threads:"):
                    state["threads"] = int(line.split()[1])
        state["fds"] = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None
    return state


def epochs_done(results):
    try:
        with open(results) as f:
            return max(0, sum(1 for line in f if line.strip()) - 1)  # less the header
    except OSError:
        return 0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--results", default="")
    p.add_argument("--interval", type=float, default=0.5)
    p.add_argument("--early-epoch", type=int, default=10)
    p.add_argument("--out", default="")
    p.add_argument("command", nargs=argparse.REMAINDER)
    a = p.parse_args()
    command = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not command:
        sys.exit("soak.py: no command given")
    t0 = time.monotonic()
    # Output goes to a file, never an undrained pipe (a chatty child would block on a full one).
    log = tempfile.TemporaryFile(mode="w+")
    child = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, text=True)
    samples = []
    while child.poll() is None:
        s = proc_state(child.pid)
        if s:
            s["t"] = round(time.monotonic() - t0, 2)
            if a.results:
                s["epochs"] = epochs_done(a.results)
            samples.append(s)
        time.sleep(a.interval)
    log.seek(0)
    err = log.read()
    if child.returncode != 0 or not samples:
        sys.exit(f"soak.py: the command failed ({child.returncode}):\n{err[-2000:]}")
    if a.results:
        # The last sample taken while `n` epochs were done: the end of epoch n, before n+1 starts.
        # The last epoch's row is followed by the run's final phase (best.pt validated again with
        # its plots, the .pt files written), so the late point is the end of the epoch before it,
        # and the final sample is reported apart.
        last_epoch = max(s["epochs"] for s in samples)
        late_epoch = max(last_epoch - 1, 1)
        early_epoch = min(a.early_epoch, late_epoch)
        at = lambda n: [s for s in samples if s["epochs"] == n][-1]  # noqa: E731
        early, late = at(early_epoch), at(late_epoch)
        where = {"early_epoch": early_epoch, "late_epoch": late_epoch,
                 "rss_final_mb": round(samples[-1]["rss_mb"], 1)}
    else:
        total = samples[-1]["t"]
        early = next(s for s in samples if s["t"] >= 0.1 * total)
        late = samples[-1]
        where = {"early_t": early["t"], "late_t": late["t"]}
    summary = dict(bench="soak", command=" ".join(command), seconds=samples[-1]["t"], samples=len(samples),
                   rss_early_mb=round(early["rss_mb"], 1), rss_late_mb=round(late["rss_mb"], 1),
                   rss_ratio=round(late["rss_mb"] / early["rss_mb"], 4),
                   rss_peak_mb=round(max(s["rss_mb"] for s in samples), 1),
                   fds_early=early["fds"], fds_late=late["fds"],
                   threads_early=early["threads"], threads_late=late["threads"], **where)
    print(json.dumps(summary), flush=True)
    if a.out:
        with open(a.out, "a") as f:
            f.write(json.dumps(summary) + "\n")
            f.write(json.dumps({"bench": "soak_samples", "samples": samples}) + "\n")


if __name__ == "__main__":
    main()
