//! `skillbox replay DIR`: the flags, the printed report and the exit status; the replay itself
//! is [`skillbox::replay`].
//!
//! Exit codes (see [`Exit`]): 0 every case matched, 1 a case failed, was unexpected or could
//! not run, 2 usage error or a missing or malformed manifest.

use std::fs;
use std::io::IsTerminal as _;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use clap::{Parser, ValueEnum};

use skillbox::replay::{self, Isolate, Options, ReplayError, SpareOptions};

use super::exit::{Exit, error_object, print_json};
use super::limits::LimitFlags;
use super::sandbox::SandboxArgs;

/// Where each case's confined child comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum IsolateArg {
    /// A spare forked ahead by one sandbox's zygote in the replay process (no exec per case).
    Spare,
    /// Each case as its own `skillbox extract --json` process (a CLI exec and a child exec).
    Process,
}

/// The `--extract-arg`s a spare run applies itself: `extract`'s limit and confinement flags.
#[derive(Parser, Debug)]
#[command(no_binary_name = true, disable_help_flag = true)]
struct MappedExtractArgs {
    #[command(flatten)]
    limits: LimitFlags,
    #[command(flatten)]
    sandbox: SandboxArgs,
}

/// Arguments of `skillbox replay`.
#[derive(clap::Args, Debug)]
pub struct ReplayArgs {
    /// Corpus directory holding `manifest.json` and the artifacts it names, or a directory
    /// below one (only its cases run, found through the nearest manifest above it).
    pub dir: PathBuf,
    /// Cases run in parallel [default: the number of CPUs].
    #[arg(long, value_name = "N")]
    pub jobs: Option<NonZeroUsize>,
    /// Also write a JUnit XML report to FILE.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// Print one JSON object (summary and every case) instead of the human summary; a failure
    /// to run prints `{"error": {"kind", "exit", "message"}}`.
    #[arg(long)]
    pub json: bool,
    /// Seconds one case may run before it is killed and reported as an error, at least 1.
    #[arg(long, value_name = "SECS", default_value = "120")]
    pub timeout: std::num::NonZeroU64,
    /// Extra argument for every case's `extract` (repeatable), e.g. `--extract-arg
    /// --max-entries=50000`. `extract`'s limit flags and its confinement flags (see `skillbox
    /// extract --help`) apply to the spares; any other argument (e.g. --server) runs every case
    /// as its own `extract` process, as `--isolate process` does.
    #[arg(long = "extract-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub extract_args: Vec<String>,
    /// How each case's confined child is started: `spare`, forked ahead by a zygote in this
    /// process, or `process`, a `skillbox extract --json` process per case. Both confine the
    /// child exactly as `extract` does and give the same report.
    #[arg(long, value_enum, value_name = "HOW", default_value_t = IsolateArg::Spare)]
    pub isolate: IsolateArg,
}

