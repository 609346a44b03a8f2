//! The only code that creates files: everything beneath one directory fd, no symlink followed.
//!
//! Every parent directory is reached by a component-wise `openat(O_NOFOLLOW | O_DIRECTORY)`
//! walk from the staging fd (each directory's fd kept open for the next file: [`DirCache`]),
//! and every leaf is created with `O_CREAT | O_EXCL | O_NOFOLLOW` (or `mkdirat` / `symlinkat`,
//! which never follow the final component). We deliberately do not use
//! `openat2(RESOLVE_BENEATH)`: its flags sit behind a pointer seccomp cannot inspect, while
//! `openat`'s flags can be pinned by the filter (docs/sandbox.md, trap 2). A planted symlink in
//! a parent position therefore fails with `ELOOP`/`ENOTDIR` instead of being followed.
//! No chown, no timestamps, no xattrs: only names, bytes and sanitised modes.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use nix::errno::Errno;
use nix::fcntl::{OFlag, openat};
use nix::sys::stat::{Mode, fchmod, mkdirat};
use nix::unistd::{UnlinkatFlags, symlinkat, unlinkat};

use crate::names::NameMap;

/// Set once this process's umask is 0 (see [`clear_umask`]): files are then created with their
/// final mode, and need no `fchmod` after.
static UMASK_CLEARED: AtomicBool = AtomicBool::new(false);

/// Clear the process's file mode creation mask, so that what the writer creates gets exactly
/// the modes it asks for (0644 or 0755 files, 0755 directories) whatever umask the caller had:
/// a file is then created with its final mode (one system call per file fewer than an
/// `fchmod` after), and a directory is 0755 as the inventory says (under an inherited umask
/// of 077 it came out 0700, which the parent's re-check refuses). The confined child calls it
/// before confinement (`umask` is not on its allow-list); it is process-wide, so only a process
/// that creates nothing but the staged tree may call it. The staged tree is the caller's alone
/// (its root is the parent's private staging directory), so a file being readable by its mode
/// while it is written gives nobody anything.
pub fn clear_umask() {
    nix::sys::stat::umask(Mode::empty());
    UMASK_CLEARED.store(true, Ordering::Release);
}

/// Whether files are created with their final mode ([`clear_umask`] was called).
pub(crate) fn umask_cleared() -> bool {
    UMASK_CLEARED.load(Ordering::Acquire)
}

/// Directories kept open beneath the root at once (see [`DirCache`]). The confined child may
/// hold 64 fds in all; with its pipes, the memfd, the staging fd and one file it stays well
/// under that. A file the hashing thread is to create holds its directory's fd too ([`Create`]),
/// but only ever one the cache holds as well: the cache waits for the hashing thread to be done
/// with them before it closes any ([`super::hashing::quiesce`]).
const MAX_CACHED_DIRS: usize = 24;

/// Open directory fds beneath a root, by relative (normalised) path. Every one was opened by
/// `openat(O_RDONLY | O_DIRECTORY | O_NOFOLLOW)` of one component relative to its own parent's
/// fd (the root's for the first level), so a symlink anywhere on the way fails instead of
/// being followed, exactly as a component-wise walk from the root does; the walk is only not
/// repeated for the next file in the same directory, or in a sibling. When a walk would pass
/// [`MAX_CACHED_DIRS`], every fd is closed first and the walk starts again from the root.
pub struct DirCache<'a> {
    root: BorrowedFd<'a>,
    dirs: NameMap<String, Arc<OwnedFd>>,
    /// The root opened once more (`openat(root, ".")`), for files in it that the hashing thread
    /// creates: that thread may hold it past this borrow.
    shared_root: Option<Arc<OwnedFd>>,
}

impl<'a> DirCache<'a> {
    pub fn new(root: BorrowedFd<'a>) -> Self {
        Self {
            root,
            dirs: NameMap::default(),
            shared_root: None,
        }
    }

