//! The staging directory on the parent's side: prepared for the child before it starts, held
//! against the child's inventory after it ends, and removed whole when the answer is not an
//! acceptance.
//!
//! The child's inventory is a claim. The re-check walks the staged tree through directory fds
//! without following a symlink, and requires node-for-node agreement: the same paths (nothing
//! extra, nothing missing), kinds, sizes, modes, link targets, a single link per file, and, with
//! [`Verify::Full`], the same SHA-256 for every file. It never opens a file for writing. A large
//! tree is walked on two threads, in batches of one directory's names.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

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
    /// node back from the child's uid on the way. The error names a disagreement (the first
    /// found: on two threads, which one comes first may vary).
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
        let walk = Walk {
            listed: &listed,
            seen: AtomicUsize::new(0),
            verify,
            owner: self.owner,
            max_depth,
            queue: Mutex::new(Queue::default()),
            ready: Condvar::new(),
        };
        let root = openat(self.fd.as_fd(), ".", dir_flags(), Mode::empty()).map_err(|e| {
            Disagreement::ReadDir {
                dir: String::new(),
                source: e.into(),
            }
        })?;
        walk.list(Arc::new(root), String::new(), 0)?;
        // Past this many nodes the per-node calls (two or three each) are most of the parent's
        // time after the child; the second core is idle then (the child has exited).
        if listed.len() >= PARALLEL_MIN {
            std::thread::scope(|s| {
                let other = s.spawn(|| walk.work());
                walk.work();
                // A panic on the other thread is a bug; re-raised here, never taken for agreement.
                if let Err(p) = other.join() {
                    std::panic::resume_unwind(p);
                }
            });
        } else {
            walk.work();
        }
        let q = walk
            .queue
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(e) = q.failed {
            return Err(e);
        }
        let seen = walk.seen.into_inner();
        if seen != listed.len() {
            return Err(Disagreement::NotOnDisk {
                count: listed.len() - seen,
            });
        }
        Ok(())
    }
}

/// The permission bits of `st_mode` as the inventory spells them (`"0644"`: four octal digits,
/// `{:04o}` of the low twelve bits), without a `String` per node.
fn octal_mode(st_mode: u32) -> [u8; 4] {
    let bits = st_mode & 0o7777;
    // Each digit is at most 7, so the cast cannot truncate.
    [9, 6, 3, 0].map(|shift| b'0' + ((bits >> shift) & 0o7) as u8)
}

/// Inventories of at least this many nodes are re-checked on two threads.
const PARALLEL_MIN: usize = 1024;
/// Names of one directory taken as one piece of work.
const BATCH: usize = 256;

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

/// Names of one staged directory still to check.
struct Batch {
    dir: Arc<OwnedFd>,
    prefix: Arc<str>,
    /// Levels beneath the staging directory.
    depth: u64,
    names: Vec<Vec<u8>>,
}

#[derive(Default)]
struct Queue {
    todo: Vec<Batch>,
    /// Threads holding a batch: the walk is over when none does and nothing is left.
    busy: usize,
    failed: Option<Disagreement>,
}

struct Walk<'a> {
    listed: &'a HashMap<&'a str, &'a Entry>,
    seen: AtomicUsize,
    verify: Verify,
    owner: Option<(Uid, Gid)>,
    max_depth: u64,
    queue: Mutex<Queue>,
    ready: Condvar,
}

