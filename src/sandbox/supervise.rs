//! Watching the child: a wall-clock deadline enforced through its pidfd, its answer read with a
//! hard size bound, its log kept to a bounded excerpt, and its end classified.
//!
//! The child is reaped on every path, including when the supervisor itself errs or a
//! [`Running`] is dropped unfinished: no zombies, and every pipe is closed with it.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::Arc;

use nix::unistd::Pid;
use std::time::{Duration, Instant};

use super::child::{EXIT_ANSWERED, EXIT_UNAVAILABLE};
use super::probe::ProbeResult;
use super::sys::{self, PollFd};
use super::wire::{self, ChildAnswer, JobResult};
use crate::reason::{Reason, ReasonCode, display_name};

/// Bytes of the child's stderr kept for diagnostics; the rest is read and dropped.
const LOG_KEEP: usize = 16 * 1024;

/// A started child: ours to wait for, whether we spawned it or the zygote forked it for us
/// (`CLONE_PARENT`).
pub struct Running {
    pid: Pid,
    pidfd: OwnedFd,
    answer: File,
    log: File,
    reaped: bool,
}

/// How a child ended, with what it said.
#[derive(Debug, Clone)]
pub struct Ended {
    pub status: ExitStatus,
    /// The raw answer bytes (at most the bound plus the 4-byte header).
    pub answer: Vec<u8>,
    /// The child announced or sent more than the bound; it was killed.
    pub answer_overflow: bool,
    /// The first bytes of its stderr.
    pub log: Vec<u8>,
    /// We killed it at the deadline.
    pub timed_out: bool,
    /// The answer as decoded the moment its frame was complete (while the child was still
    /// exiting), with the length it was decoded at; used only if no byte came after.
    decoded: Option<(usize, Result<ChildAnswer, Unusable>)>,
}

impl Running {
    /// A child of this process known by pid; it must not have been waited for yet (so the pid
    /// cannot have been recycled when the pidfd is opened).
    pub(crate) fn from_pid(pid: u32, answer: File, log: File) -> io::Result<Self> {
        let raw =
            libc::pid_t::try_from(pid).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        let pid = Pid::from_raw(raw);
        match sys::pidfd_open(pid.as_raw().unsigned_abs()) {
            Ok(pidfd) => Ok(Self {
                pid,
                pidfd,
                answer,
                log,
                reaped: false,
            }),
            Err(e) => {
                let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
                let _ = sys::wait_pid(pid.as_raw());
                Err(e)
            }
        }
    }

    pub fn pid(&self) -> u32 {
        self.pid.as_raw().unsigned_abs()
    }

    /// SIGKILL through the pidfd (never a recycled pid). A child that already exited is fine.
    pub fn kill(&self) -> io::Result<()> {
        match sys::pidfd_send_signal(self.pidfd.as_fd(), libc::SIGKILL) {
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Ok(()),
            other => other,
        }
    }

    /// Wait for the child until `timeout` from now, reading at most `max_answer` payload bytes.
    pub fn wait(mut self, timeout: Duration, max_answer: usize) -> io::Result<Ended> {
        let deadline = Instant::now() + timeout;
        let answer_cap = max_answer.saturating_add(4);
        let mut answer = Vec::new();
        let mut log = Vec::new();
        let (mut answer_open, mut log_open, mut exited) = (true, true, false);
        let (mut timed_out, mut answer_overflow) = (false, false);
        let mut buf = vec![0u8; 64 * 1024];
        let mut decoded = None;

        while !exited || answer_open || log_open {
            let now = Instant::now();
            if !exited && !timed_out && now >= deadline {
                self.kill()?;
                timed_out = true;
            }
            // Once the child is gone, drain what is buffered without waiting for anyone else.
            let wait_ms = if exited {
                0
            } else if timed_out {
                100
            } else {
                i32::try_from(
                    deadline
                        .saturating_duration_since(now)
                        .as_millis()
                        .saturating_add(1),
                )
                .unwrap_or(i32::MAX)
            };
            let mut fds = [
                PollFd::readable(self.pidfd.as_fd()),
                if answer_open {
                    PollFd::readable(self.answer.as_fd())
                } else {
                    PollFd::unused()
                },
                if log_open {
                    PollFd::readable(self.log.as_fd())
                } else {
                    PollFd::unused()
                },
            ];
            sys::poll(&mut fds, wait_ms)?;
            if fds[0].ready() {
                exited = true;
            }
            if answer_open && (fds[1].ready() || exited) {
                match drain(&mut self.answer, &mut buf, &mut answer, answer_cap, exited)? {
                    Drained::Open => {}
                    Drained::Closed => answer_open = false,
                    Drained::Overflow => {
                        answer_open = false;
                        answer_overflow = true;
                    }
                }
                // Decode as soon as the frame is whole: the child's exit (address-space
                // teardown) runs meanwhile. The bytes are no more trusted for being early.
                if decoded.is_none() && wire::single_frame(&answer, max_answer).is_ok() {
                    decoded = Some((answer.len(), decode(&answer, max_answer)));
                }
                // Refuse an announced length above the bound before reading it.
                let announced = answer.first_chunk::<4>().map(|h| u32::from_le_bytes(*h));
                if announced
                    .is_some_and(|len| usize::try_from(len).map_or(true, |l| l > max_answer))
                {
                    answer_open = false;
                    answer_overflow = true;
                }
                if answer_overflow && !exited {
                    self.kill()?;
                }
            }
            if log_open && (fds[2].ready() || exited) {
                match drain(&mut self.log, &mut buf, &mut log, LOG_KEEP, exited)? {
                    Drained::Open | Drained::Overflow => {}
                    Drained::Closed => log_open = false,
                }
            }
        }
        let status = ExitStatus::from_raw(sys::wait_pid(self.pid.as_raw())?);
        self.reaped = true;
        Ok(Ended {
            status,
            answer,
            answer_overflow,
            log,
            timed_out,
            decoded,
        })
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if !self.reaped {
            let _ = self.kill();
            let _ = sys::wait_pid(self.pid.as_raw());
        }
    }
}

