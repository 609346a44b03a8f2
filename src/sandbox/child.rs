//! The child's entry point (the hidden `sandbox-child` subcommand): read the parent's request,
//! confine, and only then run the job over the artifact.
//!
//! This process is a fresh `exec` of our own binary or a zygote's spare (`zygote.rs`): no async
//! runtime, an empty environment, and exactly the fds of its order (0 request, 1 answer, 2 log,
//! 3 artifact memfd, 4 staging directory) besides its hashing thread's pipes. It must never
//! read a byte of the artifact before [`confine`] has returned and the memfd's seals are
//! checked, and never answer on any fd but 1.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use nix::fcntl::{FcntlArg, SealFlag, fcntl};
use nix::sys::signal::Signal;
use nix::sys::stat::{SFlag, fstat};
use nix::unistd::{Gid, Uid, getegid, geteuid, getppid, setgroups, setresgid, setresuid};

use super::wire::{
    self, ChildAnswer, ChildRequest, ConfinementReport, Enforcement, Ids, Job, JobResult,
    LandlockStatus, SeccompStage,
};
use super::{landlock, probe, rlimits, seccomp, sys};
use crate::extract::RejectedTree;
use crate::extract::hashing::{self, HashThread};
use crate::extract::inventory::Totals;
use crate::intake::Outcome;
use crate::reason::{Reason, ReasonCode};

/// Exit status after a complete answer (the verdict is in the answer, not the status).
pub const EXIT_ANSWERED: i32 = 0;
/// The fds or the request were not what the parent promised; no answer was sent.
pub const EXIT_BAD_SETUP: i32 = 2;
/// Confinement could not be applied as required; a `JobResult::Unavailable` answer was sent.
pub const EXIT_UNAVAILABLE: i32 = 3;

/// A confinement step that failed.
struct StepFailed {
    step: &'static str,
    detail: String,
}

fn failed(step: &'static str, detail: impl std::fmt::Display) -> StepFailed {
    StepFailed {
        step,
        detail: detail.to_string(),
    }
}

/// What `confine` hands to the job: the inherited fds, now owned.
struct Inherited {
    artifact: File,
    staging: OwnedFd,
}

/// The exec'd child: `sandbox-child PARENT_PID UID:GID`, its socket to the parent on fd 0.
///
/// Like a zygote's spare it takes the process steps at once, for the parent and identity on
/// its command line ([`confine_process`]), then waits for its order: the five fds of one request,
/// which land on 0 to 4 (`zygote::receive_order`). So the parent can start it before it has a
/// request (`skillbox extract` does, before parsing its command line), and its `exec` and
/// start-up overlap the parent's own work. It reads nothing but the order before [`main`], which
/// reads the request, confines and only then touches the artifact. Started any other way (by
/// hand, or by a process other than the one named), it exits at once with
/// [`EXIT_BAD_SETUP`]. Ends the process with `_exit` (no destructors).
pub fn run() -> ! {
    // Started through an fd (`/proc/self/fd/N`), the kernel named us `N`: the name a spare
    // takes too, for ps and /proc/PID/comm. Before confinement; nothing depends on it.
    let _ = nix::sys::prctl::set_name(c"skillbox-child");
    let mut args = std::env::args_os().skip(2);
    let parent = args
        .next()
        .and_then(|a| a.to_str()?.parse::<u32>().ok())
        .filter(|&p| u32::try_from(getppid().as_raw()).ok() == Some(p));
    let run_as = args
        .next()
        .and_then(|a| super::zygote::parse_ids(a.to_str()?));
    let (Some(parent), Some(run_as), None) = (parent, run_as, args.next()) else {
        sys::exit_now(EXIT_BAD_SETUP)
    };
    // The socket goes to the spare's place and every other fd is closed, so the order's five
    // fds land on 0 to 4 (received fds take the lowest free numbers, in order).
    let socket = sys::inherited_fd(0).and_then(|s| sys::move_fd(s, super::zygote::SPARE_SOCKET_FD));
    if socket.is_err()
        || sys::close_fd_range(0, super::zygote::SPARE_SOCKET_FD.unsigned_abs() - 1).is_err()
        || sys::close_fds_from(super::zygote::SPARE_SOCKET_FD.unsigned_abs() + 1).is_err()
    {
        sys::exit_now(EXIT_BAD_SETUP);
    }
    let Ok(control) = sys::inherited_fd(super::zygote::SPARE_SOCKET_FD) else {
        sys::exit_now(EXIT_BAD_SETUP)
    };
    let process = confine_process(Some(run_as), parent);
    // End of stream (the parent gave up on us) or anything but a well-formed order: exit.
    if super::zygote::receive_order(control.as_fd()).is_none() {
        sys::exit_now(EXIT_BAD_SETUP);
    }
    drop(control);
    sys::exit_now(main(process))
}

