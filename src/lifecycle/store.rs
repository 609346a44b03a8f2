//! The filesystem store: one immutable tree per accepted artifact digest, entered only by a
//! rename from staging inside the store.
//!
//! Layout of `STORE/`: `records.db` (the records, unless they are shared elsewhere), `store-id`
//! (the random id the records bind this store's host name to), `records-id` (the id of the
//! records this store is bound to), `host` (the host name the records bind it to, for
//! `withdraw --local`), `lock` (held with `flock` by every command
//! that changes state, so commands on one store serialise; released only around downloads and
//! the confined extraction, [`Store::without_lock`]), `cache/` (verified downloads),
//! `staging/<random>/` (one intake: `tree/` plus `answer.json`, 0700, held by its command
//! with `flock` while it extracts without the store lock: [`Staging`]), and
//! `versions/<sha256 hex>/` (a promoted intake, write bits removed), `agents/<name>.json` (the
//! agents this store was asked to link into: [`Store::remember_agents`]), and, after a
//! `withdraw --local`, `quarantine/<sha256 hex>/`, `pending-withdrawals/` and, once the
//! records held it, `applied-withdrawals/` ([`super::quarantine`]).
//!
//! The store must be ours: a directory (not a symlink) owned by us and writable by nobody else.
//! Nothing here writes into an existing version: promotion uses `RENAME_NOREPLACE`.

use std::fs::{self, File};
use std::io::{self, Read};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};

use super::fleet::{HostChoice, Location};
use super::records::Records;
use super::{Error, Kind};
use crate::digest::Sha256Digest;
use crate::extract::inventory::Kind as EntryKind;
use crate::intake::Outcome;

/// An open store. Holding a [`Store`] with `locked` set means holding its lock.
pub struct Store {
    root: PathBuf,
    _lock: Option<Flock<File>>,
    pub records: Records,
}

/// How a command opens the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Take the lock (every command that changes state, and verify/gc).
    Exclusive,
    /// Read the last committed state without waiting for a running command.
    Read,
}

/// The default store: `$XDG_DATA_HOME/skillbox`, else `~/.local/share/skillbox`; as root
/// `/var/lib/skillbox`.
pub fn default_root() -> Option<PathBuf> {
    if nix::unistd::geteuid().is_root() {
        return Some(PathBuf::from("/var/lib/skillbox"));
    }
    if let Some(x) = std::env::var_os("XDG_DATA_HOME").filter(|x| !x.is_empty()) {
        return Some(PathBuf::from(x).join("skillbox"));
    }
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(|h| PathBuf::from(h).join(".local/share/skillbox"))
}

/// The skills directory an `agents/<name>.json` entry holds; `None` when it holds none (not
/// one of ours: anything but `{"name": .., "dir": ..}` with an absolute directory). Bounded:
/// an entry is a few hundred bytes.
fn read_remembered(path: &Path) -> io::Result<Option<String>> {
    let mut text = Vec::new();
    File::open(path)?.take(64 * 1024).read_to_end(&mut text)?;
    let value: serde_json::Value = match serde_json::from_slice(&text) {
        Ok(v) => v,
        Err(_) => return Ok(None),
    };
    Ok(value["dir"]
        .as_str()
        .filter(|d| Path::new(d).is_absolute())
        .map(str::to_owned))
}

/// Write `bytes` as `path` whole: a temporary file beside it (`.<stem>.<pid>.tmp`), fsync,
/// rename. A reader sees the whole file or none; the caller fsyncs the directory
/// ([`sync_dir`]) for the rename to survive a power loss.
pub(super) fn write_whole(path: &Path, stem: &str, bytes: &[u8]) -> Result<(), Error> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = dir.join(format!(".{stem}.{}.tmp", std::process::id()));
    let written = File::options()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)
        .and_then(|mut f| {
            io::Write::write_all(&mut f, bytes)?;
            f.sync_all()
        })
        .and_then(|()| fs::rename(&tmp, path));
    written.map_err(|e| {
        let _ = fs::remove_file(&tmp);
        Error::io(format!("cannot write {}", path.display()), &e)
    })
}

/// fsync a directory, so a rename or an unlink in it survives a power loss.
pub(super) fn sync_dir(dir: &Path) -> Result<(), Error> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io(format!("cannot sync {}", dir.display()), &e))
}

pub(super) fn mkdir_private(p: &Path) -> Result<(), Error> {
    match fs::DirBuilder::new().mode(0o700).create(p) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(Error::io(format!("cannot create {}", p.display()), &e)),
    }
}

