//! The zygote: a pre-started, never-confined, never-trusted-with-input copy of our own binary
//! that forks the broker's children ahead of time, so a request pays neither for `exec`
//! (dynamic relocation of a large binary, CPUID traps in the loader on a VM, page faults of a
//! fresh image, lazy tables built again) nor for the fork itself.
//!
//! What the zygote is:
//! - A fresh `exec` of `/proc/self/exe sandbox-zygote <broker pid> <uid>:<gid>` with an empty
//!   environment,
//!   started by the broker's keeper thread; fd 0 is a `SOCK_SEQPACKET` control socket, 1 is
//!   /dev/null, 2 the broker's stderr; everything else is closed before anything runs.
//! - Single-threaded. It never reads a request, an artifact or a staging tree. Asked for a
//!   spare, it forks one with `CLONE_PARENT` and a `SOCK_SEQPACKET` socket of its own, and
//!   answers the spare's pid with the broker's end of that socket.
//!
//! What a spare is (comm `skillbox-spare`): a forked process that breaks copy-on-write of its
//! small writable mappings, takes the process steps of confinement (identity, capabilities,
//! not dumpable, parent-death signal, no_new_privs: `child::confine_process`, for the identity
//! on the zygote's command line) and installs the first stage of the seccomp filter (the broker
//! sends it to the zygote once, at start; `seccomp::Profile::stages`), then holds only its
//! socket, at fd 9, and waits for one order. The broker keeps one spare ready. For a request it
//! sends the five fds (request pipe, answer pipe, log pipe, artifact memfd, staging directory)
//! straight to the spare, where they land on 0 to 4 (the lowest free numbers); it closes its
//! socket, renames itself `skillbox-child` and runs the same `child::main` as an exec'd child:
//! the same bounded request read, the same linear `confine()` (ending with the second seccomp
//! stage) before a byte of the artifact is read. The broker asks the zygote for the next spare
//! once the child is under way when other requests want one, else once the child has ended
//! (`Sandbox::run_in`), so a lone child does not share its cores with the fork.
//!
//! Because of `CLONE_PARENT` every spare is the broker's own child: the broker knows its pid
//! before it is used, holds its pidfd once it is, kills it at the deadline and reaps it with
//! its real exit status, exactly as on the exec path (`supervise.rs`). A spare that is never
//! used (the zygote retired, the sandbox dropped) is killed and reaped by pid; one whose broker
//! end closes exits by itself. Its parent-death signal follows the keeper thread, which lives
//! as long as the [`Zygote`].
//!
//! The price: every child forked from one zygote shares its address-space layout (ASLR) and
//! stack-protector canary, so a memory disclosure in one child would help an exploit in the
//! next. A zygote is therefore retired after `max_forks` children and replaced by a fresh
//! `exec`; `--zygote-max-forks 0` on the broker turns the zygote off (one `exec` per request).