/// [`run`] for a spare that took the process steps already.
pub(crate) fn run_prepared(process: ProcessSteps) -> ! {
    sys::exit_now(main(process))
}

/// The child's `main`, returning its exit status (once a job's answer is written, it ends
/// the process itself, `_exit` with that status): `process` holds the process steps, taken
/// before the order came (by an exec'd child or a zygote's spare), for the identity and parent
/// the request must name; fds 0 to 4 are the order's, 5 to 8 the hashing thread's pipes, and
/// nothing else is open.
fn main(process: ProcessSteps) -> i32 {
    let Ok(mut answer) = sys::inherited_fd(1).map(File::from) else {
        return EXIT_BAD_SETUP;
    };
    let Some((input, mut request, program)) = read_request() else {
        return EXIT_BAD_SETUP;
    };
    if request.build != wire::SOURCE_ID {
        let result = JobResult::Unavailable {
            step: "build".to_owned(),
            detail: format!(
                "the child binary was built from other sources ({}) than its parent ({}); rebuild both (`cargo build` builds skillbox and skillbox-child)",
                wire::SOURCE_ID,
                request.build
            ),
        };
        let report = ConfinementReport::default();
        return match send(&mut answer, &ChildAnswer::new(report, result)) {
            Ok(()) => EXIT_UNAVAILABLE,
            Err(_) => EXIT_BAD_SETUP,
        };
    }
    let mut report = ConfinementReport::default();
    let confined = confine(&request, &program, process, &mut report).and_then(|inherited| {
        // The parent seals the artifact while we confine; its digest is the last frame, and
        // the seals are checked before a byte of the artifact is read.
        let digest = read_sealed_digest(input)
            .ok_or_else(|| failed("fds", "the parent did not finish the request"))?;
        check_sealed(&inherited.artifact)?;
        if let Job::Extract(req) = &mut request.job {
            req.sealed_digest = Some(digest);
        }
        Ok(inherited)
    });
    let inherited = match confined {
        Ok(i) => i,
        Err(StepFailed { step, detail }) => {
            let result = JobResult::Unavailable {
                step: step.to_owned(),
                detail,
            };
            return match send(&mut answer, &ChildAnswer::new(report, result)) {
                Ok(()) => EXIT_UNAVAILABLE,
                Err(_) => EXIT_BAD_SETUP,
            };
        }
    };
    // Confined. From here on the artifact may be read.
    let mut hashed_inline = false;
    let result = match &request.job {
        Job::Extract(req) => {
            // While other requests keep the parent's cores busy, handing a small artifact's
            // files to the second thread buys no time (no core is idle for it) and costs a
            // message, a wake-up and a reply per file: extracted on this thread alone, a request
            // took about a tenth less CPU (bench-results/load.md).
            if request.busy
                && crate::extract::hashing::installed().is_some()
                && inherited
                    .artifact
                    .metadata()
                    .is_ok_and(|m| m.len() < crate::extract::hashing::BUSY_INLINE_BELOW)
            {
                crate::extract::hashing::hash_here_only();
                hashed_inline = true;
            }
            // A rejected tree is left as it stands: the parent removes the staging directory
            // after every answer but an acceptance, once we are gone, outside our deadline.
            // Emptying it here as well spent that deadline on the filesystem's time (16 of 30 s
            // for 9,990 links on a disk mounted `discard`), and a rejection became a timeout.
            match crate::intake::run_releasing(
                inherited.artifact,
                inherited.staging.as_fd(),
                req,
                RejectedTree::Left,
            ) {
                Ok((outcome, kept)) => {
                    // The kept bytes (mapped windows of the memfd, copies of small files) are
                    // left to the exit, which unmaps everything in one pass; unmapped here, one
                    // by one, they took about 0.9 ms of this thread's last stretch, which runs
                    // alone on its core (2,000-file tar, bench-results/throughput.md).
                    std::mem::forget(kept);
                    JobResult::Extracted(Box::new(outcome))
                }
                Err(e) => JobResult::EngineFault {
                    detail: e.to_string(),
                },
            }
        }
        Job::Probe(p) => match probe::run(
            p,
            &inherited.artifact,
            inherited.staging.as_fd(),
            &mut answer,
            &report,
        ) {
            Some(r) => JobResult::Probe(r),
            None => return EXIT_ANSWERED,
        },
    };
    let mut frame = ChildAnswer {
        report,
        result,
        hashed_inline,
    };
    let Ok(mut framed) = wire::json_frame(&frame) else {
        return EXIT_BAD_SETUP;
    };
    let json_len = framed.len() - wire::PREFIX;
    // A package inside every limit can still have an inventory the parent will not read
    // (10,000 names and link targets of 1,000 quotes each, which JSON doubles, are 40 MB):
    // answering it would read as a misbehaving child (`sandbox_violation`). Refused here
    // instead, for what it is; its tree, as every rejected one, is the parent's to remove.
    if json_len > wire::DEFAULT_MAX_ANSWER_BYTES
        && let JobResult::Extracted(outcome) = &frame.result
    {
        let reason = Reason::new(
            ReasonCode::ResourceLimit,
            // The size itself goes in `observed` only: it includes the confinement report,
            // which differs between a spare and an exec'd child.
            format!(
                "the inventory and review of this package are larger than the {} bytes the \
                 parent reads from the child",
                wire::DEFAULT_MAX_ANSWER_BYTES
            ),
        )
        .limit(
            u64::try_from(wire::DEFAULT_MAX_ANSWER_BYTES).unwrap_or(u64::MAX),
            u64::try_from(json_len).unwrap_or(u64::MAX),
        );
        let totals = Totals {
            entries: 0,
            files: 0,
            dirs: 0,
            symlinks: 0,
            ..outcome.totals.clone()
        };
        frame.result = JobResult::Extracted(Box::new(Outcome::rejected(
            outcome.artifact.clone(),
            totals,
            reason,
        )));
        let Ok(smaller) = wire::json_frame(&frame) else {
            return EXIT_BAD_SETUP;
        };
        framed = smaller;
    }
    let status = match answer.write_all(&framed) {
        Ok(()) => EXIT_ANSWERED,
        Err(_) => EXIT_BAD_SETUP,
    };
    // Ended here, not by returning: the answer and the inventory (10,000 entries and more)
    // are not freed one allocation at a time by a process about to exit.
    sys::exit_now(status)
}

