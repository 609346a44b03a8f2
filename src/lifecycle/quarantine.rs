//! Containment without the records: `skillbox withdraw SKILL@DIGEST --local`.
//!
//! When the records cannot be reached (PostgreSQL down, a partition, credentials rotated), an
//! operator can still stop every agent of this host from loading a version: its directory
//! `versions/<hex>` is renamed to `quarantine/<hex>` (one rename(2) inside the store, so every
//! link skillbox made, to `versions/<hex>/tree`, dangles at once, whatever the agents' entries
//! are), and a pending withdrawal (skill, digest, reason, who, when, host) is written to
//! `pending-withdrawals/<hex>.json`. The next command that opens the records applies it as a
//! `withdraw` would ([`super::ops::apply_pending`]), then moves the entry to
//! `applied-withdrawals/<hex>.json`, where it stays.
//!
//! The applied entry is this host's own memory of the withdrawal. A withdrawal is final in the
//! records (no command takes it back), so records that call that version anything but withdrawn
//! (a records.db, or a fleet's database, restored from a backup taken before it) have lost it:
//! every command that opens them finds the disagreement ([`super::ops::undone_withdrawals`]),
//! says so, and records the withdrawal again with its original reason, who and when, by putting
//! the entry back among the pending ones ([`reopen`]). Records that do not know the version at
//! all (restored from before it was recorded) cannot take it yet: the entry stays applied and
//! waits ([`super::ops::waiting_withdrawals`]), with no lock taken and nothing written for it,
//! until some host records the version. Containment is never undone by a restore: the tree
//! stays quarantined, and this host refuses the digest by the entry alone (even once `gc`
//! removed the tree).
//!
//! Order and crash safety: the pending entry is written first (a temporary file, fsync, rename,
//! fsync of the directory), then the tree is renamed. A crash before the entry's rename leaves
//! nothing changed (a leftover temporary file, ignored and replaced); a crash between the two
//! leaves the withdrawal pending with the tree still in `versions/`: the version is already
//! refused by install, update, approve and rollback here, and the next `withdraw --local` (or
//! the next command that opens the records) finishes the rename. The tree is never copied, so
//! it is whole in one place or the other.

use std::fmt::Write as _;
use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::fleet::HostChoice;
use super::store::{self, hex_of, sync_dir};
use super::{Error, Kind};

/// A withdrawal made on this host without the records, waiting to reach them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pending {
    pub skill: String,
    pub digest: String,
    pub reason: String,
    pub by: String,
    pub time: String,
    pub host: String,
}

/// What `withdraw --local` did.
#[derive(Debug, Clone, Serialize)]
pub struct LocalReport {
    pub skill: String,
    pub digest: String,
    /// `quarantined` (moved now), `already_quarantined`, or `not_in_store` (no tree here: the
    /// withdrawal is recorded only, so it reaches the records).
    pub containment: &'static str,
    /// The pending withdrawal as recorded (an earlier one stands: its reason, who and when).
    pub pending: Pending,
    /// A local withdrawal of this digest was recorded here before, pending or applied to the
    /// records (this run recorded nothing).
    pub already_pending: bool,
    /// Where the tree is now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quarantine: Option<String>,
}

pub fn quarantine_root(root: &Path) -> PathBuf {
    root.join("quarantine")
}

pub fn pending_root(root: &Path) -> PathBuf {
    root.join("pending-withdrawals")
}

/// `applied-withdrawals/`: the local withdrawals the records have held (kept for good).
pub fn applied_root(root: &Path) -> PathBuf {
    root.join("applied-withdrawals")
}

/// `quarantine/<hex>`: where a locally withdrawn version's directory is moved.
pub fn quarantine_dir(root: &Path, digest: &str) -> PathBuf {
    quarantine_root(root).join(hex_of(digest))
}

fn pending_path(root: &Path, digest: &str) -> PathBuf {
    pending_root(root).join(format!("{}.json", hex_of(digest)))
}

fn applied_path(root: &Path, digest: &str) -> PathBuf {
    applied_root(root).join(format!("{}.json", hex_of(digest)))
}

/// Whether `digest`'s directory is in quarantine on this host.
pub fn is_quarantined(root: &Path, digest: &str) -> bool {
    fs::symlink_metadata(quarantine_dir(root, digest)).is_ok()
}

