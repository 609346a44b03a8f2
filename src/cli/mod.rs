//! The binary side of skillbox: every command's clap types, its printing and its exit status.
//! `main.rs` parses and dispatches here; the work is the library's.
//!
//! One file per command ([`extract`], [`fetch`], [`index`], [`diff`], [`replay`], [`serve`],
//! [`doctor`], [`publish`]), plus the flags several share ([`sandbox`], [`limits`]), the printed answer
//! ([`output`]), where one-shot commands stage ([`staging`]) and what a Ctrl-C does meanwhile
//! ([`interrupt`]), the one exit-code type
//! ([`exit`]), and the completion scripts and man page generated from these types
//! ([`completions`]). Nothing here decides a verdict or touches artifact bytes.

/// `eprint!` and `eprintln!` for every command, shadowing std's (defined before the command
/// modules, so all of them use these): a line on stderr that cannot be written is dropped.
/// std's macros panic on a failed write, and a stderr whose reader went away (`skillbox
/// extract x 2>&1 | true`, a log pipe that closed) ended a one-shot command with 101 instead
/// of its own exit status. What the command says on stdout and its exit status still tell.
// Unused today; here so that an `eprint!` written later is the safe one too.
#[allow(unused_macros)]
macro_rules! eprint {
    ($($arg:tt)*) => {
        $crate::cli::stderr_write(format_args!($($arg)*), false)
    };
}
macro_rules! eprintln {
    () => {
        $crate::cli::stderr_write(format_args!(""), true)
    };
    ($($arg:tt)*) => {
        $crate::cli::stderr_write(format_args!($($arg)*), true)
    };
}

/// Write `args` (and a newline) to stderr, dropping a failed write ([`eprintln!`] above).
pub fn stderr_write(args: std::fmt::Arguments<'_>, newline: bool) {
    use std::io::Write as _;
    // Held across both writes so that the line and its newline stay together.
    let _whole_line = std::io::stderr().lock();
    let _ = Stderr.write_fmt(args);
    if newline {
        let _ = Stderr.write_all(b"\n");
    }
}

/// Stderr as an [`std::io::Write`] (for `serve`'s log subscriber) that drops a failed write
/// the way [`stderr_write`] does: it reports every write done.
pub struct Stderr;

impl std::io::Write for Stderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let _ = std::io::stderr().lock().write_all(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let _ = std::io::stderr().flush();
        Ok(())
    }
}

/// A directory the user named (by a flag or its environment variable) is used, never invented:
/// the directory `path` goes in must exist (a relative name's is the working directory), or
/// this is the usage error to say (exit 2) before anything is made. Only a command's default
/// locations are created whole: `serve --socket /typo/dir/s.sock`, `fetch --cache-dir
/// /typo/x` and `install --store /typo/x` each made `/typo` (as root, at the root).
pub fn parent_exists(flag: &str, path: &std::path::Path) -> Result<(), String> {
    let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) else {
        return Ok(());
    };
    match std::fs::metadata(parent) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(format!(
            "{flag} {}: the directory {} does not exist; create it first, or choose another \
             (skillbox creates only its default locations)",
            path.display(),
            parent.display()
        )),
        // Anything else (not a directory, not reachable) the command's own checks say.
        _ => Ok(()),
    }
}

pub mod cache;
pub mod completions;
pub mod diff;
pub mod doctor;
pub mod exit;
pub mod extract;
pub mod fetch;
pub mod index;
pub mod interrupt;
pub mod lifecycle;
pub mod limits;
pub mod output;
pub mod publish;
pub mod replay;
pub mod sandbox;
pub mod serve;
pub mod staging;

use clap::{Parser, Subcommand};