/// The request (JSON) and the seccomp program (raw BPF), both bounded, and fd 0 to read the
/// last frame from.
fn read_request() -> Option<(File, ChildRequest, Vec<seccompiler::sock_filter>)> {
    let input = File::from(sys::inherited_fd(0).ok()?);
    let json = wire::read_frame(&input, wire::MAX_REQUEST_BYTES).ok()?;
    let program = wire::read_frame(&input, wire::MAX_BPF_BYTES).ok()?;
    let request = serde_json::from_slice(&json).ok()?;
    Some((input, request, seccomp::from_bytes(&program)?))
}

/// The request's last frame: the digest of the artifact as sealed. Blocks until the parent has
/// sealed it; `None` if the parent gave up (end of file) or sent anything else. fd 0 is closed
/// after.
fn read_sealed_digest(input: File) -> Option<crate::digest::Sha256Digest> {
    let raw = wire::read_frame(&input, wire::SEALED_DIGEST_BYTES).ok()?;
    let bytes = <[u8; wire::SEALED_DIGEST_BYTES]>::try_from(raw).ok()?;
    Some(crate::digest::Sha256Digest::from_bytes(bytes))
}

/// The artifact memfd must carry all four seals (no write, grow, shrink, or seal change), so
/// what we read is exactly what the parent hashed. Not skippable.
fn check_sealed(artifact: &File) -> Result<(), StepFailed> {
    let seals = fcntl(artifact.as_fd(), FcntlArg::F_GET_SEALS)
        .map_err(|e| failed("fds", format!("artifact seals: {e}")))?;
    let wanted = SealFlag::F_SEAL_WRITE
        | SealFlag::F_SEAL_GROW
        | SealFlag::F_SEAL_SHRINK
        | SealFlag::F_SEAL_SEAL;
    if !SealFlag::from_bits_truncate(seals).contains(wanted) {
        return Err(failed("fds", "the artifact memfd is not sealed"));
    }
    Ok(())
}

