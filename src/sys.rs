//! Raw system calls the sandbox needs and neither `std` nor `nix` 0.32 wraps: fd placement for
//! the child, `close_range`, pidfds, `poll`, capabilities, the Landlock ABI query, and the
//! deliberately forbidden calls the escape probes attempt.
//!
//! This is the only module of the crate with `unsafe` (`unsafe_code` is denied everywhere else,
//! see Cargo.toml). Each function is a thin, typed wrapper
//! around one call; it never allocates (two of them run between `fork` and `exec`) and never
//! decides policy.

#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// Fd numbers the child finds its inheritance at (0, 1 and 2 are request, answer and log).
pub(crate) const CHILD_ARTIFACT_FD: RawFd = 3;
pub(crate) const CHILD_STAGING_FD: RawFd = 4;
/// The child's hashing thread's two pipes, placed by the child itself once every other fd is
/// closed: 5 and 6 carry work to it, 7 and 8 its replies.
pub(crate) const CHILD_HASH_FDS: RawFd = 5;

fn check(rc: libc::c_long) -> io::Result<libc::c_long> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

fn check_int(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// madvise(2) `MADV_POPULATE_WRITE` over one writable private mapping of this process: map its
/// pages now, breaking copy-on-write (Linux 5.14).
pub(crate) fn populate_write(start: usize, len: usize) -> io::Result<()> {
    // SAFETY: the range is one of this process's own writable mappings (from /proc/self/maps);
    // populating changes no contents, only whether private copies of the pages exist yet.
    check_int(unsafe {
        libc::madvise(start as *mut libc::c_void, len, libc::MADV_POPULATE_WRITE)
    })?;
    Ok(())
}

/// Put `fd` at number `target` (closing whatever was there) without `FD_CLOEXEC`.
pub(crate) fn move_fd(fd: OwnedFd, target: RawFd) -> io::Result<()> {
    if fd.as_raw_fd() == target {
        std::mem::forget(fd);
        return Ok(());
    }
    // SAFETY: dup2 on integer fds; `target` is the caller's to replace, and `fd` is closed
    // when it drops below.
    check_int(unsafe { libc::dup2(fd.as_raw_fd(), target) })?;
    Ok(())
}

/// Fork the calling (single-threaded) zygote with `CLONE_PARENT`: the new process is a child of
/// the zygote's parent, the broker, which can then wait for it, hold a pidfd on it and read its
/// exit status exactly as for a child it spawned itself. Returns 0 in the child, its pid in the
/// caller.
///
/// A raw clone skips glibc's fork bookkeeping (atfork handlers, the thread descriptor's cached
/// tid). That is sound here because the zygote is single-threaded, registers no atfork
/// handlers, and the child only runs `child::main`, which uses neither pthread mutexes nor the
/// cached tid.
pub(crate) fn clone_parent() -> io::Result<libc::pid_t> {
    // SAFETY: clone without CLONE_VM and with a NULL stack behaves as fork(2): the child gets a
    // copy of the address space and continues on its copy of this stack. No pointers are passed
    // (parent_tid, child_tid and tls are NULL/0 and their flags are not set).
    let rc = check(unsafe {
        libc::syscall(
            libc::SYS_clone,
            libc::c_ulong::try_from(libc::CLONE_PARENT | libc::SIGCHLD).unwrap_or(0),
            0usize,
            0usize,
            0usize,
            0usize,
        )
    })?;
    libc::pid_t::try_from(rc).map_err(|_| io::Error::from(io::ErrorKind::InvalidData))
}

/// End the process now with `code`: `_exit(2)`, so no atexit handler or library destructor
/// runs. The child's answer is written unbuffered before this, so nothing is lost, and the
/// destructors would only fault in code pages that a fresh child has never touched.
pub(crate) fn exit_now(code: i32) -> ! {
    // SAFETY: _exit takes an integer and never returns; it touches no memory of ours.
    unsafe { libc::_exit(code) }
}

/// waitpid(2) for one child, retried on EINTR; the raw wait status.
pub(crate) fn wait_pid(pid: libc::pid_t) -> io::Result<libc::c_int> {
    let mut status: libc::c_int = 0;
    loop {
        // SAFETY: `status` is a valid, writable c_int for the duration of the call.
        match check_int(unsafe { libc::waitpid(pid, &mut status, 0) }) {
            Ok(_) => return Ok(status),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Close every fd numbered `first` or above (close_range(2), Linux 5.9).
pub(crate) fn close_fds_from(first: u32) -> io::Result<()> {
    // SAFETY: close_range takes integers only. Closing fds this process does not use is the
    // point; the caller runs before anything else holds an fd at or above `first`.
    check(unsafe { libc::syscall(libc::SYS_close_range, first, libc::c_uint::MAX, 0u32) })?;
    Ok(())
}

/// Close fds `first` to `last` inclusive (close_range(2), Linux 5.9).
pub(crate) fn close_fd_range(first: u32, last: u32) -> io::Result<()> {
    // SAFETY: close_range takes integers only; the caller owns nothing in that range it still
    // needs.
    check(unsafe { libc::syscall(libc::SYS_close_range, first, last, 0u32) })?;
    Ok(())
}

/// Whether `fd` is open in this process (fcntl F_GETFD).
pub(crate) fn fd_is_open(fd: RawFd) -> bool {
    // SAFETY: F_GETFD only reads the fd-table entry.
    unsafe { libc::fcntl(fd, libc::F_GETFD) >= 0 }
}

/// Take ownership of an fd the parent placed at a fixed number. Fails if it is not open.
///
/// Must be called at most once per number: the returned `OwnedFd` closes it on drop.
/// Run `f` with a borrow of `fd`, which the caller holds open until `f` returns (the child's
/// staging fd, owned by its main thread, which waits while the hashing thread runs `f`).
pub(crate) fn with_fd<R>(fd: RawFd, f: impl FnOnce(BorrowedFd<'_>) -> R) -> io::Result<R> {
    if !fd_is_open(fd) {
        return Err(io::Error::from_raw_os_error(libc::EBADF));
    }
    // SAFETY: the fd is open (checked above) and the caller keeps it open until `f` returns;
    // the borrow is handed to `f` only and cannot outlive it.
    let fd = unsafe { BorrowedFd::borrow_raw(fd) };
    Ok(f(fd))
}

/// Keep every thread on glibc's main arena (heap grown with `brk`). With a second thread, glibc
/// would otherwise give it, or a failing allocation's retry, an arena of its own, made with
/// `mmap` and grown with `mprotect`, which the child's filter kills: an allocation past the
/// address-space limit must still end in an abort (`resource_limit`), not SIGSYS.
#[cfg(target_env = "gnu")]
pub(crate) fn malloc_one_arena() -> io::Result<()> {
    // SAFETY: mallopt takes two integers and changes only the allocator's tuning.
    if unsafe { libc::mallopt(libc::M_ARENA_MAX, 1) } == 1 {
        Ok(())
    } else {
        Err(io::Error::other("mallopt(M_ARENA_MAX) refused"))
    }
}

/// A read-only view of part of a sealed memfd: the engine reads the artifact through it instead
/// of copying it out with `pread`. Unmapped on drop.
pub(crate) struct SealedMapping {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
}

impl SealedMapping {
    /// Map `len` bytes of `file` from `offset` (a multiple of the page size), read-only and
    /// populated at once. Refused unless `file` carries the write and shrink seals, and unless
    /// the range lies inside the file.
    pub(crate) fn new(file: &std::fs::File, offset: u64, len: usize) -> io::Result<Self> {
        let wanted = libc::F_SEAL_WRITE | libc::F_SEAL_SHRINK;
        // SAFETY: F_GET_SEALS takes no pointer argument.
        let seals = check_int(unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GET_SEALS) })?;
        if seals & wanted != wanted {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "only a sealed memfd is mapped",
            ));
        }
        let size = file.metadata()?.len();
        let end = offset.checked_add(len as u64);
        if len == 0 || end.is_none_or(|e| e > size) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "mapping outside the artifact",
            ));
        }
        let off = libc::off_t::try_from(offset)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset out of range"))?;
        // SAFETY: a fresh mapping at an address the kernel chooses aliases nothing of ours. It
        // is read-only, and the seals checked above mean no one can write the pages or shrink
        // the file under it (no change to the bytes, no SIGBUS past a new end) for as long as it
        // exists; the range was checked to lie inside the file.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                file.as_raw_fd(),
                off,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = std::ptr::NonNull::new(ptr.cast::<u8>()).ok_or_else(io::Error::last_os_error)?;
        Ok(Self { ptr, len })
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        // SAFETY: `ptr` points at `len` readable bytes mapped in `new` until `drop`, and they
        // cannot change (sealed against writing): a shared borrow for `self`'s lifetime is sound.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

