//! Putting a built index in place, or comparing it with a published tree (the CI gate).
//!
//! A new output directory is the staging directory renamed into place. Into an existing one,
//! every new artifact is renamed in first (content-addressed names: an existing file of that
//! name must already hold those bytes, or nothing is written), and the index last, by one
//! rename: a reader sees the previous index or the new one, never a half-written file, and the
//! artifacts any index names are there before it. A failure removes what this run created and
//! leaves the previous tree as it was. This module never deletes or replaces a file it did not
//! write, and never writes through a symlink in the output tree.
//!
//! The output tree may be writable by others (a shared web root), who could swap a directory
//! of it for a symlink between a check and a write made by path, and so have publish write (or
//! `--check` read) outside it. So OUT_DIR is opened once, without following a link, and every
//! path beneath it is reached from that descriptor one component at a time
//! ([`Tree`]: each component opened with `O_PATH | O_NOFOLLOW` and its kind taken from that
//! very descriptor), missing directories made with `mkdirat` in the directory just opened, and
//! files moved with `linkat`/`renameat` from the staging directory's descriptor into the opened
//! one. A directory checked is the directory written in, whatever its path has become since.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use nix::errno::Errno;
use nix::fcntl::{AT_FDCWD, AtFlags, OFlag, RenameFlags, open, openat, renameat, renameat2};
use nix::sys::stat::{Mode, fchmod, fstat, mkdirat};
use nix::unistd::{UnlinkatFlags, fsync, linkat, unlinkat};
use serde::Serialize;

use super::{Built, INDEX_DIR, INDEX_FILE, PublishError, io_err};

const FILE_MODE: u32 = 0o644;
const DIR_MODE: u32 = 0o755;
/// Bounds the mkdir-then-open retries when a directory being created keeps vanishing.
const MAX_CREATE_TRIES: u32 = 8;

/// Write `bytes` to a new file at `path` (mode 0644, whatever the umask), creating missing
/// parents (0755), and flush it to disk. For the staging directory, which is publish's own.
pub fn write_file(path: &Path, bytes: &[u8]) -> Result<(), PublishError> {
    if let Some(parent) = path.parent() {
        make_dirs(parent)?;
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(io_err(path))?;
    f.write_all(bytes).map_err(io_err(path))?;
    f.set_permissions(std::fs::Permissions::from_mode(FILE_MODE))
        .map_err(io_err(path))?;
    f.sync_all().map_err(io_err(path))
}

fn make_dirs(dir: &Path) -> Result<(), PublishError> {
    if dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent() {
        make_dirs(parent)?;
    }
    std::fs::create_dir(dir).map_err(io_err(dir))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(DIR_MODE)).map_err(io_err(dir))
}

fn sync_dir(dir: &Path) -> Result<(), PublishError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err(dir))
}

fn os_err(path: &Path) -> impl FnOnce(Errno) -> PublishError {
    let path = path.to_owned();
    move |e| PublishError::Io {
        path,
        source: e.into(),
    }
}

/// What happened to each output file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FileStatus {
    Written,
    /// Already there with these exact bytes.
    Unchanged,
}

/// One output file and what happened to it.
#[derive(Debug, Clone, Serialize)]
pub struct Written {
    pub path: String,
    pub status: FileStatus,
}

/// Put `built` in place at `out` (its staging directory must be beside `out`, on the same file
/// system). Returns each file of the output with what happened to it.
pub fn write(built: Built, out: &Path) -> Result<Vec<Written>, PublishError> {
    if let Some(tree) = Tree::open_out(out)? {
        return into_existing(built, tree);
    }
    let built = match fresh(built, out)? {
        Ok(files) => return Ok(files),
        Err(built) => built,
    };
    // OUT_DIR appeared after it was looked at: publish into it as into any existing one.
    match Tree::open_out(out)? {
        Some(tree) => into_existing(built, tree),
        None => Err(PublishError::Usage(format!(
            "--out {}: appeared and vanished again while publishing; nothing was written",
            out.display()
        ))),
    }
}

/// `out` as (its parent directory, its last name), when it ends in a name (not `/` or `..`).
fn split_out(out: &Path) -> Option<(&Path, &OsStr)> {
    let name = out.file_name()?;
    let parent = out
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    Some((parent, name))
}

#[cfg(test)]
thread_local! {
    /// A test's act between the look that found no OUT and the rename into place (the window
    /// in which someone else may make OUT).
    static BEFORE_RENAME: std::cell::RefCell<Option<Box<dyn FnOnce()>>> =
        const { std::cell::RefCell::new(None) };
}

