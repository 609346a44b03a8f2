//! Escape and misbehaviour probes: what the escape-attempt tests and `doctor` run inside the
//! real confinement instead of the engine.
//!
//! A probe runs after the very same `confine()` as an extraction, in the same hidden
//! subcommand, so it can do nothing an extraction could not: shipping it in the release binary
//! adds no capability to anyone who can start that subcommand (they could equally hand it a
//! hostile artifact). Gating it behind a cargo feature would mean the tests exercise a different
//! binary from the one that ships, which is the thing they exist to prove. The parent decides
//! which job a child runs; no client input selects a probe.
//!
//! Each probe reports the raw return value or errno of its one attempt; a probe that the filter
//! kills never reports at all (the parent sees SIGSYS).

use std::ffi::CString;
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::unix::fs::FileExt;

use nix::fcntl::{OFlag, openat};
use nix::sys::stat::{FchmodatFlags, Mode, SFlag, fchmod, fchmodat, mknodat};
use serde::{Deserialize, Serialize};

use super::sys::forbidden;
use super::wire::{self, ChildAnswer, ConfinementReport, JobResult};
use crate::intake::Outcome;

/// Where a relative probe path starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Base {
    /// The staging directory fd.
    Staging,
    /// The working directory (`/` in the child); absolute paths ignore the base.
    Cwd,
}

/// One attempt. See the module docs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Probe {
    /// Open `path` read-only (`O_NOFOLLOW`) and read one byte.
    ReadFile {
        base: Base,
        path: String,
    },
    /// Create `path` (`O_CREAT | O_EXCL | O_NOFOLLOW`, write-only) and write one byte.
    Create {
        base: Base,
        path: String,
    },
    /// `openat` with exactly these flags (for the seccomp flag rules).
    OpenRaw {
        base: Base,
        path: String,
        flags: i32,
    },
    /// `openat2` with these flags and no `RESOLVE_*` restriction.
    Openat2 {
        path: String,
        flags: u64,
    },
    /// `truncate(2)` a path to zero bytes.
    Truncate {
        path: String,
    },
    /// `write` one byte into the artifact fd (sealed: must fail).
    WriteArtifact,
    TcpConnect {
        port: u16,
    },
    UnixConnect {
        path: String,
    },
    Exec {
        path: String,
    },
    Fork,
    Clone3,
    /// A raw system call: number and three integer arguments.
    Syscall {
        nr: i64,
        args: [u64; 3],
    },
    /// `std::thread::spawn` (clone3 or clone underneath).
    SpawnThread,
    Ptrace {
        pid: i32,
    },
    Kill {
        pid: i32,
        signal: i32,
    },
    Tgkill {
        pid: i32,
        signal: i32,
    },
    /// `mknodat` a character device (1:3, /dev/null) beneath staging.
    Mknod {
        path: String,
    },
    /// Create `path` beneath staging, then `fchmod` it to `mode`.
    Fchmod {
        path: String,
        mode: u32,
    },
    /// `fchmodat` by path beneath staging.
    ChmodPath {
        path: String,
        mode: u32,
    },
    /// Create `path` beneath staging and write `bytes` bytes into it.
    WriteFile {
        path: String,
        bytes: u64,
    },
    /// Map `bytes` of anonymous memory.
    Mmap {
        bytes: u64,
    },
    /// Allocate `bytes` through the global allocator (failure aborts the process).
    Allocate {
        bytes: u64,
    },
    /// Make a page executable.
    MakeExecutable,
    /// `setresuid(0, 0, 0)`.
    BecomeRoot,
    /// Which of fds 0 to 62 are open, as a bit set (F_GETFD on each): proves a child holds
    /// exactly its five fds, whichever way it was started.
    OpenFds,
    /// Burn CPU until killed.
    Spin,
    /// Create `path` beneath staging with one byte, then spin until killed.
    WriteThenSpin {
        path: String,
    },
    /// Run this probe on the child's hashing thread instead of its main thread: the second
    /// thread must be walled in exactly as the first. Only probes that need nothing but the
    /// staging fd (not the artifact, not the answer).
    OnHashThread(Box<Probe>),
    /// Write these raw bytes as the whole answer.
    AnswerRaw {
        bytes: Vec<u8>,
    },
    /// Write a frame header announcing `declared` bytes, then `sent` bytes of payload.
    AnswerOversized {
        declared: u32,
        sent: u64,
    },
    /// Create these files (path, content) beneath staging, then claim `outcome`.
    AnswerForged {
        files: Vec<(String, String)>,
        outcome: Box<Outcome>,
    },
}

