//! The `skillbox` command line: parse arguments, call the library, print, exit.
//!
//! Exit codes are a contract: 0 accepted, 3 rejected, 1 operational error, 2 usage error.

use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};

mod cli;

use skillbox::answer::{self, Staged};
use skillbox::digest::Sha256Digest;
use skillbox::extract::inventory::Outcome;
use skillbox::extract::policy::{Limits, parse_size};
use skillbox::extract::{ArtifactType, Request};
use skillbox::out_dir::Staging;
use skillbox::reason::Verdict;
use skillbox::sandbox::Confined;
use skillbox::sandbox::cli::SandboxArgs;

const EXIT_ACCEPTED: u8 = 0;
const EXIT_OPERATIONAL: u8 = 1;
const EXIT_USAGE: u8 = 2;
const EXIT_REJECTED: u8 = 3;

/// Sandboxed intake of Agent Skills artifacts: verify the digest, extract under a strict
/// policy, and report an inventory or a rejection with a reason.
#[derive(Parser, Debug)]
#[command(name = "skillbox", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    sandbox: skillbox::sandbox::cli::SandboxArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Verify and extract one artifact (a zip, tar, tar.gz or tar.zst archive, or a SKILL.md).
    ///
    /// Exit status: 0 accepted, 3 rejected (the reason is printed), 1 operational error,
    /// 2 usage error. On rejection nothing is left on disk.
    Extract(ExtractArgs),
    /// Check that confinement works on this host: Landlock, seccomp, the uid switch and the
    /// limits, by running real confined children. Exit status 0 if it works, 1 if it would fail.
    Doctor(skillbox::sandbox::cli::DoctorArgs),
    /// Internal: the confined child that runs the engine. skillbox starts it with a prepared
    /// set of fds; by hand it refuses to run.
    #[command(name = skillbox::sandbox::CHILD_SUBCOMMAND, hide = true)]
    SandboxChild,
    /// Discovery index tools (`index check FILE|URL`).
    Index(skillbox::fetch::cli::IndexArgs),
    /// Fetch one skill from a discovery index over HTTPS under a strict policy, verify its
    /// digest and extract it as `extract` does; prints the answer plus a provenance block.
    ///
    /// Exit status: 0 accepted, 3 rejected, 1 operational error, 2 usage error, 4 refused by
    /// the fetch policy (the rule is named), 5 unrecognised index $schema.
    Fetch(skillbox::fetch::cli::FetchArgs),
    /// Compare two saved `extract --json` answers of a skill: what changed, and whether its
    /// capabilities grew (new or changed scripts or executables, new hosts, tools, credential
    /// touches, downloads or risky commands). Grown capabilities are listed first.
    ///
    /// Exit status: 0 unchanged (same digest), 4 content_only, 5 needs_review, 1 operational
    /// error (a file cannot be read), 2 usage error (not an accepted answer with a review).
    Diff(DiffArgs),
    /// Replay a corpus: run every artifact in DIR through `extract` and compare each verdict
    /// and reason with DIR/manifest.json (format in the README).
    ///
    /// Exit status: 0 every case matched, 1 a case failed, was unexpected or could not run,
    /// 2 usage error or a missing or malformed manifest.
    Replay(skillbox::replay::ReplayArgs),
    /// Run the gRPC broker: installers stream artifacts in, each is extracted by a confined
    /// child into a fresh staging directory. Listens on a Unix socket unless --tcp is given;
    /// every flag can be set by the SKILLBOX_* variable its help names.
    ///
    /// Exit status: 0 after a graceful shutdown (SIGTERM), 1 a fault, 2 a bad setting.
    Serve(skillbox::broker::ServeArgs),
    #[command(flatten)]
    Lifecycle(cli::lifecycle::LifecycleCommand),
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum TypeArg {
    /// A single SKILL.md file, staged byte for byte.
    SkillMd,
    /// A zip, tar, tar.gz or tar.zst archive with SKILL.md at its root.
    Archive,
}

