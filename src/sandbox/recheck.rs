//! The staging directory on the parent's side: prepared for the child before it starts, held
//! against the child's inventory after it ends, and removed whole when the answer is not an
//! acceptance.
//!
//! The child's inventory is a claim. The re-check walks the staged tree through directory fds
//! without following a symlink, and requires node-for-node agreement: the same paths (nothing
//! extra, nothing missing), kinds, sizes, modes, link targets, a single link per file, and, with
//! [`Verify::Full`], the same SHA-256 for every file. It never opens a file for writing.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::fcntl::{AtFlags, OFlag, openat, readlinkat};
use nix::sys::stat::{Mode, SFlag, fchmod, fstat, fstatat};
use nix::unistd::{Gid, Uid, fchown, fchownat};
use serde::{Deserialize, Serialize};

use crate::digest::Sha256Digest;
use crate::extract::inventory::{Entry, Kind};
use crate::extract::writer::clear_beneath;
use crate::intake::Outcome;

/// How much of the staged tree the parent re-reads before accepting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verify {
    /// Paths, kinds, sizes, modes and link targets.
    #[default]
    Structure,
    /// All of that, plus a SHA-256 of every file.
    Full,
}

/// A staging directory prepared for one child.
pub struct StagingDir {
    /// Known when we opened it by path (and so can remove it); `None` for a caller's fd.
    path: Option<PathBuf>,
    fd: OwnedFd,
    /// Who owned it before it was lent to the child (restored afterwards).
    owner: Option<(Uid, Gid)>,
}

fn dir_flags() -> OFlag {
    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC
}

impl StagingDir {
    /// Open `path`, which must be an empty directory owned by us and not a symlink; make it
    /// 0700 and, when the child will run as `child` (another identity), lend it to that uid/gid.
    pub fn prepare(path: &Path, child: Option<(u32, u32)>) -> io::Result<Self> {
        let fd = nix::fcntl::open(path, dir_flags(), Mode::empty())?;
        Self::adopt(fd, Some(path.to_owned()), child)
    }

    /// [`StagingDir::prepare`] for a directory the caller already holds open (a duplicate of
    /// `dir` is kept; the caller stays responsible for removing the directory itself).
    pub fn prepare_fd(dir: BorrowedFd<'_>, child: Option<(u32, u32)>) -> io::Result<Self> {
        Self::adopt(openat(dir, ".", dir_flags(), Mode::empty())?, None, child)
    }

    fn adopt(fd: OwnedFd, path: Option<PathBuf>, child: Option<(u32, u32)>) -> io::Result<Self> {
        let st = fstat(fd.as_fd())?;
        if st.st_uid != nix::unistd::geteuid().as_raw() {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "the staging directory is not owned by us",
            ));
        }
        if !is_empty(fd.as_fd())? {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "the staging directory is not empty",
            ));
        }
        fchmod(fd.as_fd(), Mode::from_bits_truncate(0o700))?;
        let mut owner = None;
        if let Some((uid, gid)) = child {
            if uid != st.st_uid || gid != st.st_gid {
                fchown(
                    fd.as_fd(),
                    Some(Uid::from_raw(uid)),
                    Some(Gid::from_raw(gid)),
                )?;
                owner = Some((Uid::from_raw(st.st_uid), Gid::from_raw(st.st_gid)));
            }
        }
        Ok(Self { path, fd, owner })
    }

    pub(crate) fn fd(&self) -> &OwnedFd {
        &self.fd
    }

    /// The path, when it was opened by one.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Take the directory back from the child's uid, so nothing else running as that uid can
    /// reach into it, and make it 0700 again (the child owned it, so it could have changed the
    /// mode). Entries are taken back during [`StagingDir::recheck`].
    pub(crate) fn reclaim_root(&self) -> io::Result<()> {
        if let Some((uid, gid)) = self.owner {
            fchown(self.fd.as_fd(), Some(uid), Some(gid))?;
        }
        fchmod(self.fd.as_fd(), Mode::from_bits_truncate(0o700))?;
        Ok(())
    }

    /// Remove everything beneath the directory, then the directory itself when we know its
    /// path (a caller's fd is left empty for the caller to remove).
    pub fn discard(self) -> io::Result<()> {
        clear_beneath(self.fd.as_fd(), 0)?;
        self.reclaim_root()?;
        drop(self.fd);
        match &self.path {
            Some(p) => std::fs::remove_dir(p),
            None => Ok(()),
        }
    }

    /// Hold the staged tree against `outcome`'s inventory (see the module docs), taking every
    /// node back from the child's uid on the way. `Err(detail)` names the first disagreement.
    pub(crate) fn recheck(
        &self,
        outcome: &Outcome,
        verify: Verify,
        max_depth: u64,
    ) -> Result<(), String> {
        let mut listed: HashMap<&str, &Entry> = HashMap::with_capacity(outcome.entries.len());
        for e in &outcome.entries {
            if listed.insert(e.path.as_str(), e).is_some() {
                return Err(format!("the inventory lists {:?} twice", e.path));
            }
        }
        check_totals(outcome)?;
        let mut walk = Walk {
            listed: &listed,
            seen: 0,
            verify,
            owner: self.owner,
            max_depth,
        };
        walk.dir(self.fd.as_fd(), "", 0)?;
        if walk.seen != listed.len() {
            return Err(format!(
                "the inventory lists {} nodes that are not on disk",
                listed.len() - walk.seen
            ));
        }
        Ok(())
    }
}

