#!/usr/bin/env bash
# Replay throughput: cases per second of `skillbox replay` over the project's corpus and over a
# generated corpus of N archives (copies of corpus/'s hostile and benign cases, made by
# tools/src/bin/gen_replay_corpus.rs, never committed), against a loop of the peer over the same
# files, with the same parallelism, timed in the same run, on tmpfs (/dev/shm) and on the disk.
#
# The peer, for each case file: `sha256_files FILE` (target/release/examples/sha256_files, the
# CPU's SHA instructions) and `bsdtar -xf FILE -C DIR` into a fresh directory, JOBS loops in
# parallel, under `ulimit -f` at skillbox's default max_file_bytes (64 MiB: without a bound
# bsdtar writes the corpus's 1 and 4 GiB bombs out whole). The directories are made before the
# clock starts; each is removed right after its case (`rm -rf`, in the timed loop: bsdtar has
# no bound on an archive's total output, and the spread bombs of 10,000 cases fill a 24 GiB
# tmpfs otherwise).
#
# Each round runs, alternated: skillbox `--isolate process` (an `extract` process per case, the
# path before spares), `--isolate spare` (the default), and the peer. The figure is the median
# of ROUNDS rounds.
#
# The generated corpus leaves out corpus/'s limit probes that stage 10,000 entries or expand
# 300 MiB (8 of its 375 cases; seconds each, for skillbox and the peer alike): the first row,
# corpus/ itself, has them.
#
# Usage: scripts/bench-replay.sh [N] [ROUNDS] [JOBS]     (defaults 10000 3 2)
#   BIG_ROUNDS=1        rounds over the generated corpus (default 1)
#   DISK_DIR=/var/tmp   where the disk runs go (default target/bench-replay, on the repo's disk)
#   MEDIA="tmpfs disk"  which media to run
#   BEFORE=path/to/skillbox   the "process" column runs this binary's `replay` (a build of the
#                             commit before spares, which has no --isolate) instead
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-10000}
ROUNDS=${2:-3}
JOBS=${3:-2}
MEDIA=${MEDIA:-tmpfs disk}
DISK_DIR=${DISK_DIR:-$PWD/target/bench-replay}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}

# Both binaries: `skillbox replay` starts the `skillbox-child` beside it, which must come from
# the same sources (a stale one refuses every case).
cargo build --release --locked --bin skillbox --bin skillbox-child --example sha256_files >&2
cargo build --release --locked -p skillbox-tools --bin gen_replay_corpus >&2
SKILLBOX=$CARGO_TARGET_DIR/release/skillbox
SHA=$CARGO_TARGET_DIR/release/examples/sha256_files
GEN=$CARGO_TARGET_DIR/release/gen_replay_corpus

now() { date +%s.%N; }

# Every case file of a corpus directory (what replay runs: all but manifests, READMEs, CHECKSUMS).
case_files() {
    find "$1" -type f ! -name manifest.json ! -name 'README*' ! -name 'CHECKSUMS*' | sort
}

# One peer loop: every JOBS-th file of $1 starting at $2, into $3/<k>.
peer_loop() {
    local list=$1 k=$2 root=$3 i=0 f
    ulimit -f 65536
    while IFS= read -r f; do
        i=$((i + 1))
        [ $(((i - 1) % JOBS)) -eq "$k" ] || continue
        "$SHA" "$f" </dev/null >/dev/null
        bsdtar -xf "$f" -C "$root/$i" </dev/null 2>/dev/null || true
        # Removed at once: the corpus's bombs expand to gigabytes in bsdtar (no total bound).
        rm -rf "$root/$i"
    done <"$list"
}

# Seconds the peer takes over the files of corpus $1, with scratch under $2.
peer() {
    local list=$2/peer.list root=$2/peer
    case_files "$1" >"$list"
    rm -rf "$root" && mkdir "$root"
    (cd "$root" && seq 1 "$(wc -l <"$list")" | xargs mkdir)
    local t0 t1 k
    t0=$(now)
    for ((k = 0; k < JOBS; k++)); do peer_loop "$list" "$k" "$root" & done
    wait
    t1=$(now)
    rm -rf "$root"
    echo "$t0 $t1" | awk '{printf "%.3f", $2 - $1}'
}

# Seconds `skillbox replay $1 --isolate $3` takes, its scratch (TMPDIR) under $2; it must pass.
replay() {
    local t0 t1 cmd=("$SKILLBOX" replay "$1" --jobs "$JOBS" --isolate "$3" --json)
    if [ "$3" = process ] && [ -n "${BEFORE:-}" ]; then cmd=("$BEFORE" replay "$1" --jobs "$JOBS" --json); fi
    t0=$(now)
    TMPDIR=$2 "${cmd[@]}" >"$2/$3.json" ||
        { echo "replay $1 --isolate $3 did not pass:" >&2; head -c 2000 "$2/$3.json" >&2; exit 1; }
    t1=$(now)
    echo "$t0 $t1" | awk '{printf "%.3f", $2 - $1}'
}

# The last two reports (process, then spare) must agree case by case, seconds aside.
same() {
    python3 - "$1/process.json" "$1/spare.json" <<'PY'
import json, sys
def load(p):
    v = json.load(open(p))
    v.pop("isolate", None); v["summary"].pop("seconds", None)
    for c in v["cases"]: c.pop("duration", None)
    return v
a, b = load(sys.argv[1]), load(sys.argv[2])
if a != b:
    sys.exit("the process and spare reports differ")
PY
}

median() { tr ' ' '\n' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

echo "# replay throughput: $(date -u +%FT%TZ), $(nproc) CPUs, jobs $JOBS, $ROUNDS rounds (median), commit $(git rev-parse --short HEAD)${BEFORE:+, process column: $BEFORE}"
echo
echo "| medium | corpus | cases | process s | spare s | peer s | process cases/s | spare cases/s | peer cases/s | spare/peer time | spare/process time |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
for medium in $MEDIA; do
    case $medium in
    tmpfs) base=$(mktemp -d /dev/shm/skillbox-bench-replay.XXXXXX) ;;
    disk) mkdir -p "$DISK_DIR" && base=$(mktemp -d "$DISK_DIR/run.XXXXXX") ;;
    *) echo "unknown medium $medium" >&2 && exit 2 ;;
    esac
    trap 'rm -rf "$base"' EXIT
    cp -r corpus "$base/corpus"
    "$GEN" corpus "$base/big" "$N" --skip entries_1000 --skip expanded_300mib >&2
    mkdir "$base/tmp"
    for c in corpus big; do
        cases=$(case_files "$base/$c" | wc -l)
        p="" s="" q=""
        rounds=$ROUNDS
        [ "$c" = big ] && rounds=${BIG_ROUNDS:-1}
        for ((r = 0; r < rounds; r++)); do
            p="$p $(replay "$base/$c" "$base/tmp" process)"
            s="$s $(replay "$base/$c" "$base/tmp" spare)"
            same "$base/tmp"
            q="$q $(peer "$base/$c" "$base/tmp")"
        done
        p=$(echo $p | median) s=$(echo $s | median) q=$(echo $q | median)
        label=corpus/ && [ "$c" = big ] && label="generated"
        echo "$medium $label $cases $p $s $q" | awk '{printf "| %s | %s | %d | %.2f | %.2f | %.2f | %.0f | %.0f | %.0f | %.2fx | %.2fx |\n", $1, $2, $3, $4, $5, $6, $3/$4, $3/$5, $3/$6, $5/$6, $5/$4}'
    done
    rm -rf "$base"
    trap - EXIT
done