// SAFETY: the mapping is read-only and its bytes cannot change (sealed against writing), so
// shared borrows from several threads are sound (`Sync`); `munmap` may be called from any
// thread, so the owner may move between threads (`Send`). The engine hands a window to its
// hashing thread this way and takes it back before dropping it.
unsafe impl Send for SealedMapping {}
// SAFETY: as above: nothing mutates the mapped bytes while a `&SealedMapping` exists.
unsafe impl Sync for SealedMapping {}

impl Drop for SealedMapping {
    fn drop(&mut self) {
        // SAFETY: exactly the range mapped in `new`; no borrow of it outlives `self`.
        let _ = unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

pub(crate) fn inherited_fd(fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: F_GETFD only reads the fd-table entry.
    check_int(unsafe { libc::fcntl(fd, libc::F_GETFD) })?;
    // SAFETY: the fd is open (checked above); it was placed for this process by the parent and
    // nothing else in the child refers to it, so taking ownership cannot double-close.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `F_DUPFD_CLOEXEC`: a close-on-exec duplicate of `fd` at the lowest free number from `min`
/// up (the child binary's fd is kept above the numbers a child's fds are placed on).
pub(crate) fn dup_at_least(fd: BorrowedFd<'_>, min: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: fcntl(F_DUPFD_CLOEXEC) only adds an fd-table entry; the new fd is returned to us
    // alone, so owning it cannot double-close.
    let new = check_int(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, min) })?;
    // SAFETY: `new` was just created by the call above and nothing else refers to it.
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}

/// pidfd_open(2): an fd that becomes readable when `pid` exits and addresses exactly that
/// process (no pid-reuse race, as long as the caller has not reaped it).
pub(crate) fn pidfd_open(pid: u32) -> io::Result<OwnedFd> {
    let pid =
        libc::pid_t::try_from(pid).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: integer arguments only.
    let fd = check(unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0u32) })?;
    let fd = RawFd::try_from(fd).map_err(|_| io::Error::from(io::ErrorKind::InvalidData))?;
    // SAFETY: the kernel just returned this fd to us; nobody else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// pidfd_send_signal(2).
