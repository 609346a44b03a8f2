#!/usr/bin/env python3
"""Keep fuzz/Cargo.lock in step with the main Cargo.lock.

fuzz/ is its own Cargo workspace (cargo-fuzz wants that), so it has its own lock file. If the two
drift, the fuzz targets build other versions of the decoders and parsers than skillbox ships
(zlib-rs, zip, tar, zstd, ...), and what the fuzzer finds, or fails to find, is about code users
never run.

Usage:
  scripts/fuzz-lock.py --check   exit 1 unless fuzz/Cargo.lock is complete (`cargo metadata
                                 --locked` accepts it) and every package it shares with
                                 Cargo.lock is at a version Cargo.lock has
  scripts/fuzz-lock.py --sync    rewrite fuzz/Cargo.lock from Cargo.lock (Cargo keeps the main
                                 lock's versions, drops what fuzz/ does not use and adds the
                                 fuzzer's own crates), then --check
"""
import os
import shutil
import subprocess
import sys
import tomllib

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
MAIN = os.path.join(ROOT, "Cargo.lock")
FUZZ = os.path.join(ROOT, "fuzz", "Cargo.lock")
MANIFEST = os.path.join(ROOT, "fuzz", "Cargo.toml")


def versions(path):
    with open(path, "rb") as f:
        lock = tomllib.load(f)
    out = {}
    for p in lock.get("package", []):
        out.setdefault(p["name"], set()).add(p["version"])
    return out


def metadata(locked):
    cmd = ["cargo", "metadata", "--format-version", "1", "--manifest-path", MANIFEST]
    if locked:
        cmd.append("--locked")
    return subprocess.run(cmd, stdout=subprocess.DEVNULL).returncode == 0


def check():
    if not metadata(locked=True):
        print("fuzz-lock: fuzz/Cargo.lock is incomplete; run scripts/fuzz-lock.py --sync",
              file=sys.stderr)
        return 1
    main, fuzz = versions(MAIN), versions(FUZZ)
    drift = sorted(
        f"{name} {', '.join(sorted(fuzz[name] - main[name]))} (Cargo.lock: "
        f"{', '.join(sorted(main[name]))})"
        for name in fuzz.keys() & main.keys()
        if not fuzz[name] <= main[name]
    )
    if drift:
        print("fuzz-lock: fuzz/Cargo.lock builds other versions than Cargo.lock:", file=sys.stderr)
        for d in drift:
            print(f"  {d}", file=sys.stderr)
        print("run scripts/fuzz-lock.py --sync", file=sys.stderr)
        return 1
    return 0


def sync():
    shutil.copyfile(MAIN, FUZZ)
    if not metadata(locked=False):
        print("fuzz-lock: cargo metadata failed for fuzz/", file=sys.stderr)
        return 1
    return check()


if __name__ == "__main__":
    modes = {"--check": check, "--sync": sync}
    if len(sys.argv) != 2 or sys.argv[1] not in modes:
        print(__doc__.strip().split("\n\n")[-1], file=sys.stderr)
        sys.exit(2)
    sys.exit(modes[sys.argv[1]]())
