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
# zygote (the broker's default), and confined with `--verify-staged full`. Not a test: numbers
# go to stdout (bench-results/sandbox.md keeps a run).
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-200}"
cargo build --release --quiet --bin skillbox --bin skillbox-child --example bench_sandbox
bin="${CARGO_TARGET_DIR:-target}/release"
work="$(mktemp -d "${BENCH_DIR:-/dev/shm}/skillbox-bench-sandbox.XXXXXX")"
trap 'rm -rf "$work"' EXIT
echo "kernel $(uname -r), $(nproc) cores, euid $(id -u); workdir $work"
"$bin/skillbox" doctor | grep -E 'kernel|landlock ABI|child (runs|limits|binary)'
SKILLBOX_BENCH_ALSO_EXE="$(realpath "$bin/skillbox")" \
  "$bin/examples/bench_sandbox" "$(realpath "$bin/skillbox-child")" "$work" "$runs" ${2:-}