use std::io::{self, IoSlice};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, IntoRawFd, OwnedFd, RawFd};
use std::process::{Child, Stdio};
use std::sync::{Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::Duration;

use nix::sys::signal::Signal;
use nix::sys::socket::{
    AddressFamily, ControlMessage, MsgFlags, SockFlag, SockType, sendmsg, setsockopt, socketpair,
    sockopt,
};
use nix::sys::time::TimeVal;

use super::child_binary::ChildBinary;
use super::wire::Ids;
use super::{child, seccomp, sys, wire};

/// The hidden subcommand the zygote runs under.
pub const ZYGOTE_SUBCOMMAND: &str = "sandbox-zygote";

/// Children forked from one zygote before it is replaced by a fresh `exec`, by default (the
/// broker's and replay's): children of one zygote share its address-space layout.
pub const DEFAULT_MAX_FORKS: u32 = 256;

/// The broker's request for one spare; anything else is refused.
const SPARE_REQUEST: &[u8] = b"skillbox-zygote-spare-1";
/// The order a spare waits for, with its [`ORDER_FDS`] fds.
const ORDER: &[u8] = b"skillbox-spare-order-1";
/// Fds per order: request, answer, log, artifact, staging (their numbers in the child).
pub(super) const ORDER_FDS: usize = 5;
/// How long the broker waits for the zygote's answer to one request (a fork takes well under a
/// millisecond; this only keeps a wedged zygote from wedging the broker).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);
/// Where a spare keeps its socket while it waits (fds 0 to 4 stay free for the order).
pub(super) const SPARE_SOCKET_FD: RawFd = 9;

/// The zygote's `main`. Returns the process exit status (0 when the broker hung up).
pub fn main() -> i32 {
    // Only 0 (control), 1 and 2 may be open; anything else leaked from the broker's side.
    if sys::close_fds_from(3).is_err() {
        return child::EXIT_BAD_SETUP;
    }
    // Die with the broker's keeper thread, and not outlive a broker that is already gone.
    let parent = std::env::args().nth(2).and_then(|p| p.parse::<i32>().ok());
    if nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).is_err()
        || parent != Some(nix::unistd::getppid().as_raw())
    {
        return child::EXIT_BAD_SETUP;
    }
    // The identity every child is to run as (`UID:GID`), which spares take before their order.
    let Some(run_as) = std::env::args().nth(3).as_deref().and_then(parse_ids) else {
        return child::EXIT_BAD_SETUP;
    };
    let Some(broker) = parent.and_then(|p| u32::try_from(p).ok()) else {
        return child::EXIT_BAD_SETUP;
    };
    let Ok(control) = sys::inherited_fd(0) else {
        return child::EXIT_BAD_SETUP;
    };
    // Names for ps and /proc/PID/comm (the forked children share the zygote's command line).
    let _ = nix::sys::prctl::set_name(c"skillbox-zygote");
    // Started as root: empty the bounding set once here, so that every spare inherits it empty
    // and its own drop (`child::confine_process`, which still checks and reports the step) has
    // nothing left to copy its credentials for. The zygote keeps its effective capabilities
    // (a spare still needs them to take the children's identity); the bounding set only
    // limits what an `execve` could gain, and the zygote never executes anything. A failure
    // here is only a lost saving: the spare's own drop fails the same way and is reported.
    if nix::unistd::geteuid().is_root() {
        let _ = sys::drop_bounding_set();
    }
    warm_up();
    // Ready: every leaked fd is closed and the tables are built.
    if answer(control.as_fd(), 0, None).is_err() {
        return child::EXIT_BAD_SETUP;
    }
    // The first stage of every spare's seccomp filter (`seccomp::Profile::stages`).
    let Some(first_stage) = receive_program(control.as_fd()) else {
        return child::EXIT_BAD_SETUP;
    };
    if answer(control.as_fd(), 0, None).is_err() {
        return child::EXIT_BAD_SETUP;
    }
    let writable = writable_mappings();
    loop {
        match receive(control.as_fd(), SPARE_REQUEST, 0) {
            Ok(Some(_)) => {}
            Ok(None) => return 0,
            Err(Refused::Order(e)) => {
                let errno = e.raw_os_error().unwrap_or(libc::EINVAL);
                if answer(control.as_fd(), -errno, None).is_err() {
                    return child::EXIT_BAD_SETUP;
                }
                continue;
            }
            Err(Refused::Socket) => return child::EXIT_BAD_SETUP,
        }
        let sent = match fork_spare(run_as, broker, &first_stage, &writable) {
            Ok((pid, broker_end)) => answer(control.as_fd(), pid, Some(broker_end.as_fd())),
            Err(e) => answer(
                control.as_fd(),
                -e.raw_os_error().unwrap_or(libc::EIO),
                None,
            ),
        };
        if sent.is_err() {
            return child::EXIT_BAD_SETUP;
        }
    }
}

/// Fork one spare with `CLONE_PARENT` and a socket of its own; returns its pid and the
/// broker's end of that socket (ours to pass on and close).
fn fork_spare(
    run_as: Ids,
    broker: u32,
    first_stage: &[seccompiler::sock_filter],
    writable: &[(usize, usize)],
) -> io::Result<(i32, OwnedFd)> {
    let (broker_end, spare_end) = socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )?;
    match sys::clone_parent()? {
        0 => {
            drop(broker_end);
            spare(spare_end, run_as, broker, first_stage, writable)
        }
        pid => Ok((pid, broker_end)),
    }
}

