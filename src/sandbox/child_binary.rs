//! Which binary the confined children (and zygotes) are started from, and why it is trusted.
//!
//! By default that is `skillbox-child` (src/bin/skillbox-child.rs) in the directory of the
//! running executable: a small binary that holds the child's side only, without the async
//! runtime, gRPC, TLS or SQLite, so an `exec` maps and relocates far less, and a compromised
//! child has far less code at hand. `cargo install` installs it next to `skillbox`.
//!
//! Trust, decided once per [`super::Sandbox`]:
//! - The file is opened once, `O_PATH | O_CLOEXEC`, and every child and zygote is executed
//!   through that fd (`/proc/self/fd/N`, as `fexecve` does), never by its path again: renaming
//!   another file over the path afterwards changes nothing.
//! - The opened file must be a regular file, owned by root or by our own effective uid, not
//!   writable by group or others, and without set-user-ID or set-group-ID bits (an unprivileged
//!   parent must not start a child that gains an identity at `exec`, before confinement).
//!   Otherwise the sandbox refuses to start, naming the path: a child binary someone else could
//!   have written is never run, and never silently replaced by another.
//! - When there is no `skillbox-child` beside the executable (a build of the `skillbox` target
//!   alone in a fresh clone, `cargo run`), the running executable itself is used, opened through
//!   `/proc/self/exe` (the image already running, whatever its path now holds); it still has the
//!   hidden `sandbox-child` and `sandbox-zygote` subcommands. Confinement is the same; only the
//!   start is slower and the child's image larger. `skillbox doctor` says which binary is in
//!   use, and why.
//!
//! An explicit `SandboxConfig::exe` (tests, benchmarks) is opened and checked the same way.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use nix::sys::socket::{AddressFamily, SockFlag, SockType, socketpair};
use serde::Serialize;

use super::sys;
use super::wire::Ids;

/// The file name of the dedicated child binary, looked for next to the running executable.
pub const CHILD_BINARY: &str = "skillbox-child";

/// The lowest fd number the child binary's fd is kept at: above 0 to 4, which a child's fds
/// are placed on between `fork` and `exec` (a binary fd at 3 would be replaced by the artifact
/// memfd before the `exec` that names it), and above a spare's socket (9).
const MIN_BINARY_FD: RawFd = 10;

/// Where the child binary came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ChildBinaryKind {
    /// `skillbox-child`, found next to the running executable.
    Dedicated,
    /// Named by the configuration (`SandboxConfig::exe`).
    Configured,
    /// The running executable itself (no `skillbox-child` beside it).
    RunningExecutable,
}

/// What `doctor` and errors say about the child binary.
#[derive(Debug, Clone, Serialize)]
pub struct ChildBinaryInfo {
    pub kind: ChildBinaryKind,
    /// The path it was opened at.
    pub path: PathBuf,
    pub owner_uid: u32,
    /// Permission bits.
    pub mode: u32,
    /// The file's size (debug info included, which is never loaded).
    pub size_bytes: u64,
    /// Why the running executable is used, when it is.
    pub fallback: Option<String>,
}

impl ChildBinaryInfo {
    /// One line, e.g. `/usr/local/bin/skillbox-child (dedicated; owner uid 0, mode 0755)`.
    pub fn summary(&self) -> String {
        let kind = match self.kind {
            ChildBinaryKind::Dedicated => "dedicated",
            ChildBinaryKind::Configured => "configured",
            ChildBinaryKind::RunningExecutable => "the running executable",
        };
        let mut s = format!(
            "{} ({kind}; owner uid {}, mode {:04o})",
            self.path.display(),
            self.owner_uid,
            self.mode
        );
        if let Some(why) = &self.fallback {
            s.push_str(": ");
            s.push_str(why);
        }
        s
    }
}

/// Why no child binary can be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ChildBinaryError {
    #[error("cannot open the child binary {}: {source}", path.display())]
    Open { path: PathBuf, source: io::Error },
    #[error("refusing the child binary {}: {why}", path.display())]
    Untrusted { path: PathBuf, why: String },
    #[error("cannot find the running executable: {0}")]
    NoExecutable(#[source] io::Error),
}

/// The opened child binary; cheap to clone (the zygote's keeper thread holds one).
#[derive(Debug, Clone)]
pub struct ChildBinary {
    fd: Arc<OwnedFd>,
    info: ChildBinaryInfo,
}

impl ChildBinary {
    /// `configured`, else `skillbox-child` next to the running executable, else the running
    /// executable (see the module documentation for the checks).
    pub fn resolve(configured: Option<&Path>) -> Result<Self, ChildBinaryError> {
        if let Some(path) = configured {
            return Self::open_checked(path, ChildBinaryKind::Configured);
        }
        let exe = std::fs::read_link("/proc/self/exe").map_err(ChildBinaryError::NoExecutable)?;
        let dir = exe.parent().unwrap_or(Path::new("/"));
        let sibling = dir.join(CHILD_BINARY);
        match Self::open_checked(&sibling, ChildBinaryKind::Dedicated) {
            Err(ChildBinaryError::Open { source, .. })
                if source.kind() == io::ErrorKind::NotFound =>
            {
                // The image already running, through the magic link: the inode this process
                // was started from, even if its path has been replaced since.
                let file = open_path(Path::new("/proc/self/exe")).map_err(|source| {
                    ChildBinaryError::Open {
                        path: exe.clone(),
                        source,
                    }
                })?;
                let meta = file.metadata().map_err(|source| ChildBinaryError::Open {
                    path: exe.clone(),
                    source,
                })?;
                Self::from_file(
                    file,
                    ChildBinaryInfo {
                        kind: ChildBinaryKind::RunningExecutable,
                        path: exe,
                        owner_uid: meta.uid(),
                        mode: meta.mode() & 0o7777,
                        size_bytes: meta.len(),
                        fallback: Some(format!(
                            "no {CHILD_BINARY} at {}, so children start from this larger binary",
                            sibling.display()
                        )),
                    },
                )
            }
            other => other,
        }
    }

