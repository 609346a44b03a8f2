//! Spawning and confining the child that runs the extraction engine, and deciding what its
//! answer is worth.
//!
//! One request is: lend a fresh staging directory to the child's uid, start the child (an
//! `exec` of the child binary as the hidden `sandbox-child` subcommand, possibly started ahead
//! of the request, or a zygote's spare) and hand it exactly five fds, copy the artifact into
//! its memfd (hashing it) and seal it while the child confines itself ([`child`]), send it the
//! sealed digest, supervise it with a deadline, decode its bounded answer, check its claims and
//! the staged tree, and remove the staging directory on anything but an acceptance.
//!
//! This module must never parse artifact bytes in the parent, never run the engine unconfined
//! unless the operator passed `--allow-unconfined`, and never return an acceptance the staged
//! tree does not back. Raw system calls live in `crate::sys` (`src/sys.rs`) only.

mod bpf_layout;
pub mod child;
pub mod child_binary;
pub mod doctor;
mod landlock;
pub mod probe;
mod recheck;
pub mod rlimits;
pub mod seccomp;
mod spawn;
mod supervise;
// The system-call module is the crate's, shared with the engine's mapped reads; its old path
// inside the sandbox stays for the sandbox's own modules.
pub(crate) use crate::sys;
pub mod wire;
pub mod zygote;

use crate::stop_point::stop_point;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde::Serialize;

use crate::extract::Request;
use crate::extract::inventory::{ArtifactFacts, Totals};
use crate::extract::policy::Limits;
use crate::intake::Outcome;
use crate::reason::{Reason, ReasonCode, Verdict, display_name};
pub use child_binary::{ChildBinary, ChildBinaryInfo, ChildBinaryKind};
pub use probe::{Base, Probe, ProbeResult};
pub use recheck::{StagingDir, Verify};
use spawn::SealedFacts;
pub use spawn::{CHILD_SUBCOMMAND, ExecChild, HashedSource, RequestTail, SealedArtifact};
pub use supervise::{Ended, ProbeEnd, Running};
pub use wire::{ConfinementReport, Enforcement, Ids, Job, JobResult, LandlockStatus};
pub use zygote::{ZYGOTE_SUBCOMMAND, Zygote};

/// End the process as a Unix tool ends when its reader has gone away: killed by SIGPIPE
/// (exit status 141 to a shell), with no message. For the CLI's stdout only, when a write
/// failed with EPIPE; never called while a child is being supervised.
pub fn die_of_sigpipe() -> ! {
    let _ = sys::default_sigpipe();
    let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGPIPE);
    // Not reached once the signal is delivered; the shell's status for it otherwise.
    std::process::exit(141)
}

/// Everything an operator can set about confinement.
#[derive(Debug, Clone)]
pub struct SandboxConfig {
    /// The binary children and zygotes are started from. `None` (the default): `skillbox-child`
    /// next to the running executable, or the running executable when there is none
    /// ([`child_binary`]); tests and benchmarks name a built binary.
    pub exe: Option<PathBuf>,
    /// Wall-clock limit per request, from spawn to answer.
    pub timeout: Duration,
    /// The identity a root-started child switches to (default nobody/nogroup, 65534).
    pub run_as: Ids,
    /// Replacement seccomp profile (else the embedded one for this architecture).
    pub seccomp_profile: Option<PathBuf>,
    pub enforcement: Enforcement,
    pub verify: Verify,
    /// Bound on the child's answer, in bytes.
    pub max_answer_bytes: usize,
    /// RLIMIT_AS for the child.
    pub address_space_bytes: u64,
    /// Fork children from a pre-started zygote, replaced after this many children; 0 starts
    /// every child with its own `exec` (see `zygote.rs` for the trade-off).
    pub zygote_max_forks: u32,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        Self {
            exe: None,
            timeout: Duration::from_secs(30),
            run_as: Ids {
                uid: 65534,
                gid: 65534,
            },
            seccomp_profile: None,
            enforcement: Enforcement::Required,
            verify: Verify::Structure,
            max_answer_bytes: wire::DEFAULT_MAX_ANSWER_BYTES,
            address_space_bytes: rlimits::DEFAULT_ADDRESS_SPACE_BYTES,
            zygote_max_forks: 0,
        }
    }
}

