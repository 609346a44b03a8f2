#!/usr/bin/env python3
"""Who spends the time removing a rejected tree: `skillbox extract ARTIFACT --json` of two builds,
alternated, staging in a fresh directory under each STAGE (TMPDIR), each run under `perf record`
(sched tracepoints only: exec, fork, exit), so that the confined child's own time is seen apart
from the command's.

  python3 scripts/bench-rejected-tree.py ROUNDS ARTIFACT OLD_CLI NEW_CLI STAGE...

Per run: the whole command (the parent's exec to its exit), the child (its exec to its exit: it
is started first thing and exits right after it answers), the parent after the child (removing
the tree, among the rest) and the verdict's reason. Prints each run, then medians per build and
stage. Within a round the builds alternate which goes first. A report, not a test; the two builds
run from copies made side by side at the start (scripts/fresh_copies.py).
"""
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from fresh_copies import fresh_copies

rounds, art = int(sys.argv[1]), os.path.abspath(sys.argv[2])
builds = dict(zip(("old", "new"), fresh_copies(sys.argv[3:5])))
stages = sys.argv[5:]

EVENT = re.compile(r"^\s*\S+\s+(\d+)/(\d+)\s+([\d.]+):\s+(\S+):\s+(.*)$")


def split(trace):
    """(whole, child, after the child) in seconds from `perf script` output."""
    parent = child = None
    t0 = child_exec = child_exit = parent_exit = None
    for line in trace.splitlines():
        m = EVENT.match(line)
        if not m:
            continue
        pid, _tid, t, ev, rest = int(m.group(1)), int(m.group(2)), float(m.group(3)), m.group(4), m.group(5)
        if ev == "sched:sched_process_exec" and parent is None:
            parent, t0 = pid, t
        elif ev == "sched:sched_process_exec" and pid != parent and child_exec is None:
            child, child_exec = pid, t
        elif ev == "sched:sched_process_exit" and "group_dead=true" in rest:
            if pid == child:
                child_exit = t
            elif pid == parent:
                parent_exit = t
    return parent_exit - t0, child_exit - child_exec, parent_exit - child_exit


def run(cli, stage):
    tmp = tempfile.mkdtemp(prefix="rt-bench-", dir=stage)
    data = os.path.join(tempfile.gettempdir(), f"rt-bench-{os.getpid()}.data")
    try:
        t = time.perf_counter()
        p = subprocess.run(
            ["perf", "record", "-q", "-o", data,
             "-e", "sched:sched_process_exec", "-e", "sched:sched_process_fork",
             "-e", "sched:sched_process_exit", "--", cli, "extract", art, "--json"],
            env=dict(os.environ, TMPDIR=tmp), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        wall = time.perf_counter() - t
        left = os.listdir(tmp)
        assert not left, (cli, left)
        reason = (json.loads(p.stdout).get("reason") or {}).get("code")
        trace = subprocess.run(
            ["perf", "script", "-i", data, "-F", "comm,pid,tid,time,event,trace"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout
        whole, child, after = split(trace)
        return wall, whole, child, after, reason
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if os.path.exists(data):
            os.remove(data)


def load():
    return open("/proc/loadavg").read().split()[:3]


print(f"load at start: {' '.join(load())}", flush=True)
results = {}
for r in range(rounds):
    for stage in stages:
        order = ["old", "new"] if r % 2 == 0 else ["new", "old"]
        for name in order:
            wall, whole, child, after, reason = run(builds[name], stage)
            results.setdefault((name, stage), []).append((whole, child, after, reason))
            print(f"round {r} {stage:10} {name}: whole {whole:6.2f} s, child {child:6.2f} s, "
                  f"after the child {after:6.2f} s, {reason} (wall {wall:.2f} s, load {load()[0]})",
                  flush=True)
print(f"load at end: {' '.join(load())}")
print()
print("medians (s)        whole   child   after   reasons")
for stage in stages:
    for name in ("old", "new"):
        rs = results[(name, stage)]
        med = [statistics.median(x[i] for x in rs) for i in range(3)]
        reasons = sorted({x[3] for x in rs})
        print(f"{name} {stage:12} {med[0]:7.2f} {med[1]:7.2f} {med[2]:7.2f}   {','.join(map(str, reasons))}")