/// Every digest whose directory is in quarantine on this host (one directory read).
pub fn quarantined(root: &Path) -> std::collections::BTreeSet<String> {
    names_with(&quarantine_root(root), "", "")
        .into_iter()
        .map(|h| format!("sha256:{h}"))
        .collect()
}

/// The pending withdrawal of `digest`, if any.
pub fn pending_of(root: &Path, digest: &str) -> Result<Option<Pending>, Error> {
    read_pending(&pending_path(root, digest))
}

fn read_pending(path: &Path) -> Result<Option<Pending>, Error> {
    let text = match fs::read(path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(format!("cannot read {}", path.display()), &e)),
    };
    let corrupt = |why: String| {
        Error::new(
            Kind::Operational,
            format!(
                "corrupt store: {} is not a pending withdrawal: {why}",
                path.display()
            ),
        )
    };
    let p: Pending = serde_json::from_slice(&text).map_err(|e| corrupt(e.to_string()))?;
    // Its digest names paths in the store (quarantine/<hex>): only the one its file is named
    // after, a full digest, is taken.
    let named = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if !is_entry_name(&named) || format!("sha256:{}", named.trim_end_matches(".json")) != p.digest {
        return Err(corrupt(format!(
            "its digest is not the one its name says ({named})"
        )));
    }
    Ok(Some(p))
}

/// The local withdrawal of `digest` the records held once, if any.
pub fn applied_of(root: &Path, digest: &str) -> Result<Option<Pending>, Error> {
    read_pending(&applied_path(root, digest))
}

/// Whether any withdrawal waits for the records (cheap: one directory read).
pub fn has_pending(root: &Path) -> bool {
    has_entries(&pending_root(root))
}

/// Whether this host ever had a local withdrawal applied to the records (one directory read).
pub fn has_applied(root: &Path) -> bool {
    has_entries(&applied_root(root))
}

fn has_entries(dir: &Path) -> bool {
    fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .any(|e| is_entry_name(&e.file_name().to_string_lossy()))
}

/// `<64 hex>.json`: a pending entry (temporary files start with a dot).
fn is_entry_name(name: &str) -> bool {
    name.strip_suffix(".json")
        .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Every pending withdrawal, oldest first.
pub fn pending(root: &Path) -> Result<Vec<Pending>, Error> {
    entries(&pending_root(root))
}

/// Every local withdrawal the records held once, oldest first.
pub fn applied(root: &Path) -> Result<Vec<Pending>, Error> {
    entries(&applied_root(root))
}

fn entries(dir: &Path) -> Result<Vec<Pending>, Error> {
    let mut out = Vec::new();
    let rd = match fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(Error::io(format!("cannot read {}", dir.display()), &e)),
    };
    for e in rd.flatten() {
        if is_entry_name(&e.file_name().to_string_lossy())
            && let Some(p) = read_pending(&e.path())?
        {
            out.push(p);
        }
    }
    out.sort_by(|a, b| (&a.time, &a.digest).cmp(&(&b.time, &b.digest)));
    Ok(out)
}

/// Move `digest`'s pending entry to `applied-withdrawals/` (once the records hold the
/// withdrawal): one rename, then both directories synced. The entry is kept there for good
/// (module documentation).
pub fn mark_applied(root: &Path, digest: &str) -> Result<(), Error> {
    let from = pending_path(root, digest);
    if fs::symlink_metadata(&from).is_err() {
        return Ok(());
    }
    store::mkdir_private(&applied_root(root))?;
    let to = applied_path(root, digest);
    fs::rename(&from, &to).map_err(|e| {
        Error::io(
            format!("cannot move {} to {}", from.display(), to.display()),
            &e,
        )
    })?;
    sync_dir(&applied_root(root))?;
    sync_dir(&pending_root(root))
}

/// Put `digest`'s applied entry back among the pending ones, to be recorded again: the records
/// no longer hold that withdrawal. One rename that never replaces a pending entry (one there
/// already is applied first, and stands).
pub fn reopen(root: &Path, digest: &str) -> Result<(), Error> {
    store::mkdir_private(&pending_root(root))?;
    let from = applied_path(root, digest);
    let to = pending_path(root, digest);
    match store::rename_new(&from, &to) {
        Ok(()) | Err(nix::errno::Errno::EEXIST) | Err(nix::errno::Errno::ENOENT) => {}
        Err(e) => {
            return Err(Error::new(
                Kind::Operational,
                format!("cannot move {} to {}: {e}", from.display(), to.display()),
            ));
        }
    }
    sync_dir(&pending_root(root))?;
    sync_dir(&applied_root(root))
}

