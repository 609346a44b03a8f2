//! The working directories of one publish run, and the removal of those that killed runs
//! left: its staging directory beside OUT_DIR ([`RUN_PREFIX`]), and the directory its check
//! extraction is staged in, in the temporary directory ([`VERIFY_RUN_PREFIX`]).
//!
//! A run removes each such directory as it ends with it (or renames the staging one into
//! place as OUT_DIR), unless it is killed by `SIGKILL` or a power cut: then the directory
//! stays, and nothing else would ever remove it. So each run holds an exclusive `flock(2)` on
//! its own directory, taken right after making it, for as long as the directory exists under
//! its name; the kernel releases it when the process ends, however it ends. A later run
//! removes, before making its own, every directory of the same prefix in the same parent whose
//! lock it can take: no running publish holds it, so none will ever use it again. One whose
//! lock is held is a live run's, and is left alone. (The fetch cache ties its partial
//! downloads to a lock the same way, `src/fetch/cache.rs`.)
//!
//! Nothing is removed in a parent where someone else could rename entries (writable by group
//! or others without the sticky bit, or owned by a user other than this one or root): there
//! they could rename any directory of this user's, a published site included, to a staging
//! name and have it emptied.
//!
//! Directories made by a skillbox from before this lock carry no lock to tell a live run from
//! a dead one; their names ([`PREFIX`] or `skillbox-publish-verify-` and six characters, never
//! `run-`) are never removed, so a run of an older version working beside this one keeps its
//! directory.

use std::ffi::{CStr, CString};
use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{AtFlags, Flock, FlockArg, OFlag, open, openat};
use nix::sys::stat::{FileStat, Mode, fstat, fstatat};
use nix::unistd::{UnlinkatFlags, unlinkat};

use super::{PublishError, io_err};

/// What every staging directory's name starts with, this version's and older ones'.
pub const PREFIX: &str = ".skillbox-publish-";
/// What this version's staging directories' names start with: those made holding a lock.
pub const RUN_PREFIX: &str = ".skillbox-publish-run-";
/// What this version's check-extraction directories' names start with (in the temporary
/// directory), made holding a lock like the staging ones.
pub const VERIFY_RUN_PREFIX: &str = "skillbox-publish-verify-run-";

/// The lock a run holds on one of its directories (released when dropped, or when the process
/// ends).
#[derive(Debug)]
pub struct StageLock {
    _held: Flock<File>,
}

fn dir_flags() -> OFlag {
    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC
}

fn same_inode(a: &FileStat, b: &FileStat) -> bool {
    (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)
}

/// The pause `publish:made:<prefix>` ([`crate::stop_point`]): the directory is made, not yet
/// opened and locked. The point's name is only made in a debug build.
fn made(run_prefix: &str) {
    #[cfg(debug_assertions)]
    crate::stop_point::stop_point(&format!("publish:made:{run_prefix}"));
    #[cfg(not(debug_assertions))]
    let _ = run_prefix;
}

/// Make a new directory named `run_prefix` and six characters in `parent` (mode 0700) and
/// lock it.
pub fn create(
    parent: &Path,
    run_prefix: &str,
) -> Result<(tempfile::TempDir, StageLock), PublishError> {
    loop {
        let dir = tempfile::Builder::new()
            .prefix(run_prefix)
            .tempdir_in(parent)
            .map_err(io_err(parent))?;
        made(run_prefix);
        let fd = match open(dir.path(), dir_flags(), Mode::empty()) {
            Ok(fd) => fd,
            // Another run's [`remove_abandoned`] found it unlocked (not yet opened here) and
            // removed it: make another. Not removed by name on the way: the name is not ours.
            Err(Errno::ENOENT) => {
                let _ = dir.keep();
                continue;
            }
            Err(e) => {
                return Err(PublishError::Io {
                    path: dir.path().to_owned(),
                    source: e.into(),
                });
            }
        };
        // Waiting, not trying: another run's [`remove_abandoned`] may have taken the lock in
        // the moment between the mkdir and here, and holds it only while it removes the
        // directory.
        let held = Flock::lock(File::from(fd), FlockArg::LockExclusive).map_err(|(_, e)| {
            PublishError::Io {
                path: dir.path().to_owned(),
                source: e.into(),
            }
        })?;
        let locked = fstat(held.as_fd()).map_err(|e| PublishError::Io {
            path: dir.path().to_owned(),
            source: e.into(),
        })?;
        // Locked, and still the directory at that name: no cleaner can remove it from now on.
        // Removed meanwhile (no links left), it is never used: make another.
        let named = nix::sys::stat::lstat(dir.path()).ok();
        if locked.st_nlink > 0 && named.is_some_and(|n| same_inode(&n, &locked)) {
            return Ok((dir, StageLock { _held: held }));
        }
        let _ = dir.keep();
    }
}

