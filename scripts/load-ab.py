#!/usr/bin/env python3
"""The broker's load figures for two builds, alternated in one sitting: the #17 table in one command.

  python3 scripts/load-ab.py ROUNDS LOADGEN OLD_SKILLBOX NEW_SKILLBOX STAGING_DIR... [-- LOADGEN_ARG...]

Every round runs `LOADGEN --bin BUILD --concurrency 1,8 --seconds 5 --local-runs 0` once for each
build on each staging directory (its `TMPDIR`), in the order old, new on odd rounds and new, old on
even ones, so drift over the sitting falls on both alike. The same load generator drives both
builds (pass the older one's: a change to the client must not look like a change to the broker).
Extra loadgen arguments go after `--` (they replace `--concurrency 1,8 --seconds 5`).

Prints every run's c=8 req/s, c=1 p50 and server CPU a request, then per build and directory the
range and mean of each. Right before every run, a fixed reference job is timed on the idle machine
(SHA-256 of 64 MiB in this Python, OpenSSL's, with the CPU's SHA instructions; median of five):
these shared guests slow by 15-25 % within minutes, and a run whose reference is slow ran on a slow
host. The summary also gives c=8 req/s scaled by that run's reference against the sitting's median
one, a view of the builds with the host's drift taken out (a reading aid, not the target's figure). A report, not a test: nothing here passes or fails on a figure. Stops at
the first run that reports errors or does not print its table. The builds run from copies made
side by side at the start (scripts/fresh_copies.py), each with its `skillbox-child`. Run it without
`chrt -f`: under a real-time policy the broker's threads reaping children spun in the kernel for
minutes and stopped answering (bench-results/load.md, thirtieth session).

Staging directories: `/dev/shm` (tmpfs) and a directory on the disk under test. These machines'
own disk is ext4 without a journal (bench-results/load.md, seventh session); the journaled disk
of the tables is a loop image:

  truncate -s 3G /var/tmp/ext4.img && mkfs.ext4 -q -F /var/tmp/ext4.img
  mount -o loop /var/tmp/ext4.img /mnt/ab && mkdir /mnt/ab/tmp && chmod 1777 /mnt/ab/tmp
"""
import hashlib
import os
import re
import time
import statistics
import subprocess
import sys

from fresh_copies import fresh_copies

ROW = re.compile(r"^\| (\d+) \| (\d+) \| (\d+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \| (\S+) \| ([\d.]+) \| ([\d.]+) \|$")


def usage():
    sys.exit(__doc__.split("\n\n")[1])


def run(loadgen, build, staging, extra):
    """One loadgen run: {concurrency: (req/s, p50 ms, server CPU ms a request, peak RSS MiB)}."""
    args = extra or ["--concurrency", "1,8", "--seconds", "5"]
    cmd = [loadgen, "--bin", build, "--local-runs", "0", *args]
    p = subprocess.run(cmd, env={**os.environ, "TMPDIR": staging}, capture_output=True, text=True)
    rows = {}
    for line in p.stdout.splitlines():
        m = ROW.match(line)
        if m:
            if m.group(7) != "0":
                sys.exit(f"errors in {cmd} (TMPDIR={staging}): {line}")
            rows[int(m.group(1))] = (int(m.group(3)), float(m.group(4)), float(m.group(9)), float(m.group(8)))
    if p.returncode != 0 or not rows:
        sys.exit(f"{cmd} (TMPDIR={staging}) exited {p.returncode}:\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
    return rows


REFERENCE = bytes(64 * 1024 * 1024)


def reference_ms():
    """The host's speed now: the median of five SHA-256s of 64 MiB, in ms (about 40 ms each).
    A host slowed by its other guests (a busy sibling hyperthread, no steal time shown in this
    guest) slows this as it slows the broker."""
    times = []
    for _ in range(5):
        t = time.perf_counter()
        hashlib.sha256(REFERENCE).digest()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000


def main():
    argv = sys.argv[1:]
    extra = []
    if "--" in argv:
        k = argv.index("--")
        argv, extra = argv[:k], argv[k + 1:]
    if len(argv) < 5:
        usage()
    rounds, loadgen, old, new, dirs = int(argv[0]), os.path.abspath(argv[1]), argv[2], argv[3], argv[4:]
    for d in dirs:
        if not os.path.isdir(d):
            sys.exit(f"no staging directory {d}")
    builds = dict(zip(("old", "new"), fresh_copies([old, new])))
    results = {(b, d): [] for b in builds for d in dirs}
    print("| round | build | staging | reference ms | c=1 p50 ms | c=8 req/s | server CPU ms/req c=8 | peak RSS MiB c=8 |")
    print("|--:|---|---|--:|--:|--:|--:|--:|")
    refs = {(b, d): [] for b in builds for d in dirs}
    for r in range(1, rounds + 1):
        order = ["old", "new"] if r % 2 else ["new", "old"]
        for d in dirs:
            for b in order:
                ref = reference_ms()
                rows = run(loadgen, builds[b], d, extra)
                results[(b, d)].append(rows)
                refs[(b, d)].append(ref)
                c1, c8 = rows.get(1), rows.get(max(rows))
                p50 = f"{c1[1]:.2f}" if c1 else "-"
                print(f"| {r} | {b} | {d} | {ref:.1f} | {p50} | {c8[0]} | {c8[2]:.2f} | {c8[3]:.1f} |", flush=True)
    median_ref = statistics.median(x for v in refs.values() for x in v)
    print()
    print(f"Reference: median {median_ref:.1f} ms over the sitting.")
    print()
    print("| staging | build | c=8 req/s range | mean | scaled to the median reference | c=1 p50 ms range | server CPU ms/req c=8 mean |")
    print("|---|---|---|--:|--:|---|--:|")
    for d in dirs:
        for b in builds:
            runs = results[(b, d)]
            top = [x[max(x)] for x in runs]
            rate = [t[0] for t in top]
            scaled = [t[0] * ref / median_ref for t, ref in zip(top, refs[(b, d)])]
            cpu = [t[2] for t in top]
            p50 = [x[1][1] for x in runs if 1 in x]
            p50s = f"{min(p50):.2f}-{max(p50):.2f}" if p50 else "-"
            print(
                f"| {d} | {b} | {min(rate)}-{max(rate)} | {statistics.mean(rate):.1f} "
                f"| {statistics.mean(scaled):.1f} | {p50s} | {statistics.mean(cpu):.2f} |"
            )


if __name__ == "__main__":
    main()
