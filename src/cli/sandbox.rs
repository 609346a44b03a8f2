//! Command-line surface of the sandbox: the global confinement flags every command that
//! extracts accepts, and the engine call the CLI makes through the confined child.
//!
//! This is the only place the CLI turns flags into a [`SandboxConfig`]; it never weakens a
//! default without the operator saying so on the command line, and says so loudly when they do.

use std::fs::File;
use std::os::fd::BorrowedFd;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};

use skillbox::extract::Request;
use skillbox::sandbox::{Confined, Enforcement, Ids, Sandbox, SandboxConfig, SandboxError, Verify};

/// How much of the staged tree the parent re-reads before accepting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum VerifyArg {
    /// Paths, kinds, sizes, modes and link targets.
    Structure,
    /// All of that, plus a SHA-256 of every file.
    Full,
}

/// Confinement options (global: accepted by every command that extracts).
#[derive(Args, Debug, Clone, Default)]
pub struct SandboxArgs {
    /// Extract even when confinement cannot be fully applied (no Landlock, no seccomp, no uid
    /// switch). DANGEROUS: a hostile artifact may then reach the host. Reported in every answer.
    #[arg(long, global = true)]
    pub allow_unconfined: bool,
    /// Wall-clock limit for one confined extraction, in seconds [default: 30].
    #[arg(long, global = true, value_name = "SECONDS", value_parser = parse_seconds)]
    pub sandbox_timeout: Option<Duration>,
    /// Re-check of the staged tree before an acceptance [default: structure].
    #[arg(long, global = true, value_enum, value_name = "HOW")]
    pub verify_staged: Option<VerifyArg>,
    /// Seccomp profile (seccompiler JSON) replacing the embedded one; it may only tighten.
    #[arg(long, global = true, value_name = "FILE")]
    pub seccomp_profile: Option<PathBuf>,
    /// Identity the child switches to when skillbox runs as root [default: 65534:65534].
    #[arg(long, global = true, value_name = "UID:GID", value_parser = parse_ids)]
    pub sandbox_user: Option<Ids>,
}

fn parse_seconds(s: &str) -> Result<Duration, String> {
    let secs: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number of seconds"))?;
    if !(secs > 0.0 && secs <= 86_400.0) {
        return Err("must be more than 0 and at most 86400 seconds".into());
    }
    Ok(Duration::from_secs_f64(secs))
}

fn parse_ids(s: &str) -> Result<Ids, String> {
    let (u, g) = s.split_once(':').ok_or("expected UID:GID")?;
    let uid: u32 = u.parse().map_err(|_| format!("{u:?} is not a uid"))?;
    let gid: u32 = g.parse().map_err(|_| format!("{g:?} is not a gid"))?;
    if uid == 0 || gid == 0 {
        return Err("the child must not run as root".into());
    }
    Ok(Ids { uid, gid })
}

impl SandboxArgs {
    /// The configuration these flags describe (everything else at its default).
    pub fn config(&self) -> SandboxConfig {
        let mut c = SandboxConfig::default();
        if self.allow_unconfined {
            c.enforcement = Enforcement::AllowUnconfined;
        }
        if let Some(t) = self.sandbox_timeout {
            c.timeout = t;
        }
        c.verify = match self.verify_staged {
            None | Some(VerifyArg::Structure) => Verify::Structure,
            Some(VerifyArg::Full) => Verify::Full,
        };
        c.seccomp_profile.clone_from(&self.seccomp_profile);
        if let Some(ids) = self.sandbox_user {
            c.run_as = ids;
        }
        c
    }
}

/// The CLI's engine call: extract `artifact` into the directory open at `staging` inside a
/// confined child. Warnings about missing confinement go to stderr; the caller prints the
/// report with the answer.
pub fn extract(
    args: &SandboxArgs,
    artifact: &File,
    staging: BorrowedFd<'_>,
    req: &Request,
) -> Result<Confined, SandboxError> {
    if args.allow_unconfined {
        eprintln!(
            "skillbox: WARNING: --allow-unconfined: extraction proceeds even if confinement cannot be applied"
        );
    }
    let confined = Sandbox::new(args.config())?.extract_at(artifact, staging, req)?;
    if let Some(w) = confined.sandbox.warning() {
        eprintln!("skillbox: {w}");
    }
    Ok(confined)
}