/// Sandboxed intake of Agent Skills artifacts: verify the digest, extract under a strict
/// policy, and report an inventory or a rejection with a reason.
#[derive(Parser, Debug)]
#[command(name = "skillbox", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    #[command(flatten)]
    pub leading: sandbox::LeadingSandboxArgs,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Verify and extract one artifact (a zip, tar, tar.gz or tar.zst archive, or a SKILL.md).
    ///
    /// Exit status: 0 accepted, 3 rejected (the reason is printed), 1 operational error,
    /// 2 usage error, 130 interrupted (Ctrl-C). On rejection or interruption nothing is left on
    /// disk.
    Extract(extract::ExtractArgs),
    /// Check that confinement works on this host: Landlock, seccomp, the uid switch and the
    /// limits, by running real confined children. Exit status 0 if it works, 1 if it would fail.
    Doctor(doctor::DoctorArgs),
    /// Internal: the confined child that runs the engine. skillbox starts it with a prepared
    /// set of fds; by hand it refuses to run.
    #[command(name = skillbox::sandbox::CHILD_SUBCOMMAND, hide = true)]
    SandboxChild,
    /// Discovery index tools (`index check FILE|URL`).
    Index(index::IndexArgs),
    /// The fetch cache: `list`, `verify` (re-hash, remove mismatches), `prune --older-than AGE`.
    ///
    /// Exit status: 0 done, 3 `verify` removed something, 1 operational error, 2 usage error.
    Cache(cache::CacheArgs),
    /// Fetch one skill from a discovery index over HTTPS under a strict policy, verify its
    /// digest and extract it as `extract` does; prints the answer plus a provenance block.
    ///
    /// Exit status: 0 accepted, 3 rejected, 1 operational error, 2 usage error, 4 refused by
    /// the fetch policy (the rule is named), 5 unrecognised index $schema.
    Fetch(fetch::FetchArgs),
    /// Compare two saved `extract --json` (or `fetch --json`) answers of a skill: what changed,
    /// and whether its capabilities grew (new or changed scripts or executables, new tools, or
    /// new hosts, credential touches, downloads, uploads or risky commands in code; what prose
    /// only mentions never counts). Grown capabilities are listed first.
    ///
    /// Exit status: 0 unchanged (same digest), 4 content_only, 5 needs_review, 1 operational
    /// error (a file cannot be read), 2 usage error (a path that names no file, or not an
    /// accepted answer with a review).
    Diff(diff::DiffArgs),
    /// Build a reviewed, reproducible discovery index from a directory of skill folders:
    /// OUT_DIR/.well-known/agent-skills/index.json and content-addressed artifacts, each run
    /// through the same confined extraction and review a consumer runs first. With --check,
    /// write nothing and compare with a published tree (a CI gate). Every archive entry's mtime
    /// is SOURCE_DATE_EPOCH when set, else 0 (docs/publish.md: the reproducibility rules).
    ///
    /// Exit status: 0 published (--check: up to date), 3 a skill was refused (nothing is
    /// written), 4 --check: the published tree differs, 1 operational error, 2 usage error.
    Publish(publish::PublishArgs),
    /// Replay a corpus: run every artifact in DIR through `extract` and compare each verdict
    /// and reason with DIR/manifest.json (format in docs/corpus-and-fuzzing.md). Each case is
    /// staged under TMPDIR (/tmp by default) and deleted after; a warning says when that
    /// filesystem slows down as trees are deleted (ext4 without a journal).
    ///
    /// Exit status: 0 every case matched, 1 a case failed, was unexpected or could not run,
    /// 2 usage error or a missing or malformed manifest.
    Replay(replay::ReplayArgs),
    /// Run the gRPC broker: installers stream artifacts in, each is extracted by a confined
    /// child into a fresh staging directory. Listens on a Unix socket unless --tcp is given;
    /// every flag can be set by the SKILLBOX_* variable its help names.
    ///
    /// Exit status: 0 after a graceful shutdown (SIGTERM), 1 a fault, 2 a bad setting.
    Serve(serve::ServeArgs),
    /// Ask a running broker whether it is serving (grpc.health.v1), for probes that exec a
    /// command.
    ///
    /// Exit status: 0 SERVING, 1 anything else (not serving, shutting down, unreachable),
    /// 2 usage error (a bad flag, a --server URI that names no broker).
    Health(serve::HealthArgs),
    #[command(flatten)]
    Lifecycle(lifecycle::LifecycleCommand),
    /// Print a shell completion script, generated from these definitions, on stdout
    /// (`skillbox completions bash > ~/.local/share/bash-completion/completions/skillbox`).
    Completions(completions::CompletionsArgs),
    /// Print the man page skillbox(1), or skillbox-COMMAND(1) with `man COMMAND`, generated
    /// from these definitions, as roff on stdout (`skillbox man extract | man -l -`).
    Man(completions::ManArgs),
}

/// A flag's value that must name a file: a path that names none (missing, a directory) is a
/// usage error (2), as for every command, said when the flags are parsed.
pub fn existing_file(s: &str) -> Result<std::path::PathBuf, String> {
    match std::fs::metadata(s) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err("no such file".into()),
        Ok(m) if m.is_dir() => Err("is a directory, not a file".into()),
        _ => Ok(std::path::PathBuf::from(s)),
    }
}