fn is_empty(dir: BorrowedFd<'_>) -> io::Result<bool> {
    Ok(names(dir)?.is_empty())
}

/// The names in a directory, without `.` and `..`.
fn names(dir: BorrowedFd<'_>) -> io::Result<Vec<Vec<u8>>> {
    let fd = openat(dir, ".", dir_flags(), Mode::empty())?;
    let mut d = nix::dir::Dir::from_fd(fd)?;
    let mut out = Vec::new();
    for ent in d.iter() {
        let name = ent?.file_name().to_bytes().to_vec();
        if name != b"." && name != b".." {
            out.push(name);
        }
    }
    Ok(out)
}

fn check_totals(outcome: &Outcome) -> Result<(), String> {
    let count = |k: Kind| outcome.entries.iter().filter(|e| e.kind == k).count() as u64;
    let t = &outcome.totals;
    let claimed = (t.entries, t.files, t.dirs, t.symlinks);
    let listed = (
        outcome.entries.len() as u64,
        count(Kind::File),
        count(Kind::Dir),
        count(Kind::Symlink),
    );
    if claimed != listed {
        return Err(format!(
            "totals {claimed:?} disagree with the inventory {listed:?}"
        ));
    }
    Ok(())
}

struct Walk<'a> {
    listed: &'a HashMap<&'a str, &'a Entry>,
    seen: usize,
    verify: Verify,
    owner: Option<(Uid, Gid)>,
    max_depth: u64,
}

impl Walk<'_> {
    fn dir(&mut self, dir: BorrowedFd<'_>, prefix: &str, depth: u64) -> Result<(), String> {
        if depth > self.max_depth {
            return Err(format!(
                "the staged tree is deeper than {} levels",
                self.max_depth
            ));
        }
        let shown = |e: io::Error| format!("cannot read staged directory {prefix:?}: {e}");
        for raw in names(dir).map_err(shown)? {
            let name = std::str::from_utf8(&raw)
                .map_err(|_| format!("staged name {:?} is not UTF-8", OsStr::from_bytes(&raw)))?;
            let path = if prefix.is_empty() {
                name.to_owned()
            } else {
                format!("{prefix}/{name}")
            };
            let entry = *self
                .listed
                .get(path.as_str())
                .ok_or_else(|| format!("{path:?} is on disk but not in the inventory"))?;
            self.seen += 1;
            let fail = |what: &str| Err(format!("{path:?}: {what}"));
            let st = fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW)
                .map_err(|e| format!("{path:?}: {e}"))?;
            if let Some((uid, gid)) = self.owner {
                fchownat(
                    dir,
                    name,
                    Some(uid),
                    Some(gid),
                    AtFlags::AT_SYMLINK_NOFOLLOW,
                )
                .map_err(|e| format!("{path:?}: {e}"))?;
            }
            let kind = match SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT {
                SFlag::S_IFREG => Kind::File,
                SFlag::S_IFDIR => Kind::Dir,
                SFlag::S_IFLNK => Kind::Symlink,
                _ => return fail("is neither a file, a directory nor a symlink"),
            };
            if kind != entry.kind {
                return fail(&format!(
                    "is a {kind:?} on disk, the inventory says {:?}",
                    entry.kind
                ));
            }
            let mode = format!("{:04o}", st.st_mode & 0o7777);
            if kind != Kind::Symlink && mode != entry.mode {
                return fail(&format!(
                    "has mode {mode}, the inventory says {}",
                    entry.mode
                ));
            }
            match kind {
                Kind::File => {
                    if u64::try_from(st.st_size).ok() != Some(entry.size) {
                        return fail(&format!(
                            "has {} bytes, the inventory says {}",
                            st.st_size, entry.size
                        ));
                    }
                    if st.st_nlink != 1 {
                        return fail("has more than one link");
                    }
                    if self.verify == Verify::Full {
                        let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
                        let f = openat(dir, name, flags, Mode::empty())
                            .map(File::from)
                            .map_err(|e| format!("{path:?}: {e}"))?;
                        let (digest, _) =
                            Sha256Digest::of_reader(f).map_err(|e| format!("{path:?}: {e}"))?;
                        if Some(digest) != entry.sha256 {
                            return fail("content does not match the inventory's sha256");
                        }
                    }
                }
                Kind::Symlink => {
                    let target = readlinkat(dir, name).map_err(|e| format!("{path:?}: {e}"))?;
                    let target = target.as_bytes();
                    if Some(target) != entry.link_target.as_deref().map(str::as_bytes)
                        || target.len() as u64 != entry.size
                    {
                        return fail("link target differs from the inventory");
                    }
                }
                Kind::Dir => {
                    let sub = openat(dir, name, dir_flags(), Mode::empty())
                        .map_err(|e| format!("{path:?}: {e}"))?;
                    self.dir(sub.as_fd(), &path, depth + 1)?;
                }
            }
        }
        Ok(())
    }
}