pub(crate) fn pidfd_send_signal(pidfd: BorrowedFd<'_>, signal: libc::c_int) -> io::Result<()> {
    // SAFETY: a NULL siginfo is documented as "like kill(2)"; the other arguments are integers.
    check(unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            signal,
            std::ptr::null::<libc::siginfo_t>(),
            0u32,
        )
    })?;
    Ok(())
}

/// One entry for [`poll`].
#[derive(Clone, Copy)]
#[repr(transparent)]
pub(crate) struct PollFd(libc::pollfd);

impl PollFd {
    pub(crate) fn readable(fd: BorrowedFd<'_>) -> Self {
        Self(libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
    }
    /// An entry the kernel ignores (negative fd), for a stream already at its end.
    pub(crate) fn unused() -> Self {
        Self(libc::pollfd {
            fd: -1,
            events: 0,
            revents: 0,
        })
    }
    /// Readable, hung up or in error: a read will not block.
    pub(crate) fn ready(&self) -> bool {
        self.0.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0
    }
}

/// poll(2) with a millisecond timeout; EINTR is reported as zero ready entries.
pub(crate) fn poll(fds: &mut [PollFd], timeout_ms: i32) -> io::Result<usize> {
    let n = libc::nfds_t::try_from(fds.len())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: PollFd is repr(transparent) over libc::pollfd; the pointer and length describe
    // exactly `fds`, which outlives the call.
    let rc = unsafe { libc::poll(fds.as_mut_ptr().cast::<libc::pollfd>(), n, timeout_ms) };
    match check_int(rc) {
        Ok(n) => Ok(usize::try_from(n).unwrap_or(0)),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(0),
        Err(e) => Err(e),
    }
}

/// The Landlock ABI version the kernel offers, or the errno (ENOSYS: not built in,
/// EOPNOTSUPP: disabled at boot).
pub(crate) fn landlock_abi() -> Result<i32, i32> {
    const LANDLOCK_CREATE_RULESET_VERSION: u32 = 1;
    // SAFETY: with this flag a NULL attribute pointer and size 0 are the documented query form.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::ENOSYS))
    } else {
        Ok(i32::try_from(rc).unwrap_or(i32::MAX))
    }
}