/// No output directory yet: the staging directory becomes it, by one rename. `Err(built)` when
/// something appeared at `out` meanwhile (it is then never replaced).
fn fresh(built: Built, out: &Path) -> Result<Result<Vec<Written>, Built>, PublishError> {
    let stage = built.stage.path().to_owned();
    std::fs::set_permissions(&stage, std::fs::Permissions::from_mode(DIR_MODE))
        .map_err(io_err(&stage))?;
    sync_tree_dirs(&stage)?;
    let Some((parent, name)) = split_out(out) else {
        // `/` or a `..` always exists; only a vanished one is missing.
        return Err(PublishError::Io {
            path: out.to_owned(),
            source: std::io::ErrorKind::NotFound.into(),
        });
    };
    let parent_fd = open(
        parent,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(os_err(parent))?;
    #[cfg(test)]
    if let Some(act) = BEFORE_RENAME.with(|h| h.borrow_mut().take()) {
        act();
    }
    // RENAME_NOREPLACE: a directory someone made at `out` meanwhile, even an empty one, is not
    // replaced (plain rename would). A file system without it gets the plain rename.
    match renameat2(
        AT_FDCWD,
        &stage,
        &parent_fd,
        name,
        RenameFlags::RENAME_NOREPLACE,
    ) {
        Ok(()) => {}
        Err(Errno::EEXIST) => return Ok(Err(built)),
        Err(Errno::EINVAL) => {
            renameat(AT_FDCWD, &stage, &parent_fd, name).map_err(os_err(out))?;
        }
        Err(e) => return Err(os_err(out)(e)),
    }
    let files = built.files();
    // Renamed: the directory is `out` now, and must outlive the TempDir value.
    let _ = built.stage.keep();
    fsync(&parent_fd).map_err(os_err(parent))?;
    Ok(Ok(files
        .into_iter()
        .map(|path| Written {
            path,
            status: FileStatus::Written,
        })
        .collect()))
}

fn sync_tree_dirs(dir: &Path) -> Result<(), PublishError> {
    for e in std::fs::read_dir(dir).map_err(io_err(dir))? {
        let e = e.map_err(io_err(dir))?;
        if e.file_type().map_err(io_err(&e.path()))?.is_dir() {
            sync_tree_dirs(&e.path())?;
        }
    }
    sync_dir(dir)
}

/// What a name in an opened directory is, looked at without following it.
enum Node {
    Missing,
    /// A directory, opened.
    Dir(OwnedFd),
    Link,
    /// Anything else: a regular file, a FIFO, a device, a socket.
    Other,
}

/// `name` in `dir`, never followed: opened with `O_PATH | O_NOFOLLOW` (which opens a symlink
/// itself instead of following it, and opens nothing for reading, so a FIFO cannot block), its
/// kind taken from that descriptor, and a directory reopened through it (`.` beneath it). What
/// is classified is what is used: nothing can be swapped in between.
fn lookup(dir: &OwnedFd, name: &OsStr, at: &Path) -> Result<Node, PublishError> {
    let fd = match openat(
        dir,
        name,
        OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(Errno::ENOENT) => return Ok(Node::Missing),
        Err(e) => return Err(os_err(at)(e)),
    };
    let kind = fstat(&fd).map_err(os_err(at))?.st_mode & libc::S_IFMT;
    Ok(if kind == libc::S_IFDIR {
        Node::Dir(
            openat(
                &fd,
                ".",
                OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
                Mode::empty(),
            )
            .map_err(os_err(at))?,
        )
    } else if kind == libc::S_IFLNK {
        Node::Link
    } else {
        Node::Other
    })
}

/// The regular file `looked` (an `O_PATH` descriptor of `name` in `dir`, inode `id`), opened
/// for reading. Through `/proc/self/fd/N`, the documented way to reopen an `O_PATH`
/// descriptor: it reaches the inode that descriptor holds, whatever the name holds by now, so
/// the look is what is opened. Without `/proc` the name is opened again in the same directory
/// (never following a link, `O_NONBLOCK` so a FIFO swapped in cannot stall the run) and must
/// be the inode looked at; only there could something swapped in at the name in between be
/// opened, and it is never read.
fn reopen(looked: &OwnedFd, dir: &OwnedFd, name: &OsStr, id: (u64, u64)) -> std::io::Result<File> {
    use std::os::fd::AsRawFd;
    let flags = OFlag::O_RDONLY | OFlag::O_NOCTTY | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
    let proc_fd = format!("/proc/self/fd/{}", looked.as_raw_fd());
    let fd = match open(proc_fd.as_str(), flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::ENOENT) => openat(dir, name, flags | OFlag::O_NOFOLLOW, Mode::empty())?,
        Err(e) => return Err(e.into()),
    };
    let st = fstat(&fd)?;
    if (st.st_dev, st.st_ino) != id || st.st_mode & libc::S_IFMT != libc::S_IFREG {
        // Replaced between the look and the open (the fallback only): not the file looked at.
        return Err(std::io::Error::other(
            "replaced by another file while being read; run again",
        ));
    }
    Ok(File::from(fd))
}

/// The pause `publish:reopen:<path>` ([`crate::stop_point`]); the point's name is only made in
/// a debug build.
fn stop_point(path: &Path) {
    #[cfg(debug_assertions)]
    crate::stop_point::stop_point(&format!("publish:reopen:{}", path.display()));
    #[cfg(not(debug_assertions))]
    let _ = path;
}

/// Where a walk beneath a [`Tree`] ended.
enum Walk {
    Dir(Rc<OwnedFd>),
    /// A component is missing (and was not to be created).
    Missing,
    /// This prefix of the path is a symlink.
    Link(String),
    /// This prefix is neither a directory nor a symlink.
    NotDir(String),
}

/// A directory this run made in the output tree, or a file it moved there: removed again if
/// the run fails.
struct Made {
    parent: Rc<OwnedFd>,
    /// The parent's path beneath the tree's root.
    parent_rel: String,
    name: String,
}

/// What this run created in an existing output tree, removed again on failure.
#[derive(Default)]
struct Created {
    files: Vec<Made>,
    dirs: Vec<Made>,
}

impl Created {
    /// By name in the directories opened: the undo acts where the run did.
    fn undo(&self) {
        for f in self.files.iter().rev() {
            let _ = unlinkat(&*f.parent, f.name.as_str(), UnlinkatFlags::NoRemoveDir);
        }
        for d in self.dirs.iter().rev() {
            let _ = unlinkat(&*d.parent, d.name.as_str(), UnlinkatFlags::RemoveDir);
        }
    }
}

/// A directory tree opened once at its root. Every path beneath it is reached from the root's
/// descriptor one component at a time, never through a link ([`lookup`]); the directories
/// reached stay open, by their path beneath the root, so each later step acts in the very
/// directory that was checked.
struct Tree {
    /// The root's path, for messages.
    base: PathBuf,
    /// Opened directories by path beneath the root (`""` is the root).
    dirs: BTreeMap<String, Rc<OwnedFd>>,
}