#[derive(Args, Debug)]
struct ExtractArgs {
    /// The artifact file. Its extension is a format hint when no media type is given.
    artifact: PathBuf,
    /// Expected digest, `sha256:<64 lowercase hex>`; a mismatch rejects (`digest_mismatch`).
    #[arg(long)]
    digest: Option<String>,
    /// Declared artifact type [default: skill-md for a `.md` file, else archive].
    #[arg(long = "type", value_enum)]
    artifact_type: Option<TypeArg>,
    /// Media type hint (e.g. the HTTP Content-Type); must agree with the bytes.
    #[arg(long)]
    media_type: Option<String>,
    /// Directory to stage into; must not exist yet (it is created). Without it a temporary
    /// directory is used and removed afterwards.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Limits file (.toml or .json; keys as in the README). Flags below override it.
    #[arg(long)]
    limits: Option<PathBuf>,
    /// Print one JSON object (verdict, reason, artifact, entries, totals).
    #[arg(long)]
    json: bool,
    /// Send the artifact to a running broker instead (`unix:///path/to.sock`, `unix:` for the
    /// default socket, `http://127.0.0.1:PORT`); same output and exit codes.
    #[arg(long, value_name = "URI", conflicts_with = "out")]
    server: Option<String>,
    /// The skill's name as the discovery index lists it. The review compares it with SKILL.md's
    /// `name` and raises the `name_mismatch` flag when they differ; the verdict never changes.
    #[arg(long, value_name = "NAME", value_parser = parse_skill_name)]
    skill_name: Option<String>,
    /// The skill's description as the discovery index lists it. The review raises the
    /// `description_mismatch` flag when it differs from SKILL.md's `description` (whitespace
    /// aside); the verdict never changes.
    #[arg(long, value_name = "TEXT", value_parser = parse_index_description)]
    index_description: Option<String>,
    #[command(flatten)]
    overrides: LimitOverrides,
}

/// `--skill-name`: the broker's bound on `header.skill_name`, so the local and `--server` paths
/// accept the same values.
fn parse_skill_name(s: &str) -> Result<String, String> {
    use skillbox::broker::convert::MAX_SKILL_NAME;
    if s.len() > MAX_SKILL_NAME {
        return Err(format!("longer than {MAX_SKILL_NAME} bytes"));
    }
    if s.chars().any(char::is_control) {
        return Err("must not contain control characters".into());
    }
    Ok(s.to_owned())
}

/// `--index-description`: the broker's bound on `header.index_description`.
fn parse_index_description(s: &str) -> Result<String, String> {
    use skillbox::broker::convert::MAX_INDEX_DESCRIPTION;
    if s.len() > MAX_INDEX_DESCRIPTION {
        return Err(format!("longer than {MAX_INDEX_DESCRIPTION} bytes"));
    }
    Ok(s.to_owned())
}

/// Per-limit overrides. Sizes accept K, M, G suffixes (powers of 1024).
#[derive(Args, Debug, Default)]
struct LimitOverrides {
    /// Largest artifact in bytes [default: 256M].
    #[arg(long, value_parser = parse_size, value_name = "BYTES")]
    max_artifact_bytes: Option<u64>,
    /// Most entries [default: 10000].
    #[arg(long, value_name = "N")]
    max_entries: Option<u64>,
    /// Most bytes produced in total [default: 256M].
    #[arg(long, value_parser = parse_size, value_name = "BYTES")]
    max_expanded_bytes: Option<u64>,
    /// Most bytes produced for one file [default: 64M].
    #[arg(long, value_parser = parse_size, value_name = "BYTES")]
    max_file_bytes: Option<u64>,
    /// Largest expansion ratio once past the threshold [default: 200].
    #[arg(long, value_name = "N")]
    max_ratio: Option<u64>,
    /// Bytes produced before the ratio rule applies [default: 1M].
    #[arg(long, value_parser = parse_size, value_name = "BYTES")]
    ratio_threshold_bytes: Option<u64>,
    /// Most path components [default: 32].
    #[arg(long, value_name = "N")]
    max_path_depth: Option<u64>,
    /// Longest entry name in bytes [default: 1024].
    #[arg(long, value_name = "N")]
    max_path_bytes: Option<u64>,
}

/// An error with the exit code it maps to.
struct Failure {
    code: u8,
    message: String,
}

fn usage(message: impl Into<String>) -> Failure {
    Failure {
        code: EXIT_USAGE,
        message: message.into(),
    }
}

fn operational(message: impl Into<String>) -> Failure {
    Failure {
        code: EXIT_OPERATIONAL,
        message: message.into(),
    }
}