/// Refuse a store another user could change under us: a symlink, another owner, or group- or
/// world-writable.
pub(super) fn check_ours(root: &Path) -> Result<(), Error> {
    let md = fs::symlink_metadata(root)
        .map_err(|e| Error::io(format!("cannot inspect the store {}", root.display()), &e))?;
    let fix =
        "give --store a directory you own with mode 0700, or remove it so skillbox creates it";
    if md.file_type().is_symlink() {
        return Err(Error::new(
            Kind::Usage,
            format!("the store {} is a symlink; {fix}", root.display()),
        ));
    }
    if !md.is_dir() {
        return Err(Error::new(
            Kind::Usage,
            format!("the store {} is not a directory; {fix}", root.display()),
        ));
    }
    if md.uid() != nix::unistd::geteuid().as_raw() {
        return Err(Error::new(
            Kind::Usage,
            format!(
                "the store {} is owned by uid {}, not by us; {fix}",
                root.display(),
                md.uid()
            ),
        ));
    }
    if md.mode() & 0o022 != 0 {
        return Err(Error::new(
            Kind::Usage,
            format!(
                "the store {} is group- or world-writable (mode {:o}); {fix} (chmod 700)",
                root.display(),
                md.mode() & 0o7777
            ),
        ));
    }
    Ok(())
}

/// Rename `from` to `to`, which must not exist (`RENAME_NOREPLACE`): one atomic step that never
/// replaces what another run put there; EEXIST says it did.
pub fn rename_new(from: &Path, to: &Path) -> nix::Result<()> {
    nix::fcntl::renameat2(
        nix::fcntl::AT_FDCWD,
        from,
        nix::fcntl::AT_FDCWD,
        to,
        nix::fcntl::RenameFlags::RENAME_NOREPLACE,
    )
}

impl Store {
    /// Open the store at `root` with its own SQLite records, as the system's host.
    pub fn open(root: &Path, access: Access) -> Result<Self, Error> {
        let host = HostChoice::new(None).unwrap_or_else(|_| HostChoice::local());
        Self::open_with(root, access, &Location::Sqlite, &host)
    }

