//! One extraction, from the first artifact byte to the outcome: the only place the broker hands
//! bytes to something that parses them.
//!
//! The upload is fed chunk by chunk through a bounded channel into a blocking reader on a
//! worker thread, which writes each chunk into the sealed memfd the child will read; the
//! artifact is held once, and hashed once, by the async side as it arrives. The reader ends
//! only when the async side says the upload is complete and its digest matched, and that
//! digest is the sealed one, so a bad upload never reaches the child's parser. A job is
//! started only under a child permit, so no more children exist than the child bound.
//!
//! A [`KillSwitch`] covers the child from spawn to reap: when the caller hangs up or its
//! deadline passes, the child is killed through its pidfd, never by a pid that could have been
//! recycled. The child exists from the start of the job, while the upload is still arriving; an
//! upload that ends without [`Feed::End`] (hang-up, deadline, oversize, digest mismatch) makes the
//! sandbox kill and reap it. The job itself counts every child killed either way, once, because
//! only it sees both. The staging guard travels with the job and is dropped (removing the
//! directory) after the child is gone, unless the async side takes the accepted tree.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::metrics::Metrics;
use super::staging::StagingGuard;
use crate::digest::Sha256Digest;
use crate::extract::Request;
use crate::intake::Outcome;
use crate::reason::ReasonCode;
use crate::sandbox::{
    Enforcement, HashedSource, Job as SandboxJob, LandlockStatus, Sandbox, SandboxConfig,
    SandboxError,
};
use crate::sys;

/// Why the broker does not start its runner.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunnerError {
    /// The doctor's checks failed and degraded operation was not allowed.
    #[error(
        "confinement does not work on this host ({}); run `skillbox doctor`, or pass --allow-unconfined to run degraded",
        failed.join("; ")
    )]
    Unconfined {
        /// Each failed check as `name: detail`.
        failed: Vec<String>,
    },
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
}

/// What the async side sends the blocking reader.
pub enum Feed {
    /// The next chunk, already hashed by the async side.
    Chunk(prost::bytes::Bytes),
    /// The upload is complete, and its digest (of every chunk sent, in order) matched the
    /// expected one if there was one: it may be processed.
    End(Sha256Digest),
}

/// The feed, chunk by chunk, for the sandbox to copy into the sealed memfd as it comes. A closed
/// channel without [`Feed::End`] is an error, so an abandoned upload (hang-up, oversize, digest
/// mismatch, deadline) never reaches a child.
struct FeedReader {
    rx: mpsc::Receiver<Feed>,
    cur: prost::bytes::Bytes,
    digest: Option<Sha256Digest>,
}

impl HashedSource for FeedReader {
    fn next_piece(&mut self) -> io::Result<&[u8]> {
        if self.digest.is_some() {
            return Ok(&[]);
        }
        loop {
            match self.rx.blocking_recv() {
                Some(Feed::Chunk(c)) if c.is_empty() => {}
                Some(Feed::Chunk(c)) => {
                    self.cur = c;
                    return Ok(&self.cur);
                }
                Some(Feed::End(d)) => {
                    self.digest = Some(d);
                    return Ok(&[]);
                }
                None => {
                    return Err(io::Error::new(
                        io::ErrorKind::ConnectionAborted,
                        "upload abandoned",
                    ));
                }
            }
        }
    }

    fn digest(&self) -> Option<Sha256Digest> {
        self.digest
    }
}

/// Kills the job's child, if it has one, exactly once and only that process.
#[derive(Clone, Default)]
pub struct KillSwitch(Arc<Mutex<KillState>>);

#[derive(Default)]
struct KillState {
    tripped: bool,
    /// A SIGKILL reached the child through its pidfd.
    signalled: bool,
    pidfd: Option<OwnedFd>,
}

impl KillSwitch {
    /// Called with the child's pid right after spawn, before it can have been reaped, so the
    /// pidfd names exactly our child.
    fn arm(&self, pid: u32) {
        let mut s = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let pidfd = sys::pidfd_open(pid).ok();
        if s.tripped
            && let Some(fd) = &pidfd
        {
            s.signalled |= sys::pidfd_send_signal(fd.as_fd(), libc::SIGKILL).is_ok();
        }
        s.pidfd = pidfd;
    }

    /// Kill the child (now, or as soon as it is spawned). A job whose upload is not complete
    /// has no armed pidfd yet; dropping its feed is what ends that child.
    pub fn trip(&self) {
        let mut s = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        s.tripped = true;
        if let Some(fd) = &s.pidfd {
            s.signalled |= sys::pidfd_send_signal(fd.as_fd(), libc::SIGKILL).is_ok();
        }
    }

    /// The child was reaped: forget its pidfd. True when it had been signalled.
    fn disarm(&self) -> bool {
        let mut s = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        s.pidfd = None;
        s.signalled
    }
}

/// A failure to run the job (never a verdict about the artifact).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JobFault {
    /// The upload was abandoned before it was complete; no child ran.
    #[error("upload abandoned")]
    Abandoned,
    #[error("{0}")]
    Sandbox(String),
}

/// What a job produced: the outcome and, when a child ran, how it was confined.
pub struct Done {
    pub outcome: Outcome,
    pub sandbox: Option<crate::proto::SandboxReport>,
}