/// How a request was confined; part of every answer (`"sandbox"` in the CLI's JSON).
#[derive(Debug, Clone, Serialize)]
pub struct SandboxReport {
    /// True only when every confinement step was in force for the job.
    pub confined: bool,
    pub enforcement: Enforcement,
    pub seccomp_profile: String,
    pub verify: Verify,
    /// What the child reported applying; absent when it never answered.
    pub child: Option<ConfinementReport>,
    /// The child extracted on its main thread alone (a small artifact while other requests
    /// kept the cores busy: [`crate::extract::hashing::BUSY_INLINE_BELOW`]); not part of the
    /// answer, only how the work was spread.
    #[serde(skip)]
    pub hashed_inline: bool,
}

impl SandboxReport {
    /// One line for humans, e.g. `confined (landlock fully_enforced, ABI 7; seccomp on; uid 65534)`.
    pub fn summary(&self) -> String {
        let how = match &self.child {
            Some(c) => format!(
                "landlock {}, ABI {}; seccomp {}; uid {}",
                c.landlock,
                c.landlock_abi,
                if c.seccomp { "on" } else { "OFF" },
                c.uid
            ),
            None => "the child did not report".to_owned(),
        };
        format!(
            "{} ({how})",
            if self.confined {
                "confined"
            } else {
                "NOT CONFINED"
            }
        )
    }

    /// The warning an operator must see when the job ran with a wall missing.
    pub fn warning(&self) -> Option<String> {
        if self.confined {
            return None;
        }
        let missing = self
            .child
            .as_ref()
            .map(|c| c.missing.join("; "))
            .unwrap_or_default();
        Some(format!(
            "WARNING: the artifact was processed WITHOUT full confinement (--allow-unconfined){}",
            if missing.is_empty() {
                String::new()
            } else {
                format!(": {missing}")
            }
        ))
    }
}

/// An outcome together with how it was obtained.
#[derive(Debug, Clone)]
pub struct Confined {
    pub outcome: Outcome,
    pub sandbox: SandboxReport,
}