    /// Open the store at `root`, creating it (0700) when absent and `access` may write, with
    /// the records at `location` (the store's SQLite file, or a shared PostgreSQL database),
    /// as host `host`.
    pub fn open_with(
        root: &Path,
        access: Access,
        location: &Location,
        host: &HostChoice,
    ) -> Result<Self, Error> {
        let root = if root.is_absolute() {
            root.to_owned()
        } else {
            std::env::current_dir()
                .map_err(|e| Error::io("cannot read the current directory", &e))?
                .join(root)
        };
        if access == Access::Exclusive {
            if let Some(parent) = root.parent() {
                fs::create_dir_all(parent)
                    .map_err(|e| Error::io(format!("cannot create {}", parent.display()), &e))?;
            }
            mkdir_private(&root)?;
        } else if fs::symlink_metadata(&root).is_err() {
            return Err(Error::new(
                Kind::NotFound,
                format!(
                    "no store at {} (nothing installed yet; give --store)",
                    root.display()
                ),
            ));
        }
        check_ours(&root)?;
        let lock = match access {
            Access::Exclusive => {
                let f = File::options()
                    .create(true)
                    .truncate(false)
                    .write(true)
                    .open(root.join("lock"))
                    .map_err(|e| Error::io("cannot open the store lock", &e))?;
                Some(lock_store(f, &root)?)
            }
            Access::Read => None,
        };
        if access == Access::Exclusive {
            for d in ["staging", "versions", "cache"] {
                mkdir_private(&root.join(d))?;
            }
            // Made ahead, while there is room: `withdraw --local` must contain a version on a
            // full filesystem, where a new directory may get no block (its rename needs none).
            // Best effort: a store that cannot take them now is no worse off than before.
            for d in [
                super::quarantine::quarantine_root(&root),
                super::quarantine::pending_root(&root),
            ] {
                let _ = mkdir_private(&d);
            }
        }
        let id = store_id(&root)?;
        let records = open_records(&root, access, location, host, &id)?;
        // A store that may not be written (a read-only filesystem) still reads: the note is
        // only needed by `withdraw --local`, which writes the store anyway.
        match note_host(&root, records.host()) {
            Err(e) if access == Access::Exclusive => return Err(e),
            _ => {}
        }
        Ok(Store {
            root,
            _lock: lock,
            records,
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Run `f` without the store lock, then take the lock again (waiting as `open` waits).
    /// For network I/O (an index or an artifact download, which may stall for the whole
    /// fetch timeout) and the confined extraction (bounded, but seconds for a large package):
    /// a `withdraw` typed on this host during an incident must not queue behind either.
    /// Security: `f` must not change the store or the records, beyond writing into a
    /// [`Staging`] directory of its own (which no other command touches while it is held, and
    /// which is not a stored version), and whatever the caller read before is stale
    /// afterwards: every decision is taken again once the lock is back. A store opened
    /// without the lock just runs `f`.
    pub fn without_lock<T>(&mut self, f: impl FnOnce(&mut Self) -> T) -> Result<T, Error> {
        let Some(held) = self._lock.take() else {
            return Ok(f(self));
        };
        let file = held.unlock().map_err(|(held, e)| {
            self._lock = Some(held);
            Error::new(Kind::Operational, format!("cannot unlock the store: {e}"))
        })?;
        let out = f(self);
        self._lock = Some(lock_store(file, &self.root)?);
        Ok(out)
    }

    pub fn staging_root(&self) -> PathBuf {
        self.root.join("staging")
    }

    pub fn versions_root(&self) -> PathBuf {
        self.root.join("versions")
    }

    pub fn cache_root(&self) -> PathBuf {
        self.root.join("cache")
    }

    fn agents_root(&self) -> PathBuf {
        self.root.join("agents")
    }

    /// Remember `agents` (name, skills directory) in the store itself, before a link is made
    /// for any of them: `agents/<name>.json`, each written whole (a temporary file, fsync,
    /// rename, fsync of the directory) unless it holds that directory already. Security: the
    /// records are the usual memory of which directories hold this store's links, but records
    /// restored from a backup taken before an agent was first used (or a fleet's database
    /// that lost it) do not know it, and a withdrawal would then leave that agent running the
    /// withdrawn version while `status` called it contained. The store keeps its own list, so
    /// every command that opens the records records such an agent again
    /// ([`super::ops::reinstate_agents`]). One file per agent: two commands remembering
    /// different agents at once never lose one another's.
    pub fn remember_agents(&self, agents: &[(String, String)]) -> Result<(), Error> {
        let dir = self.agents_root();
        let mut made = false;
        // A relative directory (recorded by an older skillbox) names no place to look in.
        for (name, skills_dir) in agents.iter().filter(|(_, d)| Path::new(d).is_absolute()) {
            let path = dir.join(format!("{name}.json"));
            if read_remembered(&path).is_ok_and(|r| r.as_ref() == Some(skills_dir)) {
                continue;
            }
            if !made {
                mkdir_private(&dir)?;
                made = true;
            }
            let text = serde_json::to_vec(&serde_json::json!({"name": name, "dir": skills_dir}))
                .map_err(|e| Error::new(Kind::Operational, e.to_string()))?;
            write_whole(&path, name, &text)?;
        }
        if made {
            sync_dir(&dir)?;
        }
        Ok(())
    }

    /// Whether the store remembers any agent ([`Store::remember_agents`]): one look, no read
    /// of the entries.
    pub fn remembers_agents(&self) -> bool {
        fs::read_dir(self.agents_root()).is_ok_and(|mut d| d.next().is_some())
    }

    /// The agents [`Store::remember_agents`] remembered, by name. An entry that cannot be read
    /// as one (a leftover temporary file, a name that is not an agent's) is passed over.
    pub fn remembered_agents(&self) -> Result<Vec<(String, String)>, Error> {
        let dir = self.agents_root();
        let entries = match fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(Error::io(format!("cannot read {}", dir.display()), &e)),
        };
        let mut out = Vec::new();
        for entry in entries {
            let entry =
                entry.map_err(|e| Error::io(format!("cannot read {}", dir.display()), &e))?;
            let file = entry.file_name();
            let Some(name) = file.to_str().and_then(|f| f.strip_suffix(".json")) else {
                continue;
            };
            if super::agents::check_agent_name(name).is_err() {
                continue;
            }
            if let Ok(Some(skills_dir)) = read_remembered(&entry.path()) {
                out.push((name.to_owned(), skills_dir));
            }
        }
        out.sort();
        Ok(out)
    }

    pub fn version_dir(&self, digest: &str) -> PathBuf {
        self.versions_root().join(hex_of(digest))
    }

    /// The tree agents' links point at.
    pub fn tree(&self, digest: &str) -> PathBuf {
        self.version_dir(digest).join("tree")
    }

    /// A fresh staging directory for one intake: `staging/<random>/` with an empty `tree/`,
    /// held by this command ([`Staging`]). Made only with the store lock held: recovery, which
    /// removes every staging directory whose `flock` it can take, runs under that lock too, so
    /// it never sees this one between its mkdir and its lock.
    pub fn new_staging(&self) -> Result<Staging, Error> {
        if self._lock.is_none() {
            return Err(Error::new(
                Kind::Operational,
                "a staging directory is made only with the store lock held",
            ));
        }
        let dir = tempfile::Builder::new()
            .prefix("in-")
            .tempdir_in(self.staging_root())
            .map_err(|e| Error::io("cannot create a staging directory in the store", &e))?
            .keep();
        let held = open_dir(&dir)
            .map_err(|e| Error::io(format!("cannot open {}", dir.display()), &e))
            .and_then(|f| {
                Flock::lock(f, FlockArg::LockExclusiveNonblock).map_err(|(_, e)| {
                    Error::new(
                        Kind::Operational,
                        format!("cannot lock the staging directory {}: {e}", dir.display()),
                    )
                })
            });
        let held = match held {
            Ok(h) => h,
            Err(e) => {
                let _ = remove_tree(&dir);
                return Err(e);
            }
        };
        let staging = Staging {
            path: dir,
            _held: held,
        };
        mkdir_private(&staging.tree())?;
        Ok(staging)
    }

    /// Move a staged intake to `versions/<hex>` with one rename; `false` when that version is
    /// already there (the staging directory is then removed: same digest, same bytes).
    pub fn promote(&self, staging: &Staging, digest: &str) -> Result<bool, Error> {
        let staging = staging.path();
        freeze(staging)?;
        let target = self.version_dir(digest);
        match rename_new(staging, &target) {
            Ok(()) => Ok(true),
            Err(nix::errno::Errno::EEXIST) => {
                remove_tree(staging)?;
                Ok(false)
            }
            Err(e) => Err(Error::new(
                Kind::Operational,
                format!("cannot promote into {}: {e}", target.display()),
            )),
        }
    }

    /// The saved answer (inventory and review) of a stored version.
    pub fn answer(&self, digest: &str) -> Result<Outcome, Error> {
        read_answer(&self.version_dir(digest).join("answer.json"))
    }
}

/// One intake's staging directory, `staging/<random>/`, and the `flock(2)` this command holds
/// on it from its creation (under the store lock) until it is renamed into `versions/` or
/// removed; the kernel releases it when the process ends, however it ends. The extraction
/// writes into it without the store lock ([`Store::without_lock`]), so the lock is what tells
/// recovery a running command's staging (left alone) from a killed one's (removed:
/// [`remove_abandoned_staging`]), as publish's staging directories and the fetch cache's
/// partial downloads are told apart. Dropped, the directory is removed (nothing when it was
/// promoted), then the lock released.
pub struct Staging {
    path: PathBuf,
    _held: Flock<File>,
}

impl Staging {
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Where the engine extracts.
    pub fn tree(&self) -> PathBuf {
        self.path.join("tree")
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        // Ours alone while the lock is held: no other command removes or uses it.
        let _ = remove_tree(&self.path);
    }
}

/// A directory opened without following a link at its name.
fn open_dir(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    File::options()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
        .open(path)
}

/// Remove the staging directory at `path` unless a running command holds it ([`Staging`]).
/// Must run with the store lock held (no directory is made, locked or promoted meanwhile).
/// `Ok(false)`: left alone (held by a running intake, or gone).
pub fn remove_abandoned_staging(path: &Path) -> Result<bool, Error> {
    remove_abandoned_at(path, staging_opened)
}

/// Remove the directory at `path` unless a running command holds its `flock` ([`lock_dir`]),
/// as [`remove_abandoned_staging`] does (a quarantine step's copy put aside). Must run with the
/// store lock held. `Ok(false)`: left alone (held, or gone).
pub fn remove_abandoned_dir(path: &Path) -> Result<bool, Error> {
    remove_abandoned_at(path, |_| {})
}

/// Open the directory at `path` (never through a link) and hold its `flock(2)` exclusively
/// until the returned guard is dropped or the process ends: [`remove_abandoned_dir`] leaves
/// it alone meanwhile. The lock is on the inode, so it follows the directory through a rename.
pub fn lock_dir(path: &Path) -> Result<Flock<File>, Error> {
    let file =
        open_dir(path).map_err(|e| Error::io(format!("cannot open {}", path.display()), &e))?;
    Flock::lock(file, FlockArg::LockExclusiveNonblock).map_err(|(_, e)| {
        Error::new(
            Kind::Operational,
            format!("cannot lock {}: {e}", path.display()),
        )
    })
}

fn remove_abandoned_at(path: &Path, opened: impl FnOnce(&Path)) -> Result<bool, Error> {
    let file = match open_dir(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        // Not a directory (or a link at the name): nothing an intake holds; removed as before.
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOTDIR | libc::ELOOP)) => {
            remove_tree(path)?;
            return Ok(true);
        }
        Err(e) => return Err(Error::io(format!("cannot open {}", path.display()), &e)),
    };
    opened(path);
    let held = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(h) => h,
        // A running command's intake, extracting without the store lock.
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => return Ok(false),
        Err((_, e)) => {
            return Err(Error::new(
                Kind::Operational,
                format!("cannot lock {}: {e}", path.display()),
            ));
        }
    };
    let locked = held
        .metadata()
        .map_err(|e| Error::io(format!("cannot inspect {}", path.display()), &e))?;
    // Removed (or renamed) by its command before this lock was had: not ours to remove.
    let named = fs::symlink_metadata(path).ok();
    if locked.nlink() == 0
        || named.is_none_or(|n| (n.dev(), n.ino()) != (locked.dev(), locked.ino()))
    {
        return Ok(false);
    }
    remove_tree(path)?;
    drop(held);
    Ok(true)
}

