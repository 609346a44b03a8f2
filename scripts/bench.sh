#!/usr/bin/env bash
# Extraction benchmark: skillbox (engine in-process, CLI end to end) against stock tools
# (sha256 + bsdtar, plain and under bwrap). Writes bench-results/extract.md.
#
#   bash scripts/bench.sh            # full run (~10 min on 2 CPUs, plus ~20 s once to build bombs)
#   SKILLBOX_BENCH_REPS=0.3 SKILLBOX_BENCH_WORKLOADS=typical,bombs bash scripts/bench.sh
#
# Needs about 2 GB free in /dev/shm. A report, not a test: missed targets do not fail it.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v bsdtar >/dev/null || need+=(libarchive-tools)
command -v bwrap >/dev/null || need+=(bubblewrap)
if ((${#need[@]})); then
    sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo"
    $sudo apt-get install -y "${need[@]}" || { $sudo apt-get update && $sudo apt-get install -y "${need[@]}"; }
fi

# Both binaries: the CLI starts the `skillbox-child` beside it, built from the same sources.
cargo build --release --bin skillbox --bin skillbox-child --example sha256_files
cargo bench --bench extract --no-run
# The host may be shared (other builds). Under load, every process start and wake-up waits
# for a CPU, which buries millisecond figures. So the measurements (ours and the peer's alike:
# children inherit it) run at the lowest real-time priority when allowed, else at nice -20.
# The run is sequential, so it holds at most one CPU; the report records the class used and
# the load average.
prio=()
if chrt -f 1 true 2>/dev/null; then
    prio=(chrt -f 1)
elif nice -n -20 true 2>/dev/null && [ "$(nice -n -20 nice)" = -20 ]; then
    prio=(nice -n -20)
fi
"${prio[@]}" cargo bench --bench extract
echo "report: bench-results/extract.md"
