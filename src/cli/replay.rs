//! `skillbox replay DIR`: the flags, the printed report and the exit status; the replay itself
//! is [`skillbox::replay`].
//!
//! Exit codes (see [`Exit`]): 0 every case matched, 1 a case failed, was unexpected or could
//! not run, 2 usage error or a missing or malformed manifest.

use std::fs;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::time::Duration;

use skillbox::replay::{self, Options, ReplayError};

use super::exit::Exit;

/// Arguments of `skillbox replay`.
#[derive(clap::Args, Debug)]
pub struct ReplayArgs {
    /// Corpus directory holding `manifest.json` and the artifacts it names.
    pub dir: PathBuf,
    /// Cases run in parallel [default: the number of CPUs].
    #[arg(long, value_name = "N")]
    pub jobs: Option<NonZeroUsize>,
    /// Also write a JUnit XML report to FILE.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// Print one JSON object (summary and every case) instead of the human summary.
    #[arg(long)]
    pub json: bool,
    /// Seconds one case may run before it is killed and reported as an error.
    #[arg(long, value_name = "SECS", default_value_t = 120)]
    pub timeout: u64,
    /// Extra argument for every `skillbox extract` run (repeatable), e.g. a sandbox option.
    #[arg(long = "extract-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub extract_args: Vec<String>,
}

/// `skillbox replay`: run, print, write JUnit; returns the exit status.
pub fn run(args: ReplayArgs) -> Exit {
    let exe = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("skillbox: {}", ReplayError::Exe(e));
            return Exit::Usage;
        }
    };
    let jobs = args
        .jobs
        .or_else(|| std::thread::available_parallelism().ok())
        .map_or(1, NonZeroUsize::get);
    let opts = Options {
        jobs,
        timeout: Duration::from_secs(args.timeout.max(1)),
        exe,
        extract_args: args.extract_args,
    };
    let report = match replay::run(&args.dir, &opts) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("skillbox: {e}");
            return match e {
                ReplayError::Scratch(_) | ReplayError::Exe(_) => Exit::Operational,
                ReplayError::MissingManifest { .. }
                | ReplayError::Read { .. }
                | ReplayError::Malformed { .. } => Exit::Usage,
            };
        }
    };
    if let Some(path) = &args.junit {
        if let Err(e) = fs::write(path, replay::junit(&report)) {
            eprintln!("skillbox: cannot write {}: {e}", path.display());
            return Exit::Operational;
        }
    }
    if args.json {
        match serde_json::to_string_pretty(&replay::to_json(&report)) {
            Ok(text) => println!("{text}"),
            Err(e) => {
                eprintln!("skillbox: {e}");
                return Exit::Operational;
            }
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