/// The pause `staging:opened:<name>` ([`crate::stop_point`]): recovery opened the staging
/// directory `staging/<name>` and has not locked it yet. The point's name is only made in a
/// debug build.
fn staging_opened(path: &Path) {
    #[cfg(debug_assertions)]
    crate::stop_point::stop_point(&format!(
        "staging:opened:{}",
        path.file_name().unwrap_or_default().to_string_lossy()
    ));
    #[cfg(not(debug_assertions))]
    let _ = path;
}

/// Take the store lock on `f` (the open `STORE/lock`), saying so first when another command
/// holds it.
pub(super) fn lock_store(f: File, root: &Path) -> Result<Flock<File>, Error> {
    let locked = match Flock::lock(f, FlockArg::LockExclusiveNonblock) {
        // Another command holds it: say so before waiting, or a withdrawal typed during an
        // incident would sit silent for as long as that command runs.
        Err((f, nix::errno::Errno::EWOULDBLOCK)) => {
            eprintln!(
                "skillbox: waiting for the store lock: another skillbox command is changing {}",
                root.display()
            );
            Flock::lock(f, FlockArg::LockExclusive)
        }
        other => other,
    };
    locked.map_err(|(_, e)| Error::new(Kind::Operational, format!("cannot lock the store: {e}")))
}