/// What a probe that was not killed reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProbeResult {
    /// The call succeeded with this return value.
    Ok(i64),
    /// The call failed with this errno.
    Errno(i32),
}

impl From<Result<i64, i32>> for ProbeResult {
    fn from(r: Result<i64, i32>) -> Self {
        match r {
            Ok(v) => Self::Ok(v),
            Err(e) => Self::Errno(e),
        }
    }
}

fn errno(e: impl Into<std::io::Error>) -> i32 {
    e.into().raw_os_error().unwrap_or(0)
}

fn cstr(s: &str) -> Result<CString, i32> {
    CString::new(s).map_err(|_| libc::EINVAL)
}

fn base_fd(base: Base, staging: BorrowedFd<'_>) -> i32 {
    match base {
        Base::Staging => staging.as_raw_fd(),
        Base::Cwd => libc::AT_FDCWD,
    }
}

fn create(staging: BorrowedFd<'_>, path: &str) -> Result<File, i32> {
    let flags =
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    openat(staging, path, flags, Mode::from_bits_truncate(0o644))
        .map(File::from)
        .map_err(errno)
}

/// Burn CPU until killed (the parent's deadline or a test's SIGKILL).
fn spin() -> ! {
    let mut x = 0u64;
    loop {
        x = std::hint::black_box(x.wrapping_add(1));
    }
}

fn send(answer: &mut File, result: JobResult, report: &ConfinementReport) -> Result<i64, i32> {
    // Serializing fails with no errno of its own: EINVAL, as it always was.
    let framed = wire::json_frame(&ChildAnswer::new(report.clone(), result))
        .map_err(|e| e.raw_os_error().unwrap_or(libc::EINVAL))?;
    answer.write_all(&framed).map_err(errno)?;
    Ok(0)
}

/// Run `probe`. Returns `Some(result)` for the caller to send, or `None` when the probe wrote
/// its own answer (or deliberately none).
pub(crate) fn run(
    probe: &Probe,
    artifact: &File,
    staging: BorrowedFd<'_>,
    answer: &mut File,
    report: &ConfinementReport,
) -> Option<ProbeResult> {
    let r: Result<i64, i32> = match probe {
        // write(2), not pwrite: the filter has no pwrite, and the seal is what is under test.
        Probe::WriteArtifact => (&*artifact).write(b"x").map(|n| n as i64).map_err(errno),
        Probe::OnHashThread(inner) => on_hash_thread(inner, staging.as_raw_fd()),
        Probe::AnswerRaw { bytes } => {
            let _ = answer.write_all(bytes);
            return None;
        }
        Probe::AnswerOversized { declared, sent } => {
            let _ = answer.write_all(&declared.to_le_bytes());
            let chunk = vec![b'{'; 64 * 1024];
            let mut left = *sent;
            while left > 0 {
                let n = usize::try_from(left.min(chunk.len() as u64)).unwrap_or(chunk.len());
                if answer.write_all(&chunk[..n]).is_err() {
                    break;
                }
                left -= n as u64;
            }
            return None;
        }
        Probe::AnswerForged { files, outcome } => {
            for (path, content) in files {
                if let Err(e) = create(staging, path)
                    .and_then(|mut f| f.write_all(content.as_bytes()).map_err(errno))
                {
                    return Some(ProbeResult::Errno(e));
                }
            }
            let _ = send(answer, JobResult::Extracted(outcome.clone()), report);
            return None;
        }
        other => attempt(other, staging),
    };
    Some(r.into())
}

/// `probe` on the hashing thread, the main thread waiting (it holds the staging fd meanwhile).
fn on_hash_thread(probe: &Probe, staging: i32) -> Result<i64, i32> {
    let Some(t) = crate::extract::hashing::installed() else {
        return Err(libc::ESRCH);
    };
    let probe = probe.clone();
    t.run(move || {
        super::sys::with_fd(staging, |dir| attempt(&probe, dir))
            .map_err(errno)
            .and_then(|r| r)
    })
    .map_err(errno)
    .and_then(|r| r)
}