/// A spare: forked ahead of time, it waits for one order, then becomes that request's child.
///
/// Forking (copying the zygote's page tables), the process steps of confinement and the first
/// seccomp stage are thereby off the request's path: the broker sends the order straight to
/// the spare. Until then the spare holds its socket at [`SPARE_SOCKET_FD`], nothing else, and
/// reads nothing but the order, whose five fds land on 0 to 4.
fn spare(
    socket: OwnedFd,
    run_as: Ids,
    broker: u32,
    first_stage: &[seccompiler::sock_filter],
    writable: &[(usize, usize)],
) -> ! {
    let _ = nix::sys::prctl::set_name(c"skillbox-spare");
    // Our socket goes to SPARE_SOCKET_FD and every other fd is closed, so the order's five fds
    // land on 0 to 4 (received fds take the lowest free numbers, in order).
    if sys::move_fd(socket, SPARE_SOCKET_FD).is_err()
        || sys::close_fd_range(0, SPARE_SOCKET_FD.unsigned_abs() - 1).is_err()
        || sys::close_fds_from(SPARE_SOCKET_FD.unsigned_abs() + 1).is_err()
    {
        sys::exit_now(child::EXIT_BAD_SETUP);
    }
    let Ok(control) = sys::inherited_fd(SPARE_SOCKET_FD) else {
        sys::exit_now(child::EXIT_BAD_SETUP)
    };
    prefault(writable);
    // Identity, capabilities, process attributes, no_new_privs, then the first stage of the
    // seccomp filter: nothing of these depends on the request, so they are taken now rather
    // than after the order (`child::confine_process`, `seccomp::Profile::stages`).
    let mut process = child::confine_process(Some(run_as), broker);
    process.install_first_stage(first_stage);
    // End of stream (the broker dropped us) or anything but a well-formed order: exit. A spare
    // that exits unused is reaped by the broker, which knows its pid.
    if receive_order(control.as_fd()).is_none() {
        sys::exit_now(child::EXIT_BAD_SETUP);
    }
    drop(control);
    let _ = nix::sys::prctl::set_name(c"skillbox-child");
    child::run_prepared(process)
}

/// Wait for the one order a spare (or an exec'd child) takes, and leave its five fds open at
/// 0 to 4, exactly where `child::main` expects them (request, answer, log, artifact, staging):
/// from then on they are the child's, found by number. `None` at end of stream or for anything
/// but a well-formed order.
pub(super) fn receive_order(control: BorrowedFd<'_>) -> Option<()> {
    let fds = receive(control, ORDER, ORDER_FDS).ok()??;
    if fds.iter().zip(0..).any(|(fd, n)| fd.as_raw_fd() != n) {
        return None;
    }
    for fd in fds {
        let _ = fd.into_raw_fd();
    }
    Some(())
}