impl Tree {
    fn new(base: &Path, root: OwnedFd) -> Self {
        Self {
            base: base.to_owned(),
            dirs: BTreeMap::from([(String::new(), Rc::new(root))]),
        }
    }

    /// OUT_DIR as publish and `--check` take it: absent (`None`), or a directory itself, never
    /// a symlink to one. Its last component is looked at in its parent without following it
    /// (a trailing `/` would make `open` follow a link), the directories above it as given.
    fn open_out(out: &Path) -> Result<Option<Tree>, PublishError> {
        let node = match split_out(out) {
            Some((parent, name)) => {
                let parent_fd = match open(
                    parent,
                    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
                    Mode::empty(),
                ) {
                    Ok(fd) => fd,
                    Err(Errno::ENOENT) => return Ok(None),
                    Err(e) => return Err(os_err(parent)(e)),
                };
                lookup(&parent_fd, name, out)?
            }
            // `/`, or ending in `..`: never a link.
            None => match open(
                out,
                OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
                Mode::empty(),
            ) {
                Ok(fd) => Node::Dir(fd),
                Err(Errno::ENOENT) => Node::Missing,
                Err(Errno::ENOTDIR) => Node::Other,
                Err(e) => return Err(os_err(out)(e)),
            },
        };
        match node {
            Node::Missing => Ok(None),
            Node::Dir(fd) => Ok(Some(Tree::new(out, fd))),
            Node::Link => Err(PublishError::Usage(format!(
                "--out {}: is a symlink; publish does not write through one (give the directory \
                 it points at)",
                out.display()
            ))),
            Node::Other => Err(PublishError::Usage(format!(
                "--out {}: exists and is not a directory",
                out.display()
            ))),
        }
    }