/// What `STORE/records-id` says: the id of the records this store is bound to, and where they
/// were when it was bound (printable: never a password).
struct Binding {
    id: String,
    shown: String,
}

impl Binding {
    fn shared(&self) -> bool {
        self.shown.starts_with("postgres://")
    }
}

fn read_binding(root: &Path) -> Result<Option<Binding>, Error> {
    let path = root.join("records-id");
    let text = match fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(format!("cannot read {}", path.display()), &e)),
    };
    let mut lines = text.lines();
    let id = lines.next().unwrap_or("").trim().to_owned();
    if id.len() != 32 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(Error::new(
            Kind::Operational,
            format!(
                "corrupt store: {} does not start with 32 hex digits",
                path.display()
            ),
        ));
    }
    let shown = lines.next().unwrap_or("").trim().to_owned();
    Ok(Some(Binding { id, shown }))
}

/// The names (hex digests) in `versions/`.
fn tree_names(root: &Path) -> Vec<String> {
    fs::read_dir(root.join("versions"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

/// Open the records at `location` for the store at `root`, refusing records the store is not
/// bound to. Security: recovery removes every tree the records do not list, so a store used
/// with the wrong records (a forgotten `--records`, a store pointed at a fleet it never used, a
/// records.db made anew) would lose every tree its agents' links point at, and would ignore the
/// fleet's withdrawals. A store is bound (`STORE/records-id`) to the records' own random id at
/// first use; other records are refused, naming the fix. A store from before the binding (trees
/// but no `records-id`) is bound only by records that list every one of its trees as this
/// store's; records that miss any are refused, so they never reap it. A store without trees
/// has nothing to lose: the records it is first used with bind it.
fn open_records(
    root: &Path,
    access: Access,
    location: &Location,
    host: &HostChoice,
    store_id: &str,
) -> Result<Records, Error> {
    let given = location.display();
    let shown_root = root.display();
    let sqlite_path = root.join("records.db");
    let bound = read_binding(root)?;
    let other = |b: &Binding| {
        Error::new(
            Kind::Usage,
            if b.shared() {
                format!(
                    "the store {shown_root} keeps its records at {}, not {given}: give --records {} (or SKILLBOX_RECORDS); other records do not know its trees",
                    b.shown, b.shown
                )
            } else if location.is_shared() {
                format!(
                    "the store {shown_root} keeps its records in its own records.db, not at {given}: leave out --records, or give a new --store to use these records"
                )
            } else {
                format!(
                    "the store {shown_root} is bound to records {} and its records.db is another database: restore the store's records.db, or give a new --store",
                    b.id
                )
            },
        )
    };
    let trees = tree_names(root);
    let unknown = |n: usize| {
        Error::new(
            Kind::Usage,
            format!(
                "the store {shown_root} holds {n} version tree(s) and the records at {given} list none of them as this store's: it was used with other records; give the --records it was used with (none: its own records.db), or a new --store for these records"
            ),
        )
    };
    // Refused before the records are opened, so no records.db is made for nothing.
    match &bound {
        Some(b) if b.shared() != location.is_shared() => return Err(other(b)),
        Some(b) if !b.shared() && !sqlite_path.exists() => {
            return Err(Error::new(
                Kind::Usage,
                format!(
                    "the store {shown_root} is bound to records {} and its records.db is missing: restore it (a new one would not know the store's trees), or give a new --store",
                    b.id
                ),
            ));
        }
        None if !location.is_shared() && !trees.is_empty() && !sqlite_path.exists() => {
            return Err(unknown(trees.len()));
        }
        _ => {}
    }
    // Records the store can tell are not its own (a bound store's without its id; for a store
    // with trees, ones without skillbox's schema, which list none of them) are refused before
    // anything is written to them: an empty database given by mistake stays empty.
    let (records, peeked) = Records::peek(location, &sqlite_path, host)?;
    match &bound {
        Some(b) if peeked.id.as_deref() != Some(b.id.as_str()) => return Err(other(b)),
        None if !trees.is_empty() && !peeked.schema => return Err(unknown(trees.len())),
        _ => {}
    }
    let mut records = records.migrated(store_id)?;
    let records_id = records.records_id()?;
    match bound {
        Some(b) if b.id == records_id => {}
        Some(b) => return Err(other(&b)),
        None => {
            if !trees.is_empty() {
                let listed = records.stored_by_store(store_id)?;
                let unlisted = trees
                    .iter()
                    .filter(|t| !listed.iter().any(|d| hex_of(d) == t.as_str()))
                    .count();
                if unlisted == trees.len() {
                    return Err(unknown(trees.len()));
                }
                // Records that know some of its trees but not all (a records.db left behind
                // when the store moved to a fleet's records) would have recovery remove the
                // rest, which agents' links may point at: a first binding never costs a tree.
                if unlisted > 0 {
                    return Err(Error::new(
                        Kind::Usage,
                        format!(
                            "the store {shown_root} holds {unlisted} of its {} version tree(s) that the records at {given} do not list as this store's: binding it to these records would remove them; give the --records it was last used with, or move those trees out of {}/versions if they are leftovers",
                            trees.len(),
                            shown_root
                        ),
                    ));
                }
            }
            if access == Access::Exclusive {
                let text = format!("{records_id}\n{}\n", records.location());
                let landed = write_once(root, "records-id", &text)?;
                if landed != text {
                    // Another command bound it first, to the same records or not.
                    match read_binding(root)? {
                        Some(b) if b.id == records_id => {}
                        Some(b) => return Err(other(&b)),
                        None => {
                            return Err(Error::new(
                                Kind::Operational,
                                "corrupt store: records-id vanished",
                            ));
                        }
                    }
                }
            }
        }
    }
    records.register(host, store_id)?;
    Ok(records)
}

/// Write `STORE/<name>` once: under a temporary name, then linked into place (link(2) never
/// replaces, so two commands writing it at once agree on the one that landed first). Returns
/// the text that is there.
fn write_once(root: &Path, name: &str, text: &str) -> Result<String, Error> {
    let path = root.join(name);
    let tmp = root.join(format!("{name}.{}", std::process::id()));
    fs::write(&tmp, text).map_err(|e| Error::io(format!("cannot write {}", tmp.display()), &e))?;
    let linked = fs::hard_link(&tmp, &path);
    let _ = fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(text.to_owned()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => fs::read_to_string(&path)
            .map_err(|e| Error::io(format!("cannot read {}", path.display()), &e)),
        Err(e) => Err(Error::io(format!("cannot create {}", path.display()), &e)),
    }
}

/// `STORE/host`: the name the records bind this store's host to, as the last command that
/// opened them found it. `withdraw --local` opens no records: it records this name, and refuses
/// a `--host` naming another, as every other command does against the records' binding.
pub fn bound_host(root: &Path) -> Result<Option<String>, Error> {
    let path = root.join("host");
    match fs::read_to_string(&path) {
        Ok(s) => {
            let name = s.trim_end_matches('\n');
            super::fleet::check_host_name(name).map_err(|e| {
                Error::new(
                    Kind::Operational,
                    format!("corrupt store: {}: {e}", path.display()),
                )
            })?;
            Ok(Some(name.to_owned()))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io(format!("cannot read {}", path.display()), &e)),
    }
}

/// Keep `STORE/host` saying `name` (written only when it says something else: a temporary
/// file renamed over it, so a reader sees the old name or the new one).
fn note_host(root: &Path, name: &str) -> Result<(), Error> {
    if matches!(bound_host(root), Ok(Some(n)) if n == name) {
        return Ok(());
    }
    let path = root.join("host");
    let tmp = root.join(format!("host.{}", std::process::id()));
    fs::write(&tmp, format!("{name}\n"))
        .and_then(|()| fs::rename(&tmp, &path))
        .map_err(|e| {
            let _ = fs::remove_file(&tmp);
            Error::io(format!("cannot write {}", path.display()), &e)
        })
}

/// 32 random hex digits.
pub fn random_id() -> Result<String, Error> {
    let mut raw = [0u8; 16];
    File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut raw))
        .map_err(|e| Error::io("cannot read /dev/urandom", &e))?;
    Ok(hex::encode(raw))
}

/// The store's random id (`STORE/store-id`, 32 hex digits), made on first use: the records
/// bind a host name to it, so two stores (two machines) can never share one host's records.
fn store_id(root: &Path) -> Result<String, Error> {
    let path = root.join("store-id");
    let read = |p: &Path| -> Result<Option<String>, Error> {
        match fs::read_to_string(p) {
            Ok(s) => {
                let s = s.trim().to_owned();
                if s.len() == 32 && s.bytes().all(|b| b.is_ascii_hexdigit()) {
                    Ok(Some(s))
                } else {
                    Err(Error::new(
                        Kind::Operational,
                        format!("corrupt store: {} is not 32 hex digits", p.display()),
                    ))
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io(format!("cannot read {}", p.display()), &e)),
        }
    };
    if let Some(id) = read(&path)? {
        return Ok(id);
    }
    let id = random_id()?;
    write_once(root, "store-id", &format!("{id}\n"))?;
    read(&path)?.ok_or_else(|| Error::new(Kind::Operational, "corrupt store: store-id vanished"))
}

/// `sha256:<hex>` -> `<hex>` (digests in the records are always the full form).
pub fn hex_of(digest: &str) -> &str {
    digest.strip_prefix("sha256:").unwrap_or(digest)
}

pub fn read_answer(path: &Path) -> Result<Outcome, Error> {
    let mut text = Vec::new();
    File::open(path)
        .and_then(|f| f.take(64 * 1024 * 1024).read_to_end(&mut text))
        .map_err(|e| Error::io(format!("cannot read {}", path.display()), &e))?;
    serde_json::from_slice(&text).map_err(|e| {
        Error::new(
            Kind::Operational,
            format!("corrupt store: {} is not an answer: {e}", path.display()),
        )
    })
}

/// Remove every write bit beneath `root` (symlinks have none of their own and are skipped).
pub fn freeze(root: &Path) -> Result<(), Error> {
    walk_chmod(root, |mode| mode & !0o222)
}

/// Give the owner write access back to directories so a tree can be removed.
fn thaw_dirs(root: &Path) -> Result<(), Error> {
    walk_chmod(root, |mode| mode | 0o700)
}

fn walk_chmod(root: &Path, f: impl Fn(u32) -> u32 + Copy) -> Result<(), Error> {
    let md = fs::symlink_metadata(root)
        .map_err(|e| Error::io(format!("cannot inspect {}", root.display()), &e))?;
    if md.file_type().is_symlink() {
        return Ok(());
    }
    let set = |p: &Path, mode: u32| {
        fs::set_permissions(p, fs::Permissions::from_mode(mode))
            .map_err(|e| Error::io(format!("cannot chmod {}", p.display()), &e))
    };
    if md.is_dir() {
        // Make the directory listable and enterable first (thawing), then recurse, then set it.
        set(root, md.mode() | 0o700)?;
        let entries = fs::read_dir(root)
            .map_err(|e| Error::io(format!("cannot read {}", root.display()), &e))?;
        for e in entries {
            let e = e.map_err(|e| Error::io(format!("cannot read {}", root.display()), &e))?;
            walk_chmod(&e.path(), f)?;
        }
    }
    set(root, f(md.mode() & 0o7777))
}

/// Remove a tree of ours (a staging directory or a version), write bits restored first; a
/// non-directory at its name is removed itself.
pub fn remove_tree(root: &Path) -> Result<(), Error> {
    match fs::symlink_metadata(root) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io(format!("cannot inspect {}", root.display()), &e)),
        // A link or a file (something left at a staging name) is removed itself: a link's
        // target is never entered.
        Ok(md) if !md.is_dir() => {
            return fs::remove_file(root)
                .map_err(|e| Error::io(format!("cannot remove {}", root.display()), &e));
        }
        Ok(_) => {}
    }
    thaw_dirs(root)?;
    fs::remove_dir_all(root).map_err(|e| Error::io(format!("cannot remove {}", root.display()), &e))
}