/// Remove the directories named `run_prefix` (one of [`RUN_PREFIX`], [`VERIFY_RUN_PREFIX`])
/// in `parent` that killed runs left: owned by this user, whose lock no process holds; none in a parent where
/// others could rename entries. Best effort (a directory that cannot be removed is left for a
/// later run); returns how many were removed.
///
/// Each is opened without following a link and emptied beneath that descriptor, never by a
/// path walk: the parent may be writable by others (a shared web root), who could put a
/// symlink at such a name.
pub fn remove_abandoned(parent: &Path, run_prefix: &str) -> usize {
    let Ok(parent_fd) = open(
        parent,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    ) else {
        return 0;
    };
    // Whoever can rename entries here could give a staging name to any directory of ours.
    if fstat(&parent_fd).is_ok_and(|st| others_can_rename(&st)) {
        return 0;
    }
    let names: Vec<CString> = match openat(&parent_fd, ".", dir_flags(), Mode::empty())
        .and_then(nix::dir::Dir::from_fd)
    {
        Ok(mut d) => d
            .iter()
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_owned())
            .filter(|n| n.to_bytes().starts_with(run_prefix.as_bytes()))
            .collect(),
        Err(_) => return 0,
    };
    names
        .iter()
        .filter(|name| remove_one(&parent_fd, name).is_ok_and(|removed| removed))
        .count()
}

/// Whether someone but this user (and root) can rename the entries of the directory `st` is
/// of: its owner, or anyone when group or others may write to it without the sticky bit.
fn others_can_rename(st: &FileStat) -> bool {
    let me = nix::unistd::geteuid().as_raw();
    let owner = st.st_uid == me || st.st_uid == 0;
    let shared = st.st_mode & 0o022 != 0 && st.st_mode & libc::S_ISVTX == 0;
    !owner || shared
}

/// Remove the directory `name` in `parent` if its lock is free. `Ok(false)`: left
/// alone (a live run's, another user's, or not a directory).
fn remove_one(parent: &OwnedFd, name: &CStr) -> nix::Result<bool> {
    // A symlink or a file at the name fails here (O_NOFOLLOW | O_DIRECTORY): never followed.
    let fd = openat(parent, name, dir_flags(), Mode::empty())?;
    if fstat(&fd)?.st_uid != nix::unistd::geteuid().as_raw() {
        return Ok(false);
    }
    let held = match Flock::lock(File::from(fd), FlockArg::LockExclusiveNonblock) {
        Ok(held) => held,
        // Held: a running publish's.
        Err((_, Errno::EWOULDBLOCK)) => return Ok(false),
        Err((_, e)) => return Err(e),
    };
    let st = fstat(held.as_fd())?;
    // Already removed by another run's clean while this one waited to look.
    if st.st_nlink == 0 {
        return Ok(false);
    }
    crate::extract::writer::clear_beneath(held.as_fd(), 0)
        .map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)))?;
    // The name must still be the directory emptied (it is removed only if empty anyway).
    let named = fstatat(parent, name, AtFlags::AT_SYMLINK_NOFOLLOW)?;
    if !same_inode(&named, &st) {
        return Ok(false);
    }
    unlinkat(parent, name, UnlinkatFlags::RemoveDir)?;
    // Still held here: a run that made this directory and waits for its lock finds it
    // removed, and makes another.
    drop(held);
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stages(parent: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(parent)
            .expect("read_dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(PREFIX))
            .collect();
        v.sort();
        v
    }

    /// A live run's directory (its lock held, here by this process through its own open file
    /// description, as flock counts them) is never removed; once the lock is gone it is, with
    /// what it holds, and nothing outside it is touched through a link inside it or at its
    /// name.
    #[test]
    fn only_unlocked_staging_directories_are_removed() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let parent = tmp.path();
        let outside = parent.join("outside");
        std::fs::create_dir(&outside).expect("mkdir");
        std::fs::write(outside.join("precious"), b"keep").expect("write");

        let (live, lock) = create(parent, RUN_PREFIX).expect("create");
        std::fs::create_dir_all(live.path().join(".well-known/x")).expect("mkdir");
        std::fs::write(live.path().join(".well-known/x/a"), b"a").expect("write");
        std::os::unix::fs::symlink(&outside, live.path().join("link")).expect("symlink");
        // A symlink at a staging name, and an older version's directory: left alone.
        std::os::unix::fs::symlink(&outside, parent.join(format!("{RUN_PREFIX}evil")))
            .expect("symlink");
        std::fs::create_dir(parent.join(format!("{PREFIX}AbCdEf"))).expect("mkdir");
        // A check extraction's directory (no lock held): only its own prefix's clean takes it.
        let verify = parent.join(format!("{VERIFY_RUN_PREFIX}AbCdEf"));
        std::fs::create_dir(&verify).expect("mkdir");

        assert_eq!(remove_abandoned(parent, RUN_PREFIX), 0);
        assert!(live.path().join(".well-known/x/a").exists(), "a live stage");

        drop(lock);
        let name = live.path().file_name().expect("name").to_owned();
        let _ = live.keep();
        // A parent others may rename entries in: nothing is removed; with the sticky bit, as
        // in /tmp, they may not.
        use std::os::unix::fs::PermissionsExt;
        let chmod = |mode| {
            std::fs::set_permissions(parent, std::fs::Permissions::from_mode(mode)).expect("chmod")
        };
        chmod(0o777);
        assert_eq!(remove_abandoned(parent, RUN_PREFIX), 0);
        assert!(parent.join(&name).exists());
        chmod(0o1777);
        assert_eq!(remove_abandoned(parent, RUN_PREFIX), 1);
        assert!(!parent.join(&name).exists());
        assert_eq!(
            stages(parent),
            [format!("{PREFIX}AbCdEf"), format!("{RUN_PREFIX}evil")]
        );
        assert_eq!(
            std::fs::read(outside.join("precious")).expect("read"),
            b"keep"
        );
        assert!(verify.exists(), "another prefix's directory");
        assert_eq!(remove_abandoned(parent, VERIFY_RUN_PREFIX), 1);
        assert!(!verify.exists());
        chmod(0o700);
    }
}
