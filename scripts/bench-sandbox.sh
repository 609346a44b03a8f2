#!/usr/bin/env bash
# Per-request cost of the confined child versus the same engine in-process.
#
#   scripts/bench-sandbox.sh [RUNS [typical]]   (default 200; the 64 MiB case runs RUNS/20 times)
#   BENCH_DIR=/var/tmp scripts/bench-sandbox.sh  (work on a disk instead of /dev/shm)
#
# Builds release, works on /dev/shm (tmpfs, so disk noise stays out) unless BENCH_DIR says
# otherwise, prints medians and p90s for: a bare spawn of /bin/true and of each child binary
# given no request; a typical package (25 files, ~250 KB tar.gz) and a large one (64 MiB)
# extracted in-process, confined with a fresh exec of `skillbox-child` per child (the CLI's
# path), the same from the `skillbox` binary itself (the fallback when `skillbox-child` is
# missing, and what every child was before it existed), confined with children forked by a
# zygote (the broker's default), confined with `--verify-staged full`, and "one-shot" as
# `skillbox extract` runs (a sandbox built per request, its child started on demand or ahead of
# it). Not a test: numbers go to stdout (bench-results/sandbox.md keeps a run).
#
#   scripts/bench-sandbox.sh cli OTHER_SKILLBOX [RUNS [STAGING_PARENT]]
#
# instead times `skillbox extract typical.tar.gz` end to end as a user runs it, this build
# alternated with OTHER_SKILLBOX (another build, with its skillbox-child next to it), RUNS
# rounds (default 300), staging in TMPDIR=STAGING_PARENT (default /dev/shm; give a directory on
# a disk for ext4): medians and the paired median difference, round by round.
#
#   scripts/bench-sandbox.sh static [RUNS]
#
# instead compares the static-pie child (docs/sandbox.md, "A static child") with the default
# one on the typical package, RUNS iterations (default 300): the default child built with
# `cargo rustc` and the static one by scripts/install.sh, both copied side by side into the work
# directory (a binary copied long before another runs measurably slower:
# bench-results/sandbox.md), the static one as EXE and the default one as
# SKILLBOX_BENCH_ALSO_EXE, so "exec: EXE minus OTHER" is static minus default; the default
# child is rebuilt in target/ afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = static ]; then
  runs="${2:-300}"
  cargo build --release --quiet --bin skillbox --example bench_sandbox
  bin="${CARGO_TARGET_DIR:-target}/release"
  work="$(mktemp -d "${BENCH_DIR:-/dev/shm}/skillbox-bench-static.XXXXXX")"
  trap 'rm -rf "$work"; cargo build --release --quiet --bin skillbox-child' EXIT
  cargo rustc --release --quiet --bin skillbox-child
  cp "$bin/skillbox-child" "$work/default-child"
  scripts/install.sh "$work/static" >/dev/null
  echo "kernel $(uname -r), $(nproc) cores, euid $(id -u); workdir $work; load average $(cut -d' ' -f1-3 /proc/loadavg)"
  SKILLBOX_BENCH_ALSO_EXE="$work/default-child" \
    "$bin/examples/bench_sandbox" "$work/static/bin/skillbox-child" "$work" "$runs" typical
  exit 0
fi
if [ "${1:-}" = cli ]; then
  other="$(realpath "$2")" runs="${3:-300}" staging="${4:-/dev/shm}"
  cargo build --release --quiet --bin skillbox --bin skillbox-child --example bench_sandbox
  bin="${CARGO_TARGET_DIR:-target}/release"
  work="$(mktemp -d "$staging/skillbox-bench-cli.XXXXXX")"
  trap 'rm -rf "$work"' EXIT
  # One iteration only: it writes the typical package into $work.
  "$bin/examples/bench_sandbox" "$(realpath "$bin/skillbox-child")" "$work" 1 typical >/dev/null
  mkdir "$work/tmp"
  echo "load average: $(cut -d' ' -f1-3 /proc/loadavg); staging under $staging"
  TMPDIR="$work/tmp" python3 - "$runs" "$work/typical.tar.gz" "$other" "$(realpath "$bin/skillbox")" <<'PY'
import os, statistics, subprocess, sys, time
runs, art, bins = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
took = {b: [] for b in bins}
with open(os.devnull, "w") as null:
    for i in range(runs + 3):  # three warm-up rounds
        for b in bins if i % 2 == 0 else bins[::-1]:
            t = time.perf_counter()
            if subprocess.run([b, "extract", art], stdout=null).returncode != 0:
                sys.exit(f"{b}: extract failed")
            if i >= 3:
                took[b].append((time.perf_counter() - t) * 1e3)
other, this = (took[b] for b in bins)
paired = sorted(a - b for a, b in zip(this, other))
for name, v in (("OTHER", other), ("this build", this)):
    print(f"{name:10} median {statistics.median(v):7.3f} ms  p90 {sorted(v)[len(v) * 9 // 10]:7.3f} ms")
print(f"this build minus OTHER, paired median {paired[len(paired) // 2]:+.3f} ms ({runs} rounds)")
PY
  exit 0
fi
runs="${1:-200}"
cargo build --release --quiet --bin skillbox --bin skillbox-child --example bench_sandbox
bin="${CARGO_TARGET_DIR:-target}/release"
work="$(mktemp -d "${BENCH_DIR:-/dev/shm}/skillbox-bench-sandbox.XXXXXX")"
trap 'rm -rf "$work"' EXIT
echo "kernel $(uname -r), $(nproc) cores, euid $(id -u); workdir $work"
"$bin/skillbox" doctor | grep -E 'kernel|landlock ABI|child (runs|limits|binary)'
SKILLBOX_BENCH_ALSO_EXE="$(realpath "$bin/skillbox")" \
  "$bin/examples/bench_sandbox" "$(realpath "$bin/skillbox-child")" "$work" "$runs" ${2:-}