enum Drained {
    /// More may come.
    Open,
    /// End of stream (or, after the child exited, nothing more buffered).
    Closed,
    /// More than `cap` bytes arrived; the excess was dropped.
    Overflow,
}

/// Read what is available into `out`, keeping at most `cap` bytes in total.
fn drain(
    src: &mut File,
    buf: &mut [u8],
    out: &mut Vec<u8>,
    cap: usize,
    exited: bool,
) -> io::Result<Drained> {
    let mut overflow = false;
    loop {
        match src.read(buf) {
            Ok(0) => {
                return Ok(if overflow {
                    Drained::Overflow
                } else {
                    Drained::Closed
                });
            }
            Ok(n) => {
                let room = cap.saturating_sub(out.len());
                out.extend_from_slice(&buf[..n.min(room)]);
                if n > room {
                    overflow = true;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                // After exit, an empty pipe that is not at EOF has a writer we do not know of
                // (a descendant that cannot exist under seccomp): stop reading it.
                return Ok(if overflow {
                    Drained::Overflow
                } else if exited {
                    Drained::Closed
                } else {
                    Drained::Open
                });
            }
            Err(e) => return Err(e),
        }
    }
}

/// What the parent makes of a child's end: a decoded answer, or the reason it cannot be used.
pub(crate) fn classify(ended: &mut Ended, max_answer: usize) -> Result<ChildAnswer, Reason> {
    if ended.timed_out {
        return Err(Reason::new(
            ReasonCode::Timeout,
            "the extraction did not finish before the deadline; the child was killed",
        ));
    }
    if ended.answer_overflow {
        return Err(Reason::new(
            ReasonCode::SandboxViolation,
            "the child's answer exceeded its size bound",
        )
        .limit(
            u64::try_from(max_answer).unwrap_or(u64::MAX),
            u64::try_from(ended.answer.len()).unwrap_or(u64::MAX),
        ));
    }
    if let Some(sig) = ended.status.signal() {
        return Err(signal_reason(sig, &ended.log));
    }
    let code = ended.status.code().unwrap_or(-1);
    let answer = match ended.decoded.take() {
        Some((len, early)) if len == ended.answer.len() => early,
        _ => decode(&ended.answer, max_answer),
    };
    match (code, answer) {
        (EXIT_ANSWERED, Ok(a)) => Ok(a),
        (EXIT_UNAVAILABLE, Ok(a)) => match a.result {
            JobResult::Unavailable { step, detail } => Err(Reason::new(
                ReasonCode::SandboxUnavailable,
                format!(
                    "confinement step `{}` failed: {}",
                    display_name(step.as_bytes()),
                    display_name(detail.as_bytes())
                ),
            )),
            JobResult::Extracted(_) | JobResult::EngineFault { .. } | JobResult::Probe(_) => {
                Err(Reason::new(
                    ReasonCode::SandboxViolation,
                    "the child's exit status contradicts its answer",
                ))
            }
        },
        (EXIT_ANSWERED | EXIT_UNAVAILABLE, Err(why)) => Err(Reason::new(
            ReasonCode::SandboxViolation,
            format!("the child's answer is unusable: {why}"),
        )),
        (code, _) => Err(Reason::new(
            ReasonCode::SandboxViolation,
            format!(
                "the child exited with status {code}{}",
                log_excerpt(&ended.log)
            ),
        )),
    }
}

/// Why the bytes a child sent are not an answer. Shared (`Arc`): the early decode is kept in
/// [`Running`], which is `Clone`.
#[derive(Debug, Clone, thiserror::Error)]
enum Unusable {
    #[error(transparent)]
    Frame(Arc<wire::WireError>),
    #[error("not a valid answer: {0}")]
    Json(Arc<serde_json::Error>),
}

fn decode(raw: &[u8], max: usize) -> Result<ChildAnswer, Unusable> {
    let payload = wire::single_frame(raw, max).map_err(|e| Unusable::Frame(Arc::new(e)))?;
    // UTF-8 checked once for the whole answer, not string by string: 15 % of decoding a
    // 10,000-entry answer. Bytes that are not UTF-8 are decoded as bytes, for serde_json's
    // own account of where they go wrong.
    match std::str::from_utf8(payload) {
        Ok(text) => serde_json::from_str(text),
        Err(_) => serde_json::from_slice(payload),
    }
    .map_err(|e| Unusable::Json(Arc::new(e)))
}

fn signal_reason(sig: i32, log: &[u8]) -> Reason {
    let name = nix::sys::signal::Signal::try_from(sig)
        .map(|s| s.as_str())
        .unwrap_or("an unknown signal");
    let said = |needle: &str| log.windows(needle.len()).any(|w| w == needle.as_bytes());
    match sig {
        libc::SIGSYS => Reason::new(
            ReasonCode::SandboxViolation,
            "the child attempted a forbidden system call and was killed (SIGSYS)",
        ),
        libc::SIGXCPU | libc::SIGXFSZ | libc::SIGKILL => Reason::new(
            ReasonCode::ResourceLimit,
            format!("the child hit a resource limit and was killed ({name})"),
        ),
        // The allocator aborts when RLIMIT_AS refuses memory; a stack overflow is reported the
        // same way. The log is untrusted, but it only picks between two rejection codes.
        libc::SIGABRT | libc::SIGSEGV
            if said("memory allocation of") || said("overflowed its stack") =>
        {
            Reason::new(
                ReasonCode::ResourceLimit,
                format!("the child ran out of memory or stack ({name})"),
            )
        }
        _ => Reason::new(
            ReasonCode::SandboxViolation,
            format!("the child crashed ({name}){}", log_excerpt(log)),
        ),
    }
}

fn log_excerpt(log: &[u8]) -> String {
    let first = log.split(|&b| b == b'\n').find(|l| !l.is_empty());
    match first {
        Some(line) => format!(": {}", display_name(line)),
        None => String::new(),
    }
}

/// How a probe child ended (tests and `doctor`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeEnd {
    /// The probe ran and reported.
    Reported(ProbeResult),
    /// Killed by this signal before it could report.
    Signaled(i32),
    /// Confinement was refused (`sandbox_unavailable`).
    Unavailable(String),
    /// Anything else: exit status and the reason it is not a report.
    Other(i32, String),
}