/// Whether `digest` is withdrawn on this host without the records: its tree is in quarantine,
/// its withdrawal waits for the records, or this host withdrew it so and the records held it
/// once. Such a version is never a version to go to.
pub fn withdrawn_here(root: &Path, digest: &str) -> Result<bool, Error> {
    Ok(is_quarantined(root, digest)
        || pending_of(root, digest)?.is_some()
        || applied_of(root, digest)?.is_some())
}

/// Refuse to activate a version withdrawn on this host without the records (exit 9, as a
/// withdrawn version), whatever the records say of it: its tree is in quarantine, its
/// withdrawal waits for the records, or this host withdrew it so (records restored from
/// before that say otherwise).
pub fn refuse(root: &Path, digest: &str) -> Result<(), Error> {
    let pending = pending_of(root, digest)?;
    let applied = match pending {
        Some(_) => None,
        None => applied_of(root, digest)?,
    };
    if pending.is_none() && applied.is_none() && !is_quarantined(root, digest) {
        return Ok(());
    }
    let how = match (&pending, &applied) {
        (Some(p), _) => format!(
            "withdrawn on this host by {} at {} with --local ({}), not yet in the records",
            p.by, p.time, p.reason
        ),
        (None, Some(p)) => format!(
            "withdrawn on this host by {} at {} with --local ({})",
            p.by, p.time, p.reason
        ),
        (None, None) => "withdrawn on this host (its tree is in quarantine)".to_owned(),
    };
    Err(Error::new(
        Kind::Withdrawn,
        format!("{digest} was {how}; it can never be activated again"),
    ))
}

/// Write `p` as `pending-withdrawals/<hex>.json`: a temporary file, fsync, rename, fsync of the
/// directory. A reader sees the whole entry or none.
fn write_pending(root: &Path, p: &Pending) -> Result<(), Error> {
    let dir = pending_root(root);
    store::mkdir_private(&dir)?;
    let text =
        serde_json::to_vec_pretty(p).map_err(|e| Error::new(Kind::Operational, e.to_string()))?;
    store::write_whole(&pending_path(root, &p.digest), hex_of(&p.digest), &text)?;
    sync_dir(&dir)
}

/// The mark a `withdraw --local` whose entry could not be written leaves beside the
/// quarantined directory (`quarantine/<hex>.unwritten`; the directory itself is frozen): an
/// empty file, which needs no data block (a full filesystem still takes it), so `status` can
/// tell this version from one whose withdrawal the records lost (restored from a backup), and
/// name the fix: the same command again once there is room.
fn unwritten_mark(root: &Path, digest: &str) -> PathBuf {
    quarantine_root(root).join(format!("{}.unwritten", hex_of(digest)))
}

/// Remove `digest`'s mark of an unwritten withdrawal ([`unwritten_mark`]), if any: its entry is
/// written now, or its quarantined tree is gone.
pub fn clear_unwritten(root: &Path, digest: &str) -> Result<(), Error> {
    let mark = unwritten_mark(root, digest);
    match fs::remove_file(&mark) {
        Ok(()) => sync_dir(&quarantine_root(root)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(format!("cannot remove {}", mark.display()), &e)),
    }
}

/// Whether `digest`'s quarantined directory carries the mark of a `withdraw --local` that
/// could not write its entry ([`unwritten_mark`]).
pub fn is_unwritten(root: &Path, digest: &str) -> bool {
    fs::symlink_metadata(unwritten_mark(root, digest)).is_ok_and(|m| m.is_file())
}