/// `skillbox replay`: run, print, write JUnit; returns the exit status.
pub fn run(args: ReplayArgs) -> Exit {
    let fail = |exit: Exit, message: &str| {
        if args.json {
            print_json(&error_object(exit.kind(), exit.code(), message));
        }
        eprintln!("skillbox: {message}");
        exit
    };
    let exe = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => return fail(Exit::Operational, &ReplayError::Exe(e).to_string()),
    };
    let jobs = args
        .jobs
        .or_else(|| std::thread::available_parallelism().ok())
        .map_or(1, NonZeroUsize::get);
    let isolate = match isolate(&args, exe) {
        Ok(i) => i,
        Err(message) => return fail(Exit::Usage, &message),
    };
    // Where the report goes is checked before the cases run, not after (a typo in it cost the
    // whole run and then failed with exit 1).
    if let Some(path) = &args.junit
        && let Err(message) = junit_path_ok(path)
    {
        return fail(Exit::Usage, &message);
    }
    let opts = Options {
        jobs,
        timeout: Duration::from_secs(args.timeout.get()),
        isolate,
    };
    let bar = Progress::new(!args.json);
    // Said once, when the cases are known and before they run: each stages a tree and deletes it.
    let started = |n| {
        if let Some(w) = scratch_warning(&std::env::temp_dir()) {
            eprintln!("skillbox: WARNING: {w}");
        }
        bar.start(n)
    };
    // The cases' trees are staged in this directory: a signal is held while it exists (no new
    // case starts; a Ctrl-C ends the running ones' children too), and it is removed before the
    // command ends, as `extract` does with its tree (`interrupt`).
    let scratch = super::interrupt::staging(|| {
        let t = tempfile::Builder::new()
            .prefix("skillbox-replay-")
            .tempdir()?;
        let path = t.path().to_owned();
        Ok((t, path))
    });
    let scratch = match scratch {
        Ok(t) => t,
        Err(e) => return fail(Exit::Operational, &ReplayError::Scratch(e).to_string()),
    };
    let report = replay::run_observed(
        &args.dir,
        &opts,
        &replay::Observer {
            started: &started,
            finished: &|c| bar.case(c),
            keep_going: &|| !super::interrupt::pending(),
            scratch: Some(scratch.path()),
        },
    );
    bar.finish();
    super::staging::discard_path(scratch.path());
    drop(scratch);
    if let Some(sig) = super::interrupt::take() {
        super::interrupt::end_with(
            sig,
            args.json,
            "the replay was stopped and its cases' trees removed; no report was written",
        );
    }
    super::interrupt::staging_done();
    let report = match report {
        Ok(r) => r,
        Err(e) => {
            let exit = match e {
                ReplayError::Scratch(_) | ReplayError::Exe(_) | ReplayError::Sandbox(_) => {
                    Exit::Operational
                }
                ReplayError::MissingManifest { .. }
                | ReplayError::NoSuchDir { .. }
                | ReplayError::NotADir { .. }
                | ReplayError::Read { .. }
                | ReplayError::Malformed { .. } => Exit::Usage,
            };
            return fail(exit, &e.to_string());
        }
    };
    if let Some(path) = &args.junit
        && let Err(e) = fs::write(path, replay::junit(&report))
    {
        return fail(
            Exit::Operational,
            &format!("cannot write {}: {e}", path.display()),
        );
    }
    if args.json {
        match serde_json::to_string_pretty(&replay::to_json(&report)) {
            Ok(text) => println!("{text}"),
            Err(e) => return fail(Exit::Operational, &e.to_string()),
        }
    } else {
        print!("{}", replay::human(&report));
    }
    if report.all_passed() {
        Exit::Ok
    } else {
        Exit::Operational
    }
}

/// What to tell the caller when the scratch directory (under `tmp`, the temporary directory)
/// sits on a filesystem that slows down as trees are staged and deleted: replay stages one per
/// case, so such a disk makes its cases slower one after another (corpus/ run after run on ext4
/// without a journal: 3.1 to 7.9 s a run, slower each time; 1.3 to 1.4 s on tmpfs).
fn scratch_warning(tmp: &std::path::Path) -> Option<String> {
    skillbox::staging_fs::warning_at(tmp).map(|w| scratch_message(tmp, &w))
}

/// [`scratch_warning`]'s line for `tmp`, whose filesystem warrants `warning`.
fn scratch_message(tmp: &std::path::Path, warning: &str) -> String {
    format!(
        "the cases are staged under {} (TMPDIR), on {warning}: e.g. TMPDIR=/dev/shm",
        tmp.display()
    )
}

/// `--junit FILE` names a file that can be made: not a directory, in a directory that exists.
fn junit_path_ok(path: &std::path::Path) -> Result<(), String> {
    if path.is_dir() {
        return Err(format!("--junit {}: is a directory", path.display()));
    }
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => std::path::Path::new("."),
    };
    if !parent.is_dir() {
        return Err(format!(
            "--junit {}: no such directory {}",
            path.display(),
            parent.display()
        ));
    }
    Ok(())
}

/// The `--extract-arg`s as `extract` would read them in every case's process: one it refuses
/// (an unknown flag, a bad value) is the caller's mistake, said once before anything runs,
/// not an error of every case.
fn check_extract_args(extra: &[String]) -> Result<(), String> {
    let mut argv = vec![
        "skillbox", "extract", "ARTIFACT", "--json", "--out", "STAGING",
    ];
    argv.extend(extra.iter().map(String::as_str));
    match super::Cli::try_parse_from(argv) {
        Ok(_) => Ok(()),
        Err(e) => {
            let rendered = e.to_string();
            let first = rendered.lines().next().unwrap_or_default();
            let why = first.strip_prefix("error: ").unwrap_or(first);
            Err(format!(
                "--extract-arg {}: extract refuses it: {why}",
                extra.join(" ")
            ))
        }
    }
}

