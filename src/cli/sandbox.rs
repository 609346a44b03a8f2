//! Command-line surface of the sandbox: the confinement flags of every command that extracts,
//! and the engine call the CLI makes through the confined child.
//!
//! This is the only place the CLI turns flags into a [`SandboxConfig`]; it never weakens a
//! default without the operator saying so on the command line, and says so loudly when they do.

use std::fs::File;
use std::os::fd::BorrowedFd;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};

use skillbox::extract::Request;
use skillbox::sandbox::{
    ChildAhead, Confined, Enforcement, Ids, Sandbox, SandboxConfig, SandboxError, Verify,
};

/// How much of the staged tree the parent re-reads before accepting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum VerifyArg {
    /// Paths, kinds, sizes, modes and link targets.
    Structure,
    /// All of that, plus a SHA-256 of every file.
    Full,
}

/// Confinement options, flattened into each command that runs a confined child (`extract`,
/// `fetch`, `doctor`, `install`, `update`), so that no other command's `--help` lists them.
/// `serve` takes its own set ([`ServeSandboxArgs`]): its deadline has its own flag.
#[derive(Args, Debug, Clone, Default)]
#[command(next_help_heading = "Confinement")]
pub struct SandboxArgs {
    /// Extract even when confinement cannot be fully applied (no Landlock, no seccomp, no uid
    /// switch). DANGEROUS: a hostile artifact may then reach the host. Reported in every answer.
    #[arg(long)]
    pub allow_unconfined: bool,
    /// Wall-clock limit for one confined extraction, in seconds [default: 30].
    #[arg(long, value_name = "SECONDS", value_parser = parse_seconds)]
    pub sandbox_timeout: Option<Duration>,
    /// Re-check of the staged tree before an acceptance [default: structure].
    #[arg(long, value_enum, value_name = "HOW")]
    pub verify_staged: Option<VerifyArg>,
    /// Seccomp profile (seccompiler JSON) replacing the embedded one; it may only tighten.
    #[arg(long, value_name = "FILE", value_parser = profile_file)]
    pub seccomp_profile: Option<PathBuf>,
    /// Identity the child switches to when skillbox runs as root [default: 65534:65534].
    #[arg(long, value_name = "UID:GID", value_parser = parse_ids)]
    pub sandbox_user: Option<Ids>,
}

/// The confinement flags of `serve`, each with its `SKILLBOX_*` variable as every serve flag
/// has. `--allow-unconfined` is serve's own flag, and the deadline is `--extract-timeout-ms`.
#[derive(Args, Debug, Clone, Default)]
#[command(next_help_heading = "Confinement")]
pub struct ServeSandboxArgs {
    /// Re-check of the staged tree before an acceptance [default: structure].
    #[arg(long, env = "SKILLBOX_VERIFY_STAGED", value_enum, value_name = "HOW")]
    pub verify_staged: Option<VerifyArg>,
    /// Seccomp profile (seccompiler JSON) replacing the embedded one; it may only tighten.
    #[arg(
        long,
        env = "SKILLBOX_SECCOMP_PROFILE",
        value_name = "FILE",
        value_parser = profile_file
    )]
    pub seccomp_profile: Option<PathBuf>,
    /// Identity the child switches to when skillbox runs as root [default: 65534:65534].
    #[arg(long, env = "SKILLBOX_SANDBOX_USER", value_name = "UID:GID", value_parser = parse_ids)]
    pub sandbox_user: Option<Ids>,
}

/// The same flags written before the command (`skillbox --verify-staged full serve`), the form
/// earlier versions documented. Accepted, hidden from every `--help`, and merged with the
/// command's own; `serve` refuses `--sandbox-timeout` here with the flag to use instead.
#[derive(Args, Debug, Clone, Default)]
pub struct LeadingSandboxArgs {
    #[arg(long, hide = true)]
    pub allow_unconfined: bool,
    #[arg(long, hide = true, value_parser = parse_seconds)]
    pub sandbox_timeout: Option<Duration>,
    #[arg(long, hide = true, value_enum)]
    pub verify_staged: Option<VerifyArg>,
    #[arg(long, hide = true, value_parser = profile_file)]
    pub seccomp_profile: Option<PathBuf>,
    #[arg(long, hide = true, value_parser = parse_ids)]
    pub sandbox_user: Option<Ids>,
}

impl LeadingSandboxArgs {
    /// The command's own flags, with these filling what it left unset.
    pub fn merge(&self, own: &SandboxArgs) -> SandboxArgs {
        SandboxArgs {
            allow_unconfined: own.allow_unconfined || self.allow_unconfined,
            sandbox_timeout: own.sandbox_timeout.or(self.sandbox_timeout),
            verify_staged: own.verify_staged.or(self.verify_staged),
            seccomp_profile: own
                .seccomp_profile
                .clone()
                .or_else(|| self.seccomp_profile.clone()),
            sandbox_user: own.sandbox_user.or(self.sandbox_user),
        }
    }

    /// `serve`'s flags, with these filling what they left unset (`allow_unconfined` is the
    /// caller's to add).
    pub fn merge_serve(&self, own: &ServeSandboxArgs) -> SandboxArgs {
        SandboxArgs {
            allow_unconfined: self.allow_unconfined,
            sandbox_timeout: self.sandbox_timeout,
            verify_staged: own.verify_staged.or(self.verify_staged),
            seccomp_profile: own
                .seccomp_profile
                .clone()
                .or_else(|| self.seccomp_profile.clone()),
            sandbox_user: own.sandbox_user.or(self.sandbox_user),
        }
    }
}

/// `--seccomp-profile FILE` names a file ([`super::existing_file`]). It was found missing only
/// when the child was configured, and `serve` then said confinement did not work on this host
/// and offered `--allow-unconfined`.
fn profile_file(s: &str) -> Result<PathBuf, String> {
    super::existing_file(s)
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
/// confined child (`ahead`, when one was started for this configuration: see
/// [`Sandbox::with_child_ahead`]). Warnings about missing confinement go to stderr; the caller
/// prints the report with the answer.
pub fn extract(
    args: &SandboxArgs,
    artifact: &File,
    staging: BorrowedFd<'_>,
    req: &Request,
    ahead: Option<ChildAhead>,
) -> Result<Confined, SandboxError> {
    if args.allow_unconfined {
        eprintln!(
            "skillbox: WARNING: --allow-unconfined: extraction proceeds even if confinement cannot be applied"
        );
    }
    let confined =
        Sandbox::with_child_ahead(args.config(), ahead)?.extract_at(artifact, staging, req)?;
    if let Some(w) = confined.sandbox.warning() {
        eprintln!("skillbox: {w}");
    }
    Ok(confined)
}