    /// The staging directory, publish's own (made by `build`), opened without following a link.
    fn open_stage(stage: &Path) -> Result<Tree, PublishError> {
        let fd = open(
            stage,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(os_err(stage))?;
        Ok(Tree::new(stage, fd))
    }

    /// The directory at `rel` (`/`-separated, beneath the root), each component opened in the
    /// one before without following a link. Missing ones are made (0755 whatever the umask,
    /// recorded in `created`) when `created` is given.
    fn dir(&mut self, rel: &str, mut created: Option<&mut Created>) -> Result<Walk, PublishError> {
        if let Some(fd) = self.dirs.get(rel) {
            return Ok(Walk::Dir(fd.clone()));
        }
        let comps = components(rel)?;
        // From the deepest directory already open on the way (the root at least).
        let (mut start, mut cur) = (0, Rc::clone(&self.dirs[""]));
        for i in (1..comps.len()).rev() {
            if let Some(fd) = self.dirs.get(&comps[..i].join("/")) {
                (start, cur) = (i, Rc::clone(fd));
                break;
            }
        }
        for i in start..comps.len() {
            let (parent_rel, prefix) = (comps[..i].join("/"), comps[..=i].join("/"));
            let at = self.base.join(&prefix);
            let name = OsStr::new(comps[i]);
            let (mut made, mut tries) = (false, 0);
            let fd = loop {
                match lookup(&cur, name, &at)? {
                    Node::Dir(fd) => break fd,
                    Node::Link => return Ok(Walk::Link(prefix)),
                    Node::Other => return Ok(Walk::NotDir(prefix)),
                    Node::Missing => {
                        let Some(c) = created.as_deref_mut() else {
                            return Ok(Walk::Missing);
                        };
                        tries += 1;
                        if tries > MAX_CREATE_TRIES {
                            return Err(os_err(&at)(Errno::ENOENT));
                        }
                        // mkdirat never follows a link; then opened through the same look.
                        match mkdirat(&*cur, name, Mode::from_bits_truncate(DIR_MODE)) {
                            Ok(()) => {
                                made = true;
                                c.dirs.push(Made {
                                    parent: Rc::clone(&cur),
                                    parent_rel: parent_rel.clone(),
                                    name: comps[i].to_owned(),
                                });
                            }
                            Err(Errno::EEXIST) => {}
                            Err(e) => return Err(os_err(&at)(e)),
                        }
                    }
                }
            };
            if made {
                fchmod(&fd, Mode::from_bits_truncate(DIR_MODE)).map_err(os_err(&at))?;
            }
            cur = Rc::new(fd);
            self.dirs.insert(prefix, Rc::clone(&cur));
        }
        Ok(Walk::Dir(cur))
    }

    /// The directory at `rel`, to write in: made when missing; a link or a non-directory on
    /// the way refused.
    fn dir_to_write(
        &mut self,
        rel: &str,
        created: &mut Created,
    ) -> Result<Rc<OwnedFd>, PublishError> {
        match self.dir(rel, Some(created))? {
            Walk::Dir(fd) => Ok(fd),
            Walk::Link(p) => Err(self.link_refused(&p)),
            Walk::NotDir(p) => Err(self.not_a_dir(&p)),
            Walk::Missing => Err(os_err(&self.base.join(rel))(Errno::ENOENT)),
        }
    }

    fn link_refused(&self, prefix: &str) -> PublishError {
        PublishError::Usage(format!(
            "{} is a symlink; publish does not write through links in the output tree",
            self.base.join(prefix).display()
        ))
    }

    fn not_a_dir(&self, prefix: &str) -> PublishError {
        PublishError::Usage(format!(
            "{} is not a directory",
            self.base.join(prefix).display()
        ))
    }

    /// The file at `rel`, read as publish writes it: every directory on the way opened without
    /// following a link, then the file looked at before anything opens it for reading, and
    /// read, up to `limit` bytes, only if it is a regular file.
    ///
    /// The look is an `O_PATH | O_NOFOLLOW` open, which opens neither a link (it is looked at
    /// itself) nor anything for I/O: a FIFO is not opened (it cannot stall the run) and a
    /// device's driver is never called (opening some devices has side effects: a tape rewinds,
    /// a modem hangs up). Only a regular file is then opened for reading, through that very
    /// descriptor ([`reopen`]), so nothing swapped in at the name meanwhile is opened.
    fn read(&mut self, rel: &str, limit: u64) -> Result<Found, PublishError> {
        let (dir_rel, name) = split_rel(rel);
        let name = OsStr::new(name);
        let dir = match self.dir(dir_rel, None)? {
            Walk::Dir(fd) => fd,
            Walk::Missing => return Ok(Found::Missing),
            Walk::Link(p) => return Ok(Found::Link(p)),
            Walk::NotDir(p) => return Ok(Found::NotFile(p)),
        };
        let at = self.base.join(rel);
        let looked = match openat(
            &*dir,
            name,
            OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(Errno::ENOENT) => return Ok(Found::Missing),
            Err(e) => return Err(os_err(&at)(e)),
        };
        let st = fstat(&looked).map_err(os_err(&at))?;
        match st.st_mode & libc::S_IFMT {
            libc::S_IFREG => {}
            libc::S_IFLNK => return Ok(Found::Link(rel.into())),
            _ => return Ok(Found::NotFile(rel.into())),
        }
        stop_point(&at);
        let file = reopen(&looked, &dir, name, (st.st_dev, st.st_ino)).map_err(io_err(&at))?;
        let mut have = Vec::new();
        file.take(limit)
            .read_to_end(&mut have)
            .map_err(io_err(&at))?;
        Ok(Found::Bytes(have))
    }

    /// A staged directory: it must be one `build` made.
    fn staged_dir(&mut self, rel: &str) -> Result<Rc<OwnedFd>, PublishError> {
        match self.dir(rel, None)? {
            Walk::Dir(fd) => Ok(fd),
            _ => Err(PublishError::Inconsistent(format!(
                "the staged {rel} is not the directory publish made"
            ))),
        }
    }

    /// A staged file's bytes: it must be the regular file `build` wrote.
    fn staged(&mut self, rel: &str) -> Result<Vec<u8>, PublishError> {
        match self.read(rel, u64::MAX)? {
            Found::Bytes(b) => Ok(b),
            _ => Err(PublishError::Inconsistent(format!(
                "the staged {rel} is not the regular file publish wrote"
            ))),
        }
    }
}

/// The components of a path publish builds beneath OUT_DIR: plain names only, so no `*at`
/// call can climb out of the directory it is made in.
fn components(rel: &str) -> Result<Vec<&str>, PublishError> {
    if rel.is_empty() {
        return Ok(Vec::new());
    }
    let comps: Vec<&str> = rel.split('/').collect();
    if comps
        .iter()
        .any(|c| c.is_empty() || *c == "." || *c == ".." || c.contains('\0'))
    {
        return Err(PublishError::Inconsistent(format!(
            "{rel:?} is not a plain path beneath the output directory"
        )));
    }
    Ok(comps)
}

/// `dir/name` as (`dir`, `name`); (`""`, `name`) for a name at the root.
fn split_rel(rel: &str) -> (&str, &str) {
    rel.rsplit_once('/').unwrap_or(("", rel))
}

fn into_existing(built: Built, mut out: Tree) -> Result<Vec<Written>, PublishError> {
    let mut stage = Tree::open_stage(built.stage.path())?;
    // Checked before anything is written: every directory on the way is a real one, and every
    // artifact already there holds the bytes its content-addressed name promises.
    let mut plan = Vec::new();
    for s in &built.skills {
        let want = stage.staged(&s.path)?;
        let present = match out.read(&s.path, want.len() as u64 + 1)? {
            Found::Missing => false,
            Found::Bytes(have) if have == want => true,
            Found::Bytes(_) => {
                return Err(PublishError::Usage(format!(
                    "{} exists with other bytes than its name promises; a published URL \
                     never changes meaning, so it is not replaced (remove it if it is \
                     not what you published)",
                    out.base.join(&s.path).display()
                )));
            }
            Found::Link(p) => return Err(out.link_refused(&p)),
            Found::NotFile(p) if p == s.path => {
                return Err(PublishError::Usage(format!(
                    "{} exists and is not a regular file",
                    out.base.join(&s.path).display()
                )));
            }
            Found::NotFile(p) => return Err(out.not_a_dir(&p)),
        };
        plan.push((s.path.clone(), present));
    }
    let index_rel = format!("{INDEX_DIR}/{INDEX_FILE}");
    let index_same = match out.read(&index_rel, built.index.len() as u64 + 1)? {
        Found::Missing => false,
        Found::Bytes(have) => have == built.index,
        Found::Link(p) => return Err(out.link_refused(&p)),
        Found::NotFile(p) if p == index_rel => {
            return Err(PublishError::Usage(format!(
                "{} exists and is not a regular file",
                out.base.join(&index_rel).display()
            )));
        }
        Found::NotFile(p) => return Err(out.not_a_dir(&p)),
    };
    let mut created = Created::default();
    let result = place(&mut stage, &mut out, &plan, index_same, &mut created);
    if result.is_err() {
        created.undo();
    }
    result
}

fn place(
    stage: &mut Tree,
    out: &mut Tree,
    plan: &[(String, bool)],
    index_same: bool,
    created: &mut Created,
) -> Result<Vec<Written>, PublishError> {
    let mut report = Vec::new();
    for (rel, present) in plan {
        if *present {
            report.push(Written {
                path: rel.clone(),
                status: FileStatus::Unchanged,
            });
            continue;
        }
        let (dir_rel, name) = split_rel(rel);
        let to = out.dir_to_write(dir_rel, created)?;
        let from = stage.staged_dir(dir_rel)?;
        // A hard link then an unlink: a rename that never replaces a file that appeared at
        // the name meanwhile (EEXIST).
        linkat(&*from, name, &*to, name, AtFlags::empty()).map_err(os_err(&out.base.join(rel)))?;
        created.files.push(Made {
            parent: to,
            parent_rel: dir_rel.to_owned(),
            name: name.to_owned(),
        });
        unlinkat(&*from, name, UnlinkatFlags::NoRemoveDir)
            .map_err(os_err(&stage.base.join(rel)))?;
        report.push(Written {
            path: rel.clone(),
            status: FileStatus::Written,
        });
    }
    // The new artifacts' names are on disk before the index that lists them.
    sync_parents(out, created, 0)?;
    let index_rel = format!("{INDEX_DIR}/{INDEX_FILE}");
    let status = if index_same {
        FileStatus::Unchanged
    } else {
        let made_before = created.dirs.len();
        let to = out.dir_to_write(INDEX_DIR, created)?;
        let from = stage.staged_dir(INDEX_DIR)?;
        let name = INDEX_FILE;
        // The commit point: one rename replaces the previous index.
        renameat(&*from, name, &*to, name).map_err(os_err(&out.base.join(&index_rel)))?;
        fsync(&*to).map_err(os_err(&out.base.join(INDEX_DIR)))?;
        sync_parents(out, created, made_before)?;
        FileStatus::Written
    };
    report.push(Written {
        path: index_rel,
        status,
    });
    Ok(report)
}

/// Flush the directories holding what this run created (its directories from the
/// `from_dir`-th on, and its files), each once.
fn sync_parents(out: &Tree, created: &Created, from_dir: usize) -> Result<(), PublishError> {
    let mut parents: BTreeMap<&str, &Rc<OwnedFd>> = BTreeMap::new();
    for m in created.dirs[from_dir..].iter().chain(&created.files) {
        parents.insert(&m.parent_rel, &m.parent);
    }
    for (rel, fd) in parents {
        fsync(&**fd).map_err(os_err(&out.base.join(rel)))?;
    }
    Ok(())
}

/// How a published file differs from what the sources build.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DifferenceKind {
    /// The sources build it; the published tree lacks it.
    Missing,
    /// Both have it, with other bytes.
    Differs,
}

