//! The zygote: a pre-started, never-confined, never-trusted-with-input copy of our own binary
//! that forks one child per request, so a busy broker does not pay for `exec` (dynamic
//! relocation of a large binary, CPUID traps in the loader on a VM, page faults of a fresh
//! image, lazy tables built again) on every request.
//!
//! What the zygote is:
//! - A fresh `exec` of `/proc/self/exe sandbox-zygote <broker pid>` with an empty environment,
//!   started by the broker's keeper thread; fd 0 is a `SOCK_SEQPACKET` control socket, 1 is
//!   /dev/null, 2 the broker's stderr; everything else is closed before anything runs.
//! - Single-threaded. It never reads a request, an artifact or a staging tree: it receives five
//!   fds per request (request pipe, answer pipe, log pipe, sealed artifact memfd, staging
//!   directory), forks with `CLONE_PARENT`, and answers the child's pid.
//! - The child places the five fds at 0 to 4, closes every other fd (the control socket
//!   included) and runs the same `child::main` as an exec'd child: the same bounded request
//!   read, the same linear `confine()` before a byte of the artifact is read.
//!
//! Because of `CLONE_PARENT` the child is the broker's own child: the broker holds its pidfd,
//! kills it at the deadline and reaps it with its real exit status, exactly as on the exec
//! path (`supervise.rs`). Its parent-death signal follows the keeper thread, which lives as
//! long as the [`Zygote`].
//!
//! The price: every child forked from one zygote shares its address-space layout (ASLR) and
//! stack-protector canary, so a memory disclosure in one child would help an exploit in the
//! next. A zygote is therefore retired after `max_forks` children and replaced by a fresh
//! `exec`; `--zygote-max-forks 0` on the broker turns the zygote off (one `exec` per request).

use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::Duration;

use nix::sys::signal::Signal;
use nix::sys::socket::{
    AddressFamily, ControlMessage, ControlMessageOwned, MsgFlags, SockFlag, SockType, recvmsg,
    sendmsg, setsockopt, socketpair, sockopt,
};
use nix::sys::time::TimeVal;

use super::{child, sys};

/// The hidden subcommand the zygote runs under.
pub const ZYGOTE_SUBCOMMAND: &str = "sandbox-zygote";

/// The payload of a fork order; anything else is refused.
const ORDER: &[u8] = b"skillbox-zygote-fork-1";
/// Fds per order: request, answer, log, artifact, staging (their numbers in the child).
const ORDER_FDS: usize = 5;
/// How long the broker waits for the zygote's answer to one order (a fork takes well under a
/// millisecond; this only keeps a wedged zygote from wedging the broker).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

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
    let Ok(control) = sys::inherited_fd(0) else {
        return child::EXIT_BAD_SETUP;
    };
    // Names for ps and /proc/PID/comm (the forked children share the zygote's command line).
    let _ = nix::sys::prctl::set_name(c"skillbox-zygote");
    warm_up();
    // Ready: every leaked fd is closed and the tables are built.
    if answer(control.as_fd(), 0).is_err() {
        return child::EXIT_BAD_SETUP;
    }
    loop {
        let fds = match receive_order(control.as_fd()) {
            Ok(Some(fds)) => fds,
            Ok(None) => return 0,
            Err(Refused::Order(e)) => {
                if answer(control.as_fd(), -e.raw_os_error().unwrap_or(libc::EINVAL)).is_err() {
                    return child::EXIT_BAD_SETUP;
                }
                continue;
            }
            Err(Refused::Socket) => return child::EXIT_BAD_SETUP,
        };
        let reply = match sys::clone_parent() {
            Ok(0) => {
                // The child. Never returns into this loop.
                let _ = nix::sys::prctl::set_name(c"skillbox-child");
                let raw = fds.each_ref().map(AsRawFd::as_raw_fd);
                let code = match sys::place_forked_child_fds(raw) {
                    Ok(()) => child::main(),
                    Err(_) => child::EXIT_BAD_SETUP,
                };
                std::process::exit(code);
            }
            Ok(pid) => pid,
            Err(e) => -e.raw_os_error().unwrap_or(libc::EIO),
        };
        drop(fds);
        if answer(control.as_fd(), reply).is_err() {
            return child::EXIT_BAD_SETUP;
        }
    }
}