impl Walk<'_> {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// List the directory `dir` (at `prefix`, `depth` levels down) into batches of work.
    fn list(&self, dir: Arc<OwnedFd>, prefix: String, depth: u64) -> Result<(), Disagreement> {
        if depth > self.max_depth {
            return Err(Disagreement::TooDeep {
                limit: self.max_depth,
            });
        }
        let mut names = names(dir.as_fd()).map_err(|source| Disagreement::ReadDir {
            dir: prefix.clone(),
            source,
        })?;
        let prefix: Arc<str> = prefix.into();
        let mut q = self.lock();
        while !names.is_empty() {
            let rest = names.split_off(names.len().saturating_sub(BATCH));
            q.todo.push(Batch {
                dir: Arc::clone(&dir),
                prefix: Arc::clone(&prefix),
                depth,
                names: rest,
            });
        }
        drop(q);
        self.ready.notify_all();
        Ok(())
    }

    /// Take batches until none is left and no thread can add more, or one disagreed.
    fn work(&self) {
        // One path buffer for every node this thread checks, not an allocation each.
        let mut path = String::new();
        loop {
            let batch = {
                let mut q = self.lock();
                loop {
                    if q.failed.is_some() {
                        return;
                    }
                    if let Some(b) = q.todo.pop() {
                        q.busy += 1;
                        break b;
                    }
                    if q.busy == 0 {
                        return;
                    }
                    q = self.ready.wait(q).unwrap_or_else(PoisonError::into_inner);
                }
            };
            let result = batch
                .names
                .iter()
                .try_for_each(|raw| self.node(&batch, raw, &mut path));
            let mut q = self.lock();
            q.busy -= 1;
            if let Err(e) = result {
                q.failed.get_or_insert(e);
            }
            let over = q.failed.is_some() || (q.busy == 0 && q.todo.is_empty());
            drop(q);
            if over {
                self.ready.notify_all();
            }
        }
    }

    /// Check one staged node against its entry; a directory is listed for later batches.
    fn node(&self, batch: &Batch, raw: &[u8], path: &mut String) -> Result<(), Disagreement> {
        let prefix = &*batch.prefix;
        let name =
            std::str::from_utf8(raw).map_err(|_| Disagreement::NotUtf8 { name: raw.to_vec() })?;
        path.clear();
        if !prefix.is_empty() {
            path.push_str(prefix);
            path.push('/');
        }
        path.push_str(name);
        let path = path.as_str();
        let entry = *self
            .listed
            .get(path)
            .ok_or_else(|| Disagreement::NotListed {
                path: path.to_owned(),
            })?;
        self.seen.fetch_add(1, Ordering::Relaxed);
        let fail = |problem| {
            Err(Disagreement::Node {
                path: path.to_owned(),
                problem,
            })
        };
        let call = |source| Disagreement::Call {
            path: path.to_owned(),
            source,
        };
        let dir_fd = batch.dir.as_fd();
        let st = fstatat(dir_fd, name, AtFlags::AT_SYMLINK_NOFOLLOW).map_err(call)?;
        if let Some((uid, gid)) = self.owner {
            fchownat(
                dir_fd,
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
        if kind != Kind::Symlink && octal_mode(st.st_mode) != entry.mode.as_bytes() {
            return fail(NodeProblem::Mode {
                on_disk: format!("{:04o}", st.st_mode & 0o7777),
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
                    let f = openat(dir_fd, name, flags, Mode::empty())
                        .map(File::from)
                        .map_err(call)?;
                    let (digest, _) =
                        Sha256Digest::of_reader(f).map_err(|source| Disagreement::Read {
                            path: path.to_owned(),
                            source,
                        })?;
                    if Some(digest) != entry.sha256 {
                        return fail(NodeProblem::Content);
                    }
                }
            }
            Kind::Symlink => {
                let target = readlinkat(dir_fd, name).map_err(call)?;
                let target = target.as_bytes();
                if Some(target) != entry.link_target.as_deref().map(str::as_bytes)
                    || target.len() as u64 != entry.size
                {
                    return fail(NodeProblem::LinkTarget);
                }
            }
            Kind::Dir => {
                let sub = openat(dir_fd, name, dir_flags(), Mode::empty()).map_err(call)?;
                self.list(Arc::new(sub), path.to_owned(), batch.depth + 1)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::extract::inventory::{ArtifactFacts, Totals};
    use crate::reason::Verdict;

    fn entry(path: &str, kind: Kind, size: u64, mode: &str) -> Entry {
        Entry {
            path: path.to_owned(),
            kind,
            size,
            mode: mode.to_owned(),
            sha256: (kind == Kind::File).then(|| Sha256Digest::of_bytes(b"abc")),
            link_target: (kind == Kind::Symlink).then(|| "../SKILL.md".to_owned()),
            flags: Vec::new(),
        }
    }

    /// A staged tree of `files` files in three directories (and one symlink), and the
    /// inventory that matches it.
    fn tree(files: usize) -> (tempfile::TempDir, StagingDir, Outcome) {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let root = tmp.path().join("staging");
        std::fs::create_dir(&root).unwrap_or_else(|e| panic!("{e}"));
        let dir = StagingDir::prepare(&root, None).unwrap_or_else(|e| panic!("{e}"));
        let mut entries = Vec::new();
        for d in 0..3 {
            let name = format!("d{d}");
            std::fs::create_dir(root.join(&name)).unwrap_or_else(|e| panic!("{e}"));
            entries.push(entry(&name, Kind::Dir, 0, "0755"));
        }
        for i in 0..files {
            let path = format!("d{}/f{i:05}.txt", i % 3);
            std::fs::write(root.join(&path), b"abc").unwrap_or_else(|e| panic!("{e}"));
            entries.push(entry(&path, Kind::File, 3, "0644"));
        }
        std::os::unix::fs::symlink("../SKILL.md", root.join("d0/link"))
            .unwrap_or_else(|e| panic!("{e}"));
        entries.push(entry("d0/link", Kind::Symlink, 11, "0777"));
        let count = |k: Kind| entries.iter().filter(|e| e.kind == k).count() as u64;
        let totals = Totals {
            entries: entries.len() as u64,
            files: count(Kind::File),
            dirs: count(Kind::Dir),
            symlinks: count(Kind::Symlink),
            ..Totals::default()
        };
        let outcome = Outcome {
            verdict: Verdict::Accepted,
            reason: None,
            artifact: ArtifactFacts {
                digest: None,
                format: Some("tar".into()),
                size: 0,
            },
            entries,
            totals,
            wrapper: None,
            review: None,
        };
        (tmp, dir, outcome)
    }

    fn check(dir: &StagingDir, outcome: &Outcome) -> Result<(), String> {
        dir.recheck(outcome, Verify::Full, 8)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn modes_are_spelled_as_the_inventory_spells_them() {
        for bits in [
            0, 0o644, 0o755, 0o4755, 0o7777, 0o1000, 0o100_644, 0o040_755,
        ] {
            assert_eq!(
                octal_mode(bits),
                format!("{:04o}", bits & 0o7777).as_bytes(),
                "{bits:o}"
            );
        }
    }

    #[test]
    fn agreement_and_each_disagreement_on_one_thread_and_on_two() {
        // Below and above PARALLEL_MIN.
        for files in [200, 3 * PARALLEL_MIN] {
            let (tmp, dir, outcome) = tree(files);
            let root = tmp.path().join("staging");
            assert_eq!(check(&dir, &outcome), Ok(()), "{files} files");

            // The last file of the last batch some thread takes, and one in the middle.
            let last = format!("d{}/f{:05}.txt", (files - 1) % 3, files - 1);
            let middle = format!("d{}/f{:05}.txt", (files / 2) % 3, files / 2);

            std::fs::write(root.join("d2/unlisted.sh"), b"x").unwrap_or_else(|e| panic!("{e}"));
            let e = check(&dir, &outcome).expect_err("an unlisted file");
            assert!(e.contains("d2/unlisted.sh"), "{files}: {e}");
            std::fs::remove_file(root.join("d2/unlisted.sh")).unwrap_or_else(|e| panic!("{e}"));

            std::fs::write(root.join(&middle), b"abcd").unwrap_or_else(|e| panic!("{e}"));
            let e = check(&dir, &outcome).expect_err("a wrong size");
            assert!(e.contains(&middle) && e.contains("4 bytes"), "{files}: {e}");
            std::fs::write(root.join(&middle), b"abc").unwrap_or_else(|e| panic!("{e}"));

            let set_mode = |mode| {
                let perms = std::os::unix::fs::PermissionsExt::from_mode(mode);
                std::fs::set_permissions(root.join(&middle), perms)
                    .unwrap_or_else(|e| panic!("{e}"))
            };
            set_mode(0o4640);
            let e = check(&dir, &outcome).expect_err("another mode");
            assert!(
                e.contains(&middle) && e.contains("has mode 4640, the inventory says 0644"),
                "{files}: {e}"
            );
            set_mode(0o644);

            std::fs::write(root.join(&last), b"abd").unwrap_or_else(|e| panic!("{e}"));
            let e = check(&dir, &outcome).expect_err("other content");
            assert!(e.contains(&last) && e.contains("sha256"), "{files}: {e}");
            std::fs::remove_file(root.join(&last)).unwrap_or_else(|e| panic!("{e}"));
            let e = check(&dir, &outcome).expect_err("a missing file");
            assert!(e.contains("1 nodes that are not on disk"), "{files}: {e}");
            std::fs::write(root.join(&last), b"abc").unwrap_or_else(|e| panic!("{e}"));

            let e = dir
                .recheck(&outcome, Verify::Structure, 0)
                .expect_err("too deep")
                .to_string();
            assert!(e.contains("deeper than 0"), "{files}: {e}");

            assert_eq!(check(&dir, &outcome), Ok(()), "{files} files, restored");
        }
    }
}