/// Send one order: `fds` land on 0 to 4 of the process at the other end of `socket`.
pub(super) fn send_order(
    socket: BorrowedFd<'_>,
    fds: &[BorrowedFd<'_>; ORDER_FDS],
) -> io::Result<()> {
    let raw = fds.each_ref().map(AsRawFd::as_raw_fd);
    let cmsg = [ControlMessage::ScmRights(&raw)];
    sendmsg::<()>(
        socket.as_raw_fd(),
        &[IoSlice::new(ORDER)],
        &cmsg,
        MsgFlags::MSG_NOSIGNAL,
        None,
    )?;
    Ok(())
}

/// `UID:GID`, as the broker passes it.
pub(super) fn parse_ids(s: &str) -> Option<Ids> {
    let (uid, gid) = s.split_once(':')?;
    Some(Ids {
        uid: uid.parse().ok()?,
        gid: gid.parse().ok()?,
    })
}

/// Break copy-on-write now, while no request waits, for the small writable mappings the spare
/// shares with the zygote (heap, stack, data): otherwise the child takes those faults one by one
/// after its order. Best effort: a failure only costs the faults later.
///
/// Code pages are left to fault in: populating all of the text (a fork does not copy the page
/// tables of file mappings) saved about as much per request as unmapping it at exit then cost.
fn prefault(ranges: &[(usize, usize)]) {
    for &(start, len) in ranges {
        let _ = sys::populate_write(start, len);
    }
}

/// The small private writable mappings of this process, as (start, length): read once by the
/// zygote, whose spares inherit exactly its mappings.
///
/// Of the stack, only the pages a spare and its child will write: from here (the zygote's
/// loop, which forks every spare from about this depth) [`STACK_AHEAD`] down, and the page
/// here. Above it are the frames of the zygote's start, which a spare never returns to;
/// populating the whole 132 KiB mapping copied or zeroed 33 pages where a child writes about
/// 13 (page faults by address, bench-results/load.md, seventeenth session).
fn writable_mappings() -> Vec<(usize, usize)> {
    /// Writable mappings above this are left alone (populating would allocate, not just map).
    const MAX_WRITE: usize = 1 << 20;
    const PAGE: usize = 4096;
    let here = std::hint::black_box(0u8);
    let here = std::ptr::addr_of!(here) as usize & !(PAGE - 1);
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for line in maps.lines() {
        let mut f = line.split_ascii_whitespace();
        let (Some(range), Some(perms)) = (f.next(), f.next()) else {
            continue;
        };
        let path = f.nth(3).unwrap_or("");
        let Some((a, b)) = range.split_once('-') else {
            continue;
        };
        let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16)) else {
            continue;
        };
        let len = b.saturating_sub(a);
        if perms == "rw-p" && !path.starts_with("[v") && len <= MAX_WRITE {
            if path == "[stack]" && (a..b).contains(&here) {
                let from = here.saturating_sub(STACK_AHEAD).max(a);
                out.push((from, (here + PAGE).min(b) - from));
            } else {
                out.push((a, len));
            }
        }
    }
    out
}

/// How much stack below the zygote's loop a spare and its child use at most, as far as
/// populating ahead is concerned (a deeper call only takes its faults as usual): a child wrote
/// 11 pages of it on the typical package, its spare 2.
const STACK_AHEAD: usize = 64 * 1024;

/// Fill, once, what every child would otherwise fill on its first request: the CPU feature
/// caches (CPUID traps to the hypervisor on a VM). The review's trigger automaton needs nothing:
/// it is built when the binary is compiled.
fn warm_up() {
    #[cfg(target_arch = "x86_64")]
    let _ = std::arch::is_x86_feature_detected!("avx2");
    let _ = memchr::memchr(b'\n', b"warm up memchr's CPU feature dispatch\n");
    let mut h = crate::digest::Hasher::new();
    h.update(b"warm up the sha256 CPU feature detection");
    let _ = h.finish();
}

enum Refused {
    /// A malformed message; answered with this error (by the zygote), or fatal (to a spare).
    Order(io::Error),
    /// The socket itself failed.
    Socket,
}

/// One message that must be exactly `payload` with exactly `nfds` fds. `None` at end of stream.
fn receive(
    socket: BorrowedFd<'_>,
    payload: &[u8],
    nfds: usize,
) -> Result<Option<Vec<OwnedFd>>, Refused> {
    let mut buf = [0u8; 64];
    let (bytes, flags, fds) = sys::recv_with_fds(socket, &mut buf).map_err(|_| Refused::Socket)?;
    if bytes == 0 && fds.is_empty() {
        return Ok(None);
    }
    // Exactly the payload and exactly `nfds` fds, or the message is refused (and every fd that
    // came is closed).
    if flags.intersects(MsgFlags::MSG_TRUNC | MsgFlags::MSG_CTRUNC)
        || buf.get(..bytes) != Some(payload)
        || fds.len() != nfds
    {
        return Err(Refused::Order(io::Error::from_raw_os_error(libc::EINVAL)));
    }
    Ok(Some(fds))
}

/// The first-stage program the broker sends once the zygote is ready: raw BPF, at most
/// `wire::MAX_BPF_BYTES`.
fn receive_program(control: BorrowedFd<'_>) -> Option<Vec<seccompiler::sock_filter>> {
    let mut buf = vec![0u8; wire::MAX_BPF_BYTES + 1];
    let n = loop {
        match nix::sys::socket::recv(control.as_raw_fd(), &mut buf, MsgFlags::empty()) {
            Err(nix::errno::Errno::EINTR) => {}
            Ok(n) if n <= wire::MAX_BPF_BYTES => break n,
            _ => return None,
        }
    };
    seccomp::from_bytes(buf.get(..n)?)
}