/// PR_GET_SECCOMP: 0 when this process runs without seccomp, 2 under a filter; an error if the
/// kernel was built without seccomp.
pub(crate) fn seccomp_mode() -> io::Result<i32> {
    // SAFETY: PR_GET_SECCOMP takes no pointer arguments.
    check_int(unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) })
}

/// Remove every capability from the bounding set (needs CAP_SETPCAP, so call while still
/// root). Stops at the first number the kernel does not know (EINVAL).
///
/// Each drop replaces the process's credentials (a copy and an RCU free), so a capability is
/// dropped only when the set still holds it: a spare forked from a zygote that emptied its own
/// set (`zygote::main`) reads 41 bits instead of copying its credentials 41 times (about 60 µs
/// a request in a broker profile).
pub(crate) fn drop_bounding_set() -> io::Result<()> {
    for cap in 0..64 {
        // SAFETY: integer arguments only.
        let held = unsafe { libc::prctl(libc::PR_CAPBSET_READ, cap, 0, 0, 0) };
        if held == 0 {
            continue;
        }
        let rc = if held < 0 {
            held
        } else {
            // SAFETY: integer arguments only.
            unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) }
        };
        if rc < 0 {
            let e = io::Error::last_os_error();
            // Past the last capability this kernel knows.
            if e.raw_os_error() == Some(libc::EINVAL) {
                return Ok(());
            }
            return Err(e);
        }
    }
    Ok(())
}

/// PR_CAP_AMBIENT_CLEAR_ALL.
pub(crate) fn clear_ambient_caps() -> io::Result<()> {
    // SAFETY: integer arguments only.
    check_int(unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        )
    })?;
    Ok(())
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// The effective, permitted and inheritable sets of this thread (64 bits each).
pub(crate) fn capabilities() -> io::Result<(u64, u64, u64)> {
    let mut header = CapHeader {
        version: CAPABILITY_VERSION_3,
        pid: 0,
    };
    let mut data = [CapData::default(); 2];
    // SAFETY: version 3 takes a header and an array of two CapData, which is what we pass.
    check(unsafe {
        libc::syscall(
            libc::SYS_capget,
            &mut header as *mut CapHeader,
            data.as_mut_ptr(),
        )
    })?;
    let join = |lo: u32, hi: u32| u64::from(lo) | (u64::from(hi) << 32);
    Ok((
        join(data[0].effective, data[1].effective),
        join(data[0].permitted, data[1].permitted),
        join(data[0].inheritable, data[1].inheritable),
    ))
}

/// Empty the effective, permitted and inheritable sets (lowering is always allowed).
pub(crate) fn clear_capabilities() -> io::Result<()> {
    let mut header = CapHeader {
        version: CAPABILITY_VERSION_3,
        pid: 0,
    };
    let data = [CapData::default(); 2];
    // SAFETY: version 3 takes a header and an array of two CapData, read by the kernel.
    check(unsafe {
        libc::syscall(
            libc::SYS_capset,
            &mut header as *mut CapHeader,
            data.as_ptr(),
        )
    })?;
    Ok(())
}

/// The calls the escape probes attempt. Each is expected to fail or to kill the caller; none is
/// used by production code. Results are raw: `Ok(return value)` or `Err(errno)`.
pub(crate) mod forbidden {
    use super::*;

    fn ret(rc: libc::c_long) -> Result<i64, i32> {
        if rc < 0 {
            Err(io::Error::last_os_error().raw_os_error().unwrap_or(0))
        } else {
            Ok(rc)
        }
    }