fn send(answer: &mut File, msg: &ChildAnswer) -> io::Result<()> {
    answer.write_all(&wire::json_frame(msg)?)
}

/// The steps of confinement that concern the process rather than the request (3 to 6 of
/// [`confine`]): identity, capabilities, process attributes and no_new_privs. Every child runs
/// them before its order arrives (a zygote's spare, and an exec'd child, for the identity and
/// parent on their command lines), so they are off the request's path whenever the child was
/// started ahead. Failures are kept, in order, until the request says whether a step may be
/// skipped.
pub(crate) struct ProcessSteps {
    /// The identity switched to (started as root) or that would have been.
    run_as: Option<Ids>,
    parent_pid: u32,
    failures: Vec<StepFailed>,
    no_new_privs: bool,
    uid: u32,
    gid: u32,
    /// A spare's first seccomp stage: `None` if none was installed (an exec'd child).
    first_stage: Option<Result<(), seccompiler::Error>>,
    /// The thread that hashes files while they are written, started here so that every later
    /// step (the first seccomp stage of a spare included) covers it; `None` if it could not
    /// be started (files are then hashed inline).
    hash_thread: Option<HashThread>,
}

impl ProcessSteps {
    /// Install the first stage of a spare's filter, and record how it went. The hashing thread
    /// is waited for first: its start makes calls the filter does not allow, and the filter
    /// covers every thread.
    pub(crate) fn install_first_stage(&mut self, program: &[seccompiler::sock_filter]) {
        if let Some(t) = self.hash_thread.take() {
            match t.wait_started() {
                Ok(()) => self.hash_thread = Some(t),
                // Not used, and not ended either (see `confine`): files are hashed inline.
                Err(_) => std::mem::forget(t),
            }
        }
        self.first_stage = Some(seccomp::install(program));
    }
}