impl Ended {
    /// Interpret this end as a probe's.
    pub fn probe_end(&self, max_answer: usize) -> ProbeEnd {
        if let Some(sig) = self.status.signal() {
            return ProbeEnd::Signaled(sig);
        }
        match classify(&mut self.clone(), max_answer) {
            Ok(ChildAnswer {
                result: JobResult::Probe(r),
                ..
            }) => ProbeEnd::Reported(r),
            Ok(other) => ProbeEnd::Other(
                self.status.code().unwrap_or(-1),
                format!("{:?}", other.result),
            ),
            Err(r) if r.code == ReasonCode::SandboxUnavailable => ProbeEnd::Unavailable(r.detail),
            Err(r) => ProbeEnd::Other(self.status.code().unwrap_or(-1), r.detail),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::wire::ConfinementReport;

    #[test]
    fn an_answer_decodes_whole_and_bytes_that_are_not_utf8_are_refused() {
        let answer = ChildAnswer::new(
            ConfinementReport::default(),
            JobResult::EngineFault {
                detail: "caf\u{e9} \"x\"".into(),
            },
        );
        let framed = wire::json_frame(&answer).unwrap_or_default();
        match decode(&framed, 1024) {
            Ok(ChildAnswer {
                result: JobResult::EngineFault { detail },
                ..
            }) => assert_eq!(detail, "caf\u{e9} \"x\""),
            other => panic!("{other:?}"),
        }
        // The é's first byte made 0xff: the frame is whole, the JSON is not UTF-8.
        let at = framed
            .windows(2)
            .position(|w| w == [0xc3, 0xa9])
            .unwrap_or_default();
        let mut bad = framed.clone();
        bad[at] = 0xff;
        assert!(matches!(decode(&bad, 1024), Err(Unusable::Json(_))));
        let mut trailing = framed;
        trailing.push(b' ');
        assert!(matches!(decode(&trailing, 1024), Err(Unusable::Frame(_))));
    }
}