/// One answer to the broker: a pid (with the spare's socket) or a negative errno.
fn answer(control: BorrowedFd<'_>, value: i32, fd: Option<BorrowedFd<'_>>) -> io::Result<()> {
    let raw = fd.map(|f| [f.as_raw_fd()]);
    let cmsg: Vec<ControlMessage<'_>> = raw.iter().map(|r| ControlMessage::ScmRights(r)).collect();
    sendmsg::<()>(
        control.as_raw_fd(),
        &[IoSlice::new(&value.to_le_bytes())],
        &cmsg,
        MsgFlags::MSG_NOSIGNAL,
        None,
    )?;
    Ok(())
}

/// The broker's handle on its zygote: started at construction, replaced when it dies or has
/// forked `max_forks` children. One spare is kept forked ahead of the next request; orders are
/// serialised by a mutex.
pub struct Zygote {
    max_forks: u32,
    live: Mutex<Option<Live>>,
    keeper: Keeper,
}

/// One running zygote process, and the spare it forked last.
struct Live {
    control: OwnedFd,
    process: Child,
    /// Spares asked of this zygote (its quota counts these).
    forks: u32,
    /// A spare was asked for and the answer is not read yet.
    pending: bool,
    spare: Option<Spare>,
}

/// A forked spare waiting for its order: our child (`CLONE_PARENT`), so ours to reap.
struct Spare {
    pid: u32,
    socket: OwnedFd,
    /// Still ours to kill and reap (cleared once the order is handed over).
    unused: bool,
}

impl Spare {
    /// Send the order; the spare is then the request's child, for the caller to supervise.
    fn hand(mut self, fds: &[BorrowedFd<'_>; ORDER_FDS]) -> io::Result<u32> {
        send_order(self.socket.as_fd(), fds)?;
        // Handed over: now the request's child, which the caller supervises and reaps. Our end
        // of its socket closes with `self`; the order is already queued on the spare's end.
        self.unused = false;
        Ok(self.pid)
    }
}

impl Drop for Spare {
    fn drop(&mut self) {
        // Unused (the zygote is retired, or the sandbox dropped): kill and reap by pid. It is our
        // unreaped child, so the pid cannot have been recycled.
        if !self.unused {
            return;
        }
        if let Ok(pid) = i32::try_from(self.pid) {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), Signal::SIGKILL);
            let _ = sys::wait_pid(pid);
        }
    }
}

impl Live {
    /// Ask for the next spare without waiting for it (the answer is read by [`Live::spare`]).
    fn ask(&mut self) -> io::Result<()> {
        nix::sys::socket::send(
            self.control.as_raw_fd(),
            SPARE_REQUEST,
            MsgFlags::MSG_NOSIGNAL,
        )?;
        self.forks += 1;
        self.pending = true;
        Ok(())
    }

    /// Read the answer to an outstanding request, if any, into `self.spare`: `Err` when the
    /// zygote is gone or wedged, `Ok(Err)` when it is alive and could not fork.
    fn collect(&mut self) -> io::Result<io::Result<()>> {
        if !self.pending {
            return Ok(Ok(()));
        }
        self.pending = false;
        Ok(read_answer(self.control.as_fd())?.map(|s| self.spare = Some(s)))
    }

    /// The spare forked ahead, or one asked for now (errors as for [`Live::collect`]).
    fn spare(&mut self) -> io::Result<io::Result<Spare>> {
        if self.spare.is_none() && !self.pending {
            self.ask()?;
        }
        Ok(self.collect()?.and_then(|()| {
            self.spare
                .take()
                .ok_or_else(|| io::Error::other("no spare was asked for"))
        }))
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        // Learn the pid of a spare still being forked, so it is reaped too (a live zygote
        // answers at once; a dead one gives end of file).
        let _ = self.collect();
        // Its children belong to the broker and do not depend on it; it holds nothing.
        let _ = self.process.kill();
        let _ = self.process.wait();
        self.spare = None;
    }
}

