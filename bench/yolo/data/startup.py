#!/usr/bin/env python3
"""Times a training command's start-up: from launch to the end of the train split's label scan and
to its first training step, with the peak memory (VmHWM) of the process tree by then.

    startup.py [--verbose] [--timeout 900] -- COMMAND ...

The command runs in a pseudo-terminal, so both Kestrel and the reference (tqdm) draw their progress
bar on every batch, as a user at a terminal sees it. The first step is done when the bar first
shows a batch done after "Starting training" ("| 1/N"; Kestrel's bar may skip to 2/N); the command is then stopped (SIGINT, then SIGKILL). The scan
ends at the last line that starts with "train: Scanning" (both tools print the split's summary
there). Prints one JSON line: first_step_s, scan_end_s, training_starts_s, peak_rss_mb (the largest VmHWM among the
process and its descendants, sampled every 50 ms), and the exit reason."""
import argparse
import fcntl
import json
import os
import pty
import re
import select
import signal
import struct
import sys
import termios
import time

FIRST_STEP = re.compile(rb"\|\s*([1-9]\d*)/\d+")
STARTING = re.compile(rb"Starting training")
ANSI = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]")  # colours and cursor moves
SCAN = re.compile(rb"train: Scanning")


def tree(pid):
    """pid and its descendants, from /proc."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def hwm_mb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--timeout", type=float, default=900)
    p.add_argument("--verbose", action="store_true")
    p.add_argument("command", nargs=argparse.REMAINDER)
    a = p.parse_args()
    command = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not command:
        sys.exit("startup.py: no command given")

    t0 = time.monotonic()
    pid, fd = pty.fork()
    if pid == 0:
        # A pty starts 0x0, and tqdm draws nothing at width 0: give it a terminal's size.
        fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
        os.execvp(command[0], command)
    result = {"command": " ".join(command), "first_step_s": None, "scan_end_s": None}
    peak = 0.0
    pending = b""
    reason = "exited"
    last_sample = 0.0
    while True:
        now = time.monotonic() - t0
        if now > a.timeout:
            reason = "timeout"
            break
        if now - last_sample > 0.05:
            peak = max([peak] + [hwm_mb(q) for q in tree(pid)])
            last_sample = now
        ready, _, _ = select.select([fd], [], [], 0.05)
        if not ready:
            continue
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        pending += chunk
        *lines, pending = re.split(rb"[\r\n]", pending)
        now = time.monotonic() - t0
        for line in lines:
            line = ANSI.sub(b"", line)
            if not line.strip():
                continue
            if a.verbose:
                print(f"{now:8.2f} {line.decode(errors='replace')[:160]}", file=sys.stderr)
            if SCAN.search(line):
                result["scan_end_s"] = round(now, 3)
            if STARTING.search(line):
                result["training_starts_s"] = round(now, 3)
            if "training_starts_s" in result and FIRST_STEP.search(line):
                result["first_step_s"] = round(now, 3)
        if result["first_step_s"] is not None:
            reason = "first step"
            break
    peak = max([peak] + [hwm_mb(q) for q in tree(pid)])
    for sig in (signal.SIGINT, signal.SIGKILL):
        try:
            os.killpg(os.getpgid(pid), sig) if sig == signal.SIGKILL else os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            break
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if os.waitpid(pid, os.WNOHANG) != (0, 0):
                break
            try:
                os.read(fd, 65536)  # keep the pty drained so the child can exit
            except OSError:
                pass
            time.sleep(0.05)
        else:
            continue
        break
    result["peak_rss_mb"] = round(peak, 1)
    result["stopped"] = reason
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