/// One difference found by [`check`].
#[derive(Debug, Clone, Serialize)]
pub struct Difference {
    pub path: String,
    pub kind: DifferenceKind,
    pub detail: String,
    /// Whether publishing (without `--check`) makes the tree what the sources build: true for
    /// a missing file and an index with other bytes; false for an artifact with other bytes
    /// (never replaced: its URL keeps its meaning) and for a link or another kind of file on
    /// the way (publish never writes through them). Not serialized: the hint is the CLI's.
    #[serde(skip)]
    pub publish_fixes: bool,
}

/// Compare `built` with the tree published at `out`: the index byte for byte, and every
/// artifact it names. Files the index does not name (older artifacts, the rest of a site) are
/// not compared. Read as publish writes ([`Tree`]): OUT_DIR itself a symlink is refused as
/// publish refuses it, and a file that is a symlink, or reached through one, is a difference,
/// never followed (publish would refuse to write through it, so the tree is not what it
/// builds).
pub fn check(built: &Built, out: &Path) -> Result<Vec<Difference>, PublishError> {
    let mut tree = Tree::open_out(out)?;
    let mut stage = Tree::open_stage(built.stage.path())?;
    let mut diffs = Vec::new();
    for rel in built.files() {
        let want = stage.staged(&rel)?;
        // Past what it should hold, a file differs; an index is read whole up to the
        // consumers' bound, to name the entries that differ.
        let limit = (want.len() as u64 + 1).max(crate::index::IndexLimits::default().max_bytes);
        let differs = |detail: String| Difference {
            path: rel.clone(),
            kind: DifferenceKind::Differs,
            detail,
            publish_fixes: false,
        };
        let found = match &mut tree {
            Some(t) => t.read(&rel, limit)?,
            None => Found::Missing,
        };
        match found {
            Found::Missing => diffs.push(Difference {
                path: rel,
                kind: DifferenceKind::Missing,
                detail: "the sources build it; the published tree lacks it".into(),
                publish_fixes: true,
            }),
            Found::Link(link) => diffs.push(differs(format!(
                "{link} is a symlink; a published tree holds its files itself, and publish does \
                 not write through links"
            ))),
            Found::NotFile(what) => diffs.push(differs(format!(
                "{what} is of another kind than publish writes there (directories on the way, a \
                 regular file at the end)"
            ))),
            Found::Bytes(have) if have == want => {}
            Found::Bytes(have) => {
                let index = rel.ends_with(INDEX_FILE);
                let detail = if index {
                    index_changes(&have, &want)
                } else {
                    "other bytes than the sources build; publish never replaces a published \
                     artifact (its URL keeps its meaning): remove it if it is not what you \
                     published"
                        .into()
                };
                diffs.push(Difference {
                    path: rel,
                    kind: DifferenceKind::Differs,
                    detail,
                    publish_fixes: index,
                });
            }
        }
    }
    Ok(diffs)
}

/// What [`Tree::read`] found at a path.
enum Found {
    Missing,
    /// This prefix of the path (relative to the tree's root) is a symlink.
    Link(String),
    /// This prefix is neither the directory nor the regular file publish writes there.
    NotFile(String),
    /// The regular file's bytes (up to the limit asked for).
    Bytes(Vec<u8>),
}