impl Zygote {
    /// Start a zygote of `exe` now, and have it fork the first spare. `max_forks` must be at
    /// least 1.
    pub fn start(
        binary: &ChildBinary,
        max_forks: u32,
        run_as: Ids,
        first_stage: Vec<u8>,
    ) -> io::Result<Self> {
        let keeper = Keeper::new(binary.clone(), run_as, first_stage)?;
        let mut live = keeper.start()?;
        live.ask()?;
        Ok(Self {
            max_forks: max_forks.max(1),
            live: Mutex::new(Some(live)),
            keeper,
        })
    }

    /// The pid of the running zygote, if one is up (tests kill it to prove it is replaced).
    pub fn pid(&self) -> Option<u32> {
        let live = self
            .live
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        live.as_ref().map(|l| l.process.id())
    }

    /// Have the next spare forked, unless one is ready or on its way, or the quota is spent.
    /// Callers ask once the child they just ordered is under way (so the fork does not compete
    /// with that child's start), or once it has ended when no other request wants a spare
    /// sooner (so the fork does not compete with the child at all). A zygote that cannot take
    /// the request is replaced now, so the next order finds a spare waiting.
    pub fn replenish(&self) {
        let mut live = self
            .live
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(l) = live.as_mut() else { return };
        // A zygote that has exited is replaced now. Asking it is no test of that: a spare it
        // forked just before dying may not have closed its copy of the control socket yet, so
        // the ask can still succeed and the death would only show at the next order.
        let exited = !matches!(l.process.try_wait(), Ok(None));
        if !exited && (l.spare.is_some() || l.pending || l.forks >= self.max_forks) {
            return;
        }
        if exited || l.ask().is_err() {
            *live = None;
            *live = self.keeper.start().ok().and_then(|mut fresh| {
                fresh.ask().ok()?;
                Some(fresh)
            });
        }
    }

    /// The pid of the spare waiting for the next order, if one is forked (tests inspect it).
    pub fn spare_pid(&self) -> Option<u32> {
        let mut live = self
            .live
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let l = live.as_mut()?;
        l.collect().ok()?.ok()?;
        l.spare.as_ref().map(|s| s.pid)
    }

    /// Have a spare take these fds at 0 to 4 (request, answer, log, artifact, staging) and run
    /// the request. The child is ours: the caller must wait for it, and should
    /// [`Zygote::replenish`] once it is under way or has ended.
    pub fn fork(&self, fds: [BorrowedFd<'_>; ORDER_FDS]) -> io::Result<u32> {
        let mut live = self
            .live
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut last = None;
        // A zygote that died (killed, or the OOM killer) is replaced, and a spare that died
        // while waiting is dropped for the next one; a few tries, not a loop.
        for _ in 0..3 {
            let spent = live
                .as_ref()
                .is_none_or(|l| l.spare.is_none() && !l.pending && l.forks >= self.max_forks);
            if spent {
                *live = None;
                *live = Some(self.keeper.start()?);
            }
            let Some(l) = live.as_mut() else { continue };
            let spare = match l.spare() {
                Ok(Ok(s)) => s,
                // The zygote is alive and said why it could not fork (EAGAIN at the process
                // limit, or EPERM/EINVAL where a seccomp policy forbids CLONE_PARENT): report it.
                Ok(Err(e)) => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!(
                            "the zygote could not fork a child: {e} (--zygote-max-forks 0 starts children by exec instead)"
                        ),
                    ));
                }
                Err(e) => {
                    *live = None;
                    last = Some(e);
                    continue;
                }
            };
            match spare.hand(&fds) {
                Ok(pid) => return Ok(pid),
                // The spare died while it waited (it was reaped when `hand` dropped it).
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("the zygote could not be started")))
    }
}

/// One answer from the zygote: a spare (pid and socket) or the errno it could not fork with;
/// `Err` on end of file (it died), a timeout, or a malformed answer.
fn read_answer(control: BorrowedFd<'_>) -> io::Result<io::Result<Spare>> {
    let value = read_word(control)?;
    let (value, fds) = value;
    match u32::try_from(value) {
        Ok(pid) if pid > 0 => {
            let spare = fds.into_iter().next().map(|socket| Spare {
                pid,
                socket,
                unused: true,
            });
            match spare {
                Some(s) => Ok(Ok(s)),
                None => {
                    // A pid without a socket: not our protocol. Reap the process and give up
                    // on this zygote.
                    if let Ok(p) = i32::try_from(pid) {
                        let _ =
                            nix::sys::signal::kill(nix::unistd::Pid::from_raw(p), Signal::SIGKILL);
                        let _ = sys::wait_pid(p);
                    }
                    Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "the zygote sent a spare without its socket",
                    ))
                }
            }
        }
        _ => Ok(Err(io::Error::from_raw_os_error(
            value.checked_neg().unwrap_or(libc::EIO),
        ))),
    }
}

