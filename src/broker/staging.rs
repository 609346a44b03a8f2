//! The staging root and the life of each staging directory in it.
//!
//! One new directory per request, made with `mkdirat(0700)` beneath the root's fd (it fails if
//! the name exists, so nothing is ever reused), named by 128 random bits that double as the
//! `Release` capability. A [`StagingGuard`] removes its directory when dropped, so a rejection,
//! a hang-up, a deadline or a panic leaves nothing behind; only [`StagingRoot::keep`] disarms
//! it, for an accepted tree, which then lives until `Release` or the TTL reaper. How many
//! accepted trees are held, and how many file bytes they hold, is bounded ([`KeptBounds`]): a
//! client that never releases would otherwise fill the staging filesystem (tmpfs: memory)
//! within one TTL.
//!
//! The root belongs to one server: it is locked with `flock`, and entries a previous run left
//! are removed at start-up. Only names this module could have made are ever removed; a
//! directory is emptied through fds without following a symlink, never by a path walk.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read as _};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg, OFlag, openat};
use nix::sys::stat::{Mode, fchmod, mkdirat};
use nix::unistd::{UnlinkatFlags, unlinkat};

use crate::extract::inventory::{Entry, Kind};
use crate::extract::writer::clear_beneath;

/// The lock file inside the root; its presence is the only thing a start-up clean leaves.
const LOCK_NAME: &str = ".lock";

/// A staging root that cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StagingError {
    #[error("staging root {path}: {source}")]
    Io { path: String, source: io::Error },
    #[error("staging root: {0}")]
    Directory(#[from] crate::owned_dir::OwnedDirError),
    #[error("staging root {path} is in use by another skillbox server")]
    Locked { path: String },
}

/// How much the accepted trees nobody released yet may hold.
#[derive(Debug, Clone, Copy)]
pub struct KeptBounds {
    pub trees: u64,
    /// File bytes, as their inventories count them.
    pub bytes: u64,
}

/// The directories of requests (their [`StagingGuard`]s, not yet removed or kept), and whether
/// new ones may still be made: see [`StagingRoot::close`].
#[derive(Debug, Clone, Copy, Default)]
struct Live {
    dirs: usize,
    closed: bool,
}

/// The directory the per-request staging directories are made in.
pub struct StagingRoot {
    path: PathBuf,
    dir: OwnedFd,
    _lock: Flock<File>,
    ttl: Duration,
    kept: Mutex<HashMap<String, Kept>>,
    bounds: KeptBounds,
    /// The kept trees' count and bytes, changed under `kept`'s lock, read without it.
    kept_trees: AtomicU64,
    kept_bytes: AtomicU64,
    /// Changed under the channel's lock, so a directory is either counted before the root is
    /// closed or never made.
    live: tokio::sync::watch::Sender<Live>,
}

/// An accepted tree held for its client: since when, the inventory it must match, and its
/// file bytes.
struct Kept {
    since: Instant,
    entries: Arc<[Entry]>,
    bytes: u64,
}

fn dir_flags() -> OFlag {
    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC
}

