#!/usr/bin/env bash
# Build skillbox and install it with a static-pie child (docs/sandbox.md, "A static child"),
# which starts every one-shot child (`skillbox extract`, `fetch`, `install`) sooner than the
# dynamically linked one `cargo install` puts beside it.
#
#   scripts/install.sh [--debug] [PREFIX]
#
# Builds `skillbox` with `cargo build --release` (`--debug`: the dev profile, as the tests
# build it), relinks `skillbox-child` static-pie in place with `cargo rustc`, and installs
# both into PREFIX/bin (default ~/.local/bin), mode 0755, each through a temporary name in that
# directory and a rename, so neither is ever half-written. Then runs `skillbox doctor` from
# there: exit 0 when confinement works, 1 (after installing) when it does not, 2 for bad usage.
set -euo pipefail
usage() { echo "usage: scripts/install.sh [--debug] [PREFIX]" >&2; exit 2; }
flags=(--release) dir=release
if [ "${1:-}" = --debug ]; then
  flags=() dir=debug
  shift
fi
case "${1:-}" in -*) usage ;; esac
[ $# -le 1 ] || usage
prefix="${1:-$HOME/.local}"
# PREFIX as the caller meant it, before moving to the checkout.
case "$prefix" in /*) ;; *) prefix="$PWD/$prefix" ;; esac
cd "$(dirname "$0")/.."
built="${CARGO_TARGET_DIR:-target}/$dir"

cargo build --locked "${flags[@]}" --bin skillbox
cargo rustc --locked "${flags[@]}" --bin skillbox-child -- -C target-feature=+crt-static
# Static-pie: position-independent (ELF type DYN) and no program interpreter.
if ! readelf -hW "$built/skillbox-child" | grep -q 'Type: *DYN' \
  || readelf -lW "$built/skillbox-child" | grep -q INTERP; then
  echo "install.sh: $built/skillbox-child did not come out static-pie" >&2
  exit 1
fi

mkdir -p "$prefix/bin"
bin="$(cd "$prefix/bin" && pwd)"
tmp=""
trap '[ -z "$tmp" ] || rm -f "$tmp"' EXIT
for name in skillbox-child skillbox; do
  tmp="$(mktemp "$bin/.$name.XXXXXX")"
  cp "$built/$name" "$tmp"
  chmod 0755 "$tmp"
  mv -f "$tmp" "$bin/$name"
  tmp=""
done
echo "installed $bin/skillbox and $bin/skillbox-child (static-pie)"
if ! "$bin/skillbox" doctor; then
  echo "install.sh: installed, but confinement does not work on this host (above)" >&2
  exit 1
fi