fn main() -> ExitCode {
    // The confined child starts here, before clap: the less code runs ahead of confine(), the
    // better, and a fresh process per request pays for every microsecond of start-up.
    if std::env::args_os().nth(1).as_deref()
        == Some(std::ffi::OsStr::new(skillbox::sandbox::CHILD_SUBCOMMAND))
    {
        skillbox::sandbox::child::run();
    }
    if std::env::args_os().nth(1).as_deref()
        == Some(std::ffi::OsStr::new(skillbox::sandbox::ZYGOTE_SUBCOMMAND))
    {
        std::process::exit(skillbox::sandbox::zygote::main());
    }
    let cli = Cli::parse();
    let sandbox = &cli.sandbox;
    let result = match cli.command {
        Command::SandboxChild => skillbox::sandbox::child::run(),
        Command::Doctor(args) => Ok(skillbox::sandbox::cli::run_doctor(sandbox, &args)),
        Command::Extract(args) => cmd_extract(args, sandbox),
        Command::Index(args) => Ok(skillbox::fetch::cli::run_index(args)),
        Command::Fetch(args) => Ok(skillbox::fetch::cli::run_fetch(
            args,
            &|artifact, staging, req| {
                run_engine(sandbox, artifact, staging, req).map_err(|f| f.message)
            },
        )),
        Command::Diff(args) => cmd_diff(&args),
        Command::Replay(args) => Ok(skillbox::replay::main(args)),
        Command::Serve(args) => return skillbox::broker::main(args, sandbox),
        Command::Lifecycle(c) => Ok(cli::lifecycle::run(c, sandbox)),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(f) => {
            eprintln!("skillbox: {}", f.message);
            ExitCode::from(f.code)
        }
    }
}

fn build_limits(args: &ExtractArgs) -> Result<Limits, Failure> {
    let mut limits = match &args.limits {
        Some(path) => Limits::from_file(path).map_err(|e| usage(e.to_string()))?,
        None => Limits::default(),
    };
    let o = &args.overrides;
    let set = |slot: &mut u64, v: Option<u64>| {
        if let Some(v) = v {
            *slot = v;
        }
    };
    set(&mut limits.max_artifact_bytes, o.max_artifact_bytes);
    set(&mut limits.max_entries, o.max_entries);
    set(&mut limits.max_expanded_bytes, o.max_expanded_bytes);
    set(&mut limits.max_file_bytes, o.max_file_bytes);
    set(&mut limits.max_ratio, o.max_ratio);
    set(&mut limits.ratio_threshold_bytes, o.ratio_threshold_bytes);
    set(&mut limits.max_path_depth, o.max_path_depth);
    set(&mut limits.max_path_bytes, o.max_path_bytes);
    limits.validate().map_err(|e| usage(e.to_string()))?;
    Ok(limits)
}

fn cmd_extract(args: ExtractArgs, sandbox: &SandboxArgs) -> Result<u8, Failure> {
    let expected_digest = match &args.digest {
        Some(d) => Some(
            d.parse::<Sha256Digest>()
                .map_err(|e| usage(format!("--digest: {e}")))?,
        ),
        None => None,
    };
    let limits = build_limits(&args)?;
    let file_name = args
        .artifact
        .file_name()
        .map(|n| n.to_string_lossy().into_owned());
    let artifact_type = match args.artifact_type {
        Some(TypeArg::SkillMd) => ArtifactType::SkillMd,
        Some(TypeArg::Archive) => ArtifactType::Archive,
        None if file_name
            .as_deref()
            .is_some_and(|n| n.to_ascii_lowercase().ends_with(".md")) =>
        {
            ArtifactType::SkillMd
        }
        None => ArtifactType::Archive,
    };
    let artifact = File::open(&args.artifact)
        .map_err(|e| operational(format!("cannot open {}: {e}", args.artifact.display())))?;
    if !artifact.metadata().map(|m| m.is_file()).unwrap_or(false) {
        return Err(usage(format!(
            "{} is not a regular file",
            args.artifact.display()
        )));
    }
    let req = Request {
        media_type: args.media_type.clone(),
        file_name,
        expected_digest,
        skill_name: args.skill_name.clone(),
        index_description: args.index_description.clone(),
        ..Request::new(artifact_type, limits)
    };
    if let Some(server) = &args.server {
        return extract_remote(server, &args, &req);
    }
    let staging = match &args.out {
        Some(out) => Staging::kept(out).map_err(|e| match e.kind() {
            std::io::ErrorKind::AlreadyExists => usage(format!(
                "--out {} already exists; give a new path",
                out.display()
            )),
            _ => operational(format!("cannot create {}: {e}", out.display())),
        })?,
        None => Staging::temporary()
            .map_err(|e| operational(format!("cannot create a temporary directory: {e}")))?,
    };
    let dir = File::open(staging.path())
        .map_err(|e| operational(format!("cannot open {}: {e}", staging.path().display())));
    let confined = dir.and_then(|dir| run_engine(sandbox, &artifact, dir.as_fd(), &req));
    let (outcome, report) = match confined {
        Ok(c) => (c.outcome, c.sandbox),
        Err(f) => {
            staging.discard();
            return Err(f);
        }
    };
    if outcome.verdict == Verdict::Rejected {
        staging.discard();
    }
    print_answer(
        &outcome,
        Some(&report),
        Some(&report.summary()),
        staging.shown(),
        args.json,
    )?;
    Ok(match outcome.verdict {
        Verdict::Accepted => EXIT_ACCEPTED,
        Verdict::Rejected => EXIT_REJECTED,
    })
}

