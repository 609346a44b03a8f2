#!/usr/bin/env bash
# Run every cargo-fuzz target (or the ones named) for a time budget each, one after another,
# at the lowest CPU priority, and print executions per second and findings per target.
#
#   scripts/fuzz.sh                 # 600 s per target
#   scripts/fuzz.sh 60 zip path     # 60 s for zip and path only
#
# cargo-fuzz needs nightly-only `-Z` flags. There is no nightly toolchain here, so the stable
# compiler is told to accept them with RUSTC_BOOTSTRAP=1 (a documented escape hatch of rustc;
# fine for a fuzzing build, never for a shipped one). AddressSanitizer works with it.
# SKILLBOX_FUZZ_SANITIZER=none skips ASan (faster; panics and aborts are still caught).
#
# New inputs grow fuzz/corpus-work/<target>/ (ignored by git); the committed seeds in
# fuzz/corpus/<target>/ are read, never written. Crashes land in fuzz/artifacts/<target>/:
# minimise one with `cargo fuzz tmin <target> <file>`, then commit it as a seed and as a named
# case in corpus/fuzz/manifest.json (see README "Fuzzing").
set -euo pipefail
cd "$(dirname "$0")/.."

budget="${1:-600}"
shift || true
sanitizer="${SKILLBOX_FUZZ_SANITIZER:-address}"
export RUSTC_BOOTSTRAP=1
# The archive targets create and remove a staging tree per input: keep that off the disk.
if [ -z "${SKILLBOX_FUZZ_KEEP_TMPDIR:-}" ] && [ -d /dev/shm ] && [ -w /dev/shm ]; then
    export TMPDIR=/dev/shm
fi

if ! command -v cargo-fuzz >/dev/null 2>&1; then
    echo "fuzz: installing cargo-fuzz (crates.io)" >&2
    cargo install cargo-fuzz --locked
fi

if (($#)); then
    targets=("$@")
else
    mapfile -t targets < <(cargo fuzz list)
fi

echo "== building ${targets[*]} (release, debug assertions, sanitizer: $sanitizer)"
nice -n 19 cargo fuzz build --release --debug-assertions -s "$sanitizer"
summary=()
status=0
for t in "${targets[@]}"; do
    mkdir -p "fuzz/corpus-work/$t" "fuzz/artifacts/$t"
    log="fuzz/artifacts/$t/last-run.log"
    before=$(find "fuzz/artifacts/$t" -type f ! -name '*.log' | wc -l)
    echo "== $t: ${budget}s (sanitizer: $sanitizer)"
    # -jobs/-workers stay at 1: the machine's cores are shared.
    if ! nice -n 19 cargo fuzz run --release --debug-assertions -s "$sanitizer" "$t" "fuzz/corpus-work/$t" "fuzz/corpus/$t" -- \
        -max_total_time="$budget" -print_final_stats=1 -timeout=20 -rss_limit_mb=4096 \
        -max_len=262144 >"$log" 2>&1; then
        status=1
    fi
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -1 | cut -d' ' -f2)
    after=$(find "fuzz/artifacts/$t" -type f ! -name '*.log' | wc -l)
    summary+=("$(printf '%-6s %10s execs %8s exec/s  cov %6s  findings %d' "$t" "${runs:-?}" "${rate:-?}" "${cov:-?}" $((after - before)))")
    tail -n 3 "$log"
done
echo "== summary (${budget}s per target)"
printf '%s\n' "${summary[@]}"
exit "$status"