    /// The fd of directory `parent` (relative, normalised; `None`: the root).
    pub fn get(&mut self, parent: Option<&str>) -> io::Result<BorrowedFd<'_>> {
        let Some(parent) = parent else {
            return Ok(self.root);
        };
        if !self.dirs.contains_key(parent) {
            self.open(parent)?;
        }
        Ok(self.dirs.get(parent).map_or(self.root, |fd| fd.as_fd()))
    }

    /// [`Self::get`], as a handle another thread may hold (see [`Create`]).
    fn get_shared(&mut self, parent: Option<&str>) -> io::Result<Arc<OwnedFd>> {
        let Some(parent) = parent else {
            if let Some(root) = &self.shared_root {
                return Ok(Arc::clone(root));
            }
            let root = Arc::new(openat(self.root, ".", dir_flags(), Mode::empty())?);
            self.shared_root = Some(Arc::clone(&root));
            return Ok(root);
        };
        if !self.dirs.contains_key(parent) {
            self.open(parent)?;
        }
        match self.dirs.get(parent) {
            Some(fd) => Ok(Arc::clone(fd)),
            None => Err(io::Error::other(
                "a directory just opened is not in the cache",
            )),
        }
    }

    /// Close every cached fd, once the hashing thread holds none of them: a file it is still to
    /// create holds its directory ([`Create`]), and closing the cache's copy would leave that
    /// fd open past the cache's bound.
    fn evict(&mut self) -> io::Result<()> {
        if self.dirs.values().any(|fd| Arc::strong_count(fd) > 1) {
            super::hashing::quiesce()?;
        }
        self.dirs.clear();
        Ok(())
    }

    fn open(&mut self, parent: &str) -> io::Result<()> {
        // Where each component ends: `a/b/c` -> 1, 3, 5.
        let ends: Vec<usize> = parent
            .match_indices('/')
            .map(|(i, _)| i)
            .chain(std::iter::once(parent.len()))
            .collect();
        // The nearest ancestor already open; the walk continues from there.
        let mut from = ends
            .iter()
            .rposition(|&e| self.dirs.contains_key(&parent[..e]))
            .map_or(0, |i| i + 1);
        if self.dirs.len() + (ends.len() - from) > MAX_CACHED_DIRS {
            self.evict()?;
            from = 0;
        }
        for k in from..ends.len() {
            let (start, end) = (if k == 0 { 0 } else { ends[k - 1] + 1 }, ends[k]);
            let fd = {
                let base = match k {
                    0 => self.root,
                    _ => self
                        .dirs
                        .get(&parent[..ends[k - 1]])
                        .map_or(self.root, |fd| fd.as_fd()),
                };
                openat(base, &parent[start..end], dir_flags(), Mode::empty())?
            };
            self.dirs.insert(parent[..end].to_owned(), Arc::new(fd));
        }
        Ok(())
    }

    /// Close every cached fd (before the tree beneath the root is removed), once the hashing
    /// thread has created every file it was given (after it, nothing may appear in the tree).
    pub fn clear(&mut self) -> io::Result<()> {
        super::hashing::quiesce()?;
        self.dirs.clear();
        self.shared_root = None;
        Ok(())
    }

    pub fn root(&self) -> BorrowedFd<'a> {
        self.root
    }
}

/// A regular file to be created by whoever first writes it (the hashing thread, for a file it
/// is handed: `hashing.rs`): its parent directory, reached by the same component-wise walk as
/// every other entry's (so a planted symlink on the way is refused here, at once), its name and
/// its final mode. [`Create::open`] is the writer's own `openat(O_CREAT | O_EXCL | O_NOFOLLOW)`.
/// Only made when the umask is cleared ([`clear_umask`]): the file needs nothing after its bytes.
pub(crate) struct Create {
    dir: Arc<OwnedFd>,
    name: CString,
    mode: u32,
}

impl Create {
    /// Create the file, never following a symlink and never opening something that exists.
    /// Allocates nothing (the hashing thread calls it once confined).
    pub(crate) fn open(&self) -> io::Result<File> {
        let fd = openat(
            self.dir.as_fd(),
            self.name.as_c_str(),
            create_flags(),
            Mode::from_bits_truncate(self.mode),
        )?;
        Ok(File::from(fd))
    }
}

