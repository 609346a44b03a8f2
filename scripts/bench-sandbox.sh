#!/usr/bin/env bash
# Per-request cost of the confined child versus the same engine in-process.
#
#   scripts/bench-sandbox.sh [RUNS]      (default 200; the 64 MiB case runs RUNS/20 times)
#
# Builds release, works on /dev/shm (tmpfs, so disk noise stays out), prints medians and p90s
# for: a bare spawn of /bin/true and of `skillbox --version`; a typical package (25 files,
# ~250 KB tar.gz) and a large one (64 MiB) extracted in-process, confined with a fresh exec per
# child (the CLI's path), confined with children forked by a zygote (the broker's default), and
# confined with `--verify-staged full`. Not a test: numbers go to stdout (bench-results/sandbox.md
# keeps a run).
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-200}"
cargo build --release --quiet --bin skillbox --example bench_sandbox
bin="${CARGO_TARGET_DIR:-target}/release"
work="$(mktemp -d /dev/shm/skillbox-bench-sandbox.XXXXXX)"
trap 'rm -rf "$work"' EXIT
echo "kernel $(uname -r), $(nproc) cores, euid $(id -u); workdir $work"
"$bin/skillbox" doctor | sed -n '1,4p'
"$bin/examples/bench_sandbox" "$(realpath "$bin/skillbox")" "$work" "$runs"