/// The probes that need only the staging fd, on whichever thread runs this.
fn attempt(probe: &Probe, staging: BorrowedFd<'_>) -> Result<i64, i32> {
    match probe {
        Probe::ReadFile { base, path } => cstr(path).and_then(|p| {
            let fd = forbidden::openat(
                base_fd(*base, staging),
                &p,
                libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            )?;
            let fd = i32::try_from(fd).map_err(|_| libc::EBADF)?;
            let f = super::sys::inherited_fd(fd)
                .map(File::from)
                .map_err(errno)?;
            let mut b = [0u8; 1];
            f.read_at(&mut b, 0).map(|n| n as i64).map_err(errno)
        }),
        Probe::Create { base, path } => cstr(path).and_then(|p| {
            let flags =
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
            let fd = forbidden::openat(base_fd(*base, staging), &p, flags)?;
            let fd = i32::try_from(fd).map_err(|_| libc::EBADF)?;
            let mut f = super::sys::inherited_fd(fd)
                .map(File::from)
                .map_err(errno)?;
            f.write(b"x").map(|n| n as i64).map_err(errno)
        }),
        Probe::OpenRaw { base, path, flags } => {
            cstr(path).and_then(|p| forbidden::openat(base_fd(*base, staging), &p, *flags))
        }
        Probe::Openat2 { path, flags } => {
            cstr(path).and_then(|p| forbidden::openat2(staging.as_raw_fd(), &p, *flags))
        }
        Probe::Truncate { path } => nix::unistd::truncate(path.as_str(), 0)
            .map(|()| 0)
            .map_err(errno),
        Probe::TcpConnect { port } => forbidden::tcp_connect(*port),
        Probe::UnixConnect { path } => forbidden::unix_connect(path.as_bytes()),
        Probe::Exec { path } => cstr(path).and_then(|p| forbidden::execve(&p)),
        Probe::Fork => forbidden::fork(),
        Probe::OpenFds => Ok((0..63)
            .filter(|&fd| super::sys::fd_is_open(fd))
            .fold(0i64, |set, fd| set | 1 << fd)),
        Probe::Clone3 => forbidden::clone3(),
        Probe::Syscall { nr, args } => forbidden::raw(*nr, *args),
        Probe::SpawnThread => std::thread::Builder::new()
            .spawn(|| 7i64)
            .map_err(errno)
            .and_then(|h| h.join().map_err(|_| libc::EINVAL)),
        Probe::Ptrace { pid } => forbidden::ptrace_attach(*pid),
        Probe::Kill { pid, signal } => forbidden::kill(*pid, *signal),
        Probe::Tgkill { pid, signal } => forbidden::tgkill(*pid, *pid, *signal),
        Probe::Mknod { path } => {
            let dev = nix::sys::stat::makedev(1, 3);
            mknodat(
                staging,
                path.as_str(),
                SFlag::S_IFCHR,
                Mode::from_bits_truncate(0o666),
                dev,
            )
            .map(|()| 0)
            .map_err(errno)
        }
        Probe::Fchmod { path, mode } => create(staging, path).and_then(|f| {
            let mode = Mode::from_bits_retain(*mode as libc::mode_t);
            fchmod(f.as_fd(), mode).map(|()| 0).map_err(errno)
        }),
        Probe::ChmodPath { path, mode } => {
            let mode = Mode::from_bits_retain(*mode as libc::mode_t);
            fchmodat(staging, path.as_str(), mode, FchmodatFlags::NoFollowSymlink)
                .map(|()| 0)
                .map_err(errno)
        }
        Probe::WriteFile { path, bytes } => create(staging, path).and_then(|mut f| {
            let chunk = vec![b'a'; 64 * 1024];
            let mut left = *bytes;
            while left > 0 {
                let n = usize::try_from(left.min(chunk.len() as u64)).unwrap_or(chunk.len());
                f.write_all(&chunk[..n]).map_err(errno)?;
                left -= n as u64;
            }
            Ok(i64::try_from(*bytes).unwrap_or(i64::MAX))
        }),
        Probe::Mmap { bytes } => {
            forbidden::mmap_anonymous(usize::try_from(*bytes).unwrap_or(usize::MAX))
        }
        Probe::Allocate { bytes } => {
            let v: Vec<u8> = vec![1; usize::try_from(*bytes).unwrap_or(usize::MAX)];
            Ok(i64::from(std::hint::black_box(v)[0]))
        }
        Probe::MakeExecutable => forbidden::make_executable(),
        Probe::BecomeRoot => forbidden::become_root(),
        Probe::Spin => spin(),
        Probe::WriteThenSpin { path } => {
            match create(staging, path).and_then(|mut f| f.write_all(b"x").map_err(errno)) {
                Ok(()) => spin(),
                Err(e) => Err(e),
            }
        }
        Probe::WriteArtifact
        | Probe::OnHashThread(_)
        | Probe::AnswerRaw { .. }
        | Probe::AnswerOversized { .. }
        | Probe::AnswerForged { .. } => Err(libc::EINVAL),
    }
}