/// Steps 3 to 6 of [`confine`] (see there). Exits at once if the parent is already gone.
pub(crate) fn confine_process(run_as: Option<Ids>, parent_pid: u32) -> ProcessSteps {
    let mut failures = Vec::new();

    // 3. Identity.
    if geteuid().is_root() {
        let step = match run_as {
            None => Err(failed(
                "identity",
                "started as root and no unprivileged uid/gid to switch to",
            )),
            Some(ids) => {
                let (uid, gid) = (Uid::from_raw(ids.uid), Gid::from_raw(ids.gid));
                sys::drop_bounding_set()
                    .map_err(|e| failed("identity", format!("capability bounding set: {e}")))
                    .and_then(|()| {
                        setgroups(&[]).map_err(|e| failed("identity", format!("setgroups: {e}")))
                    })
                    .and_then(|()| {
                        setresgid(gid, gid, gid)
                            .map_err(|e| failed("identity", format!("setresgid: {e}")))
                    })
                    .and_then(|()| {
                        setresuid(uid, uid, uid)
                            .map_err(|e| failed("identity", format!("setresuid: {e}")))
                    })
                    .and_then(|()| {
                        let r = nix::unistd::getresuid().map_err(|e| failed("identity", e))?;
                        let g = nix::unistd::getresgid().map_err(|e| failed("identity", e))?;
                        if [r.real, r.effective, r.saved] != [uid; 3]
                            || [g.real, g.effective, g.saved] != [gid; 3]
                        {
                            return Err(failed("identity", "uid/gid did not change"));
                        }
                        Ok(())
                    })
            }
        };
        if let Err(f) = step {
            failures.push(f);
        }
    }

    // 4. Capabilities.
    let caps = sys::clear_ambient_caps()
        .and_then(|()| sys::clear_capabilities())
        .and_then(|()| sys::capabilities())
        .map_err(|e| failed("capabilities", e))
        .and_then(|sets| match sets {
            (0, 0, 0) => Ok(()),
            (e, p, i) => Err(failed(
                "capabilities",
                format!("still held: eff {e:#x} prm {p:#x} inh {i:#x}"),
            )),
        });
    if let Err(f) = caps {
        failures.push(f);
    }

    // 5. Process attributes.
    let attrs = nix::sys::prctl::set_dumpable(false)
        .and_then(|()| nix::sys::prctl::set_pdeathsig(Signal::SIGKILL))
        .map_err(|e| failed("process attributes", e));
    if let Err(f) = attrs {
        failures.push(f);
    }
    // Files and directories are created with exactly the modes the writer gives, whatever
    // umask the caller had (`umask` is not on the allow-list: now, before confinement).
    crate::extract::writer::clear_umask();
    if u32::try_from(getppid().as_raw()).ok() != Some(parent_pid) {
        // The parent died before the death signal was armed: nobody is waiting for an answer.
        sys::exit_now(EXIT_BAD_SETUP);
    }

    // 6. no_new_privs.
    let no_new_privs = match nix::sys::prctl::set_no_new_privs() {
        Ok(()) => true,
        Err(e) => {
            failures.push(failed("no_new_privs", e));
            false
        }
    };
    ProcessSteps {
        run_as,
        parent_pid,
        failures,
        no_new_privs,
        uid: geteuid().as_raw(),
        gid: getegid().as_raw(),
        first_stage: None,
        // Started after the identity, capability and no_new_privs steps, which a new thread
        // inherits (credentials, capability sets and no_new_privs are per thread, copied at
        // creation); the process-wide ones (dumpable, rlimits) cover it anyway. Landlock and
        // seccomp come later, for both threads (`confine`, steps 8 and 9). Not waited for:
        // it starts while this thread reads its request, and the first round trip with it
        // (its Landlock step, or a spare's first seccomp stage) comes before any filter.
        hash_thread: start_hash_thread().ok(),
    }
}

/// The hashing thread, its pipes on fds 5 to 8 (between the staging fd and a spare's socket: a
/// spare's order must still land on 0 to 4), started but not waited for.
fn start_hash_thread() -> io::Result<HashThread> {
    let pipe = |at: i32| -> io::Result<(File, File)> {
        let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
        // The write end first: when the pipe came out at 0 and 1, moving the read end to `at`
        // must not close the other one.
        sys::move_fd(w, at + 1)?;
        sys::move_fd(r, at)?;
        Ok((
            File::from(sys::inherited_fd(at)?),
            File::from(sys::inherited_fd(at + 1)?),
        ))
    };
    #[cfg(target_env = "gnu")]
    sys::malloc_one_arena()?;
    let work = pipe(sys::CHILD_HASH_FDS)?;
    let replies = pipe(sys::CHILD_HASH_FDS + 2)?;
    // The review's trigger pass runs on the helper too, over the bytes it hashes, and here over
    // the small files hashed here that the engine keeps none of.
    let scan = Box::new(crate::skill::triggers::Prescan::new());
    HashThread::start_with(work, replies, Some(scan))
        .map(|t| t.scan_inline(Box::new(crate::skill::triggers::Prescan::new())))
}