    /// socket(AF_INET, SOCK_STREAM) then connect to 127.0.0.1:`port`.
    pub(crate) fn tcp_connect(port: u16) -> Result<i64, i32> {
        // SAFETY: integer arguments only.
        let fd = ret(unsafe {
            libc::syscall(
                libc::SYS_socket,
                libc::AF_INET,
                libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
                0,
            )
        })?;
        let addr = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: port.to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from_be_bytes([127, 0, 0, 1]).to_be(),
            },
            sin_zero: [0; 8],
        };
        // SAFETY: `addr` is a valid sockaddr_in and its size is passed alongside.
        ret(unsafe {
            libc::syscall(
                libc::SYS_connect,
                fd,
                &addr as *const libc::sockaddr_in,
                std::mem::size_of::<libc::sockaddr_in>(),
            )
        })
    }

    /// socket(AF_UNIX, SOCK_STREAM) then connect to the pathname socket `path` (NUL-free).
    pub(crate) fn unix_connect(path: &[u8]) -> Result<i64, i32> {
        // SAFETY: integer arguments only.
        let fd = ret(unsafe {
            libc::syscall(
                libc::SYS_socket,
                libc::AF_UNIX,
                libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
                0,
            )
        })?;
        // SAFETY: sockaddr_un is plain old data; all-zero is a valid value.
        let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
        addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
        for (dst, src) in addr.sun_path.iter_mut().zip(path.iter().take(107)) {
            *dst = *src as libc::c_char;
        }
        // SAFETY: `addr` is a valid, NUL-terminated sockaddr_un; its size is passed alongside.
        ret(unsafe {
            libc::syscall(
                libc::SYS_connect,
                fd,
                &addr as *const libc::sockaddr_un,
                std::mem::size_of::<libc::sockaddr_un>(),
            )
        })
    }

    /// execve(path, [path], []).
    pub(crate) fn execve(path: &std::ffi::CStr) -> Result<i64, i32> {
        let argv = [path.as_ptr(), std::ptr::null()];
        let envp = [std::ptr::null::<libc::c_char>()];
        // SAFETY: NUL-terminated path and NULL-terminated argv/envp arrays that outlive the call.
        ret(unsafe {
            libc::syscall(
                libc::SYS_execve,
                path.as_ptr(),
                argv.as_ptr(),
                envp.as_ptr(),
            )
        })
    }

    /// A bare fork: clone(SIGCHLD). A child that should never exist exits at once.
    pub(crate) fn fork() -> Result<i64, i32> {
        // SAFETY: with no CLONE_VM the child gets a copy of the address space; it only calls
        // _exit, which is async-signal-safe.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_clone,
                libc::SIGCHLD as libc::c_ulong,
                0usize,
                0usize,
                0usize,
                0usize,
            )
        };
        if rc == 0 {
            // SAFETY: _exit never returns and touches no Rust state.
            unsafe { libc::_exit(0) };
        }
        ret(rc)
    }

    /// A system call by number with three integer arguments (for calls that take a pointer,
    /// 0: the point is whether the filter lets the call through at all).
    pub(crate) fn raw(nr: i64, args: [u64; 3]) -> Result<i64, i32> {
        // SAFETY: integer arguments only; a pointer argument is 0 (NULL), which the kernel
        // rejects with EFAULT rather than dereferencing.
        let rc = unsafe { libc::syscall(nr as libc::c_long, args[0], args[1], args[2]) };
        if rc < 0 {
            Err(io::Error::last_os_error().raw_os_error().unwrap_or(0))
        } else {
            Ok(rc)
        }
    }

    /// clone3 with an all-zero argument struct except the exit signal.
    pub(crate) fn clone3() -> Result<i64, i32> {
        // SAFETY: clone_args is plain old data; all-zero is valid.
        let mut args: libc::clone_args = unsafe { std::mem::zeroed() };
        args.exit_signal = libc::SIGCHLD as u64;
        // SAFETY: pointer and size describe `args`; the child (if any) only calls _exit.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_clone3,
                &mut args as *mut libc::clone_args,
                std::mem::size_of::<libc::clone_args>(),
            )
        };
        if rc == 0 {
            // SAFETY: as in `fork`.
            unsafe { libc::_exit(0) };
        }
        ret(rc)
    }

    /// ptrace(PTRACE_ATTACH, pid).
    pub(crate) fn ptrace_attach(pid: i32) -> Result<i64, i32> {
        // SAFETY: integer arguments only (addr and data are unused by PTRACE_ATTACH).
        ret(unsafe { libc::syscall(libc::SYS_ptrace, libc::PTRACE_ATTACH, pid, 0usize, 0usize) })
    }

    /// kill(pid, sig).
    pub(crate) fn kill(pid: i32, sig: i32) -> Result<i64, i32> {
        // SAFETY: integer arguments only.
        ret(unsafe { libc::syscall(libc::SYS_kill, pid, sig) })
    }

    /// tgkill(tgid, tid, sig).
    pub(crate) fn tgkill(tgid: i32, tid: i32, sig: i32) -> Result<i64, i32> {
        // SAFETY: integer arguments only.
        ret(unsafe { libc::syscall(libc::SYS_tgkill, tgid, tid, sig) })
    }

    /// openat2(dirfd, path, {flags}) with no RESOLVE_* restriction.
    pub(crate) fn openat2(dirfd: RawFd, path: &std::ffi::CStr, flags: u64) -> Result<i64, i32> {
        // SAFETY: open_how is plain old data; all-zero is valid.
        let mut how: libc::open_how = unsafe { std::mem::zeroed() };
        how.flags = flags;
        // SAFETY: NUL-terminated path; pointer and size describe `how`.
        ret(unsafe {
            libc::syscall(
                libc::SYS_openat2,
                dirfd,
                path.as_ptr(),
                &how as *const libc::open_how,
                std::mem::size_of::<libc::open_how>(),
            )
        })
    }

    /// openat(dirfd, path, flags, 0o644) with flags exactly as given.
    pub(crate) fn openat(dirfd: RawFd, path: &std::ffi::CStr, flags: i32) -> Result<i64, i32> {
        // SAFETY: NUL-terminated path; integer flags and mode.
        ret(unsafe { libc::syscall(libc::SYS_openat, dirfd, path.as_ptr(), flags, 0o644) })
    }

    /// setresuid(0, 0, 0).
    pub(crate) fn become_root() -> Result<i64, i32> {
        // SAFETY: integer arguments only.
        ret(unsafe { libc::syscall(libc::SYS_setresuid, 0, 0, 0) })
    }

    /// mmap `len` bytes of private anonymous memory (and leave it mapped).
    pub(crate) fn mmap_anonymous(len: usize) -> Result<i64, i32> {
        // SAFETY: a fresh anonymous mapping at a kernel-chosen address aliases nothing.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            Err(io::Error::last_os_error().raw_os_error().unwrap_or(0))
        } else {
            Ok(p as i64)
        }
    }

    /// mprotect a fresh page to PROT_READ | PROT_EXEC (code injection needs this).
    pub(crate) fn make_executable() -> Result<i64, i32> {
        let p = mmap_anonymous(4096)?;
        // SAFETY: `p` is a page we just mapped and never hand out.
        let rc = unsafe {
            libc::mprotect(
                p as *mut libc::c_void,
                4096,
                libc::PROT_READ | libc::PROT_EXEC,
            )
        };
        ret(libc::c_long::from(rc))
    }
}

