//! Directories skillbox keeps its own state in (the runtime directory with the socket, the
//! staging root, the fetch cache, the store): created if missing, and trusted only when they are
//! really ours.
//!
//! A default such as `/tmp/skillbox-UID` is a predictable name in a directory everyone can write
//! to. Anyone can create it first (mode 0777, or a symlink to a directory of theirs) and then
//! swap our socket or read our staged trees. So a directory we reuse must be a real directory
//! (no symlink is followed to reach it), owned by our effective uid, writable by nobody else,
//! and its parent must not let another user rename it away (writable by others only with the
//! sticky bit, as `/tmp` is). This module never fixes a directory it refuses (someone else may
//! already have put things in it): it says what is wrong and what to do.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{OFlag, open};
use nix::sys::stat::{Mode, fstat, lstat};

/// Why a directory was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OwnedDirError {
    #[error(
        "{} is a symbolic link; skillbox keeps private state only in a real directory \
         (remove the link, or choose another directory)",
        path.display()
    )]
    Symlink { path: PathBuf },
    #[error("{} exists and is not a directory", path.display())]
    NotADirectory { path: PathBuf },
    #[error(
        "{} is owned by uid {owner}, not by this user (uid {ours}); another user may have \
         created it to read or swap skillbox's files: remove it, or choose a directory of \
         your own (XDG_RUNTIME_DIR, or the flag that sets this directory)",
        path.display()
    )]
    NotOurs {
        path: PathBuf,
        owner: u32,
        ours: u32,
    },
    #[error(
        "{} has mode {mode:04o}: writable by group or others, so anyone could swap skillbox's \
         files there; run `chmod go-w {}` if you trust what is in it, or remove it",
        path.display(),
        path.display()
    )]
    WritableByOthers { path: PathBuf, mode: u32 },
    #[error(
        "{} is in {}, which has mode {mode:04o}: writable by others without the sticky bit, \
         so another user could rename it away; choose a directory in a safe place",
        path.display(),
        parent.display()
    )]
    UnsafeParent {
        path: PathBuf,
        parent: PathBuf,
        mode: u32,
    },
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: io::Error },
}

const GROUP_OR_OTHER_WRITE: u32 = 0o022;
const STICKY: u32 = 0o1000;

/// Make sure `path` is a directory of ours, creating it with `mode` (and any missing parents
/// with the default mode) when it does not exist. Returns an fd of the directory, opened without
/// following a link, on which the checks were made.
pub fn ensure(path: &Path, mode: u32) -> Result<OwnedFd, OwnedDirError> {
    let io_err = |source: io::Error| OwnedDirError::Io {
        path: path.to_path_buf(),
        source,
    };
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(io_err)?;
        // Before creating anything in it: a squatted parent gets nothing of ours.
        check_parent(path, parent)?;
    }
    match nix::unistd::mkdir(path, Mode::from_bits_truncate(mode)) {
        // Newly made: the umask may have narrowed `mode`, never widened it.
        Ok(()) | Err(Errno::EEXIST) => {}
        Err(e) => return Err(io_err(e.into())),
    }
    check(path)
}

/// Check an existing directory as [`ensure`] does, without creating anything.
pub fn check(path: &Path) -> Result<OwnedFd, OwnedDirError> {
    let io_err = |source: io::Error| OwnedDirError::Io {
        path: path.to_path_buf(),
        source,
    };
    // O_NOFOLLOW: a symlink in the last component fails with ELOOP instead of being followed.
    let fd = match open(
        path,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(Errno::ELOOP) => {
            return Err(OwnedDirError::Symlink {
                path: path.to_path_buf(),
            });
        }
        Err(Errno::ENOTDIR) => {
            // Either a file or a symlink to something that is not a directory.
            return Err(match lstat(path) {
                Ok(st) if st.st_mode & libc::S_IFMT == libc::S_IFLNK => OwnedDirError::Symlink {
                    path: path.to_path_buf(),
                },
                _ => OwnedDirError::NotADirectory {
                    path: path.to_path_buf(),
                },
            });
        }
        Err(e) => return Err(io_err(e.into())),
    };
    let st = fstat(fd.as_fd()).map_err(|e| io_err(e.into()))?;
    let ours = nix::unistd::geteuid().as_raw();
    if st.st_uid != ours {
        return Err(OwnedDirError::NotOurs {
            path: path.to_path_buf(),
            owner: st.st_uid,
            ours,
        });
    }
    let perm = st.st_mode & 0o7777;
    if perm & GROUP_OR_OTHER_WRITE != 0 {
        return Err(OwnedDirError::WritableByOthers {
            path: path.to_path_buf(),
            mode: perm,
        });
    }
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        check_parent(path, parent)?;
    }
    Ok(fd)
}