/// How the job ended; the staging guard is handed back with an outcome.
pub struct JobEnd {
    pub result: Result<Done, JobFault>,
    pub staging: StagingGuard,
}

/// Runs every extraction in a confined child (`crate::sandbox`); the broker itself never
/// parses artifact bytes.
pub struct Runner {
    sandbox: Sandbox,
    confinement: Confinement,
}

/// What ServerInfo says about confinement.
#[derive(Debug, Clone, Default)]
pub struct Confinement {
    pub landlock_abi: i32,
    pub landlock: LandlockStatus,
    pub seccomp: bool,
    pub confined: bool,
}

impl Runner {
    /// Configure the sandbox and prove it works here (real confined children, as `skillbox
    /// doctor` does). Refuses to start when confinement fails, unless degraded operation was
    /// explicitly allowed.
    /// The checks run with `config` itself, so through the same spawn path (zygote or exec),
    /// profile and identity the requests will get.
    pub fn new(config: SandboxConfig) -> Result<Self, RunnerError> {
        let allow_unconfined = config.enforcement == Enforcement::AllowUnconfined;
        let report = crate::sandbox::doctor::run(config.clone());
        let check = |name: &str| report.checks.iter().any(|c| c.name == name && c.ok);
        if !report.ok {
            let failed: Vec<String> = report
                .checks
                .iter()
                .filter(|c| !c.ok)
                .map(|c| format!("{}: {}", c.name, c.detail))
                .collect();
            if !allow_unconfined {
                return Err(RunnerError::Unconfined { failed });
            }
            tracing::warn!(failed = %failed.join("; "), "confinement is incomplete; running degraded (--allow-unconfined)");
        }
        let sandbox = Sandbox::new(config)?;
        let confinement = Confinement {
            landlock_abi: report.landlock_abi,
            landlock: if check("landlock") {
                LandlockStatus::FullyEnforced
            } else {
                LandlockStatus::NotEnforced
            },
            seccomp: check("seccomp"),
            confined: report.ok,
        };
        Ok(Self {
            sandbox,
            confinement,
        })
    }

    pub fn confinement(&self) -> Confinement {
        self.confinement.clone()
    }

    /// Announce a request to the sandbox, from its admission until its job starts (see
    /// [`Sandbox::expect`]).
    pub fn expect(&self) -> crate::sandbox::Expected {
        self.sandbox.expect()
    }

    /// The blocking part: the child reads the sealed copy of `artifact` and extracts beneath
    /// `staging`; `on_spawn` receives its pid.
    fn run_blocking(
        &self,
        artifact: impl HashedSource,
        staging: &Path,
        req: &Request,
        on_spawn: impl FnOnce(u32),
    ) -> Result<Done, JobFault> {
        match self.sandbox.run_job_hashed(
            SandboxJob::Extract(req.clone()),
            artifact,
            staging,
            &req.limits,
            on_spawn,
        ) {
            Ok(confined) => {
                if let Some(w) = confined.sandbox.warning() {
                    tracing::warn!("{w}");
                }
                let sandbox = crate::convert::sandbox_to_proto(&confined.sandbox)
                    .map_err(|e| JobFault::Sandbox(e.to_string()))?;
                Ok(Done {
                    sandbox: Some(sandbox),
                    outcome: confined.outcome,
                })
            }
            Err(SandboxError::Artifact(e)) if e.kind() == io::ErrorKind::ConnectionAborted => {
                Err(JobFault::Abandoned)
            }
            Err(e) => Err(JobFault::Sandbox(e.to_string())),
        }
    }
}

/// A job in progress: feed it, then await it.
pub struct Job {
    pub feed: mpsc::Sender<Feed>,
    pub kill: KillSwitch,
    pub handle: JoinHandle<JobEnd>,
}

/// Chunks buffered between the upload and the worker (backpressure beyond this).
const FEED_DEPTH: usize = 4;

/// Whether the job's child was killed before it answered: signalled by the kill switch, killed
/// by the sandbox when the upload was abandoned (the child had started and read nothing), or
/// killed by the sandbox at the extraction timeout (that reason is the supervisor's; a child
/// claiming it could only move this counter, never a decision).
fn child_was_killed(signalled: bool, result: &Result<Done, JobFault>) -> bool {
    signalled
        || match result {
            Err(JobFault::Abandoned) => true,
            Ok(done) => done
                .outcome
                .reason
                .as_ref()
                .is_some_and(|r| r.code == ReasonCode::Timeout),
            Err(JobFault::Sandbox(_)) => false,
        }
}

/// Start the worker for one request; it waits for the upload.
pub fn start(
    runner: Arc<Runner>,
    metrics: Arc<Metrics>,
    req: Request,
    staging: StagingGuard,
) -> Job {
    let (tx, rx) = mpsc::channel(FEED_DEPTH);
    let kill = KillSwitch::default();
    let k = kill.clone();
    let handle = tokio::task::spawn_blocking(move || {
        let reader = FeedReader {
            rx,
            cur: prost::bytes::Bytes::new(),
            digest: None,
        };
        let path = staging.path();
        let result = runner.run_blocking(reader, &path, &req, |pid| k.arm(pid));
        if child_was_killed(k.disarm(), &result) {
            metrics.child_killed();
        }
        JobEnd { result, staging }
    });
    Job {
        feed: tx,
        kill,
        handle,
    }
}
