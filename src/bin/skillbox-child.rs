//! `skillbox-child`: the binary every confined child (and every zygote) is started from.
//!
//! It runs nothing but the child's side of the sandbox: the request read, `confine()`, the
//! engine, the review and the escape probes (`skillbox::sandbox::child`), or the zygote that
//! forks spares of it (`skillbox::sandbox::zygote`). It references neither the broker, the
//! fetcher nor the CLI, so link-time garbage collection leaves out the async runtime, gRPC, TLS
//! and SQLite: a smaller image to map and relocate on every `exec`, and less code at hand for a
//! child that has been compromised. `skillbox` finds it next to its own executable
//! (docs/sandbox.md, "The child binary").

use std::ffi::OsStr;

fn main() {
    let first = std::env::args_os().nth(1);
    if first.as_deref() == Some(OsStr::new(skillbox::sandbox::CHILD_SUBCOMMAND)) {
        skillbox::sandbox::child::run();
    }
    if first.as_deref() == Some(OsStr::new(skillbox::sandbox::ZYGOTE_SUBCOMMAND)) {
        std::process::exit(skillbox::sandbox::zygote::main());
    }
    eprintln!(
        "skillbox-child: this is skillbox's confined child; skillbox starts it (it takes no arguments of yours)"
    );
    std::process::exit(2);
}