/// A parent writable by others lets them rename our directory and put their own in its place,
/// unless the sticky bit restricts renames to the owner (as /tmp does).
fn check_parent(path: &Path, parent: &Path) -> Result<(), OwnedDirError> {
    let pst = nix::sys::stat::stat(parent).map_err(|e| OwnedDirError::Io {
        path: parent.to_path_buf(),
        source: e.into(),
    })?;
    let pperm = pst.st_mode & 0o7777;
    let ours = nix::unistd::geteuid().as_raw();
    if pperm & GROUP_OR_OTHER_WRITE != 0 && pperm & STICKY == 0 && pst.st_uid != ours {
        return Err(OwnedDirError::UnsafeParent {
            path: path.to_path_buf(),
            parent: parent.to_path_buf(),
            mode: pperm,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn creates_a_private_directory() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("a/b/state");
        ensure(&dir, 0o700).expect("ensure");
        let m = std::fs::metadata(&dir).expect("metadata");
        assert!(m.is_dir());
        assert_eq!(
            m.permissions().mode() & 0o077,
            0,
            "mode {:o}",
            m.permissions().mode()
        );
        // A second call reuses it.
        ensure(&dir, 0o700).expect("reuse");
    }

    #[test]
    fn refuses_a_world_writable_directory() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("squat");
        std::fs::create_dir(&dir).expect("mkdir");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).expect("chmod");
        let err = ensure(&dir, 0o700).expect_err("a 0777 directory must be refused");
        assert!(
            matches!(err, OwnedDirError::WritableByOthers { mode: 0o777, .. }),
            "{err}"
        );
        // Not repaired behind the user's back.
        let m = std::fs::metadata(&dir).expect("metadata");
        assert_eq!(m.permissions().mode() & 0o777, 0o777);
    }

    #[test]
    fn refuses_a_symlink_in_its_place() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let target = tmp.path().join("elsewhere");
        std::fs::create_dir(&target).expect("mkdir");
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        let link = tmp.path().join("state");
        std::os::unix::fs::symlink(&target, &link).expect("symlink");
        let err = ensure(&link, 0o700).expect_err("a symlink must be refused");
        assert!(matches!(err, OwnedDirError::Symlink { .. }), "{err}");
        // A dangling link too (mkdir fails with EEXIST on it).
        let dangling = tmp.path().join("dangling");
        std::os::unix::fs::symlink(tmp.path().join("nowhere"), &dangling).expect("symlink");
        let err = ensure(&dangling, 0o700).expect_err("a dangling symlink must be refused");
        assert!(matches!(err, OwnedDirError::Symlink { .. }), "{err}");
    }

    #[test]
    fn refuses_a_file_in_its_place() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let file = tmp.path().join("state");
        std::fs::write(&file, b"x").expect("write");
        let err = ensure(&file, 0o700).expect_err("a file must be refused");
        assert!(matches!(err, OwnedDirError::NotADirectory { .. }), "{err}");
    }

    #[test]
    fn refuses_a_directory_of_another_user() {
        if !nix::unistd::geteuid().is_root() {
            eprintln!(
                "NOTE: refuses_a_directory_of_another_user needs root to chown; the squatted \
                 directory case is covered by tests/suite/owned_dir.rs as an unprivileged uid"
            );
            return;
        }
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("squat");
        std::fs::create_dir(&dir).expect("mkdir");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        nix::unistd::chown(&dir, Some(nix::unistd::Uid::from_raw(65534)), None).expect("chown");
        let err = ensure(&dir, 0o700).expect_err("another user's directory must be refused");
        assert!(
            matches!(
                err,
                OwnedDirError::NotOurs {
                    owner: 65534,
                    ours: 0,
                    ..
                }
            ),
            "{err}"
        );
    }
}
