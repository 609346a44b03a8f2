#!/usr/bin/env python3
"""Instructions a request of the child's own work (the engine and the review, in-process), for two
builds: a figure the host's load does not move.

  python3 scripts/engine-ir.py ARTIFACT OLD_ENGINE_IR NEW_ENGINE_IR [RUNS] [--top N]

Each ENGINE_IR is a build of `examples/engine_ir.rs` (`cargo build --release --example engine_ir`;
for a commit older than the example, copy the file into that checkout first). Each runs under
`valgrind --tool=callgrind` twice, over 1 and over 1 + RUNS requests (default 5) on ARTIFACT, into
a fresh directory on /dev/shm; instructions a request = the difference / RUNS, so the process's
start and the first request's one-time work fall out. With `--top N`, the N functions whose own
instructions a request changed most between the builds, by name (inlining moves work between
names: read them as where to look, not as a ledger).

Valgrind runs SHA-256 without the CPU's SHA instructions (it does not report them), so hashing is
about two thirds of the count and far more than its share of real time; the difference between
two builds is what this is for. Timed figures belong to load-ab.py. A report, not a test.
`target/release/examples/loadgen --save-package typical.tar.gz` writes the broker benchmark's
package; SKILL_NAME=pdf-tools passes its name as an index would.
"""
import os
import re
import subprocess
import sys
import tempfile
from collections import defaultdict

COLLECTED = re.compile(r"Collected : (\d+)")
ANNOTATED = re.compile(r"^\s*([\d,]+) \([^)]*\)\s+[^:\s]*:(.+?)(?: \[.*\])?$")


def callgrind(binary, artifact, runs, out):
    """Total instructions of `binary` over `runs` requests; the profile is written to `out`."""
    with tempfile.TemporaryDirectory(dir="/dev/shm") as work:
        p = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", binary, artifact, work, str(runs)],
            capture_output=True,
            text=True,
        )
    m = COLLECTED.search(p.stderr)
    if p.returncode != 0 or not m:
        sys.exit(f"{binary} over {runs} runs exited {p.returncode}:\n{p.stderr[-2000:]}")
    return int(m.group(1))


def functions(profile):
    """Own instructions by function name (summed over the files a name's code came from)."""
    p = subprocess.run(["callgrind_annotate", "--threshold=100", profile], capture_output=True, text=True)
    own = defaultdict(int)
    for line in p.stdout.splitlines():
        m = ANNOTATED.match(line)
        if m and "PROGRAM TOTALS" not in line:
            own[m.group(2).strip()] += int(m.group(1).replace(",", ""))
    return own


def main():
    argv = sys.argv[1:]
    top = 0
    if "--top" in argv:
        k = argv.index("--top")
        top = int(argv[k + 1])
        del argv[k : k + 2]
    if len(argv) not in (3, 4):
        sys.exit(__doc__.split("\n\n")[1])
    artifact, builds, runs = argv[0], argv[1:3], int(argv[3]) if len(argv) == 4 else 5
    if runs < 1:
        sys.exit("RUNS must be at least 1")
    per_fn = []
    with tempfile.TemporaryDirectory() as tmp:
        print("| build | instructions, 1 request | instructions, 1 + %d | a request |" % runs)
        print("|---|--:|--:|--:|")
        per = []
        for k, b in enumerate(builds):
            one = callgrind(b, artifact, 1, f"{tmp}/{k}.1")
            many = callgrind(b, artifact, 1 + runs, f"{tmp}/{k}.n")
            per.append((many - one) / runs)
            print(f"| {b} | {one:,} | {many:,} | {per[-1]:,.0f} |")
            if top:
                f1, fn = functions(f"{tmp}/{k}.1"), functions(f"{tmp}/{k}.n")
                per_fn.append({f: (fn.get(f, 0) - f1.get(f, 0)) / runs for f in set(f1) | set(fn)})
    print(f"\nnew minus old: {per[1] - per[0]:+,.0f} instructions a request ({(per[1] / per[0] - 1) * 100:+.2f} %)")
    if top:
        old, new = per_fn
        names = sorted(set(old) | set(new), key=lambda f: -abs(new.get(f, 0) - old.get(f, 0)))
        print(f"\n| function | old a request | new a request | change |\n|---|--:|--:|--:|")
        for f in names[:top]:
            o, n = old.get(f, 0), new.get(f, 0)
            print(f"| `{f[:90]}` | {o:,.0f} | {n:,.0f} | {n - o:+,.0f} |")


if __name__ == "__main__":
    main()