/// The error of a `withdraw --local` whose entry could not be written (`e`): the version is
/// contained all the same when it can be, and the message says what holds and what to do.
fn unwritten(root: &Path, digest: &str, e: Error) -> Error {
    let mut message = e.message;
    match contain(root, digest) {
        Ok(Contained::Now | Contained::Already) => {
            // Best effort: without the mark, `status` says the withdrawal is lost, which is
            // still not contained, only with a less fitting hint.
            let _ = File::options()
                .write(true)
                .create(true)
                .truncate(false)
                .open(unwritten_mark(root, digest))
                .and_then(|f| f.sync_all());
            let _ = sync_dir(&quarantine_root(root));
            let _ = write!(
                message,
                "; {digest} is contained on this host all the same (its tree is in {}: no agent \
                 of this host can load it), but its withdrawal (reason, who, when) is not \
                 written, so it cannot reach the records: free space in the store's filesystem \
                 and run this command again",
                quarantine_dir(root, digest).display()
            );
        }
        Ok(Contained::NotInStore) => {
            let _ = write!(
                message,
                "; {digest} is not in this store (nothing to contain here) and its withdrawal \
                 is not written: free space in the store's filesystem and run this command again"
            );
        }
        Err(c) => {
            let _ = write!(
                message,
                "; {digest} could not be contained either ({}): nothing changed",
                c.message
            );
        }
    }
    Error::new(e.kind, message)
}

/// Where `digest` is on this host after [`contain`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Contained {
    Now,
    Already,
    NotInStore,
}

/// Move `versions/<hex>` to `quarantine/<hex>` with one rename (`RENAME_NOREPLACE`), so every
/// link to `versions/<hex>/tree` dangles at once. Idempotent. Must run under the store lock.
pub fn contain(root: &Path, digest: &str) -> Result<Contained, Error> {
    let from = root.join("versions").join(hex_of(digest));
    let to = quarantine_dir(root, digest);
    if fs::symlink_metadata(&from).is_err() {
        return Ok(if is_quarantined(root, digest) {
            Contained::Already
        } else {
            Contained::NotInStore
        });
    }
    store::mkdir_private(&quarantine_root(root))?;
    match store::rename_new(&from, &to) {
        Ok(()) => {}
        // Quarantined before, and the same bytes promoted again since (an older skillbox
        // without the refusal): this copy leaves `versions/` by a rename too, then goes.
        Err(nix::errno::Errno::EEXIST) => put_aside(root, &from, digest)?,
        Err(e) => {
            return Err(Error::new(
                Kind::Operational,
                format!("cannot move {} to {}: {e}", from.display(), to.display()),
            ));
        }
    }
    sync_dir(&root.join("versions"))?;
    sync_dir(&quarantine_root(root))?;
    Ok(Contained::Now)
}

/// Move the directory `from` (a second copy of a quarantined version) out of `versions/` to
/// `quarantine/.<hex>.<pid>`, then remove it there. Must run under the store lock.
///
/// Security: the copy is held by a `flock(2)` on its directory, taken before the rename (the
/// lock follows the inode), until it is removed; the kernel releases it however this process
/// ends. A run killed half-way leaves the directory, and the next command that holds the store
/// lock removes it ([`remove_abandoned`]) only when it can take that `flock` itself: never a
/// live run's, whatever its pid (a pid is reused), as staging directories are told apart.
fn put_aside(root: &Path, from: &Path, digest: &str) -> Result<(), Error> {
    // A leftover of a killed run may have this process's pid (reused): gone first, so the
    // name below is free unless a live run holds it.
    remove_abandoned(root)?;
    let aside = quarantine_root(root).join(format!(".{}.{}", hex_of(digest), std::process::id()));
    let held = store::lock_dir(from)?;
    store::rename_new(from, &aside).map_err(|e| {
        Error::new(
            Kind::Operational,
            format!("cannot move {} to {}: {e}", from.display(), aside.display()),
        )
    })?;
    crate::stop_point::stop_point("quarantine:aside");
    store::remove_tree(&aside)?;
    drop(held);
    Ok(())
}