/// Confine this process before it reads a byte of the artifact. Every step is irreversible,
/// and the order matters: each later step relies on the earlier ones.
///
/// 1. **Inherited fds.** Take ownership of fds 3 (the artifact memfd) and 4 (the staging
///    directory) and check that 4 is a directory. Everything above 4 was closed by `main`. Not
///    skippable. The memfd's seals are checked after this function, once the parent has sent
///    the last request frame (it seals while we confine), and before the artifact is read.
/// 2. **The process steps match the request.** Steps 3 to 6 ran already ([`confine_process`]:
///    in a spare before its order, or in an exec'd child just now), for the identity and parent
///    the request names; a mismatch is refused. Their failures are judged here, in order.
/// 3. **Identity.** Started as root: empty the capability bounding set (still privileged enough
///    to), drop supplementary groups, then `setresgid` and `setresuid` to the unprivileged ids;
///    verify all three uids and gids changed. Leaving uid 0 without `PR_SET_KEEPCAPS` clears the
///    permitted and effective sets. Refused outright if no unprivileged identity was given.
/// 4. **Capabilities.** Clear the ambient set, `capset` everything to zero, and verify with
///    `capget` that effective, permitted and inheritable are empty.
/// 5. **Process attributes.** Not dumpable (no core, no same-uid ptrace or /proc peeking), and
///    SIGKILL on parent death. Both after step 3, because a credential change resets them. If
///    the parent is already gone, exit at once.
/// 6. **no_new_privs**, so nothing later can gain privileges through exec (there is no exec,
///    but seccomp and Landlock require it of unprivileged callers anyway).
/// 7. **Resource limits.** Core dumps off, a small fd table, the file-size, CPU and
///    address-space ceilings from the request's plan (`rlimits.rs`); only ever lowered, so the
///    unprivileged identity can set them.
/// 8. **Landlock**: reach nothing but the staging directory (`landlock.rs`).
/// 9. **Seccomp last**: the allow-list (`seccomp.rs`); after it even the Landlock and prctl
///    calls above would kill the process.
///
/// Under `Enforcement::AllowUnconfined`, steps 3 to 9 that fail are recorded in
/// `report.missing` and skipped; otherwise the first failure is returned and the job never runs.
fn confine(
    req: &ChildRequest,
    program: &[seccompiler::sock_filter],
    process: ProcessSteps,
    report: &mut ConfinementReport,
) -> Result<Inherited, StepFailed> {
    let degrade = |report: &mut ConfinementReport, f: StepFailed| -> Result<(), StepFailed> {
        match req.enforcement {
            Enforcement::Required => Err(f),
            Enforcement::AllowUnconfined => {
                report.missing.push(format!("{}: {}", f.step, f.detail));
                Ok(())
            }
        }
    };

    // 1. Inherited fds.
    let artifact = sys::inherited_fd(sys::CHILD_ARTIFACT_FD)
        .map_err(|e| failed("fds", format!("artifact fd: {e}")))?;
    let staging = sys::inherited_fd(sys::CHILD_STAGING_FD)
        .map_err(|e| failed("fds", format!("staging fd: {e}")))?;
    let st = fstat(staging.as_fd()).map_err(|e| failed("fds", format!("staging fd: {e}")))?;
    if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT != SFlag::S_IFDIR {
        return Err(failed("fds", "the staging fd is not a directory"));
    }

    // 2. The process steps were taken for this request; then 3 to 6, judged in order.
    if process.run_as != req.run_as || process.parent_pid != req.parent_pid {
        return Err(failed(
            "identity",
            "the child was prepared for another identity or parent than the request names",
        ));
    }
    for f in process.failures {
        degrade(report, f)?;
    }
    report.uid = process.uid;
    report.gid = process.gid;
    report.no_new_privs = process.no_new_privs;

    // 7. Resource limits.
    match rlimits::apply(&req.rlimits) {
        Ok(()) => report.rlimits = Some(req.rlimits),
        Err((which, e)) => degrade(report, failed("rlimits", format!("{which}: {e}")))?,
    }

    // 8. Landlock.
    match landlock::restrict_to(staging.as_fd(), req.enforcement) {
        Ok(applied) => {
            report.landlock_abi = applied.abi;
            report.landlock = applied.status;
            report.landlock_features = applied.features;
            if applied.status == LandlockStatus::NotEnforced {
                degrade(report, failed("landlock", "not enforced by this kernel"))?;
            }
        }
        Err(e) => {
            report.landlock_abi = landlock::kernel_abi().0;
            report.landlock = LandlockStatus::NotEnforced;
            degrade(report, failed("landlock", e))?;
        }
    }
    // Landlock restricts the calling thread only: the hashing thread restricts itself with the
    // same ruleset, and must end up exactly as restricted as this one, or the job does not run
    // (a thread of this process left outside the domain could be made to open any path).
    let mut hash_thread = process.hash_thread;
    if let Some(t) = hash_thread.take() {
        // By number: this thread holds the staging fd open, and waits while the other runs.
        let (dir, enforcement) = (staging.as_raw_fd(), req.enforcement);
        let restricted = t
            .run(move || {
                sys::with_fd(dir, |dir| landlock::restrict_to(dir, enforcement))
                    .map_err(|e| e.to_string())
                    .and_then(|r| r.map(|a| a.status).map_err(|e| e.to_string()))
            })
            .map_err(|e| e.to_string())
            .and_then(|r| r);
        // Restricted exactly as this thread (unrestricted alike only where the operator allowed
        // running unconfined and the kernel has no Landlock).
        let mismatch = match restricted {
            Ok(status) if status == report.landlock => None,
            Ok(status) => Some(format!(
                "the hashing thread is {status:?}, the main thread {:?}",
                report.landlock
            )),
            Err(e) => Some(format!("hashing thread: {e}")),
        };
        match mismatch {
            None => hash_thread = Some(t),
            Some(detail) => {
                // Never used, and never ended either: a thread exiting while the filter is
                // installed on every thread could fail the install, and after it would need
                // calls the filter kills. It stays blocked on its pipe until the process exits.
                std::mem::forget(t);
                degrade(report, failed("landlock", detail))?;
            }
        }
    }

    // 9. Seccomp, last: the whole profile, or the second stage of a spare's filter, which only
    // completes the first stage it installed before its order.
    let stage = match (req.seccomp_stage, process.first_stage) {
        (SeccompStage::Whole, _) | (SeccompStage::Second, Some(Ok(()))) => Ok(()),
        (SeccompStage::Second, Some(Err(e))) => Err(format!("first stage: {e}")),
        (SeccompStage::Second, None) => Err("a second stage without the first".to_owned()),
    };
    match stage.and_then(|()| seccomp::install(program).map_err(|e| e.to_string())) {
        Ok(()) => report.seccomp = true,
        Err(e) => degrade(report, failed("seccomp", e))?,
    }

    // Both threads are confined: from here on, extractions hash on the second one.
    // (Unconfined by the operator's choice, it is not used: nothing would vouch for it.)
    if let Some(t) = hash_thread.filter(|_| report.seccomp) {
        // A second install cannot happen (one confinement per process); were it to, the
        // extraction would hash inline.
        let _ = hashing::install(t);
    }
    Ok(Inherited {
        artifact: File::from(artifact),
        staging,
    })
}