/// One 4-byte word from the zygote and the fds that came with it (at most one is expected);
/// end of file (it died) and a timeout are errors.
fn read_word(control: BorrowedFd<'_>) -> io::Result<(i32, Vec<OwnedFd>)> {
    let mut reply = [0u8; 8];
    let (n, _, fds) = sys::recv_with_fds(control, &mut reply)?;
    let word = reply
        .get(..n)
        .and_then(|b| <[u8; 4]>::try_from(b).ok())
        .map(i32::from_le_bytes)
        .ok_or_else(|| io::Error::new(io::ErrorKind::BrokenPipe, "the zygote hung up"))?;
    Ok((word, fds))
}

/// The thread every zygote is started from. A child's parent-death signal is tied to the thread
/// that forked its parent, not to the process: zygotes (and, through `CLONE_PARENT`, their
/// children) must not be started from a worker thread that may exit while they run.
struct Keeper {
    orders: mpsc::Sender<mpsc::Sender<io::Result<Live>>>,
    thread: Option<JoinHandle<()>>,
}

impl Keeper {
    fn new(binary: ChildBinary, run_as: Ids, first_stage: Vec<u8>) -> io::Result<Self> {
        let (orders, rx) = mpsc::channel::<mpsc::Sender<io::Result<Live>>>();
        let thread = std::thread::Builder::new()
            .name("skillbox-zygote-keeper".into())
            .spawn(move || {
                for reply in rx {
                    let _ = reply.send(launch(&binary, run_as, &first_stage));
                }
            })?;
        Ok(Self {
            orders,
            thread: Some(thread),
        })
    }

    fn start(&self) -> io::Result<Live> {
        let (tx, rx) = mpsc::channel();
        self.orders
            .send(tx)
            .map_err(|_| io::Error::other("the zygote keeper thread is gone"))?;
        rx.recv()
            .map_err(|_| io::Error::other("the zygote keeper thread is gone"))?
    }
}

impl Drop for Keeper {
    fn drop(&mut self) {
        // Closing the order channel ends the thread's loop.
        let (dead, _) = mpsc::channel();
        drop(std::mem::replace(&mut self.orders, dead));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// `skillbox-child sandbox-zygote <our pid> <uid>:<gid>` with the control socket on fd 0 and an
/// empty environment, executed through the child binary's fd (`child_binary.rs`).
fn launch(binary: &ChildBinary, run_as: Ids, first_stage: &[u8]) -> io::Result<Live> {
    // The zygote closes every fd above 2 itself before doing anything else.
    let (process, ours) = binary.spawn(ZYGOTE_SUBCOMMAND, run_as, Stdio::inherit())?;
    // From here a failure kills and reaps it (`Live`'s drop).
    let live = Live {
        control: ours,
        process,
        forks: 0,
        pending: false,
        spare: None,
    };
    setsockopt(
        &live.control,
        sockopt::ReceiveTimeout,
        &TimeVal::new(ANSWER_TIMEOUT.as_secs().try_into().unwrap_or(5), 0),
    )?;
    // Its first word is 0 once it has closed what it inherited and warmed up; anything else
    // (or silence past the timeout) and it is killed and reaped by `Live`'s drop.
    match read_word(live.control.as_fd())?.0 {
        0 => {}
        other => {
            return Err(io::Error::other(format!(
                "the zygote did not start (said {other})"
            )));
        }
    }
    // Then it takes the first stage of its spares' filter, and says 0 again.
    nix::sys::socket::send(
        live.control.as_raw_fd(),
        first_stage,
        MsgFlags::MSG_NOSIGNAL,
    )?;
    match read_word(live.control.as_fd())?.0 {
        0 => Ok(live),
        other => Err(io::Error::other(format!(
            "the zygote refused the seccomp first stage (said {other})"
        ))),
    }
}