    fn open_checked(path: &Path, kind: ChildBinaryKind) -> Result<Self, ChildBinaryError> {
        let open_err = |source| ChildBinaryError::Open {
            path: path.to_owned(),
            source,
        };
        let file = open_path(path).map_err(open_err)?;
        // The checks are on the file opened, by its fd: what is checked is what is executed.
        let meta = file.metadata().map_err(open_err)?;
        let euid = nix::unistd::geteuid().as_raw();
        if let Err(why) = trusted(meta.mode(), meta.uid(), euid) {
            return Err(ChildBinaryError::Untrusted {
                path: path.to_owned(),
                why,
            });
        }
        Self::from_file(
            file,
            ChildBinaryInfo {
                kind,
                path: path.to_owned(),
                owner_uid: meta.uid(),
                mode: meta.mode() & 0o7777,
                size_bytes: meta.len(),
                fallback: None,
            },
        )
    }

    fn from_file(file: File, info: ChildBinaryInfo) -> Result<Self, ChildBinaryError> {
        let fd = sys::dup_at_least(file.as_fd(), MIN_BINARY_FD).map_err(|source| {
            ChildBinaryError::Open {
                path: info.path.clone(),
                source,
            }
        })?;
        Ok(Self {
            fd: Arc::new(fd),
            info,
        })
    }

    /// The path to `exec`: the opened file itself, through this process's fd table. Valid in
    /// this process and in a child between `fork` and `exec` (the fd is close-on-exec, and is
    /// closed only once the `exec` has resolved it).
    pub fn exec_path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}", self.fd.as_raw_fd()))
    }

    pub fn info(&self) -> &ChildBinaryInfo {
        &self.info
    }

    /// Start `skillbox-child SUBCOMMAND <our pid> <uid>:<gid>` (a zygote or an exec'd child),
    /// with one end of a new `SOCK_SEQPACKET` pair on fd 0, `/dev/null` on 1, `stderr` on 2, an
    /// empty environment and `/` as its directory, executed through the opened file, never its
    /// path; returns the child and our end of the pair. No `pre_exec` hook, so std can use
    /// `posix_spawn` (vfork): the parent's page tables are not copied and the child starts
    /// sooner. The child closes every other fd itself before anything else.
    pub(crate) fn spawn(
        &self,
        subcommand: &str,
        run_as: Ids,
        stderr: Stdio,
    ) -> io::Result<(Child, OwnedFd)> {
        let (ours, theirs) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )?;
        let child = Command::new(self.exec_path())
            .arg0(CHILD_BINARY)
            .arg(subcommand)
            .arg(std::process::id().to_string())
            .arg(format!("{}:{}", run_as.uid, run_as.gid))
            .env_clear()
            .current_dir("/")
            .stdin(Stdio::from(theirs))
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()?;
        Ok((child, ours))
    }
}

/// `O_PATH | O_CLOEXEC`: enough to `fstat` and to `exec`, not to read or write.
fn open_path(path: &Path) -> io::Result<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH)
        .open(path)
}

/// Whether a file with this `mode` and owner may be executed as the child by `euid`.
fn trusted(mode: u32, owner: u32, euid: u32) -> Result<(), String> {
    if mode & libc::S_IFMT != libc::S_IFREG {
        return Err("not a regular file".to_owned());
    }
    if mode & (libc::S_ISUID | libc::S_ISGID) != 0 {
        return Err(format!(
            "it has the set-user-ID or set-group-ID bit (mode {:04o})",
            mode & 0o7777
        ));
    }
    if mode & 0o022 != 0 {
        return Err(format!(
            "it is writable by group or others (mode {:04o})",
            mode & 0o7777
        ));
    }
    if owner != 0 && owner != euid {
        return Err(format!(
            "it is owned by uid {owner}, neither root nor this process's uid {euid}"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::trusted;

    #[test]
    fn only_a_file_nobody_else_could_write_is_trusted() {
        let file = libc::S_IFREG;
        assert!(trusted(file | 0o755, 0, 1000).is_ok());
        assert!(trusted(file | 0o700, 1000, 1000).is_ok());
        assert!(trusted(file | 0o555, 0, 0).is_ok());
        for (mode, owner, euid, says) in [
            (file | 0o775, 0, 1000, "group or others"),
            (file | 0o757, 1000, 1000, "group or others"),
            (file | 0o755, 1001, 1000, "owned by uid 1001"),
            (file | 0o755, 1001, 0, "owned by uid 1001"),
            (file | 0o4755, 0, 1000, "set-user-ID"),
            (file | 0o2755, 0, 1000, "set-group-ID"),
            (libc::S_IFDIR | 0o755, 0, 1000, "regular file"),
            (libc::S_IFLNK | 0o777, 0, 1000, "regular file"),
        ] {
            let why = trusted(mode, owner, euid).err().unwrap_or_default();
            assert!(why.contains(says), "{mode:o} {owner} {euid}: {why:?}");
        }
    }
}