/// Remove what a killed quarantine step left in the store: a copy put aside by [`contain`]
/// (`quarantine/.<hex>.<pid>`) that no running command holds, and a pending entry's temporary
/// file (`pending-withdrawals/.<hex>.<pid>.tmp`, written only under the store lock, so none is
/// a live run's while this holds it). Must run under the store lock. Returns the names removed.
pub fn remove_abandoned(root: &Path) -> Result<Vec<String>, Error> {
    let mut removed = Vec::new();
    for (dir, suffix) in [(quarantine_root(root), ""), (pending_root(root), ".tmp")] {
        let Ok(rd) = fs::read_dir(&dir) else {
            continue;
        };
        let before = removed.len();
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !is_aside_name(&name, suffix) {
                continue;
            }
            let gone = if suffix.is_empty() {
                store::remove_abandoned_dir(&e.path())?
            } else {
                match fs::remove_file(e.path()) {
                    Ok(()) => true,
                    Err(err) if err.kind() == io::ErrorKind::NotFound => false,
                    Err(err) => {
                        return Err(Error::io(
                            format!("cannot remove {}", e.path().display()),
                            &err,
                        ));
                    }
                }
            };
            if gone {
                removed.push(format!(
                    "{}/{name}",
                    dir.file_name().unwrap_or_default().to_string_lossy()
                ));
            }
        }
        if removed.len() > before {
            sync_dir(&dir)?;
        }
    }
    Ok(removed)
}

/// `.<64 hex>.<pid><suffix>`: a name a quarantine step gives what it holds only while it runs.
fn is_aside_name(name: &str, suffix: &str) -> bool {
    let Some(rest) = name.strip_prefix('.').and_then(|n| n.strip_suffix(suffix)) else {
        return false;
    };
    let Some((hex, pid)) = rest.split_once('.') else {
        return false;
    };
    hex.len() == 64
        && hex.bytes().all(|b| b.is_ascii_hexdigit())
        && !pid.is_empty()
        && pid.bytes().all(|b| b.is_ascii_digit())
}

/// The hex names under `dir` (versions, quarantine, pending entries) starting with `prefix`.
fn names_with(dir: &Path, prefix: &str, strip: &str) -> Vec<String> {
    fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            let n = n.strip_suffix(strip).unwrap_or(&n).to_owned();
            (n.len() == 64 && n.bytes().all(|b| b.is_ascii_hexdigit()) && n.starts_with(prefix))
                .then_some(n)
        })
        .collect()
}

/// The full digest `digest` (a unique prefix, `sha256:` and 8 to 64 hex digits) names among
/// the versions this store holds, has quarantined, or has pending; a full digest it does not
/// know is taken as given.
fn resolve(root: &Path, digest: &str) -> Result<String, Error> {
    let prefix = hex_of(digest);
    let mut found: Vec<String> = names_with(&root.join("versions"), prefix, "");
    found.extend(names_with(&quarantine_root(root), prefix, ""));
    found.extend(names_with(&pending_root(root), prefix, ".json"));
    found.extend(names_with(&applied_root(root), prefix, ".json"));
    found.sort();
    found.dedup();
    match found.len() {
        1 => Ok(format!("sha256:{}", found.remove(0))),
        0 if prefix.len() == 64 => Ok(format!("sha256:{prefix}")),
        0 => Err(Error::new(
            Kind::NotFound,
            format!(
                "{digest} names no version in this store; give the full digest (sha256: and 64 hex digits) to record its withdrawal for the records"
            ),
        )),
        n => Err(Error::new(
            Kind::Usage,
            format!("{digest} matches {n} versions in this store; give more of the digest"),
        )),
    }
}

/// The host a local withdrawal is recorded for: the one the records bind this store to
/// (`STORE/host`, noted by every command that opened them), whatever the system hostname is
/// now. A `--host` naming another is refused (exit 2) as every other command refuses it; a
/// store no command has opened the records of yet takes `host` as given.
fn host_of_store(root: &Path, host: &HostChoice) -> Result<String, Error> {
    match store::bound_host(root)? {
        Some(bound) if host.explicit && host.name != bound => Err(Error::new(
            Kind::Usage,
            format!(
                "this store is host {bound} in the records; --host {} names another host (give --host {bound}, or another store)",
                host.name
            ),
        )),
        Some(bound) => Ok(bound),
        None => Ok(host.name.clone()),
    }
}

