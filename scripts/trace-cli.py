#!/usr/bin/env python3
"""Where a one-shot `skillbox extract` spends its wall time, from kernel tracepoints: per run,
when the parent spawns its child, when the child's `exec` starts and ends, when the parent sends
the order, when the child is confined (its `seccomp` call) and when each process exits, with
medians over the runs, and the same split by whether the child's `exec` ran on the parent's CPU.

  perf record -q -o /tmp/cli.data -e sched:sched_process_exec,sched:sched_process_fork \\
      -e raw_syscalls:sys_enter -- bash -c 'for i in $(seq 100); do \\
      target/release/skillbox extract ARTIFACT > /dev/null; done'
  perf script -i /tmp/cli.data -F comm,pid,tid,cpu,time,event,trace > /tmp/cli.txt
  python3 scripts/trace-cli.py /tmp/cli.txt [RUN]     # RUN: also print that run's system calls

Times are ms from the parent's `exec`. Tracing every system call slows the syscall-heavy parts
(a few microseconds each): read the milestones against each other, not as absolute figures.
A report, not a test (bench-results/sandbox.md keeps a run).
"""
import re
import statistics
import sys

NAMES = {}
for path in ("/usr/include/x86_64-linux-gnu/asm/unistd_64.h", "/usr/include/asm/unistd_64.h"):
    try:
        for line in open(path):
            m = re.match(r"#define __NR_(\w+) (\d+)", line)
            if m:
                NAMES[int(m.group(2))] = m.group(1)
        break
    except OSError:
        continue

LINE = re.compile(r"^\s*(\S+) (\d+)/(\d+) \[(\d+)\]\s+([\d.]+):\s+(\S+): (.*)$")


def runs_of(path):
    """Each run: the parent ('P'), its first child ('C'), and their events."""
    runs, cur = [], None
    for line in open(path):
        m = LINE.match(line)
        if not m:
            continue
        _comm, pid, tid, cpu, t, ev, rest = m.groups()
        pid, tid, t = int(pid), int(tid), float(t) * 1e3
        if ev == "sched:sched_process_exec" and "/skillbox " in rest + " " and "skillbox-child" not in rest:
            cur = {"t0": t, "who": {pid: "P"}, "ev": []}
            runs.append(cur)
            continue
        if cur is None:
            continue
        if ev == "sched:sched_process_fork":
            f = re.search(r" pid=(\d+) .*child_pid=(\d+)", rest)
            parent, child = int(f.group(1)), int(f.group(2))
            # The parent's first new process is the child (threads keep their process's pid).
            if cur["who"].get(parent) == "P" and "C" not in cur["who"].values() and child != parent:
                cur["who"][child] = "C"
            continue
        who = cur["who"].get(pid)
        if who is None:
            continue
        if ev == "raw_syscalls:sys_enter":
            name = NAMES.get(int(rest.split()[1]), rest.split()[1])
        else:
            name = ev.split(":")[1]
        cur["ev"].append((t - cur["t0"], who, tid == pid, int(cpu), name))
    return runs


def first(ev, who, name):
    """When and on which CPU `who`'s main thread first did `name`."""
    for t, w, main, cpu, n in ev:
        if w == who and n == name and main:
            return t, cpu
    return None, None


def milestones(run):
    ev = run["ev"]
    m = {}
    m["parent spawns the child"] = first(ev, "P", "clone3")[0]
    m["child calls execve"] = first(ev, "C", "execve")[0]
    done, child_cpu = first(ev, "C", "sched_process_exec")
    m["child's exec done"] = done
    order, parent_cpu = first(ev, "P", "sendmsg")
    m["parent sends the order"] = order
    m["child confined (seccomp)"] = first(ev, "C", "seccomp")[0]
    m["child exits"] = first(ev, "C", "exit_group")[0]
    m["parent exits"] = first(ev, "P", "exit_group")[0]
    same = None if child_cpu is None or parent_cpu is None else child_cpu == parent_cpu
    return m, same


def report(rows, title):
    if not rows:
        return
    print(f"{title} ({len(rows)} runs): median ms from the parent's exec")
    for key in rows[0]:
        v = [r[key] for r in rows if r[key] is not None]
        if v:
            print(f"  {key:28} {statistics.median(v):8.3f}")
    v = [r["child's exec done"] - r["child calls execve"] for r in rows
         if r["child's exec done"] is not None and r["child calls execve"] is not None]
    if v:
        print(f"  {'(execve to exec done)':28} {statistics.median(v):8.3f}")


def main():
    runs = runs_of(sys.argv[1])
    table = [milestones(r) for r in runs]
    report([m for m, _ in table], "all")
    report([m for m, same in table if same], "child's exec on the parent's CPU")
    report([m for m, same in table if same is False], "child's exec on another CPU")
    if len(sys.argv) > 2:
        for t, who, main, cpu, name in runs[int(sys.argv[2])]["ev"]:
            print(f"{t:8.3f} {who}{'' if main else 't'} cpu{cpu} {name}")


if __name__ == "__main__":
    main()