/// 32 lowercase hex digits: exactly what [`new_id`] makes.
pub fn is_staging_id(s: &str) -> bool {
    s.len() == 32 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

fn new_id() -> io::Result<String> {
    let mut bytes = [0u8; 16];
    File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(hex::encode(bytes))
}

impl StagingRoot {
    /// Open (creating it if needed) and lock the root, then remove what a previous run left.
    /// Returns the root and the number of stale directories removed.
    pub fn open(
        path: &Path,
        ttl: Duration,
        bounds: KeptBounds,
    ) -> Result<(Arc<Self>, usize), StagingError> {
        let shown = path.display().to_string();
        let io_err = |source| StagingError::Io {
            path: shown.clone(),
            source,
        };
        // Staged trees live here: a root another user owns, can write to, or swapped for a
        // symlink would let them read or replace what the child wrote.
        let dir = crate::owned_dir::ensure(path, 0o711)?;
        // Traversable so a caller can reach the path it was given, not listable: ids stay secret.
        fchmod(dir.as_fd(), Mode::from_bits_truncate(0o711)).map_err(|e| io_err(e.into()))?;
        let lock_fd = openat(
            dir.as_fd(),
            LOCK_NAME,
            OFlag::O_RDWR | OFlag::O_CREAT | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o600),
        )
        .map_err(|e| io_err(e.into()))?;
        let lock =
            Flock::lock(File::from(lock_fd), FlockArg::LockExclusiveNonblock).map_err(|_| {
                StagingError::Locked {
                    path: shown.clone(),
                }
            })?;
        let root = Arc::new(Self {
            path: path.to_owned(),
            dir,
            _lock: lock,
            ttl,
            kept: Mutex::new(HashMap::new()),
            bounds,
            kept_trees: AtomicU64::new(0),
            kept_bytes: AtomicU64::new(0),
            live: tokio::sync::watch::Sender::new(Live::default()),
        });
        let stale = root.clean_stale().map_err(io_err)?;
        Ok((root, stale))
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    fn clean_stale(&self) -> io::Result<usize> {
        let fd = openat(self.dir.as_fd(), ".", dir_flags(), Mode::empty())?;
        let mut d = nix::dir::Dir::from_fd(fd)?;
        let mut names = Vec::new();
        for ent in d.iter() {
            let ent = ent?;
            if let Ok(name) = ent.file_name().to_str()
                && is_staging_id(name)
            {
                names.push(name.to_owned());
            }
        }
        for name in &names {
            self.remove(name)?;
        }
        Ok(names.len())
    }

    /// Make a new, empty staging directory (0700). Removed when the guard drops. Refused once
    /// the root is [closed](Self::close).
    pub fn create(self: &Arc<Self>) -> io::Result<StagingGuard> {
        let mut refused = false;
        self.live.send_modify(|l| {
            refused = l.closed;
            if !refused {
                l.dirs += 1;
            }
        });
        if refused {
            return Err(io::Error::other(
                "the server is stopping: no new staging directory",
            ));
        }
        let made = self.make_dir();
        if made.is_err() {
            self.live.send_modify(|l| l.dirs -= 1);
        }
        Ok(StagingGuard {
            root: Arc::clone(self),
            id: made?,
            armed: true,
        })
    }

    fn make_dir(&self) -> io::Result<String> {
        loop {
            let id = new_id()?;
            match mkdirat(
                self.dir.as_fd(),
                id.as_str(),
                Mode::from_bits_truncate(0o700),
            ) {
                Ok(()) => return Ok(id),
                // 128 random bits do not collide; if they do, never reuse: draw again.
                Err(Errno::EEXIST) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Make no new staging directory from now on, and wait, at most `within`, until every
    /// request's directory is gone: removed by its guard (a job drops its guard only once its
    /// child was reaped, so nothing writes there any more) or kept (then [`Self::take_all`]
    /// has it). Returns how many were still there. What shutdown does before it removes the
    /// kept trees, so none is kept after.
    pub async fn close(&self, within: Duration) -> usize {
        self.live.send_modify(|l| l.closed = true);
        let mut live = self.live.subscribe();
        let gone = tokio::time::timeout(within, async {
            // The sender is `self`: the channel cannot close while this waits.
            let _ = live.wait_for(|l| l.dirs == 0).await;
        })
        .await;
        match gone {
            Ok(()) => 0,
            Err(_) => self.live.borrow().dirs,
        }
    }

    /// Whether no tree could be kept now (either bound reached): checked at admission, so a
    /// request that could not keep its tree is refused before its upload.
    pub fn full(&self) -> bool {
        self.kept_trees.load(Ordering::Relaxed) >= self.bounds.trees
            || self.kept_bytes.load(Ordering::Relaxed) >= self.bounds.bytes
    }

    /// Keep an accepted tree, whose inventory is `entries`, until `Release` or the TTL, if the
    /// bounds allow it. Returns (id, path), or the guard back (dropping it removes the tree).
    pub fn keep(
        &self,
        mut guard: StagingGuard,
        entries: &[Entry],
    ) -> Result<(String, PathBuf), StagingGuard> {
        let bytes = entries
            .iter()
            .filter(|e| e.kind == Kind::File)
            .fold(0u64, |n, e| n.saturating_add(e.size));
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        let trees = self.kept_trees.load(Ordering::Relaxed);
        let held = self.kept_bytes.load(Ordering::Relaxed);
        if trees >= self.bounds.trees || held.saturating_add(bytes) > self.bounds.bytes {
            return Err(guard);
        }
        guard.armed = false;
        let id = std::mem::take(&mut guard.id);
        kept.insert(
            id.clone(),
            Kept {
                since: Instant::now(),
                entries: entries.into(),
                bytes,
            },
        );
        self.kept_trees.store(trees + 1, Ordering::Relaxed);
        self.kept_bytes.store(held + bytes, Ordering::Relaxed);
        drop(kept);
        let path = self.path.join(&id);
        Ok((id, path))
    }

    /// Count `k` as no longer kept; under `kept`'s lock.
    fn forget(&self, k: &Kept) {
        self.kept_trees.fetch_sub(1, Ordering::Relaxed);
        self.kept_bytes.fetch_sub(k.bytes, Ordering::Relaxed);
    }

    /// A kept tree's directory, opened without following a link, and its inventory; `None`
    /// when `id` is not held.
    pub fn open_kept(&self, id: &str) -> io::Result<Option<(OwnedFd, Arc<[Entry]>)>> {
        let entries = match self
            .kept
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(id)
        {
            Some(k) => Arc::clone(&k.entries),
            None => return Ok(None),
        };
        let fd = openat(self.dir.as_fd(), id, dir_flags(), Mode::empty())?;
        Ok(Some((fd, entries)))
    }

    /// Every kept id, forgotten (the caller removes them): what shutdown clears.
    pub fn take_all(&self) -> Vec<String> {
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        let ids = kept
            .drain()
            .map(|(id, k)| {
                self.forget(&k);
                id
            })
            .collect();
        drop(kept);
        ids
    }

    /// Forget a kept directory and return its inventory; the caller removes it (see
    /// [`StagingRoot::remove_listed`]). `None` when `id` is not held.
    pub fn take_kept(&self, id: &str) -> Option<Arc<[Entry]>> {
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        let k = kept.remove(id)?;
        self.forget(&k);
        Some(k.entries)
    }

    /// Kept directories older than the TTL, forgotten (the caller removes them).
    pub fn take_expired(&self) -> Vec<String> {
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        let expired: Vec<String> = kept
            .iter()
            .filter(|(_, k)| now.duration_since(k.since) >= self.ttl)
            .map(|(id, _)| id.clone())
            .collect();
        for id in &expired {
            if let Some(k) = kept.remove(id) {
                self.forget(&k);
            }
        }
        expired
    }

    /// Whether `id` is still kept (not released, expired or cleared at shutdown).
    pub fn is_kept(&self, id: &str) -> bool {
        self.kept
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains_key(id)
    }

    /// How many accepted directories are held.
    pub fn kept_count(&self) -> usize {
        self.kept
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Remove the directory `id` and everything beneath it; absent is fine.
    pub fn remove(&self, id: &str) -> io::Result<()> {
        if !is_staging_id(id) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a staging id",
            ));
        }
        match openat(self.dir.as_fd(), id, dir_flags(), Mode::empty()) {
            Ok(fd) => clear_beneath(fd.as_fd(), 0)?,
            Err(Errno::ENOENT) => return Ok(()),
            Err(e) => return Err(e.into()),
        }
        match unlinkat(self.dir.as_fd(), id, UnlinkatFlags::RemoveDir) {
            Ok(()) | Err(Errno::ENOENT) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Remove a kept tree whose inventory is `entries`: each listed node unlinked through its
    /// parent's fd, so Release reads no directory back (on a journaled ext4 the listing walk's
    /// `getdents64` and second `openat` of every directory were about a sixth of Release).
    /// The inventory is only a plan: the tree was re-checked against it and nothing has
    /// written to it since (the child is dead, readers only read), but anything the plan does
    /// not remove (a name it cannot take, an unlink that fails) is left to the listing walk of
    /// [`StagingRoot::remove`], which ends the job. Names are single components taken with
    /// `O_NOFOLLOW` from the tree's own fd, as the walk does.
    pub fn remove_listed(&self, id: &str, entries: &[Entry]) -> io::Result<()> {
        if is_staging_id(id)
            && let Ok(tree) = openat(self.dir.as_fd(), id, dir_flags(), Mode::empty())
        {
            unlink_listed(tree, entries);
            match unlinkat(self.dir.as_fd(), id, UnlinkatFlags::RemoveDir) {
                Ok(()) | Err(Errno::ENOENT) => return Ok(()),
                Err(_) => {}
            }
        }
        self.remove(id)
    }
}

/// Unlink what `entries` lists beneath `tree`, best effort (see [`StagingRoot::remove_listed`]).
fn unlink_listed(tree: OwnedFd, entries: &[Entry]) {
    // A name the plan takes: one component, nothing a walk could climb or loop with.
    fn split(path: &str) -> Option<(&str, &str)> {
        let (parent, name) = path.rsplit_once('/').unwrap_or(("", path));
        let plain = |c: &str| !c.is_empty() && c != "." && c != ".." && !c.contains('\0');
        (plain(name) && (parent.is_empty() || parent.split('/').all(plain)))
            .then_some((parent, name))
    }
    let mut dirs: Vec<&str> = entries
        .iter()
        .filter(|e| e.kind == Kind::Dir)
        .map(|e| e.path.as_str())
        .collect();
    // Parents before children, so each directory opens through its parent's fd.
    dirs.sort_unstable_by_key(|p| p.bytes().filter(|&b| b == b'/').count());
    let mut fds: HashMap<&str, OwnedFd> = HashMap::with_capacity(dirs.len() + 1);
    fds.insert("", tree);
    for &d in &dirs {
        let Some((parent, name)) = split(d) else {
            continue;
        };
        if let Some(p) = fds.get(parent)
            && let Ok(fd) = openat(p.as_fd(), name, dir_flags(), Mode::empty())
        {
            fds.insert(d, fd);
        }
    }
    for e in entries.iter().filter(|e| e.kind != Kind::Dir) {
        if let Some((parent, name)) = split(&e.path)
            && let Some(p) = fds.get(parent)
        {
            let _ = unlinkat(p.as_fd(), name, UnlinkatFlags::NoRemoveDir);
        }
    }
    // Children before parents; a directory still holding something stays for the walk.
    for &d in dirs.iter().rev() {
        if let Some((parent, name)) = split(d)
            && let Some(p) = fds.get(parent)
        {
            let _ = unlinkat(p.as_fd(), name, UnlinkatFlags::RemoveDir);
        }
    }
}

/// One request's staging directory; removed on drop unless kept.
pub struct StagingGuard {
    root: Arc<StagingRoot>,
    id: String,
    armed: bool,
}

impl StagingGuard {
    /// The id `StagingRoot::keep` will give this directory.
    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn path(&self) -> PathBuf {
        self.root.path.join(&self.id)
    }
}

impl Drop for StagingGuard {
    fn drop(&mut self) {
        // Inline, not deferred to a task: a task may never run once the runtime shuts down, and
        // the directory must not outlive the request. The job drops its guard on a worker
        // thread, after the child is gone; here it is almost always empty.
        if self.armed
            && let Err(e) = self.root.remove(&self.id)
        {
            tracing::error!(staging_id = %self.id, error = %e, "cannot remove a staging directory");
        }
        // Removed, or kept (disarmed): either way no longer a request's directory.
        self.root.live.send_modify(|l| l.dirs -= 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UNBOUNDED: KeptBounds = KeptBounds {
        trees: u64::MAX,
        bytes: u64::MAX,
    };

    #[test]
    fn create_keep_remove_and_stale_cleaning() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("staging");
        let (root, stale) =
            StagingRoot::open(&path, Duration::from_secs(60), UNBOUNDED).expect("open");
        assert_eq!(stale, 0);
        // A second server on the same root is refused.
        assert!(matches!(
            StagingRoot::open(&path, Duration::from_secs(60), UNBOUNDED),
            Err(StagingError::Locked { .. })
        ));

        let g = root.create().expect("create");
        let dropped = g.path();
        std::fs::write(dropped.join("f"), b"x").expect("write");
        drop(g);
        assert!(!dropped.exists(), "a dropped guard removes its directory");

        let g = root.create().expect("create");
        let Ok((id, kept)) = root.keep(g, &[]) else {
            panic!("not kept")
        };
        std::fs::create_dir(kept.join("sub")).expect("create_dir");
        std::os::unix::fs::symlink("/etc", kept.join("sub/link")).expect("symlink");
        assert!(kept.exists());
        std::fs::write(path.join("unrelated"), b"keep me").expect("write");
        drop(root);

        let (root, stale) =
            StagingRoot::open(&path, Duration::from_secs(60), UNBOUNDED).expect("open");
        assert_eq!(stale, 1);
        assert!(!kept.exists());
        assert!(
            Path::new("/etc/passwd").exists(),
            "links are never followed"
        );
        assert!(
            path.join("unrelated").exists(),
            "only names we could have made are removed"
        );
        assert!(root.take_kept(&id).is_none());
        assert!(root.remove("../etc").is_err());
    }

    fn entry(path: &str, kind: Kind) -> Entry {
        Entry {
            path: path.into(),
            kind,
            ..file(0)
        }
    }

    #[test]
    fn release_unlinks_by_inventory_and_the_walk_takes_what_it_did_not_list() {
        use std::os::unix::fs::symlink;
        let tmp = tempfile::tempdir().expect("tempdir");
        let outside = tmp.path().join("outside");
        std::fs::create_dir(&outside).expect("mkdir");
        std::fs::write(outside.join("keep"), b"x").expect("write");
        let (root, _) =
            StagingRoot::open(&tmp.path().join("s"), Duration::from_secs(60), UNBOUNDED)
                .expect("open");
        let g = root.create().expect("create");
        let t = g.path();
        for d in ["a", "a/b", "c"] {
            std::fs::create_dir(t.join(d)).expect("mkdir");
        }
        for f in ["SKILL.md", "a/x", "a/b/y", "c/z", "unlisted"] {
            std::fs::write(t.join(f), b"data").expect("write");
        }
        symlink("../SKILL.md", t.join("a/l")).expect("symlink");
        // A link to a directory outside, listed as a directory: never followed.
        symlink(&outside, t.join("c/d")).expect("symlink");
        let listed = [
            entry("SKILL.md", Kind::File),
            entry("a", Kind::Dir),
            entry("a/b", Kind::Dir),
            entry("a/b/y", Kind::File),
            entry("a/l", Kind::Symlink),
            entry("a/x", Kind::File),
            entry("c", Kind::Dir),
            entry("c/d", Kind::Dir),
            entry("c/d/keep", Kind::File),
            entry("c/z", Kind::File),
            entry("../outside/keep", Kind::File),
            entry("a/../../outside/keep", Kind::File),
        ];
        let Ok((id, path)) = root.keep(g, &listed) else {
            panic!("keep")
        };
        let plan = root.take_kept(&id).expect("kept");
        assert_eq!(plan.len(), listed.len());
        root.remove_listed(&id, &plan).expect("remove_listed");
        assert!(!path.exists(), "the unlisted file is taken by the walk");
        assert!(outside.join("keep").exists(), "nothing outside is removed");
        // A tree already gone is fine, as for `remove`.
        root.remove_listed(&id, &plan).expect("absent");
        assert!(root.remove_listed("../s", &plan).is_err());
    }

    #[test]
    fn a_closed_root_makes_no_directory_and_waits_for_those_of_requests() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let (root, _) =
            StagingRoot::open(&tmp.path().join("s"), Duration::from_secs(60), UNBOUNDED)
                .expect("open");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime");
        let inflight = root.create().expect("create");
        let kept = root.create().expect("create");
        let Ok((kept, _)) = root.keep(kept, &[]) else {
            panic!("not kept")
        };
        // One request's directory is still there: counted, not waited for past the bound.
        assert_eq!(rt.block_on(root.close(Duration::from_millis(1))), 1);
        assert!(root.create().is_err(), "made after the root was closed");
        let path = inflight.path();
        drop(inflight);
        assert!(!path.exists());
        assert_eq!(rt.block_on(root.close(Duration::from_secs(60))), 0);
        assert_eq!(root.take_all(), vec![kept]);
    }

    fn file(size: u64) -> Entry {
        Entry {
            path: "f".into(),
            kind: Kind::File,
            size,
            mode: "0644".into(),
            sha256: None,
            link_target: None,
            flags: Vec::new(),
        }
    }

    #[test]
    fn kept_trees_are_bounded_by_count_and_bytes_and_freed_by_every_way_out() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let bounds = KeptBounds {
            trees: 2,
            bytes: 100,
        };
        let (root, _) = StagingRoot::open(&tmp.path().join("s"), Duration::from_secs(60), bounds)
            .expect("open");
        let keep = |size| root.keep(root.create().expect("create"), &[file(size)]);
        let Ok((a, _)) = keep(60) else {
            panic!("first")
        };
        // 60 + 41 bytes is over; the refused tree's directory goes with its guard.
        let Err(refused) = keep(41) else {
            panic!("kept past the byte bound")
        };
        let path = refused.path();
        drop(refused);
        assert!(!path.exists());
        assert!(!root.full());
        let Ok((b, _)) = keep(40) else {
            panic!("second")
        };
        assert!(root.full(), "100 of 100 bytes");
        assert!(root.take_kept(&a).is_some());
        assert!(!root.full());
        let Ok((c, _)) = keep(0) else { panic!("third") };
        assert!(root.full(), "two of two trees");
        assert!(keep(0).is_err(), "kept past the count bound");
        assert_eq!(root.take_all().len(), 2);
        assert!(!root.full());
        for id in [&a, &b, &c] {
            root.remove(id).expect("remove");
        }
    }
}