/// `withdraw SKILL@DIGEST --local`: contain the version on this host without the records. The
/// store must exist and be ours; runs under its lock. See the module's documentation.
pub fn withdraw_local(
    root: &Path,
    skill: &str,
    digest: &str,
    reason: &str,
    by: &str,
    host: &HostChoice,
) -> Result<LocalReport, Error> {
    if fs::symlink_metadata(root).is_err() {
        return Err(Error::new(
            Kind::NotFound,
            format!(
                "no store at {} (nothing installed here, so nothing to contain; give --store)",
                root.display()
            ),
        ));
    }
    store::check_ours(root)?;
    let lock = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(root.join("lock"))
        .map_err(|e| Error::io("cannot open the store lock", &e))?;
    let _held = store::lock_store(lock, root)?;
    // A killed run's leftovers go first (this run needs none of them).
    remove_abandoned(root)?;
    let host = host_of_store(root, host)?;
    let digest = resolve(root, digest)?;
    // An earlier local withdrawal stands (its reason, who and when), pending or applied: as
    // `withdraw` of a version already withdrawn, this one is not recorded over it. An applied
    // one the records lost is recorded again by the next command that opens them.
    let earlier = match pending_of(root, &digest)? {
        Some(p) => Some(p),
        None => applied_of(root, &digest)?,
    };
    let (pending, already_pending) = match earlier {
        Some(p) => (p, true),
        None => {
            let p = Pending {
                skill: skill.to_owned(),
                digest: digest.clone(),
                reason: reason.to_owned(),
                by: by.to_owned(),
                time: super::now(),
                host,
            };
            if let Err(e) = write_pending(root, &p) {
                // Security: containment does not wait for the entry. A full filesystem (or a
                // quota) refuses the few bytes of the entry, but the rename below needs no
                // room: every agent of this host stops loading the version now, and the
                // operator is told the withdrawal itself is not written yet.
                return Err(unwritten(root, &digest, e));
            }
            // Written now: an earlier run's mark says nothing any more (the entry stands, and
            // `status` looks at the entry first, so a mark left behind changes nothing).
            let _ = clear_unwritten(root, &digest);
            (p, false)
        }
    };
    super::crash_point("withdraw-local", "pending");
    let containment = match contain(root, &digest)? {
        Contained::Now => "quarantined",
        Contained::Already => "already_quarantined",
        Contained::NotInStore => "not_in_store",
    };
    let quarantine = (containment != "not_in_store")
        .then(|| quarantine_dir(root, &digest).display().to_string());
    Ok(LocalReport {
        skill: pending.skill.clone(),
        digest,
        containment,
        pending,
        already_pending,
        quarantine,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEX: &str = "0c33d4704359c7305e11409d5fdab9ccc1ce4eacab37d95ea909c6049b6f5d7c";

    fn h1() -> HostChoice {
        HostChoice {
            name: "h1".into(),
            explicit: true,
        }
    }

    fn store() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        fs::create_dir_all(dir.path().join("versions").join(HEX).join("tree"))
            .unwrap_or_else(|e| panic!("{e}"));
        dir
    }

    /// One rename, idempotent; a prefix resolves to the stored version; the first pending
    /// entry stands; the digest is refused (exit 9) from the entry alone.
    #[test]
    fn contain_is_one_rename_and_idempotent() {
        let s = store();
        let root = s.path();
        let digest = format!("sha256:{HEX}");
        assert!(refuse(root, &digest).is_ok());
        let r = withdraw_local(root, "demo", "sha256:0c33d470", "bad", "alice", &h1())
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((r.containment, r.already_pending), ("quarantined", false));
        assert_eq!(r.digest, digest);
        assert!(!root.join("versions").join(HEX).exists());
        assert!(quarantine_dir(root, &digest).join("tree").is_dir());
        let r = withdraw_local(root, "demo", &digest, "other", "bob", &h1())
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (r.containment, r.already_pending),
            ("already_quarantined", true)
        );
        assert_eq!(
            (r.pending.by.as_str(), r.pending.reason.as_str()),
            ("alice", "bad")
        );
        assert_eq!(
            refuse(root, &digest).map_err(|e| e.kind).err(),
            Some(Kind::Withdrawn)
        );
        assert!(has_pending(root));
        mark_applied(root, &digest).unwrap_or_else(|e| panic!("{e}"));
        assert!(!has_pending(root));
        assert!(has_applied(root));
        // Quarantined still: refused by the tree's place alone.
        assert!(refuse(root, &digest).is_err());
        // Applied, and the tree gone (`gc`): refused by the applied entry alone, and a new
        // `--local` finds it standing.
        store::remove_tree(&quarantine_dir(root, &digest)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            refuse(root, &digest).map_err(|e| e.kind).err(),
            Some(Kind::Withdrawn)
        );
        let r = withdraw_local(root, "demo", "sha256:0c33d470", "again", "carol", &h1())
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((r.containment, r.already_pending), ("not_in_store", true));
        assert_eq!(r.pending.by, "alice");
        assert!(!has_pending(root));
        // Reopened (the records lost it): pending again, the same entry.
        reopen(root, &digest).unwrap_or_else(|e| panic!("{e}"));
        assert!(!has_applied(root));
        let p = pending_of(root, &digest).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(p.map(|p| p.by), Some("alice".to_owned()));
    }

    /// What a killed quarantine step left goes; a copy a live run holds (its `flock`), and
    /// anything not named as a step names what it holds, stay.
    #[test]
    fn remove_abandoned_keeps_what_a_live_run_holds() {
        let s = store();
        let root = s.path();
        let q = quarantine_root(root);
        let held = q.join(format!(".{HEX}.1"));
        let abandoned = q.join(format!(".{HEX}.2"));
        let other = q.join(".not-a-step");
        for d in [&held, &abandoned, &other] {
            fs::create_dir_all(d.join("tree/sub")).unwrap_or_else(|e| panic!("{e}"));
        }
        store::freeze(&abandoned).unwrap_or_else(|e| panic!("{e}"));
        fs::create_dir_all(pending_root(root)).unwrap_or_else(|e| panic!("{e}"));
        let tmp = pending_root(root).join(format!(".{HEX}.3.tmp"));
        fs::write(&tmp, "{").unwrap_or_else(|e| panic!("{e}"));
        let lock = store::lock_dir(&held).unwrap_or_else(|e| panic!("{e}"));
        let gone = remove_abandoned(root).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(gone.len(), 2, "{gone:?}");
        assert!(held.join("tree/sub").is_dir(), "a held copy was removed");
        assert!(other.is_dir());
        assert!(!abandoned.exists() && !tmp.exists());
        drop(lock);
        assert_eq!(remove_abandoned(root).map(|g| g.len()).ok(), Some(1));
        assert!(!held.exists());
    }

    /// A killed run's copy whose name this process's pid gives again (a pid is reused) does not
    /// stop the next containment of the same digest: it is removed first. (Before: the rename
    /// onto it failed, ENOTEMPTY, and `withdraw --local` with it.)
    #[test]
    fn a_leftover_under_a_reused_pid_does_not_stop_containment() {
        let s = store();
        let root = s.path();
        let digest = format!("sha256:{HEX}");
        assert_eq!(
            contain(root, &digest).map_err(|e| e.message).ok(),
            Some(Contained::Now)
        );
        // The same bytes promoted again, and a killed run's copy under this pid.
        fs::create_dir_all(root.join("versions").join(HEX).join("tree"))
            .unwrap_or_else(|e| panic!("{e}"));
        let leftover = quarantine_root(root).join(format!(".{HEX}.{}", std::process::id()));
        fs::create_dir_all(leftover.join("tree/sub")).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            contain(root, &digest).map_err(|e| e.message),
            Ok(Contained::Now)
        );
        assert!(!root.join("versions").join(HEX).exists());
        assert!(!leftover.exists());
        assert!(quarantine_dir(root, &digest).join("tree").is_dir());
    }

    /// A pending entry names paths in the store: one whose digest is not its file's name is
    /// corrupt, never followed.
    #[test]
    fn a_pending_entry_must_name_its_own_digest() {
        let s = store();
        let root = s.path();
        let p = Pending {
            skill: "demo".into(),
            digest: "sha256:../../etc".into(),
            reason: "x".into(),
            by: "a".into(),
            time: "t".into(),
            host: "h".into(),
        };
        fs::create_dir_all(pending_root(root)).unwrap_or_else(|e| panic!("{e}"));
        let text = serde_json::to_vec(&p).unwrap_or_else(|e| panic!("{e}"));
        fs::write(pending_root(root).join(format!("{HEX}.json")), text)
            .unwrap_or_else(|e| panic!("{e}"));
        let e = pending(root).err().unwrap_or_else(|| panic!("accepted"));
        assert!(e.message.contains("corrupt store"), "{e}");
    }
}