/// Which entries of two index documents differ, by name, for the message.
fn index_changes(have: &[u8], want: &[u8]) -> String {
    use serde_json::Value;
    let entries = |b: &[u8]| -> Option<Vec<(String, Value)>> {
        let v: Value = serde_json::from_slice(b).ok()?;
        Some(
            v.get("skills")?
                .as_array()?
                .iter()
                .map(|e| {
                    let name = e.get("name").and_then(Value::as_str).unwrap_or("?");
                    (name.to_owned(), e.clone())
                })
                .collect(),
        )
    };
    let (Some(have), Some(want)) = (entries(have), entries(want)) else {
        return "the published index is not the document the sources build".into();
    };
    let mut parts = Vec::new();
    for (name, w) in &want {
        match have.iter().find(|(n, _)| n == name) {
            None => parts.push(format!("{name} is not listed")),
            Some((_, h)) if h != w => {
                let fields: Vec<&str> = ["type", "description", "url", "digest"]
                    .into_iter()
                    .filter(|k| h.get(*k) != w.get(*k))
                    .collect();
                parts.push(format!("{name}: {} differ", fields.join(", ")));
            }
            Some(_) => {}
        }
    }
    for (name, _) in &have {
        if !want.iter().any(|(n, _)| n == name) {
            parts.push(format!("{name} is listed but no source builds it"));
        }
    }
    if parts.is_empty() {
        "same entries, other bytes (formatting or order)".into()
    } else {
        parts.join("; ")
    }
}

// The swaps need renameat2's RENAME_EXCHANGE, which nix offers on Linux with glibc.
#[cfg(test)]
#[cfg(all(target_os = "linux", target_env = "gnu"))]
mod tests {
    use super::*;
    use crate::digest::Sha256Digest;
    use crate::index::EntryType;
    use crate::lifecycle::policy::Decision;
    use crate::publish::{Findings, NAME_HEX, Published};
    use std::collections::BTreeMap;

    /// No publish staging directory is left in `parent`.
    fn no_staging_left(parent: &Path) {
        let left: Vec<_> = std::fs::read_dir(parent)
            .expect("read_dir")
            .map(|e| e.expect("entry").file_name())
            .filter(|n| n.to_string_lossy().starts_with(".skillbox-publish-"))
            .collect();
        assert!(left.is_empty(), "staging left behind: {left:?}");
    }

    /// A build as `publish::build` stages it beside `beside`: one skill whose artifact holds
    /// `artifact`, and `index` as the index document.
    fn built(beside: &Path, skill: &str, artifact: &[u8], index: &[u8]) -> Built {
        let (stage, stage_lock) =
            crate::publish::stage::create(beside, crate::publish::stage::RUN_PREFIX)
                .expect("stage");
        let digest = Sha256Digest::of_bytes(artifact);
        let rel = format!(
            "{INDEX_DIR}/{skill}/{skill}-{}.tar.gz",
            &digest.hex()[..NAME_HEX]
        );
        write_file(&stage.path().join(&rel), artifact).expect("stage artifact");
        write_file(&stage.path().join(INDEX_DIR).join(INDEX_FILE), index).expect("stage index");
        Built {
            skills: vec![Published {
                name: skill.to_owned(),
                artifact_type: EntryType::Archive,
                description: "d".into(),
                digest,
                size: artifact.len() as u64,
                url: rel.replacen(&format!("{INDEX_DIR}/"), "", 1),
                path: rel,
                entries: 1,
                left_out: Vec::new(),
                left_out_unlisted: Default::default(),
                not_shared: Vec::new(),
                skills_cli_leaves_out: Vec::new(),
                skills_cli_changes: Vec::new(),
                findings: Findings {
                    tools: Vec::new(),
                    scripts: Vec::new(),
                    capabilities: Default::default(),
                    kinds: BTreeMap::new(),
                    review_complete: true,
                },
                decision: Decision::Approved { rule: "t".into() },
                sandbox: "confined".into(),
                review: Default::default(),
            }],
            index: index.to_vec(),
            stage,
            stage_lock,
        }
    }