#[cfg(test)]
impl Create {
    /// `name` in `dir`, with `mode` (less the umask unless it is cleared).
    pub(crate) fn at(dir: Arc<OwnedFd>, name: &str, mode: u32) -> Create {
        let name = CString::new(name).unwrap_or_default();
        Create { dir, name, mode }
    }
}

fn create_flags() -> OFlag {
    OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC
}

/// Creates entries beneath a root directory fd, keeping the directories it used open.
pub struct Writer<'a> {
    dirs: DirCache<'a>,
}

fn dir_flags() -> OFlag {
    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC
}

/// A relative path as (parent directory, if any; last component).
pub(crate) fn split(path: &str) -> (Option<&str>, &str) {
    match path.rfind('/') {
        Some(i) => (Some(&path[..i]), &path[i + 1..]),
        None => (None, path),
    }
}

impl<'a> Writer<'a> {
    pub fn new(root: BorrowedFd<'a>) -> Self {
        Self {
            dirs: DirCache::new(root),
        }
    }

    /// The fd of directory `parent` (relative, normalised), opened without following symlinks.
    fn parent_fd(&mut self, parent: Option<&str>) -> io::Result<BorrowedFd<'_>> {
        self.dirs.get(parent)
    }

    /// Create directory `path` with mode 0755. Fails if anything exists there.
    pub fn mkdir(&mut self, path: &str) -> io::Result<()> {
        let (parent, name) = split(path);
        let dir = self.parent_fd(parent)?;
        mkdirat(dir, name, Mode::from_bits_truncate(0o755))?;
        Ok(())
    }

    /// Create regular file `path` (must not exist) for writing; mode set by [`Self::finish_file`].
    pub fn create_file(&mut self, path: &str) -> io::Result<File> {
        self.create_with_mode(path, 0o600)
    }

    /// Create regular file `path` with `mode` (less the umask), never following a symlink and
    /// never opening something that already exists.
    fn create_with_mode(&mut self, path: &str, mode: u32) -> io::Result<File> {
        let (parent, name) = split(path);
        let dir = self.parent_fd(parent)?;
        let fd = openat(dir, name, create_flags(), Mode::from_bits_truncate(mode))?;
        Ok(File::from(fd))
    }

    /// Regular file `path` to be created later, with its final mode (0644, or 0755 if
    /// `executable`), by whoever first writes it ([`Create`]); its parent is reached now.
    /// `None` when the umask is not cleared (then use [`Self::create_file_as`]).
    pub(crate) fn deferred(&mut self, path: &str, executable: bool) -> io::Result<Option<Create>> {
        if !umask_cleared() {
            return Ok(None);
        }
        let (parent, name) = split(path);
        // As `openat` would refuse the name (no path holds a NUL: `path.rs`).
        let name = CString::new(name).map_err(|_| io::Error::from(Errno::EINVAL))?;
        let dir = self.dirs.get_shared(parent)?;
        let mode = if executable { 0o755 } else { 0o644 };
        Ok(Some(Create { dir, name, mode }))
    }

    /// Create regular file `path` (must not exist) for writing, with its final, sanitised mode
    /// (0644, or 0755 if `executable`) when the umask was cleared ([`clear_umask`]): then the
    /// answer's flag is `true` and the file needs no [`Self::finish_file`]. Otherwise it is
    /// created 0600 (`false`), its mode set by [`Self::finish_file`].
    pub fn create_file_as(&mut self, path: &str, executable: bool) -> io::Result<(File, bool)> {
        let cleared = umask_cleared();
        let mode = match (cleared, executable) {
            (true, true) => 0o755,
            (true, false) => 0o644,
            (false, _) => 0o600,
        };
        Ok((self.create_with_mode(path, mode)?, cleared))
    }

    /// Set the final, sanitised mode (0644 or 0755) on a file we created; independent of umask.
    pub fn finish_file(file: &File, executable: bool) -> io::Result<()> {
        let mode = if executable { 0o755 } else { 0o644 };
        fchmod(file.as_fd(), Mode::from_bits_truncate(mode))?;
        Ok(())
    }

    /// Open a regular file we created earlier, for reading (hard-link copies).
    pub fn open_for_copy(&mut self, path: &str) -> io::Result<File> {
        let (parent, name) = split(path);
        let dir = self.parent_fd(parent)?;
        let fd = openat(
            dir,
            name,
            OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )?;
        Ok(File::from(fd))
    }

    /// Create symlink `path` -> `target`. `symlinkat` never follows the new name.
    pub fn symlink(&mut self, path: &str, target: &str) -> io::Result<()> {
        let (parent, name) = split(path);
        let dir = self.parent_fd(parent)?;
        symlinkat(target, dir, name)?;
        Ok(())
    }

    /// Remove everything beneath the root (not the root itself). Used on every rejection the
    /// engine clears itself.
    pub fn clear(&mut self) -> io::Result<()> {
        self.dirs.clear()?;
        clear_beneath(self.dirs.root(), 0)
    }

    /// Leave the tree as it stands, once the hashing thread has created and written every
    /// file it was handed (nothing appears in it after) and every cached fd is closed: a
    /// rejection whose tree the caller removes.
    pub fn leave(&mut self) -> io::Result<()> {
        self.dirs.clear()
    }
}