/// One message into `buf`, retried on EINTR: its length, flags, and the fds that came with it
/// (at most 8), owned at once so each is closed on any path.
pub(super) fn recv_with_fds(
    socket: BorrowedFd<'_>,
    buf: &mut [u8],
) -> io::Result<(usize, nix::sys::socket::MsgFlags, Vec<OwnedFd>)> {
    let mut cmsg = nix::cmsg_space!([RawFd; 8]);
    loop {
        let mut iov = [std::io::IoSliceMut::new(buf)];
        match nix::sys::socket::recvmsg::<()>(
            socket.as_raw_fd(),
            &mut iov,
            Some(&mut cmsg),
            nix::sys::socket::MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
            Ok(msg) => {
                let mut fds = Vec::new();
                for c in msg.cmsgs()? {
                    if let nix::sys::socket::ControlMessageOwned::ScmRights(raw) = c {
                        // SAFETY: SCM_RIGHTS just installed these fds in our table; nothing else
                        // refers to them.
                        fds.extend(
                            raw.into_iter()
                                .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
                        );
                    }
                }
                return Ok((msg.bytes, msg.flags, fds));
            }
        }
    }
}

/// Restore the default action of SIGPIPE (Rust's runtime ignores it), just before the CLI
/// raises it on itself because its stdout reader went away (see `sandbox::die_of_sigpipe`).
/// Never while a child is supervised: its pipes must fail with EPIPE, not kill us.
pub(crate) fn default_sigpipe() -> io::Result<()> {
    // SAFETY: signal(2) with SIG_DFL installs no handler code; the process is about to end, and
    // a concurrent change of SIGPIPE's disposition elsewhere would only decide how it ends.
    let prev = unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    if prev == libc::SIG_ERR {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