/// The `--extract-arg`s with the files they name made absolute: each case's process runs in
/// its own scratch directory, where a relative `--limits my.toml` names nothing (every case
/// failed, `cannot read limits file`).
fn absolute_paths(extra: &[String]) -> Vec<String> {
    const PATH_FLAGS: [&str; 2] = ["--limits", "--seccomp-profile"];
    let absolute =
        |p: &str| std::path::absolute(p).map_or_else(|_| p.to_owned(), |a| a.display().to_string());
    let mut out = Vec::with_capacity(extra.len());
    let mut next_is_path = false;
    for arg in extra {
        if next_is_path {
            out.push(absolute(arg));
            next_is_path = false;
            continue;
        }
        next_is_path = PATH_FLAGS.contains(&arg.as_str());
        match arg.split_once('=') {
            Some((flag, value)) if PATH_FLAGS.contains(&flag) => {
                out.push(format!("{flag}={}", absolute(value)));
            }
            _ => out.push(arg.clone()),
        }
    }
    out
}

/// The run's isolation: spares, unless asked for processes or given an `--extract-arg` the
/// spares cannot apply (then every case is an `extract` process, which takes any of them).
fn isolate(args: &ReplayArgs, exe: std::path::PathBuf) -> Result<Isolate, String> {
    check_extract_args(&args.extract_args)?;
    let process = || Isolate::Process {
        exe: exe.clone(),
        extract_args: absolute_paths(&args.extract_args),
    };
    if args.isolate == IsolateArg::Process {
        return Ok(process());
    }
    let Ok(mapped) = MappedExtractArgs::try_parse_from(&args.extract_args) else {
        return Ok(process());
    };
    let overrides = mapped.limits.overrides();
    // A flag `extract` would refuse is the caller's mistake here too, not every case's error.
    let limits = overrides.apply(&skillbox::extract::policy::Limits::default());
    if let Err(e) = limits.validate() {
        return Err(format!("--extract-arg: {e}"));
    }
    if mapped.sandbox.allow_unconfined {
        eprintln!(
            "skillbox: WARNING: --allow-unconfined: extraction proceeds even if confinement cannot be applied"
        );
    }
    let mut sandbox = mapped.sandbox.config();
    sandbox.zygote_max_forks = skillbox::sandbox::zygote::DEFAULT_MAX_FORKS;
    Ok(Isolate::Spare(Box::new(SpareOptions {
        sandbox,
        overrides,
    })))
}

/// The progress line on a terminal: cases done of all, failures so far, time left. Nothing at
/// all with `--json` or when stderr is not a terminal (a log, a pipe, CI).
struct Progress {
    bar: Option<indicatif::ProgressBar>,
    failed: AtomicUsize,
}

impl Progress {
    fn new(wanted: bool) -> Self {
        let bar = (wanted && std::io::stderr().is_terminal()).then(|| {
            let bar = indicatif::ProgressBar::hidden();
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "{bar:30} {pos}/{len} cases, {msg}, {eta} left",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            bar.set_message("0 failed");
            bar
        });
        Self {
            bar,
            failed: AtomicUsize::new(0),
        }
    }

    fn start(&self, total: usize) {
        if let Some(bar) = &self.bar {
            bar.set_length(total as u64);
            bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
        }
    }

    fn case(&self, c: &replay::CaseResult) {
        let Some(bar) = &self.bar else { return };
        if c.status != replay::Status::Pass {
            let n = self.failed.fetch_add(1, Ordering::Relaxed) + 1;
            bar.set_message(format!("{n} failed"));
        }
        bar.inc(1);
    }

    fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use skillbox::staging_fs::{Filesystem, warning};
    use std::path::Path;

    #[test]
    fn the_scratch_warning_names_the_directory_and_the_filesystems_warning() {
        let tmp = Path::new("/tmp");
        let bare = Filesystem::Ext4 {
            device: Some("vda".into()),
            journal: Some(false),
            discard: None,
        };
        let w = warning(&bare).expect("a warning for ext4 without a journal");
        let line = scratch_message(tmp, &w);
        assert!(
            line.starts_with(
                "the cases are staged under /tmp (TMPDIR), on ext4 without a journal (vda): "
            ),
            "{line}"
        );
        assert!(line.ends_with("e.g. TMPDIR=/dev/shm"), "{line}");
        // The real one, where the test runs: tmpfs never warns.
        assert_eq!(scratch_warning(Path::new("/dev/shm")), None);
    }
}
