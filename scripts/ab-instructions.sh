#!/usr/bin/env bash
# Instruction counts of the engine (extraction and review, in-process) at two commits, by
# callgrind: unlike wall time, the count repeats run after run whatever else the machine does,
# so a change can be compared with the commit before it on a busy host.
#
#   bash scripts/ab-instructions.sh OLD_COMMIT [NEW_COMMIT]    # NEW defaults to HEAD
#
# Workloads (built with Python's tarfile/zipfile, gzip and zstd): a typical package (25 files),
# 2,000 files of 20 KB, and 10,000 tiny files; tar.gz, tar.zst and zip. Needs valgrind, zstd
# and about 4 GB for the two release builds (one shared target directory).
set -euo pipefail
old=$1 new=${2:-HEAD}
repo=$(cd "$(dirname "$0")/.." && pwd)
work=${AB_WORK:-/tmp/skillbox-ab}
mkdir -p "$work/out"
cd "$work"
python3 - <<'PY'
import io, os, random, subprocess, tarfile, zipfile
random.seed(7)
W = ("the of and to in is that for it as with was on be by this are from or have an they which "
     "you were all there would their we been has when who will more no if out so said what up "
     "its about into than them can only other new some could time these two may then do first").split()
def text(n): return " ".join(random.choices(W, k=n // 3 + 2))[:n].encode()
def skill(name):
    return f"---\nname: {name}\ndescription: A benchmark skill.\n---\n# {name}\n\n".encode() + text(3000)
def build(name, files, dirs):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for d in dirs:
            ti = tarfile.TarInfo(d); ti.type = tarfile.DIRTYPE; ti.mode = 0o755; t.addfile(ti)
        for p, data in files:
            ti = tarfile.TarInfo(p); ti.size = len(data); ti.mode = 0o644; t.addfile(ti, io.BytesIO(data))
    open(f"{name}.tar", "wb").write(buf.getvalue())
    subprocess.run(["zstd", "-q", "-f", "-3", f"{name}.tar", "-o", f"{name}.tar.zst"], check=True)
    subprocess.run(["gzip", "-k", "-f", "-6", f"{name}.tar"], check=True)
    with zipfile.ZipFile(f"{name}.zip", "w", zipfile.ZIP_DEFLATED) as z:
        for p, data in files: z.writestr(p, data)
build("typical", [("SKILL.md", skill("typical"))] + [(f"references/r{i}.md", text(8000)) for i in range(16)]
      + [(f"scripts/s{i}.py", text(6000)) for i in range(4)] + [(f"assets/a{i}.bin", random.randbytes(20000)) for i in range(4)],
      ["references", "scripts", "assets"])
build("files2000", [("SKILL.md", skill("files2000"))] + [(f"d{i%20}/f{i:04}.txt", text(20000)) for i in range(1999)],
      [f"d{i}" for i in range(20)])
build("tiny10k", [("SKILL.md", skill("tiny10k"))] + [(f"t{i%8}/n{i:05}.txt", text(16 + random.randrange(241))) for i in range(1, 9990)],
      [f"t{i}" for i in range(8)])
PY
for side in old new; do
    rev=${!side}
    rm -rf "$work/$side"
    git -C "$repo" worktree add -q --detach --force "$work/$side" "$rev"
    # The engine and the review are one call at either side of the layout change.
    if [ -f "$work/$side/src/intake.rs" ]; then entry=skillbox::intake::run; else entry=skillbox::extract::extract; fi
    cat > "$work/$side/examples/ab_driver.rs" <<RS
use std::os::fd::AsFd;
use skillbox::extract::{ArtifactType, Request, policy::Limits};
fn main() {
    let a: Vec<String> = std::env::args().collect();
    let bytes = std::fs::read(&a[1]).expect("artifact");
    let out = std::path::Path::new(&a[2]);
    std::fs::create_dir_all(out).expect("out");
    let dir = std::fs::File::open(out).expect("out");
    let file = std::fs::File::open(&a[1]).expect("artifact");
    let mut req = Request::new(ArtifactType::Archive, Limits::default());
    req.file_name = Some(a[1].clone());
    req.expected_digest = Some(skillbox::digest::Sha256Digest::of_bytes(&bytes));
    let o = $entry(&file, dir.as_fd(), &req).expect("engine");
    assert_eq!(format!("{:?}", o.verdict), "Accepted", "{:?}", o.reason);
}
RS
    (cd "$work/$side" && CARGO_TARGET_DIR="$work/target" cargo build -q --release --example ab_driver)
    cp "$work/target/release/examples/ab_driver" "$work/drv-$side"
    git -C "$repo" worktree remove --force "$work/$side"
done
printf '| artifact | %s | %s | new/old |\n|---|---:|---:|---:|\n' "$old" "$new"
for w in typical.tar.gz typical.tar.zst typical.zip files2000.tar.zst files2000.zip tiny10k.tar.gz tiny10k.tar.zst tiny10k.zip; do
    declare -A ir=()
    for side in old new; do
        rm -rf "$work/out/$side"
        ir[$side]=$(valgrind --tool=callgrind --callgrind-out-file=/dev/null "$work/drv-$side" "$w" "$work/out/$side" 2>&1 \
            | sed -n 's/.*Collected : \([0-9]*\).*/\1/p')
    done
    python3 -c "import sys; o,n=int(sys.argv[2]),int(sys.argv[3]); print(f'| {sys.argv[1]} | {o:,} | {n:,} | {n/o:.3f} |')" "$w" "${ir[old]}" "${ir[new]}"
done