    /// Every path beneath `dir` with its bytes (a directory's empty), not following links.
    fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
        let mut m = BTreeMap::new();
        for e in std::fs::read_dir(dir).expect("read_dir") {
            let p = e.expect("entry").path();
            let meta = std::fs::symlink_metadata(&p).expect("lstat");
            if meta.is_dir() {
                m.insert(p.clone(), Vec::new());
                m.extend(snapshot(&p));
            } else if meta.is_symlink() {
                m.insert(p.clone(), b"->".to_vec());
            } else {
                m.insert(p.clone(), std::fs::read(&p).expect("read"));
            }
        }
        m
    }

    /// A published tree `out` with a victim outside it, and links to the victim beside the two
    /// directories publish walks through (`out/evil-wk -> victim` beside `.well-known`,
    /// `.well-known/evil-as -> victim/agent-skills` beside `agent-skills`), for a thread to
    /// swap in with RENAME_EXCHANGE. Returns (out, victim).
    fn site_and_victim(tmp: &Path) -> (PathBuf, PathBuf) {
        let out = tmp.join("out");
        let victim = tmp.join("victim");
        std::fs::create_dir_all(victim.join("agent-skills")).expect("mkdir victim");
        std::fs::write(victim.join("precious"), b"precious").expect("write victim");
        let first = built(tmp, "first", b"first artifact", b"first index\n");
        write(first, &out).expect("first publish");
        std::os::unix::fs::symlink(&victim, out.join("evil-wk")).expect("symlink");
        std::os::unix::fs::symlink(victim.join("agent-skills"), out.join(".well-known/evil-as"))
            .expect("symlink");
        (out, victim)
    }

    /// Runs `act` while another thread swaps a directory of `out`'s tree with a link to the
    /// victim, again and again (trial even: `.well-known`, odd: `agent-skills`), then puts the
    /// real directory back.
    fn while_swapping<R>(out: &Path, trial: usize, act: impl FnOnce() -> R) -> R {
        use nix::fcntl::{OFlag, RenameFlags, open, renameat2};
        use nix::sys::stat::Mode;

        let (dir, real, link) = if trial.is_multiple_of(2) {
            (out.to_owned(), ".well-known", "evil-wk")
        } else {
            (out.join(".well-known"), "agent-skills", "evil-as")
        };
        // Opened before the swapping starts: the real directory holding both names.
        let fd = open(
            &dir,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .expect("open");
        let exchange = || renameat2(&fd, real, &fd, link, RenameFlags::RENAME_EXCHANGE);
        let r = crate::race::while_swapping(|| exchange().expect("exchange"), act);
        if std::fs::symlink_metadata(dir.join(real))
            .expect("stat")
            .is_symlink()
        {
            exchange().expect("exchange back");
        }
        r
    }

    /// A special file at a path publish and `--check` read, watched for opens: the nodes at
    /// `paths` (beneath `out`) replaced by what `make` makes there, then both runs; returns
    /// the opens inotify saw (an open of a node is seen whoever opens it, and an `O_PATH`
    /// look is none).
    fn opens_of_special_files(
        tmp: &Path,
        make: impl Fn(&Path),
    ) -> (Vec<Difference>, Result<Vec<Written>, PublishError>, usize) {
        use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
        let out = tmp.join("out");
        write(
            built(tmp, "first", b"first artifact", b"first index\n"),
            &out,
        )
        .expect("first publish");
        let b = built(tmp, "second", b"second artifact", b"second index\n");
        let index = out.join(INDEX_DIR).join(INDEX_FILE);
        let artifact = out.join(&b.skills[0].path);
        std::fs::remove_file(&index).expect("remove index");
        std::fs::create_dir_all(artifact.parent().expect("parent")).expect("mkdir");
        let watch = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC).expect("inotify");
        for at in [&index, &artifact] {
            make(at);
            watch.add_watch(at, AddWatchFlags::IN_OPEN).expect("watch");
        }
        let opens = |w: &Inotify| match w.read_events() {
            Ok(events) => events.len(),
            Err(Errno::EAGAIN) => 0,
            Err(e) => panic!("inotify: {e}"),
        };
        assert_eq!(opens(&watch), 0, "the watch itself opened nothing");
        let diffs = check(&b, &out).expect("check");
        let written = write(b, &out);
        let seen = opens(&watch);
        // The watch does see an open: without it, no open above would prove nothing.
        drop(
            openat(
                AT_FDCWD,
                &index,
                OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
                Mode::empty(),
            )
            .expect("open the node"),
        );
        assert_eq!(opens(&watch), 1, "inotify saw the test's own open");
        (diffs, written, seen)
    }

    fn assert_special_refused_unopened(
        (diffs, written, opens): (Vec<Difference>, Result<Vec<Written>, PublishError>, usize),
    ) {
        assert_eq!(opens, 0, "a special file in OUT was opened");
        assert_eq!(diffs.len(), 2, "{diffs:?}");
        for d in &diffs {
            assert!(
                d.kind == DifferenceKind::Differs && d.detail.contains("of another kind"),
                "{d:?}"
            );
        }
        match written {
            Err(PublishError::Usage(m)) if m.contains("is not a regular file") => {}
            other => panic!("publish over a special file: {other:?}"),
        }
    }

    /// A FIFO where publish and `--check` read the index and an artifact: refused, and never
    /// opened (the old read opened it, `O_NONBLOCK`, before looking at its kind).
    #[test]
    fn a_fifo_in_out_is_looked_at_never_opened() {
        let tmp = tempfile::tempdir().expect("tempdir");
        assert_special_refused_unopened(opens_of_special_files(tmp.path(), |at| {
            nix::unistd::mkfifo(at, Mode::from_bits_truncate(0o644)).expect("mkfifo")
        }));
    }

    /// A character device (1, 3: the null device, whose open is harmless, and seen by inotify
    /// as any open is) where publish and `--check` read: refused, and never opened, so no
    /// device's driver is called. Making the node needs root (CAP_MKNOD), as CI runs the
    /// tests; without it this test fails, saying so, rather than pass having tested nothing.
    #[test]
    fn a_device_node_in_out_is_looked_at_never_opened() {
        use nix::sys::stat::{SFlag, makedev, mknod};
        assert!(
            nix::unistd::geteuid().is_root(),
            "this test makes a device node with mknod and needs root (CI runs the tests as \
             root); run it as root, it cannot be checked otherwise"
        );
        let tmp = tempfile::tempdir().expect("tempdir");
        assert_special_refused_unopened(opens_of_special_files(tmp.path(), |at| {
            mknod(
                at,
                SFlag::S_IFCHR,
                Mode::from_bits_truncate(0o644),
                makedev(1, 3),
            )
            .expect("mknod (root, CAP_MKNOD)")
        }));
    }

    /// OUT made by someone else (an empty directory: `mkdir site`) after publish looked and
    /// found none, just before the staging directory is renamed into place: it is published
    /// into, as any existing OUT, and never replaced (a plain rename replaces an empty
    /// directory; RENAME_NOREPLACE does not). The other thread makes OUT appear the moment
    /// the look is behind publish, and publish waits for it: the window is hit every run.
    #[test]
    fn out_appearing_between_the_look_and_the_rename_is_kept_and_published_into() {
        use std::os::unix::fs::MetadataExt;
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, Ordering};
        let tmp = tempfile::tempdir().expect("tempdir");
        let (out, theirs) = (tmp.path().join("out"), tmp.path().join("theirs"));
        std::fs::create_dir(&theirs).expect("mkdir");
        let their_dir = std::fs::metadata(&theirs).expect("stat").ino();
        let b = built(tmp.path(), "s", b"artifact", b"index\n");
        let rel = b.skills[0].path.clone();
        let (looked, appeared) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
        );
        let (l, a) = (Arc::clone(&looked), Arc::clone(&appeared));
        BEFORE_RENAME.with(|h| {
            *h.borrow_mut() = Some(Box::new(move || {
                l.store(true, Ordering::Release);
                while !a.load(Ordering::Acquire) {
                    std::hint::spin_loop();
                }
            }));
        });
        let appear = || {
            if looked.load(Ordering::Acquire) && !appeared.load(Ordering::Acquire) {
                renameat2(
                    AT_FDCWD,
                    &theirs,
                    AT_FDCWD,
                    &out,
                    RenameFlags::RENAME_NOREPLACE,
                )
                .expect("OUT appears");
                appeared.store(true, Ordering::Release);
            }
        };
        let files = crate::race::while_swapping(appear, || write(b, &out)).expect("publish");
        assert!(
            appeared.load(Ordering::Acquire),
            "OUT never appeared in the window"
        );
        assert_eq!(
            std::fs::metadata(&out).expect("stat out").ino(),
            their_dir,
            "the directory made at OUT was replaced"
        );
        assert_eq!(
            std::fs::read(out.join(&rel)).expect("artifact"),
            b"artifact"
        );
        let index = out.join(INDEX_DIR).join(INDEX_FILE);
        assert_eq!(std::fs::read(index).expect("index"), b"index\n");
        assert!(
            files.iter().all(|f| f.status == FileStatus::Written),
            "{files:?}"
        );
        no_staging_left(tmp.path());
    }

    /// The race the output tree allows when another account can write in it (a shared web
    /// root): it swaps `.well-known` or `agent-skills` for a link to a directory outside OUT
    /// while publish writes a new skill's directory, its artifact and the index. Writes by
    /// path, after a look by path, followed the link and wrote into the victim. Every write
    /// must land in OUT's own directories (or the run be refused, with what it created
    /// removed and the previous index kept).
    #[test]
    fn a_component_swapped_during_a_publish_never_gets_written_outside() {
        const TRIALS: usize = 300;
        let tmp = tempfile::tempdir().expect("tempdir");
        let (out, victim) = site_and_victim(tmp.path());
        let victim_before = snapshot(&victim);
        let index_at = out.join(INDEX_DIR).join(INDEX_FILE);
        let mut index_now = std::fs::read(&index_at).expect("index");
        let (mut written, mut refused) = (0, 0);
        for trial in 0..TRIALS {
            let skill = format!("s{trial}");
            let artifact = format!("artifact {trial}");
            let index = format!("index {trial}\n");
            let b = built(tmp.path(), &skill, artifact.as_bytes(), index.as_bytes());
            let rel = b.skills[0].path.clone();
            let result = while_swapping(&out, trial, || write(b, &out));
            assert_eq!(
                snapshot(&victim),
                victim_before,
                "trial {trial}: publish wrote outside OUT ({result:?})"
            );
            match result {
                Ok(_) => {
                    written += 1;
                    assert_eq!(std::fs::read(&index_at).expect("index"), index.as_bytes());
                    assert_eq!(
                        std::fs::read(out.join(&rel)).expect("artifact"),
                        artifact.as_bytes()
                    );
                    index_now = index.into_bytes();
                }
                Err(PublishError::Usage(m)) if m.contains("is a symlink") => {
                    refused += 1;
                    // Refused: the previous index, and nothing this run created.
                    assert_eq!(std::fs::read(&index_at).expect("index"), index_now);
                    assert!(
                        std::fs::symlink_metadata(out.join(INDEX_DIR).join(&skill)).is_err(),
                        "trial {trial}: {skill}/ left behind"
                    );
                }
                Err(e) => panic!("trial {trial}: {e}"),
            }
        }
        no_staging_left(tmp.path());
        eprintln!("{written} written, {refused} refused of {TRIALS}");
    }

    /// `--check` under the same swap: the victim holds other bytes at the same paths. Reading
    /// by path after a look by path read the victim's files and reported their bytes; the
    /// check must read OUT's own files, or name the link.
    #[test]
    fn a_component_swapped_during_a_check_is_never_read_through() {
        const TRIALS: usize = 300;
        let tmp = tempfile::tempdir().expect("tempdir");
        let (out, victim) = site_and_victim(tmp.path());
        let b = built(tmp.path(), "first", b"first artifact", b"first index\n");
        // The victim holds other bytes at the paths the check reads.
        let rel = b.skills[0].path.replacen(&format!("{INDEX_DIR}/"), "", 1);
        for (at, bytes) in [(INDEX_FILE, "other index\n"), (rel.as_str(), "other")] {
            let at = victim.join("agent-skills").join(at);
            std::fs::create_dir_all(at.parent().expect("parent")).expect("mkdir");
            std::fs::write(at, bytes).expect("write");
        }
        assert!(check(&b, &out).expect("check").is_empty());
        let (mut same, mut links) = (0, 0);
        for trial in 0..TRIALS {
            let diffs = while_swapping(&out, trial, || check(&b, &out)).expect("check");
            for d in &diffs {
                assert!(
                    d.kind == DifferenceKind::Differs && d.detail.contains("is a symlink"),
                    "trial {trial}: read through a link: {d:?}"
                );
            }
            if diffs.is_empty() {
                same += 1;
            } else {
                links += 1;
            }
        }
        eprintln!("{same} up to date, {links} named a link, of {TRIALS}");
    }
}