/// Build, once, what every child would otherwise build on its first request: the review's
/// trigger automaton, and the CPU feature caches (CPUID traps to the hypervisor on a VM).
fn warm_up() {
    let _ = crate::skill::scan::Triggers::get();
    #[cfg(target_arch = "x86_64")]
    let _ = std::arch::is_x86_feature_detected!("avx2");
    let _ = memchr::memchr(b'\n', b"warm up memchr's CPU feature dispatch\n");
    let mut h = crate::digest::Hasher::new();
    h.update(b"warm up the sha256 CPU feature detection");
    let _ = h.finish();
}

enum Refused {
    /// A malformed order; answered with this error, the zygote goes on.
    Order(io::Error),
    /// The control socket itself failed; the zygote exits.
    Socket,
}

/// One fork order: exactly [`ORDER`] with exactly [`ORDER_FDS`] fds. `None` at end of stream.
fn receive_order(control: BorrowedFd<'_>) -> Result<Option<[OwnedFd; ORDER_FDS]>, Refused> {
    let mut buf = [0u8; 64];
    let mut cmsg = nix::cmsg_space!([RawFd; 8]);
    let (bytes, flags, fds) = loop {
        let mut iov = [IoSliceMut::new(&mut buf)];
        match recvmsg::<()>(
            control.as_raw_fd(),
            &mut iov,
            Some(&mut cmsg),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Ok(msg) => {
                // Take ownership of every fd that arrived first, so each is closed on any path.
                let mut fds = Vec::new();
                for c in msg.cmsgs().map_err(|_| Refused::Socket)? {
                    if let ControlMessageOwned::ScmRights(raw) = c {
                        // SAFETY: SCM_RIGHTS just installed these fds in our table; nothing else
                        // refers to them.
                        fds.extend(
                            raw.into_iter()
                                .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
                        );
                    }
                }
                break (msg.bytes, msg.flags, fds);
            }
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return Err(Refused::Socket),
        }
    };
    if bytes == 0 && fds.is_empty() {
        return Ok(None);
    }
    let malformed = || Refused::Order(io::Error::from_raw_os_error(libc::EINVAL));
    if flags.intersects(MsgFlags::MSG_TRUNC | MsgFlags::MSG_CTRUNC)
        || buf.get(..bytes) != Some(ORDER)
    {
        return Err(malformed());
    }
    // Exactly ORDER_FDS fds, or the order is refused (and every fd that came is closed).
    <[OwnedFd; ORDER_FDS]>::try_from(fds)
        .map(Some)
        .map_err(|_| malformed())
}

fn answer(control: BorrowedFd<'_>, value: i32) -> io::Result<()> {
    nix::sys::socket::send(
        control.as_raw_fd(),
        &value.to_le_bytes(),
        MsgFlags::MSG_NOSIGNAL,
    )?;
    Ok(())
}

/// The broker's handle on its zygote: started at construction, replaced when it dies or has
/// forked `max_forks` children. Orders are serialised by a mutex (a fork takes well under a
/// millisecond).
pub struct Zygote {
    max_forks: u32,
    live: Mutex<Option<Live>>,
    keeper: Keeper,
}

/// One running zygote process.
struct Live {
    control: OwnedFd,
    process: Child,
    forks: u32,
}

