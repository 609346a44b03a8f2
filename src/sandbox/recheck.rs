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

/// The first way the staged tree and the child's inventory disagree.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Disagreement {
    #[error("the inventory lists {path:?} twice")]
    ListedTwice { path: String },
    #[error("totals {claimed:?} disagree with the inventory {listed:?}")]
    Totals {
        /// Entries, files, directories, symlinks.
        claimed: (u64, u64, u64, u64),
        listed: (u64, u64, u64, u64),
    },
    #[error("the inventory lists {count} nodes that are not on disk")]
    NotOnDisk { count: usize },
    #[error("the staged tree is deeper than {limit} levels")]
    TooDeep { limit: u64 },
    #[error("cannot read staged directory {dir:?}: {source}")]
    ReadDir { dir: String, source: io::Error },
    #[error("staged name {:?} is not UTF-8", OsStr::from_bytes(.name))]
    NotUtf8 { name: Vec<u8> },
    #[error("{path:?} is on disk but not in the inventory")]
    NotListed { path: String },
    #[error("{path:?}: {source}")]
    Call {
        path: String,
        source: nix::errno::Errno,
    },
    #[error("{path:?}: {source}")]
    Read { path: String, source: io::Error },
    #[error("{path:?}: {problem}")]
    Node { path: String, problem: NodeProblem },
}

/// How one staged node differs from its inventory entry.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NodeProblem {
    #[error("is neither a file, a directory nor a symlink")]
    UnknownKind,
    #[error("is a {on_disk:?} on disk, the inventory says {listed:?}")]
    Kind { on_disk: Kind, listed: Kind },
    #[error("has mode {on_disk}, the inventory says {listed}")]
    Mode { on_disk: String, listed: String },
    #[error("has {on_disk} bytes, the inventory says {listed}")]
    Size { on_disk: i64, listed: u64 },
    #[error("has more than one link")]
    Links,
    #[error("content does not match the inventory's sha256")]
    Content,
    #[error("link target differs from the inventory")]
    LinkTarget,
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
        if let Some((uid, gid)) = child
            && (uid != st.st_uid || gid != st.st_gid)
        {
            fchown(
                fd.as_fd(),
                Some(Uid::from_raw(uid)),
                Some(Gid::from_raw(gid)),
            )?;
            owner = Some((Uid::from_raw(st.st_uid), Gid::from_raw(st.st_gid)));
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
    /// node back from the child's uid on the way. The error names the first disagreement.
    pub(crate) fn recheck(
        &self,
        outcome: &Outcome,
        verify: Verify,
        max_depth: u64,
    ) -> Result<(), Disagreement> {
        let mut listed: HashMap<&str, &Entry> = HashMap::with_capacity(outcome.entries.len());
        for e in &outcome.entries {
            if listed.insert(e.path.as_str(), e).is_some() {
                return Err(Disagreement::ListedTwice {
                    path: e.path.clone(),
                });
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
            return Err(Disagreement::NotOnDisk {
                count: listed.len() - walk.seen,
            });
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

fn check_totals(outcome: &Outcome) -> Result<(), Disagreement> {
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
        return Err(Disagreement::Totals { claimed, listed });
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
    fn dir(&mut self, dir: BorrowedFd<'_>, prefix: &str, depth: u64) -> Result<(), Disagreement> {
        if depth > self.max_depth {
            return Err(Disagreement::TooDeep {
                limit: self.max_depth,
            });
        }
        let shown = |source| Disagreement::ReadDir {
            dir: prefix.to_owned(),
            source,
        };
        for raw in names(dir).map_err(shown)? {
            let name = std::str::from_utf8(&raw)
                .map_err(|_| Disagreement::NotUtf8 { name: raw.clone() })?;
            let path = if prefix.is_empty() {
                name.to_owned()
            } else {
                format!("{prefix}/{name}")
            };
            let entry = *self
                .listed
                .get(path.as_str())
                .ok_or_else(|| Disagreement::NotListed { path: path.clone() })?;
            self.seen += 1;
            let fail = |problem| {
                Err(Disagreement::Node {
                    path: path.clone(),
                    problem,
                })
            };
            let call = |source| Disagreement::Call {
                path: path.clone(),
                source,
            };
            let st = fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW).map_err(call)?;
            if let Some((uid, gid)) = self.owner {
                fchownat(
                    dir,
                    name,
                    Some(uid),
                    Some(gid),
                    AtFlags::AT_SYMLINK_NOFOLLOW,
                )
                .map_err(call)?;
            }
            let kind = match SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT {
                SFlag::S_IFREG => Kind::File,
                SFlag::S_IFDIR => Kind::Dir,
                SFlag::S_IFLNK => Kind::Symlink,
                _ => return fail(NodeProblem::UnknownKind),
            };
            if kind != entry.kind {
                return fail(NodeProblem::Kind {
                    on_disk: kind,
                    listed: entry.kind,
                });
            }
            let mode = format!("{:04o}", st.st_mode & 0o7777);
            if kind != Kind::Symlink && mode != entry.mode {
                return fail(NodeProblem::Mode {
                    on_disk: mode,
                    listed: entry.mode.clone(),
                });
            }
            match kind {
                Kind::File => {
                    if u64::try_from(st.st_size).ok() != Some(entry.size) {
                        return fail(NodeProblem::Size {
                            on_disk: st.st_size,
                            listed: entry.size,
                        });
                    }
                    if st.st_nlink != 1 {
                        return fail(NodeProblem::Links);
                    }
                    if self.verify == Verify::Full {
                        let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
                        let f = openat(dir, name, flags, Mode::empty())
                            .map(File::from)
                            .map_err(call)?;
                        let (digest, _) =
                            Sha256Digest::of_reader(f).map_err(|source| Disagreement::Read {
                                path: path.clone(),
                                source,
                            })?;
                        if Some(digest) != entry.sha256 {
                            return fail(NodeProblem::Content);
                        }
                    }
                }
                Kind::Symlink => {
                    let target = readlinkat(dir, name).map_err(call)?;
                    let target = target.as_bytes();
                    if Some(target) != entry.link_target.as_deref().map(str::as_bytes)
                        || target.len() as u64 != entry.size
                    {
                        return fail(NodeProblem::LinkTarget);
                    }
                }
                Kind::Dir => {
                    let sub = openat(dir, name, dir_flags(), Mode::empty()).map_err(call)?;
                    self.dir(sub.as_fd(), &path, depth + 1)?;
                }
            }
        }
        Ok(())
    }
}