/// A failure to run the request at all (a verdict about the artifact is never an error).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SandboxError {
    #[error(transparent)]
    Profile(#[from] seccomp::ProfileError),
    #[error("cannot copy the artifact into a sealed memfd: {0}")]
    Artifact(#[source] io::Error),
    #[error("staging directory {path}: {source}")]
    Staging { path: String, source: io::Error },
    #[error(transparent)]
    ChildBinary(#[from] child_binary::ChildBinaryError),
    #[error("cannot start the confined child ({exe}): {source}")]
    Spawn { exe: String, source: io::Error },
    #[error("supervising the confined child: {0}")]
    Supervise(#[source] io::Error),
    #[error("request too large for the child ({0} bytes)")]
    RequestTooLarge(usize),
    #[error("the extraction engine failed inside the child: {0}")]
    Engine(String),
}

/// A configured sandbox with its seccomp profile compiled; reusable for many requests.
pub struct Sandbox {
    config: SandboxConfig,
    profile: seccomp::Profile,
    /// Opened and checked once; every child and zygote is executed through its fd.
    binary: ChildBinary,
    /// The BPF frame every child's request carries: the whole profile for an exec'd child, the
    /// second stage for a zygote's spares.
    program: (wire::SeccompStage, Vec<u8>),
    zygote: Option<Zygote>,
    /// An exec'd child started before this sandbox ([`Sandbox::with_child_ahead`]), for its
    /// first request.
    ahead: std::sync::Mutex<Option<ExecChild>>,
    /// Requests in [`Sandbox::run_in`] and those announced ahead ([`Sandbox::expect`]): while
    /// there is more than the one asking, the next spare is forked at once.
    demand: Arc<AtomicUsize>,
}

/// One request counted in a sandbox's demand while this lives ([`Sandbox::expect`]).
pub struct Expected(Arc<AtomicUsize>);

impl Expected {
    fn new(demand: &Arc<AtomicUsize>) -> Self {
        demand.fetch_add(1, Ordering::Relaxed);
        Expected(Arc::clone(demand))
    }

    /// Whether requests other than this one are under way or on their way.
    fn others(&self) -> bool {
        self.0.load(Ordering::Relaxed) > 1
    }
}

impl Drop for Expected {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A child started ahead of its sandbox and request ([`start_child_ahead`]).
pub struct ChildAhead {
    exe: Option<PathBuf>,
    child: ExecChild,
}

impl ChildAhead {
    /// Its pid (tests check that an unused one is gone).
    pub fn pid(&self) -> Option<u32> {
        self.child.pid()
    }
}

/// Start an exec'd child now, before there is a request or even a [`Sandbox`]: `skillbox
/// extract` calls this before it parses its command line, so the child's `exec`, start-up and
/// process steps (identity `run_as`, capabilities, no_new_privs) overlap the parent's parsing,
/// reading and sealing. The child holds nothing but its socket until it is handed a request
/// ([`Sandbox::with_child_ahead`]); dropped unused, it is killed and reaped. `exe` as in
/// [`SandboxConfig::exe`].
pub fn start_child_ahead(exe: Option<&Path>, run_as: Ids) -> Result<ChildAhead, SandboxError> {
    let binary = ChildBinary::resolve(exe)?;
    let child = ExecChild::start(&binary, run_as).map_err(|source| SandboxError::Spawn {
        exe: binary.info().path.display().to_string(),
        source,
    })?;
    Ok(ChildAhead {
        exe: exe.map(Path::to_owned),
        child,
    })
}

impl Sandbox {
    /// Compile the profile and, when `zygote_max_forks` is above 0, start the zygote.
    pub fn new(config: SandboxConfig) -> Result<Self, SandboxError> {
        Self::with_child_ahead(config, None)
    }

    /// [`Sandbox::new`], whose first child is `ahead` when it was started for this
    /// configuration (the same binary and identity, and no zygote); otherwise `ahead` is killed
    /// and reaped, and children start as usual.
    pub fn with_child_ahead(
        config: SandboxConfig,
        ahead: Option<ChildAhead>,
    ) -> Result<Self, SandboxError> {
        let ahead = ahead.filter(|a| {
            a.exe == config.exe && a.child.run_as() == config.run_as && config.zygote_max_forks == 0
        });
        let profile = seccomp::load(config.seccomp_profile.as_deref())?;
        let binary = match &ahead {
            Some(a) => a.child.binary().clone(),
            None => ChildBinary::resolve(config.exe.as_deref())?,
        };
        // Spares install the profile in two stages (see `seccomp::Profile::stages`): the
        // zygote gets the first, every request to a spare carries the second.
        let (zygote, program) = match config.zygote_max_forks {
            0 => (
                None,
                (
                    wire::SeccompStage::Whole,
                    seccomp::to_bytes(&profile.program),
                ),
            ),
            n => {
                let (first, second) = profile.stages()?;
                let zygote = Zygote::start(&binary, n, config.run_as, seccomp::to_bytes(&first))
                    .map_err(|source| SandboxError::Spawn {
                        exe: binary.info().path.display().to_string(),
                        source,
                    })?;
                (
                    Some(zygote),
                    (wire::SeccompStage::Second, seccomp::to_bytes(&second)),
                )
            }
        };
        Ok(Self {
            config,
            profile,
            binary,
            program,
            zygote,
            ahead: std::sync::Mutex::new(ahead.map(|a| a.child)),
            demand: Arc::new(AtomicUsize::new(0)),
        })
    }

    /// How many seccomp filters each child installs: two for a zygote's spare (the first stage
    /// before its order, the second as its last step), one for an exec'd child.
    pub fn seccomp_stages(&self) -> u64 {
        match self.program.0 {
            wire::SeccompStage::Whole => 1,
            wire::SeccompStage::Second => 2,
        }
    }

    /// The zygote children are forked from, when there is one.
    pub fn zygote(&self) -> Option<&Zygote> {
        self.zygote.as_ref()
    }

    pub fn config(&self) -> &SandboxConfig {
        &self.config
    }

    /// The binary children are started from, and where it came from.
    pub fn child_binary(&self) -> &ChildBinaryInfo {
        self.binary.info()
    }

    /// Where the profile came from and how many BPF instructions it compiled to.
    pub fn profile_summary(&self) -> (String, usize) {
        (self.profile.source.clone(), self.profile.program.len())
    }

    /// The uid/gid the child runs as, when that differs from ours (we are root).
    pub fn child_ids(&self) -> Option<(u32, u32)> {
        nix::unistd::geteuid()
            .is_root()
            .then_some((self.config.run_as.uid, self.config.run_as.gid))
    }

    /// The resource limits a child gets under `limits`.
    pub fn rlimit_plan(&self, limits: &Limits) -> wire::RlimitPlan {
        rlimits::plan(limits, self.config.timeout, self.config.address_space_bytes)
    }

    /// Extract `artifact` into the empty directory `staging` inside a confined child.
    ///
    /// On anything but an acceptance the directory is gone when this returns.
    pub fn extract(
        &self,
        artifact: &File,
        staging: &Path,
        req: &Request,
    ) -> Result<Confined, SandboxError> {
        let dir = StagingDir::prepare(staging, self.child_ids()).map_err(staging_err(staging))?;
        self.extract_in(artifact, dir, req)
    }

    /// [`Sandbox::extract`] into a directory the caller holds open (and removes itself): on
    /// anything but an acceptance it is left empty.
    pub fn extract_at(
        &self,
        artifact: &File,
        staging: BorrowedFd<'_>,
        req: &Request,
    ) -> Result<Confined, SandboxError> {
        let dir = StagingDir::prepare_fd(staging, self.child_ids())
            .map_err(staging_err(Path::new("(fd)")))?;
        self.extract_in(artifact, dir, req)
    }

    fn extract_in(
        &self,
        artifact: &File,
        dir: StagingDir,
        req: &Request,
    ) -> Result<Confined, SandboxError> {
        self.run_in(
            Job::Extract(req.clone()),
            |memfd| SealedArtifact::fill_from_file(memfd, artifact, &req.limits),
            dir,
            &req.limits,
            |_| {},
        )
    }

    /// The general form of [`Sandbox::extract`]: any job over any bytes, with `on_spawn` told
    /// the child's pid (tests use it to kill a child mid-job). Whatever the job, an acceptance is
    /// only returned when the claims and the staged tree check out.
    pub fn run_job(
        &self,
        job: Job,
        artifact: impl Read,
        staging: &Path,
        limits: &Limits,
        on_spawn: impl FnOnce(u32),
    ) -> Result<Confined, SandboxError> {
        self.run_job_sealed(job, staging, limits, on_spawn, |memfd, max| {
            SealedArtifact::fill(memfd, artifact, max)
        })
    }

    /// [`Sandbox::run_job`] over bytes their source hashed on the way in (the broker's upload):
    /// copied into the memfd as they come, not hashed again ([`SealedArtifact::fill_hashed`]).
    pub fn run_job_hashed(
        &self,
        job: Job,
        artifact: impl HashedSource,
        staging: &Path,
        limits: &Limits,
        on_spawn: impl FnOnce(u32),
    ) -> Result<Confined, SandboxError> {
        self.run_job_sealed(job, staging, limits, on_spawn, |memfd, max| {
            SealedArtifact::fill_hashed(memfd, artifact, max)
        })
    }

    /// Both forms: a staging directory prepared at `staging`, and `seal` given the memfd and
    /// the bound (one byte past the size limit, so an oversized artifact is still recognised).
    fn run_job_sealed(
        &self,
        job: Job,
        staging: &Path,
        limits: &Limits,
        on_spawn: impl FnOnce(u32),
        seal: impl FnOnce(File, u64) -> io::Result<SealedArtifact>,
    ) -> Result<Confined, SandboxError> {
        let dir = StagingDir::prepare(staging, self.child_ids()).map_err(staging_err(staging))?;
        let max = limits.max_artifact_bytes.saturating_add(1);
        self.run_in(job, |memfd| seal(memfd, max), dir, limits, on_spawn)
    }

    /// Start the child over an empty memfd, have `seal` copy the artifact into it (hashing and
    /// sealing) while the child confines itself, then send the child the sealed digest and
    /// supervise it. On anything but an acceptance the staging directory is emptied (and
    /// removed when we know its path).
    fn run_in(
        &self,
        job: Job,
        seal: impl FnOnce(File) -> io::Result<SealedArtifact>,
        dir: StagingDir,
        limits: &Limits,
        on_spawn: impl FnOnce(u32),
    ) -> Result<Confined, SandboxError> {
        let expected = match &job {
            Job::Extract(r) => r.expected_digest,
            Job::Probe(_) => None,
        };
        let working = Expected::new(&self.demand);
        let result = self
            .start(job, seal, &dir, limits, working.others())
            .and_then(|(running, sealed)| {
                // The next spare: forked now when other requests are under way or announced
                // (one of them may want it before this child ends), else once this child is
                // gone, on the core it leaves idle while we re-check and answer, not beside it
                // while it works (the fork and the spare's prefault took the second core from
                // the child's hashing thread for about 0.4 ms: bench-results/load.md).
                if working.others() {
                    self.replenish();
                }
                // The child holds the sealed memfd now (inherited, or in flight to a spare). A
                // large one is let go only once the child is gone, so ours is the last reference
                // whatever the child maps of it to the end (a plain tarball's kept members:
                // `captured.rs`): freeing its pages, the last close's work, then runs on a
                // thread of its own while the tree is re-checked, not in the child's exit, which
                // we wait for. A small one is let go now: its few pages are freed by the child.
                let early = if sealed.frees_aside() {
                    Err(sealed)
                } else {
                    Ok(sealed.release())
                };
                on_spawn(running.pid());
                let ended = running.wait(self.config.timeout, self.config.max_answer_bytes);
                let (sealed, _freeing) = early.unwrap_or_else(SealedArtifact::release);
                self.replenish();
                let ended = ended.map_err(SandboxError::Supervise)?;
                let (outcome, sandbox) = self.supervise(ended, sealed, &dir)?;
                let checked =
                    check_claims(&outcome, sealed, expected).and_then(|()| match outcome.verdict {
                        Verdict::Accepted => {
                            Ok(dir.recheck(&outcome, self.config.verify, limits.max_path_depth)?)
                        }
                        Verdict::Rejected => Ok(()),
                    });
                Ok(match checked {
                    Ok(()) => Confined { outcome, sandbox },
                    Err(why) => Confined {
                        outcome: rejected(
                            sealed,
                            Reason::new(ReasonCode::SandboxViolation, why.to_string()),
                        ),
                        sandbox,
                    },
                })
            });
        match &result {
            Ok(c) if c.outcome.verdict == Verdict::Accepted => {}
            Ok(_) | Err(_) => {
                // The child is gone (reaped, every thread of it) before this runs, so nothing
                // appears in the tree while it is removed. The child leaves a rejected tree
                // as it stands: removing it here keeps that time off the child's deadline.
                stop_point("sandbox:discard");
                let path = dir.path().map(Path::to_owned).unwrap_or_default();
                dir.discard().map_err(staging_err(&path))?;
            }
        }
        result
    }

    /// Spawn the child for `job` over a fresh memfd, seal the artifact into it meanwhile, and
    /// finish the child's request with the digest. If sealing fails, the child (which has read
    /// nothing of the artifact) is killed and reaped, and the error returned.
    fn start(
        &self,
        job: Job,
        seal: impl FnOnce(File) -> io::Result<SealedArtifact>,
        dir: &StagingDir,
        limits: &Limits,
        busy: bool,
    ) -> Result<(Running, SealedArtifact), SandboxError> {
        let memfd = SealedArtifact::memfd().map_err(SandboxError::Artifact)?;
        let (running, tail) = self.spawn_child(job, memfd.as_fd(), dir, limits, busy)?;
        // `running` kills and reaps the child when dropped on the error path.
        let sealed = seal(memfd).map_err(SandboxError::Artifact)?;
        self.finish(tail, &sealed);
        Ok((running, sealed))
    }

    /// Read the ended child's answer; the staging root is taken back before it is looked at.
    fn supervise(
        &self,
        mut ended: Ended,
        sealed: SealedFacts,
        dir: &StagingDir,
    ) -> Result<(Outcome, SandboxReport), SandboxError> {
        dir.reclaim_root()
            .map_err(staging_err(dir.path().unwrap_or(Path::new("(fd)"))))?;
        let mut report = SandboxReport {
            // Under `Required` no job runs unless every step held; refine from the child's word.
            confined: self.config.enforcement == Enforcement::Required,
            enforcement: self.config.enforcement,
            seccomp_profile: self.profile.source.clone(),
            verify: self.config.verify,
            child: None,
            hashed_inline: false,
        };
        let answer = match supervise::classify(&mut ended, self.config.max_answer_bytes) {
            Ok(a) => a,
            Err(reason) => return Ok((rejected(sealed, reason), report)),
        };
        let r = &answer.report;
        report.confined = report.confined
            || (r.missing.is_empty()
                && r.seccomp
                && r.no_new_privs
                && r.landlock != LandlockStatus::NotEnforced);
        report.child = Some(answer.report);
        report.hashed_inline = answer.hashed_inline;
        let outcome = match answer.result {
            JobResult::Extracted(o) => *o,
            JobResult::EngineFault { detail } => {
                return Err(SandboxError::Engine(display_name(detail.as_bytes())));
            }
            JobResult::Unavailable { .. } | JobResult::Probe(_) => rejected(
                sealed,
                Reason::new(
                    ReasonCode::SandboxViolation,
                    "the child answered something other than an extraction",
                ),
            ),
        };
        Ok((outcome, report))
    }

    /// Start a child for `job` over `sealed` and `dir` (tests and `doctor` drive this directly).
    pub fn spawn(
        &self,
        job: Job,
        sealed: &SealedArtifact,
        dir: &StagingDir,
        limits: &Limits,
    ) -> Result<Running, SandboxError> {
        let (running, tail) = self.spawn_unsealed(job, sealed.file().as_fd(), dir, limits)?;
        self.finish(tail, sealed);
        self.replenish();
        Ok(running)
    }

    /// Send a started child the digest of its sealed artifact.
    fn finish(&self, tail: RequestTail, sealed: &SealedArtifact) {
        // A child that is already gone cannot take the last frame; its end says why.
        let _ = tail.finish(&sealed.digest());
    }

    /// Announce a request that will come (the broker's, from its admission until its job
    /// starts): while the returned guard lives, a request that takes the ready spare has the
    /// next one forked at once rather than after its child has ended.
    pub fn expect(&self) -> Expected {
        Expected::new(&self.demand)
    }

    /// With a zygote, have the spare for the next request forked (see [`Zygote::replenish`]).
    pub fn replenish(&self) {
        if let Some(z) = &self.zygote {
            z.replenish();
        }
    }

    /// Start a child for `job` over `artifact`, a memfd the caller seals before it finishes the
    /// request with the returned [`RequestTail`], then calls [`Sandbox::replenish`] (tests use
    /// it to show that a child never runs its job over an unsealed memfd, or without the last
    /// frame).
    pub fn spawn_unsealed(
        &self,
        job: Job,
        artifact: BorrowedFd<'_>,
        dir: &StagingDir,
        limits: &Limits,
    ) -> Result<(Running, RequestTail), SandboxError> {
        self.spawn_child(job, artifact, dir, limits, false)
    }

    /// [`Sandbox::spawn_unsealed`]; `busy` when other requests are under way or announced
    /// (`wire::ChildRequest::busy`).
    fn spawn_child(
        &self,
        job: Job,
        artifact: BorrowedFd<'_>,
        dir: &StagingDir,
        limits: &Limits,
        busy: bool,
    ) -> Result<(Running, RequestTail), SandboxError> {
        let (seccomp_stage, program) = &self.program;
        let request = wire::ChildRequest {
            build: wire::SOURCE_ID.to_owned(),
            parent_pid: std::process::id(),
            run_as: Some(self.config.run_as),
            rlimits: self.rlimit_plan(limits),
            enforcement: self.config.enforcement,
            seccomp_stage: *seccomp_stage,
            busy,
            job,
        };
        let json = serde_json::to_vec(&request).map_err(|e| SandboxError::Spawn {
            exe: String::new(),
            source: io::Error::other(e),
        })?;
        if json.len() > wire::MAX_REQUEST_BYTES {
            return Err(SandboxError::RequestTooLarge(json.len()));
        }
        let start = match &self.zygote {
            Some(z) => spawn::Start::Zygote(z),
            None => spawn::Start::Exec {
                binary: &self.binary,
                run_as: self.config.run_as,
                ahead: self
                    .ahead
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .take(),
            },
        };
        spawn::spawn(start, &json, program, artifact, dir.fd()).map_err(|source| {
            SandboxError::Spawn {
                exe: self.binary.info().path.display().to_string(),
                source,
            }
        })
    }

    /// Run one probe in a confined child over `dir` and report how it ended.
    pub fn probe(&self, probe: Probe, dir: &StagingDir) -> Result<ProbeEnd, SandboxError> {
        let sealed = SealedArtifact::copy_from(&b"probe artifact"[..], 64)
            .map_err(SandboxError::Artifact)?;
        let running = self.spawn(Job::Probe(probe), &sealed, dir, &Limits::default())?;
        let ended = running
            .wait(self.config.timeout, self.config.max_answer_bytes)
            .map_err(SandboxError::Supervise)?;
        dir.reclaim_root()
            .map_err(staging_err(dir.path().unwrap_or(Path::new("(fd)"))))?;
        Ok(ended.probe_end(self.config.max_answer_bytes))
    }
}

fn staging_err(path: &Path) -> impl FnOnce(io::Error) -> SandboxError + '_ {
    move |source| SandboxError::Staging {
        path: path.display().to_string(),
        source,
    }
}

/// Why the parent does not take the child's answer as it stands.
#[derive(Debug, thiserror::Error)]
enum Untrusted {
    #[error("the child reports {reported} artifact bytes; {sealed} were sealed")]
    Size { reported: u64, sealed: u64 },
    #[error("the child reports a digest other than the sealed bytes'")]
    Digest,
    #[error("an acceptance with a rejection reason")]
    AcceptedWithReason,
    #[error("an acceptance of bytes that do not match the expected digest")]
    AcceptedOtherBytes,
    #[error("a rejection without a reason, or with entries")]
    MalformedRejection,
    #[error(transparent)]
    Tree(#[from] recheck::Disagreement),
}

/// The child's claims about the artifact must match what the parent knows: the size and digest
/// of the bytes it sealed, and the expected digest for an acceptance. A rejection carries a
/// reason and no entries; an acceptance carries no reason.
fn check_claims(
    o: &Outcome,
    sealed: SealedFacts,
    expected: Option<crate::digest::Sha256Digest>,
) -> Result<(), Untrusted> {
    if o.artifact.size != sealed.size {
        return Err(Untrusted::Size {
            reported: o.artifact.size,
            sealed: sealed.size,
        });
    }
    if o.artifact.digest.is_some_and(|d| d != sealed.digest) {
        return Err(Untrusted::Digest);
    }
    match o.verdict {
        Verdict::Accepted => {
            if o.reason.is_some() {
                return Err(Untrusted::AcceptedWithReason);
            }
            if o.artifact.digest.is_none() || expected.is_some_and(|e| e != sealed.digest) {
                return Err(Untrusted::AcceptedOtherBytes);
            }
        }
        Verdict::Rejected => {
            if o.reason.is_none() || !o.entries.is_empty() {
                return Err(Untrusted::MalformedRejection);
            }
        }
    }
    Ok(())
}

/// A rejection decided by the parent (the child's answer was not usable).
fn rejected(sealed: SealedFacts, reason: Reason) -> Outcome {
    let facts = ArtifactFacts {
        digest: Some(sealed.digest),
        format: None,
        size: sealed.size,
    };
    Outcome::rejected(
        facts,
        Totals {
            bytes_in: sealed.size,
            ..Totals::default()
        },
        reason,
    )
}