/// Remove every entry beneath `dir`, recursing without following symlinks.
pub fn clear_beneath(dir: BorrowedFd<'_>, depth: u32) -> io::Result<()> {
    // Deeper than anything the policy lets us create: something else is going on.
    if depth > 4096 {
        return Err(io::Error::other("directory tree too deep to clear"));
    }
    let names = {
        let fd = openat(dir, ".", dir_flags(), Mode::empty())?;
        let mut d = nix::dir::Dir::from_fd(fd)?;
        let mut names = Vec::new();
        for ent in d.iter() {
            let ent = ent?;
            let name = ent.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            names.push((ent.file_name().to_owned(), ent.file_type()));
        }
        names
    };
    for (name, ty) in names {
        let is_dir = match ty {
            Some(nix::dir::Type::Directory) => true,
            Some(_) => false,
            None => match unlinkat(dir, name.as_c_str(), UnlinkatFlags::NoRemoveDir) {
                Ok(()) => continue,
                Err(Errno::EISDIR) => true,
                Err(e) => return Err(e.into()),
            },
        };
        if is_dir {
            let sub = openat(dir, name.as_c_str(), dir_flags(), Mode::empty())?;
            clear_beneath(sub.as_fd(), depth + 1)?;
            unlinkat(dir, name.as_c_str(), UnlinkatFlags::RemoveDir)?;
        } else {
            unlinkat(dir, name.as_c_str(), UnlinkatFlags::NoRemoveDir)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn root() -> (tempfile::TempDir, OwnedFd) {
        let dir = tempfile::tempdir().expect("tempdir");
        let fd = File::open(dir.path()).expect("open");
        (dir, OwnedFd::from(fd))
    }

    #[test]
    fn creates_beneath_and_refuses_planted_symlinks() {
        let (dir, fd) = root();
        let outside = tempfile::tempdir().expect("tempdir");
        let mut w = Writer::new(fd.as_fd());
        w.mkdir("a").expect("mkdir");
        let mut f = w.create_file("a/x").expect("create_file");
        f.write_all(b"hi").expect("write_all");
        Writer::finish_file(&f, false).expect("finish_file");
        assert_eq!(
            std::fs::read(dir.path().join("a/x")).unwrap_or_default(),
            b"hi"
        );

        // A symlink planted by someone else must not be followed as a parent.
        std::os::unix::fs::symlink(outside.path(), dir.path().join("evil")).expect("symlink");
        let err = w.create_file("evil/owned").err().map(|e| e.raw_os_error());
        assert!(
            matches!(err, Some(Some(libc_eloop)) if libc_eloop == Errno::ELOOP as i32 || libc_eloop == Errno::ENOTDIR as i32)
        );
        // ... nor beneath a directory whose fd is kept open for the next file.
        std::os::unix::fs::symlink(outside.path(), dir.path().join("a/evil")).expect("symlink");
        let err = w
            .create_file("a/evil/owned")
            .err()
            .map(|e| e.raw_os_error());
        assert!(
            matches!(err, Some(Some(e)) if e == Errno::ELOOP as i32 || e == Errno::ENOTDIR as i32)
        );
        w.mkdir("a/b").expect("mkdir");
        w.create_file("a/b/y").expect("create_file");
        std::os::unix::fs::symlink(outside.path(), dir.path().join("a/b/evil")).expect("symlink");
        let err = w
            .create_file("a/b/evil/owned")
            .err()
            .map(|e| e.raw_os_error());
        assert!(
            matches!(err, Some(Some(e)) if e == Errno::ELOOP as i32 || e == Errno::ENOTDIR as i32)
        );
        // ... nor as a leaf.
        let err = w.create_file("evil").err().map(|e| e.raw_os_error());
        assert_eq!(err, Some(Some(Errno::EEXIST as i32)));
        assert_eq!(
            std::fs::read_dir(outside.path())
                .map(|d| d.count())
                .unwrap_or(99),
            0
        );

        // More directories than the cache keeps open: the walk starts again from the root.
        for i in 0..(2 * MAX_CACHED_DIRS) {
            w.mkdir(&format!("d{i}")).expect("mkdir");
            w.mkdir(&format!("d{i}/e")).expect("mkdir");
        }
        for round in 0..2 {
            for i in 0..(2 * MAX_CACHED_DIRS) {
                let mut f = w
                    .create_file(&format!("d{i}/e/f{round}"))
                    .expect("create_file");
                f.write_all(b"x").expect("write_all");
            }
        }
        assert!(w.dirs.dirs.len() <= MAX_CACHED_DIRS);
        assert_eq!(
            std::fs::read(dir.path().join("d3/e/f1")).unwrap_or_default(),
            b"x"
        );

        // A file still to be created holds its directory past the cache's eviction of it.
        w.mkdir("later").expect("mkdir");
        let create = Create {
            dir: w.dirs.get_shared(Some("later")).expect("shared"),
            name: CString::new("f").unwrap_or_default(),
            mode: 0o644,
        };
        let root_file = Create {
            dir: w.dirs.get_shared(None).expect("shared root"),
            name: CString::new("at-root").unwrap_or_default(),
            mode: 0o644,
        };
        for i in 0..(2 * MAX_CACHED_DIRS) {
            w.create_file(&format!("d{i}/e/g")).expect("create_file");
        }
        assert!(w.dirs.dirs.len() <= MAX_CACHED_DIRS);
        let mut f = create.open().expect("create after eviction");
        f.write_all(b"late").expect("write_all");
        root_file.open().expect("create at the root");
        assert_eq!(
            std::fs::read(dir.path().join("later/f")).unwrap_or_default(),
            b"late"
        );
        assert!(dir.path().join("at-root").is_file());
        // ... and never opens what exists, nor follows a symlink put in its place.
        assert_eq!(
            create.open().err().and_then(|e| e.raw_os_error()),
            Some(Errno::EEXIST as i32)
        );
        std::fs::remove_file(dir.path().join("later/f")).expect("remove");
        std::os::unix::fs::symlink(outside.path().join("x"), dir.path().join("later/f"))
            .expect("symlink");
        assert_eq!(
            create.open().err().and_then(|e| e.raw_os_error()),
            Some(Errno::EEXIST as i32)
        );
        assert!(!outside.path().join("x").exists());
        drop((create, root_file, f));

        w.clear().expect("clear");
        assert_eq!(
            std::fs::read_dir(dir.path())
                .map(|d| d.count())
                .unwrap_or(99),
            0
        );
        assert!(outside.path().exists());
    }
}