impl Drop for Live {
    fn drop(&mut self) {
        // Its children belong to the broker and do not depend on it; it holds nothing.
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

impl Zygote {
    /// Start a zygote of `exe` now. `max_forks` must be at least 1.
    pub fn start(exe: &Path, max_forks: u32) -> io::Result<Self> {
        let keeper = Keeper::new(exe.to_owned())?;
        let live = keeper.start()?;
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

    /// Have the zygote fork a child with these fds at 0 to 4 (request, answer, log, artifact,
    /// staging). The child is ours: the caller must wait for it.
    pub fn fork(&self, fds: [BorrowedFd<'_>; ORDER_FDS]) -> io::Result<u32> {
        let mut live = self
            .live
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut last = None;
        // A zygote that died (killed, or the OOM killer) is replaced once per order.
        for _ in 0..2 {
            if live.as_ref().is_none_or(|l| l.forks >= self.max_forks) {
                *live = None;
                *live = Some(self.keeper.start()?);
            }
            let Some(l) = live.as_mut() else { continue };
            match order(l.control.as_fd(), &fds) {
                Ok(Ok(pid)) => {
                    l.forks += 1;
                    return Ok(pid);
                }
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
                }
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("the zygote could not be started")))
    }
}

/// Send one order and read the answer: `Err` when the zygote is gone or wedged, `Ok(Err)` when
/// it refused or failed to fork.
fn order(
    control: BorrowedFd<'_>,
    fds: &[BorrowedFd<'_>; ORDER_FDS],
) -> io::Result<io::Result<u32>> {
    let raw = fds.each_ref().map(AsRawFd::as_raw_fd);
    let cmsg = [ControlMessage::ScmRights(&raw)];
    sendmsg::<()>(
        control.as_raw_fd(),
        &[IoSlice::new(ORDER)],
        &cmsg,
        MsgFlags::MSG_NOSIGNAL,
        None,
    )?;
    let value = read_answer(control)?;
    Ok(match u32::try_from(value) {
        Ok(pid) if pid > 0 => Ok(pid),
        _ => Err(io::Error::from_raw_os_error(
            value.checked_neg().unwrap_or(libc::EIO),
        )),
    })
}

/// One 4-byte answer from the zygote; EOF (it died) and a timeout are errors.
fn read_answer(control: BorrowedFd<'_>) -> io::Result<i32> {
    let mut reply = [0u8; 8];
    let n = loop {
        match nix::sys::socket::recv(control.as_raw_fd(), &mut reply, MsgFlags::empty()) {
            Err(nix::errno::Errno::EINTR) => {}
            other => break other?,
        }
    };
    reply
        .get(..n)
        .and_then(|b| <[u8; 4]>::try_from(b).ok())
        .map(i32::from_le_bytes)
        .ok_or_else(|| io::Error::new(io::ErrorKind::BrokenPipe, "the zygote hung up"))
}

/// The thread every zygote is started from. A child's parent-death signal is tied to the thread
/// that forked its parent, not to the process: zygotes (and, through `CLONE_PARENT`, their
/// children) must not be started from a worker thread that may exit while they run.
struct Keeper {
    orders: mpsc::Sender<mpsc::Sender<io::Result<Live>>>,
    thread: Option<JoinHandle<()>>,
}

impl Keeper {
    fn new(exe: PathBuf) -> io::Result<Self> {
        let (orders, rx) = mpsc::channel::<mpsc::Sender<io::Result<Live>>>();
        let thread = std::thread::Builder::new()
            .name("skillbox-zygote-keeper".into())
            .spawn(move || {
                for reply in rx {
                    let _ = reply.send(launch(&exe));
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

/// `exe sandbox-zygote <our pid>` with the control socket on fd 0 and an empty environment.
fn launch(exe: &Path) -> io::Result<Live> {
    let (ours, theirs) = socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )?;
    setsockopt(
        &ours,
        sockopt::ReceiveTimeout,
        &TimeVal::new(ANSWER_TIMEOUT.as_secs().try_into().unwrap_or(5), 0),
    )?;
    // No pre_exec hook, so std can use posix_spawn (vfork) instead of copying the broker's page
    // tables; the zygote closes every fd above 2 itself before doing anything else.
    let process = Command::new(exe)
        .arg(ZYGOTE_SUBCOMMAND)
        .arg(std::process::id().to_string())
        .env_clear()
        .current_dir("/")
        .stdin(Stdio::from(theirs))
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()?;
    let live = Live {
        control: ours,
        process,
        forks: 0,
    };
    // Its first word is 0 once it has closed what it inherited and warmed up; anything else
    // (or silence past the timeout) and it is killed and reaped by `Live`'s drop.
    match read_answer(live.control.as_fd())? {
        0 => Ok(live),
        other => Err(io::Error::other(format!(
            "the zygote did not start (said {other})"
        ))),
    }
}
