#!/usr/bin/env python3
"""Paired, alternated timing of `skillbox extract` across builds copied side by side.

    python3 scripts/pair-extract.py ROUNDS ARTIFACT BIN...

Each round runs every BIN once (order reversed every other round; two warm-up rounds), each
run as `BIN extract ARTIFACT --digest sha256:<its digest> --out /dev/shm/pair-out --json`
after removing the output (`SKILLBOX_PAIR_OUT=DIR/pair-out` puts it elsewhere: a disk, for
the disk's side of a comparison). With `SKILLBOX_PAIR_CPU=1` it times CPU instead of wall:
the user and system time of the run and every process it waited for (`RUSAGE_CHILDREN`).
Prints each build's median and the median of its per-round differences from the first BIN,
the figure for a step on these noisy machines. The builds run
from copies made side by side at the start (scripts/fresh_copies.py); the report names the
paths given. Not a test: numbers go to stdout (bench-results/throughput.md keeps runs).
"""
import hashlib
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time

from fresh_copies import fresh_copies

WARMUP = 2
OUT = os.environ.get("SKILLBOX_PAIR_OUT", "/dev/shm/pair-out")
CPU = os.environ.get("SKILLBOX_PAIR_CPU") == "1"


def clock() -> float:
    """Seconds: wall, or the CPU of the runs waited for so far (`SKILLBOX_PAIR_CPU=1`)."""
    if CPU:
        r = resource.getrusage(resource.RUSAGE_CHILDREN)
        return r.ru_utime + r.ru_stime
    return time.perf_counter()


def main() -> None:
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    rounds, artifact, named = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
    bins = fresh_copies(named)
    with open(artifact, "rb") as f:
        digest = "sha256:" + hashlib.file_digest(f, "sha256").hexdigest()
    took = {b: [] for b in bins}
    with open(os.devnull, "w") as null:
        for i in range(rounds + WARMUP):
            for b in bins if i % 2 == 0 else bins[::-1]:
                shutil.rmtree(OUT, ignore_errors=True)
                t = clock()
                run = subprocess.run(
                    [b, "extract", artifact, "--digest", digest, "--out", OUT, "--json"],
                    stdout=null,
                )
                ms = (clock() - t) * 1e3
                if run.returncode != 0:
                    sys.exit(f"{b}: extract failed ({run.returncode})")
                if i >= WARMUP:
                    took[b].append(ms)
    shutil.rmtree(OUT, ignore_errors=True)
    first = took[bins[0]]
    for name, b in zip(named, bins):
        diffs = sorted(x - y for x, y in zip(took[b], first))
        print(
            f"{name:24} median {statistics.median(took[b]):8.2f} ms  "
            f"paired minus first {diffs[len(diffs) // 2]:+.2f} ms  ({rounds} rounds)"
        )


if __name__ == "__main__":
    main()