/// `--server`: the broker extracts and keeps nothing (the staged tree is released).
fn extract_remote(server: &str, args: &ExtractArgs, req: &Request) -> Result<u8, Failure> {
    let done = skillbox::client::extract_blocking(server, &args.artifact, req).map_err(|e| {
        if e.is_invalid_argument() {
            usage(e.to_string())
        } else {
            operational(e.to_string())
        }
    })?;
    let summary = done.sandbox_summary();
    print_answer(
        &done.outcome,
        done.sandbox.as_ref(),
        summary.as_deref(),
        Staged::Released,
        args.json,
    )?;
    let outcome = done.outcome;
    Ok(match outcome.verdict {
        Verdict::Accepted => EXIT_ACCEPTED,
        Verdict::Rejected => EXIT_REJECTED,
    })
}

/// Run the extraction engine on the artifact into the staging directory, in a confined child.
fn run_engine(
    sandbox: &SandboxArgs,
    artifact: &File,
    staging: BorrowedFd<'_>,
    req: &Request,
) -> Result<Confined, Failure> {
    skillbox::sandbox::cli::extract(sandbox, artifact, staging, req).map_err(operational)
}

/// Print an answer: the outcome, plus how it was confined (`"sandbox"`) when a child ran.
fn print_answer<S: serde::Serialize>(
    outcome: &Outcome,
    sandbox: Option<&S>,
    summary: Option<&str>,
    staged: Staged<'_>,
    json: bool,
) -> Result<(), Failure> {
    if json {
        let answer = answer::json(outcome, sandbox).map_err(|e| operational(e.to_string()))?;
        println!(
            "{}",
            serde_json::to_string_pretty(&answer).map_err(|e| operational(e.to_string()))?
        );
    } else {
        print!("{}", answer::text(outcome, staged, summary));
    }
    Ok(())
}

/// Arguments of `skillbox diff` (issue 5).
#[derive(Args, Debug)]
struct DiffArgs {
    /// The older version's saved answer (`skillbox extract --json` output).
    old: PathBuf,
    /// The newer version's saved answer.
    new: PathBuf,
    /// Print one JSON object (change, digests, grown, dropped, files, frontmatter_changed).
    #[arg(long)]
    json: bool,
}

const EXIT_DIFF_CONTENT_ONLY: u8 = 4;
const EXIT_DIFF_NEEDS_REVIEW: u8 = 5;
/// A saved answer is at most a few MiB (10,000 entries plus a bounded review).
const MAX_ANSWER_BYTES: u64 = 64 * 1024 * 1024;

fn cmd_diff(args: &DiffArgs) -> Result<u8, Failure> {
    use skillbox::skill::diff::{self, Change};
    use std::io::Read as _;
    let load = |p: &Path| -> Result<Outcome, Failure> {
        let file =
            File::open(p).map_err(|e| operational(format!("cannot open {}: {e}", p.display())))?;
        let mut text = Vec::new();
        file.take(MAX_ANSWER_BYTES + 1)
            .read_to_end(&mut text)
            .map_err(|e| operational(format!("cannot read {}: {e}", p.display())))?;
        if text.len() as u64 > MAX_ANSWER_BYTES {
            return Err(usage(format!(
                "{} is larger than {MAX_ANSWER_BYTES} bytes",
                p.display()
            )));
        }
        serde_json::from_slice(&text)
            .map_err(|e| usage(format!("{} is not a skillbox answer: {e}", p.display())))
    };
    let (old, new) = (load(&args.old)?, load(&args.new)?);
    let d = diff::diff(&old, &new).map_err(|e| usage(e.to_string()))?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&d).map_err(|e| operational(e.to_string()))?
        );
    } else {
        print!("{}", diff::render(&d));
    }
    Ok(match d.change {
        Change::Unchanged => EXIT_ACCEPTED,
        Change::ContentOnly => EXIT_DIFF_CONTENT_ONLY,
        Change::NeedsReview => EXIT_DIFF_NEEDS_REVIEW,
    })
}