/// Re-hash a stored tree against its inventory: every entry present with its kind, bytes and
/// link target, and nothing else. Returns the problems found.
pub fn check_tree(tree: &Path, answer: &Outcome) -> Vec<String> {
    let mut problems = Vec::new();
    let mut expected = std::collections::BTreeSet::new();
    for e in &answer.entries {
        expected.insert(e.path.clone());
        let p = tree.join(&e.path);
        let md = match fs::symlink_metadata(&p) {
            Ok(m) => m,
            Err(err) => {
                problems.push(format!("{}: {err}", e.path));
                continue;
            }
        };
        match e.kind {
            EntryKind::File => {
                if !md.is_file() {
                    problems.push(format!("{}: not a regular file", e.path));
                    continue;
                }
                let got = File::open(&p).and_then(Sha256Digest::of_reader);
                match got {
                    Ok((d, n)) if Some(d) == e.sha256 && n == e.size => {}
                    Ok(_) => {
                        problems.push(format!("{}: content differs from the inventory", e.path))
                    }
                    Err(err) => problems.push(format!("{}: {err}", e.path)),
                }
                if md.mode() & 0o222 != 0 {
                    problems.push(format!("{}: writable", e.path));
                }
            }
            EntryKind::Dir => {
                if !md.is_dir() {
                    problems.push(format!("{}: not a directory", e.path));
                }
            }
            EntryKind::Symlink => match fs::read_link(&p) {
                Ok(t) if Some(t.to_string_lossy().as_ref()) == e.link_target.as_deref() => {}
                Ok(_) | Err(_) => problems.push(format!("{}: link target differs", e.path)),
            },
        }
    }
    let mut stack = vec![(tree.to_owned(), String::new())];
    while let Some((dir, rel)) = stack.pop() {
        let Ok(rd) = fs::read_dir(&dir) else {
            problems.push(format!("cannot read {}", dir.display()));
            continue;
        };
        for ent in rd.flatten() {
            let name = ent.file_name().to_string_lossy().into_owned();
            let r = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            if !expected.contains(&r) {
                problems.push(format!("{r}: not in the inventory"));
            }
            if ent.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                stack.push((ent.path(), r));
            }
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    fn staging_root() -> tempfile::TempDir {
        tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"))
    }

    fn staged(root: &Path, name: &str) -> PathBuf {
        let dir = root.join(name);
        fs::create_dir_all(dir.join("tree/sub")).unwrap_or_else(|e| panic!("{e}"));
        fs::write(dir.join("tree/sub/SKILL.md"), "x").unwrap_or_else(|e| panic!("{e}"));
        dir
    }

    /// The contract recovery relies on: a staging directory whose `flock` a live handle holds
    /// (a running intake's, extracting without the store lock) is left alone, whole; one whose
    /// lock is free (its command was killed) is removed, frozen (write bits gone, as `promote`
    /// leaves it when killed before its rename) or not; a name already gone is nothing to do;
    /// a non-directory at a staging name (a file, a symbolic link) is removed itself, and what
    /// a link points at is never touched.
    #[test]
    fn remove_abandoned_staging_keeps_held_and_removes_abandoned() {
        let s = staging_root();
        let root = s.path();

        let held_dir = staged(root, "in-held");
        let held = Flock::lock(
            open_dir(&held_dir).unwrap_or_else(|e| panic!("{e}")),
            FlockArg::LockExclusiveNonblock,
        )
        .unwrap_or_else(|(_, e)| panic!("{e}"));
        assert!(!remove_abandoned_staging(&held_dir).unwrap_or_else(|e| panic!("{e}")));
        assert!(
            held_dir.join("tree/sub/SKILL.md").is_file(),
            "a held staging was touched"
        );

        let abandoned = staged(root, "in-abandoned");
        assert!(remove_abandoned_staging(&abandoned).unwrap_or_else(|e| panic!("{e}")));
        assert!(
            fs::symlink_metadata(&abandoned).is_err(),
            "abandoned staging kept"
        );

        let frozen = staged(root, "in-frozen");
        freeze(&frozen).unwrap_or_else(|e| panic!("{e}"));
        assert!(remove_abandoned_staging(&frozen).unwrap_or_else(|e| panic!("{e}")));
        assert!(
            fs::symlink_metadata(&frozen).is_err(),
            "frozen staging kept"
        );

        // Gone already (its command removed or promoted it): nothing removed.
        assert!(!remove_abandoned_staging(&root.join("in-gone")).unwrap_or_else(|e| panic!("{e}")));

        // Not a directory: nothing an intake holds.
        let file = root.join("in-file");
        fs::write(&file, "x").unwrap_or_else(|e| panic!("{e}"));
        assert!(remove_abandoned_staging(&file).unwrap_or_else(|e| panic!("{e}")));
        assert!(fs::symlink_metadata(&file).is_err());
        let elsewhere = staging_root();
        let target = staged(elsewhere.path(), "kept");
        let link = root.join("in-link");
        std::os::unix::fs::symlink(&target, &link).unwrap_or_else(|e| panic!("{e}"));
        assert!(remove_abandoned_staging(&link).unwrap_or_else(|e| panic!("{e}")));
        assert!(fs::symlink_metadata(&link).is_err(), "the link was kept");
        assert!(
            target.join("tree/sub/SKILL.md").is_file(),
            "the link's target was touched"
        );

        // Released (its command ended): the next recovery removes it.
        drop(held);
        assert!(held_dir.is_dir());
        assert!(remove_abandoned_staging(&held_dir).unwrap_or_else(|e| panic!("{e}")));
        assert!(fs::symlink_metadata(&held_dir).is_err());
    }
}
