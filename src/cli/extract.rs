//! `skillbox extract ARTIFACT`: verify and extract one artifact in a confined child (or send it
//! to a running broker with `--server`), print the answer, and leave nothing on disk after a
//! rejection.
//!
//! Exit codes (see [`Exit`]): 0 accepted, 3 rejected (the reason is printed), 1 operational
//! error, 2 usage error.

use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::PathBuf;

use clap::{Args, ValueEnum};

use skillbox::convert::{MAX_INDEX_DESCRIPTION, MAX_SKILL_NAME};
use skillbox::digest::Sha256Digest;
use skillbox::extract::{ArtifactType, Request};
use skillbox::reason::Verdict;
use skillbox::sandbox::Confined;

use super::exit::{Exit, Failure};
use super::limits::{self, LimitFlags};
use super::output::{Staged, print_answer, remote_summary};
use super::sandbox::{self, SandboxArgs};
use super::staging::Staging;

#[derive(Clone, Copy, Debug, ValueEnum)]
enum TypeArg {
    /// A single SKILL.md file, staged byte for byte.
    SkillMd,
    /// A zip, tar, tar.gz or tar.zst archive with SKILL.md at its root.
    Archive,
}

#[derive(Args, Debug)]
pub struct ExtractArgs {
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
    /// directory is used and removed afterwards. With --server, the accepted tree is fetched
    /// from the broker into it (every SHA-256 checked), which works over TCP too.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Limits file (.toml or .json; keys as in docs/limits.md). Flags below override it.
    #[arg(long)]
    limits: Option<PathBuf>,
    /// Print one JSON object (verdict, reason, artifact, entries, totals).
    #[arg(long)]
    json: bool,
    /// Send the artifact to a running broker instead (`unix:///path/to.sock`, `unix:` for the
    /// default socket, `http://127.0.0.1:PORT`, `https://HOST:PORT` with SKILLBOX_TLS_CA); same
    /// output and exit codes. With --out the accepted tree is fetched into that directory.
    #[arg(long, value_name = "URI")]
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
    overrides: LimitFlags,
}

/// `--skill-name`: the broker's bound on `header.skill_name`, so the local and `--server` paths
/// accept the same values.
fn parse_skill_name(s: &str) -> Result<String, String> {
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
    if s.len() > MAX_INDEX_DESCRIPTION {
        return Err(format!("longer than {MAX_INDEX_DESCRIPTION} bytes"));
    }
    Ok(s.to_owned())
}

/// Run `skillbox extract`.
pub fn run(args: ExtractArgs, sandbox: &SandboxArgs) -> Result<Exit, Failure> {
    let expected_digest = match &args.digest {
        Some(d) => Some(
            d.parse::<Sha256Digest>()
                .map_err(|e| Failure::usage(format!("--digest: {e}")))?,
        ),
        None => None,
    };
    let mut limits = limits::build(args.limits.as_deref(), &args.overrides)?;
    let file_name = args
        .artifact
        .file_name()
        .map(|n| n.to_string_lossy().into_owned());
    // A local `.skill` file is what the skill packagers write: one wrapping directory.
    limits.accept_wrapper |= file_name
        .as_deref()
        .is_some_and(|n| n.to_ascii_lowercase().ends_with(".skill"));
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
    let artifact = File::open(&args.artifact).map_err(|e| {
        Failure::operational(format!("cannot open {}: {e}", args.artifact.display()))
    })?;
    if !artifact.metadata().map(|m| m.is_file()).unwrap_or(false) {
        return Err(Failure::usage(format!(
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
            std::io::ErrorKind::AlreadyExists => Failure::usage(format!(
                "--out {} already exists; give a new path",
                out.display()
            )),
            _ => Failure::operational(format!("cannot create {}: {e}", out.display())),
        })?,
        None => Staging::temporary().map_err(|e| {
            Failure::operational(format!("cannot create a temporary directory: {e}"))
        })?,
    };
    let dir = File::open(staging.path()).map_err(|e| {
        Failure::operational(format!("cannot open {}: {e}", staging.path().display()))
    });
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
    Ok(verdict_exit(outcome.verdict))
}

fn verdict_exit(v: Verdict) -> Exit {
    match v {
        Verdict::Accepted => Exit::Ok,
        Verdict::Rejected => Exit::Rejected,
    }
}

/// `--server`: the broker extracts; with `--out` its accepted tree is fetched into the new
/// directory; the broker keeps nothing (the staged tree is released).
fn extract_remote(server: &str, args: &ExtractArgs, req: &Request) -> Result<Exit, Failure> {
    let out = args.out.as_deref();
    if let Some(dir) = out {
        if std::fs::symlink_metadata(dir).is_ok() {
            return Err(Failure::usage(format!(
                "--out {} already exists; give a new path",
                dir.display()
            )));
        }
    }
    let done =
        skillbox::client::extract_blocking_into(server, &args.artifact, req, out).map_err(|e| {
            if e.is_invalid_argument() {
                Failure::usage(e.to_string())
            } else {
                Failure::operational(e.to_string())
            }
        })?;
    let summary = remote_summary(done.sandbox.as_ref());
    print_answer(
        &done.outcome,
        done.sandbox.as_ref(),
        summary.as_deref(),
        match out {
            Some(dir) if done.outcome.verdict == Verdict::Accepted => Staged::At(dir),
            _ => Staged::Released,
        },
        args.json,
    )?;
    Ok(verdict_exit(done.outcome.verdict))
}

/// Run the extraction engine on the artifact into the staging directory, in a confined child.
pub fn run_engine(
    sandbox: &SandboxArgs,
    artifact: &File,
    staging: BorrowedFd<'_>,
    req: &Request,
) -> Result<Confined, Failure> {
    sandbox::extract(sandbox, artifact, staging, req)
        .map_err(|e| Failure::operational(e.to_string()))
}
