//! A digest-keyed store of verified artifacts, plus the last copy of each index fetched.
//!
//! Layout under the root: `sha256/<hex>` (artifact bytes), `sha256/<hex>.json` (where they came
//! from: a hint for format detection and provenance, never trusted for anything else),
//! `index/<hex of the URL>.json` (the index's text and the URL a redirect moved it to, for
//! `--offline`: [`Cache::store_index`]), `tmp/` (downloads in progress,
//! `dl-<hex>-*` while the lock of `<hex>` is held; the artifact's record being written,
//! `w-<hex>-*`, under the same lock; an index copy being written, `w-index-<hex of the URL>-*`,
//! while `locks/index-<hex of the URL>.lock` is held. `cache prune` removes those whose lock is
//! free, which a killed fetch leaves, and older versions' `dl-XXXXXX` and `w-XXXXXX`, which
//! carry no name to lock, once unmodified for [`OLD_PARTIAL_AGE`]).
//! Every write is a temporary file in `tmp/` renamed into place (same filesystem, so the rename
//! is atomic). Every read re-hashes: a file that no longer matches its name is removed and
//! treated as absent.
//!
//! Concurrent fetches of one digest take its lock (`locks/<hex>.lock`, `flock(2)`, released
//! when the holder exits however it exits) around look-up, download and commit, so the bytes
//! are downloaded once and a reader only ever opens a complete file (a rename is atomic).
//! `cache prune` unlinks the lock files of what is no longer cached, each while holding it;
//! every taker checks, once it has a lock, that the file it locked is still the one at the
//! path, and opens the path again if not ([`Cache::take_lock`]).
//! `cache prune` and `cache verify` list what is there, then take each entry's lock: what they
//! decide on (an artifact's last use, an index copy's age, that a file is still there) is read
//! again under the lock, never acted on as the listing found it.
//! `sha256/<hex>.used` is an empty file whose modification time is the last use (`cache
//! list`, `cache prune --older-than`); access times are not used, `relatime` and `noatime`
//! make them unreliable.

use crate::stop_point::stop_point;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use nix::fcntl::{Flock, FlockArg};

use serde::{Deserialize, Serialize};
use tempfile::NamedTempFile;

use crate::digest::{Hasher, Sha256Digest};

/// Largest cached index copy read back (matches the largest index limit one could set).
const MAX_INDEX_COPY: u64 = 64 << 20;
/// Largest metadata file read back.
const MAX_META: u64 = 64 * 1024;
/// How long a partial download in the older versions' form (`dl-` and six characters, no
/// digest, so no lock to ask) must have gone unmodified before `cache prune` takes it for dead:
/// twice the longest a download can run ([`super::config::MAX_DURATION`], the bound on
/// `total_timeout`, which every version held; a live download's file is made just before it
/// starts and is renamed or removed as it ends, and is written as bytes arrive). The margin
/// covers a clock stepped back, and the versions before every socket read was bounded by the
/// deadline, in which a peer trickling a TLS record could hold a download past it without a
/// byte written. Removing a partial that some such fetch still held costs that fetch only: its
/// final rename fails (exit 1), and nothing it received is kept.
pub const OLD_PARTIAL_AGE: Duration =
    Duration::from_secs(2 * super::config::MAX_DURATION.as_secs());

/// Where an artifact came from, recorded when it was downloaded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Origin {
    pub url: String,
    pub final_url: String,
    pub content_type: Option<String>,
    pub fetched_at: String,
}

/// A cache directory.
#[derive(Debug, Clone)]
pub struct Cache {
    root: PathBuf,
}

/// A verified artifact read from the cache.
#[derive(Debug)]
pub struct Hit {
    pub file: File,
    pub path: PathBuf,
    pub size: u64,
    pub origin: Option<Origin>,
}

/// A download in progress: bytes go to a temporary file and are hashed on the way.
pub struct Pending {
    tmp: NamedTempFile,
    hasher: Option<Hasher>,
    digest: Option<Sha256Digest>,
    bytes: u64,
}

impl Write for Pending {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let Some(hasher) = self.hasher.as_mut() else {
            return Err(io::Error::other("download already finished"));
        };
        let n = self.tmp.write(buf)?;
        hasher.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.tmp.flush()
    }
}

impl Pending {
    /// End the download: the digest of exactly the bytes written. Later writes fail.
    pub fn finish(&mut self) -> Sha256Digest {
        if let Some(h) = self.hasher.take() {
            self.digest = Some(h.finish().0);
        }
        self.digest.unwrap_or_else(|| Sha256Digest::of_bytes(b""))
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Path of the temporary file (removed when this value is dropped without `commit`).
    pub fn path(&self) -> &Path {
        self.tmp.path()
    }
}

impl Cache {
    /// `$XDG_CACHE_HOME/skillbox`, else `~/.cache/skillbox` (XDG Base Directory spec: a relative
    /// `XDG_CACHE_HOME` is invalid and ignored).
    pub fn default_root() -> Option<PathBuf> {
        if let Some(x) = std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
        {
            return Some(x.join("skillbox"));
        }
        std::env::var_os("HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .map(|h| h.join(".cache").join("skillbox"))
    }

    /// Open (creating, mode 0700) the cache at `root`.
    pub fn open(root: &Path) -> io::Result<Self> {
        // Verified artifacts are trusted from here on a digest match: a root another user owns,
        // can write to, or swapped for a symlink would let them plant or swap what we read.
        crate::owned_dir::ensure(root, 0o700).map_err(io::Error::other)?;
        for sub in ["sha256", "index", "tmp", "locks"] {
            let dir = root.join(sub);
            match fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&dir)
            {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(io::Error::new(e.kind(), format!("{}: {e}", dir.display()))),
            }
        }
        Ok(Self {
            root: root.to_owned(),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn artifact_path(&self, digest: &Sha256Digest) -> PathBuf {
        self.root.join("sha256").join(digest.hex())
    }

    fn index_path(&self, url: &str) -> PathBuf {
        self.root.join("index").join(format!(
            "{}.json",
            Sha256Digest::of_bytes(url.as_bytes()).hex()
        ))
    }

    /// A new download target in `tmp/` for the artifact `digest` names, made while holding
    /// its [`lock`](Self::lock): the name carries the digest, so a download a killed fetch left
    /// can be told from a live one ([`remove_abandoned`](Self::remove_abandoned)).
    pub fn pending(&self, digest: &Sha256Digest) -> io::Result<Pending> {
        let tmp = tempfile::Builder::new()
            .prefix(&format!("dl-{}-", digest.hex()))
            .tempfile_in(self.root.join("tmp"))?;
        Ok(Pending {
            tmp,
            hasher: Some(Hasher::new()),
            digest: None,
            bytes: 0,
        })
    }

    /// The artifact with this digest, re-hashed now; a mismatching file is removed, with its
    /// records.
    pub fn lookup(&self, digest: &Sha256Digest) -> io::Result<Option<Hit>> {
        let path = self.artifact_path(digest);
        let file = match OpenOptions::new()
            .read(true)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(&path)
        {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let meta = file.metadata()?;
        if !meta.is_file() {
            return Ok(None);
        }
        let (actual, size) = Sha256Digest::of_reader(&file)?;
        if actual != *digest {
            // With its records: a `.used` left alone would never be listed or pruned.
            let _ = self.remove_entry(digest);
            return Ok(None);
        }
        let origin = read_bounded(&path.with_extension("json"), MAX_META)
            .ok()
            .flatten()
            .and_then(|b| serde_json::from_slice::<Origin>(&b).ok());
        self.touch(digest);
        Ok(Some(Hit {
            file,
            path,
            size,
            origin,
        }))
    }

    /// Move a verified download into place under its digest (atomic rename), with its origin.
    /// Called with the digest's [`lock`](Self::lock) held, as [`pending`](Self::pending) is.
    pub fn commit(&self, mut pending: Pending, origin: &Origin) -> io::Result<Hit> {
        let digest = pending.finish();
        let path = self.artifact_path(&digest);
        if let Ok(bytes) = serde_json::to_vec_pretty(origin) {
            // Metadata first: a crash between the two leaves a hint without bytes, never the reverse.
            // Named for the digest whose lock the caller holds (as its download is), so a
            // copy a killed fetch left is told from a live one (`remove_abandoned`).
            let _ = self.write_atomic(
                &path.with_extension("json"),
                &format!("w-{}-", digest.hex()),
                &bytes,
                "cache:record",
            );
        }
        let Pending { tmp, .. } = pending;
        tmp.as_file().sync_all()?;
        tmp.persist(&path).map_err(|e| e.error)?;
        // lookup re-hashes what was stored and records the first use.
        self.lookup(&digest)?.ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                "the cached artifact changed while being stored",
            )
        })
    }

    /// Wait for, then hold, the lock of `digest` (until the value is dropped).
    pub fn lock(&self, digest: &Sha256Digest) -> io::Result<DigestLock> {
        self.lock_named(&digest.hex())
    }

    /// Wait for, then hold, the lock `locks/<stem>.lock`.
    fn lock_named(&self, stem: &str) -> io::Result<DigestLock> {
        self.take_lock(stem, true)?
            .ok_or_else(|| io::Error::other("a waiting lock was not taken"))
    }

    /// Record a use of `digest` now (best effort: a failure only makes `cache list` older).
    fn touch(&self, digest: &Sha256Digest) {
        let used = self.artifact_path(digest).with_extension("used");
        let _ = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(&used)
            .and_then(|f| f.set_modified(SystemTime::now()));
    }

    fn remove_entry(&self, digest: &Sha256Digest) -> io::Result<()> {
        let path = self.artifact_path(digest);
        let _ = fs::remove_file(path.with_extension("json"));
        let _ = fs::remove_file(path.with_extension("used"));
        match fs::remove_file(&path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// Digests of the artifacts held (names under `sha256/` that are digests), sorted; other
    /// names are returned apart.
    fn digests(&self) -> io::Result<(Vec<Sha256Digest>, Vec<String>)> {
        let mut digests = Vec::new();
        let mut other = Vec::new();
        for e in fs::read_dir(self.root.join("sha256"))? {
            let name = e?.file_name().to_string_lossy().into_owned();
            if name.ends_with(".json") || name.ends_with(".used") {
                continue;
            }
            match format!("sha256:{name}").parse::<Sha256Digest>() {
                Ok(d) => digests.push(d),
                Err(_) => other.push(name),
            }
        }
        digests.sort_by_key(|d| d.hex());
        other.sort();
        Ok((digests, other))
    }

    /// What the cache holds, without re-hashing (see [`Cache::verify`]).
    pub fn list(&self) -> io::Result<Vec<Listed>> {
        let (digests, _) = self.digests()?;
        let mut out = Vec::new();
        for digest in digests {
            let path = self.artifact_path(&digest);
            let Ok(meta) = fs::symlink_metadata(&path) else {
                continue;
            };
            let origin = read_bounded(&path.with_extension("json"), MAX_META)
                .ok()
                .flatten()
                .and_then(|b| serde_json::from_slice::<Origin>(&b).ok());
            let last_used = last_used(&path, &meta);
            out.push(Listed {
                digest,
                size: meta.len(),
                // Shown and serialised: never with credentials, even from an older record.
                url: origin
                    .as_ref()
                    .map(|o| crate::urls::redact_str(&o.url).into_owned()),
                first_used: origin.as_ref().map(|o| o.fetched_at.clone()),
                last_used: last_used.map(super::rfc3339_of),
                last_used_at: last_used,
            });
        }
        Ok(out)
    }

    /// Re-hash every artifact; remove each one that does not match its name (with its records).
    pub fn verify(&self) -> io::Result<VerifyReport> {
        let (digests, unknown) = self.digests()?;
        let mut report = VerifyReport {
            unknown,
            ..VerifyReport::default()
        };
        for digest in digests {
            let _lock = self.lock(&digest)?;
            let path = self.artifact_path(&digest);
            let opened = OpenOptions::new()
                .read(true)
                .custom_flags(nix::libc::O_NOFOLLOW)
                .open(&path);
            let actual = match opened {
                // Listed before the lock was taken, and removed since (by `cache prune`, or a
                // fetch that found it corrupt) by a holder of that lock: no longer cached, so
                // neither verified nor removed here.
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                opened => opened.and_then(|f| {
                    if f.metadata()?.is_file() {
                        Sha256Digest::of_reader(&f).map(|(d, _)| Some(d))
                    } else {
                        Ok(None)
                    }
                }),
            };
            match actual {
                Ok(Some(d)) if d == digest => report.ok.push(digest),
                Ok(Some(d)) => {
                    self.remove_entry(&digest)?;
                    report
                        .removed
                        .push((digest, format!("the bytes hash to {d}")));
                }
                Ok(None) => {
                    self.remove_entry(&digest)?;
                    report.removed.push((digest, "not a regular file".into()));
                }
                Err(e) => {
                    self.remove_entry(&digest)?;
                    report
                        .removed
                        .push((digest, format!("cannot be read: {e}")));
                }
            }
        }
        Ok(report)
    }

    /// `locks/<stem>.lock`: a digest's hex, or `index-` and the hex of an index URL.
    fn lock_path(&self, stem: &str) -> PathBuf {
        self.root.join("locks").join(format!("{stem}.lock"))
    }

    /// Remove what killed fetches left in `tmp/` (nothing renames it into place, so nothing
    /// else ever removes it): a partial download (`dl-<hex>-*`, up to `max_bytes`) or an
    /// artifact's record being written (`w-<hex>-*`) whose digest lock is free, and an index
    /// copy being written (`w-index-<hex>-*`) whose index lock is free. Each is made after its
    /// lock is taken and renamed or removed before it is released, and a killed process
    /// releases it (flock), so a free lock means no process will ever use the file; one held is
    /// left alone. An older version's file (`dl-XXXXXX`, `w-XXXXXX`: no name, so no lock to
    /// ask) is removed once it has not been modified for [`OLD_PARTIAL_AGE`], longer than any
    /// download runs (a `w-` file is written at once and renamed); a newer one is left alone.
    pub fn remove_abandoned(&self) -> io::Result<Abandoned> {
        let mut removed = Abandoned::default();
        let cutoff = SystemTime::now()
            .checked_sub(OLD_PARTIAL_AGE)
            .unwrap_or(SystemTime::UNIX_EPOCH);
        for e in fs::read_dir(self.root.join("tmp"))? {
            let e = e?;
            let name = e.file_name();
            let Some((kind, owner)) = name.to_str().and_then(tmp_owner) else {
                continue;
            };
            let _lock = match &owner {
                Owner::Lock(stem) => match self.try_lock_named(stem)? {
                    Some(lock) => Some(lock),
                    None => continue,
                },
                Owner::Old => None,
            };
            let meta = match fs::symlink_metadata(e.path()) {
                Ok(meta) => meta,
                // Listed before the lock was taken, and renamed into place or removed since by
                // the fetch that held it (or by another prune): nothing is left to remove.
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            if !meta.is_file() {
                continue;
            }
            // No lock to ask: only its age says no fetch is writing it (a future mtime, from
            // a clock stepped back, is not old).
            if matches!(owner, Owner::Old) && !meta.modified().is_ok_and(|t| t < cutoff) {
                continue;
            }
            if fs::remove_file(e.path()).is_ok() {
                let (count, bytes) = match kind {
                    TmpKind::Download => (&mut removed.downloads, &mut removed.download_bytes),
                    TmpKind::Write => (&mut removed.writes, &mut removed.write_bytes),
                };
                *count += 1;
                *bytes += meta.len();
            }
        }
        Ok(removed)
    }

    /// The lock `locks/<stem>.lock` if no one holds it, without waiting.
    fn try_lock_named(&self, stem: &str) -> io::Result<Option<DigestLock>> {
        self.take_lock(stem, false)
    }

    /// Take the lock `locks/<stem>.lock`, waiting for it when `wait` (else `None` if it is
    /// held). Every taker goes through here.
    ///
    /// `cache prune` unlinks a lock file (while holding it) once what it guards is no longer
    /// cached ([`remove_stale_locks`](Self::remove_stale_locks)). A taker that opened the
    /// file before that would then lock an inode no one else will ever open, while a later
    /// taker locks a new file at the same path: two holders of one lock. So the lock counts
    /// only if, once taken, the file locked is still the one at the path (same device and
    /// inode, still linked); if not, it is let go and the path opened again.
    fn take_lock(&self, stem: &str, wait: bool) -> io::Result<Option<DigestLock>> {
        let path = self.lock_path(stem);
        let how = if wait {
            FlockArg::LockExclusive
        } else {
            FlockArg::LockExclusiveNonblock
        };
        loop {
            let file = open_lock_file(&path)?;
            lock_opened(stem);
            let held = match Flock::lock(file, how) {
                Ok(held) => held,
                Err((_, nix::errno::Errno::EWOULDBLOCK)) if !wait => return Ok(None),
                Err((_, errno)) => return Err(io::Error::from(errno)),
            };
            let locked = held.metadata()?;
            let current = match fs::symlink_metadata(&path) {
                Ok(m) => Some(m),
                Err(e) if e.kind() == io::ErrorKind::NotFound => None,
                Err(e) => return Err(e),
            };
            if locked.nlink() > 0
                && current.is_some_and(|m| m.dev() == locked.dev() && m.ino() == locked.ino())
            {
                return Ok(Some(DigestLock { _held: held }));
            }
            // Unlinked (or replaced) between our open and our lock: not the lock any more.
        }
    }

    /// Remove the lock files (`locks/<hex>.lock`, `locks/index-<hex>.lock`) of artifacts and
    /// index copies no longer cached, so the directory does not grow by one file for every
    /// artifact ever fetched. Each is taken first, without waiting (one held is in use and
    /// left alone), what it guards is looked for again under it (a fetch stores under the
    /// lock), and it is unlinked while held: a taker that opened it before sees, once it has
    /// it, that it is no longer the file at the path and opens the path again
    /// ([`take_lock`](Self::take_lock)). Other names are left alone. Returns how many went.
    pub fn remove_stale_locks(&self) -> io::Result<usize> {
        let mut removed = 0;
        for e in fs::read_dir(self.root.join("locks"))? {
            let e = e?;
            let name = e.file_name();
            let Some(stem) = name.to_str().and_then(|n| n.strip_suffix(".lock")) else {
                continue;
            };
            let Some(guarded) = self.guarded_by(stem) else {
                continue;
            };
            if exists(&guarded)? {
                continue;
            }
            let Some(_lock) = self.try_lock_named(stem)? else {
                continue;
            };
            if exists(&guarded)? {
                continue;
            }
            match fs::remove_file(self.lock_path(stem)) {
                Ok(()) => removed += 1,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok(removed)
    }

    /// What the lock `locks/<stem>.lock` guards: the artifact of a digest, or the copy of an
    /// index (`index-<hex of the URL>`); `None` for a name no fetch makes.
    fn guarded_by(&self, stem: &str) -> Option<PathBuf> {
        let digest = |hex: &str| format!("sha256:{hex}").parse::<Sha256Digest>().ok();
        match stem.strip_prefix("index-") {
            Some(hex) => {
                digest(hex).map(|d| self.root.join("index").join(format!("{}.json", d.hex())))
            }
            None => digest(stem).map(|d| self.artifact_path(&d)),
        }
    }

    /// Remove artifacts last used longer than `age` ago, and index copies not refreshed in
    /// that time (each under its lock, skipped while a fetch holds it, its age read again
    /// under it); then the lock files of whatever is no longer cached
    /// ([`remove_stale_locks`](Self::remove_stale_locks)).
    pub fn prune(&self, age: Duration) -> io::Result<Pruned> {
        let cutoff = SystemTime::now()
            .checked_sub(age)
            .unwrap_or(SystemTime::UNIX_EPOCH);
        let mut removed = Vec::new();
        let unused = |last_used: Option<SystemTime>| last_used.is_some_and(|t| t < cutoff);
        for item in self.list()? {
            if !unused(item.last_used_at) {
                continue;
            }
            // A fetch holds the digest's lock while it looks the artifact up, which records
            // the use (`.used`): the age listed above may be from before a fetch used it, and
            // removing on it would throw away what that fetch just used. So the lock is taken,
            // without waiting (an artifact a fetch holds is in use, not old), and the age read
            // again under it, as for an index copy below.
            let Some(_lock) = self.try_lock_named(&item.digest.hex())? else {
                continue;
            };
            let path = self.artifact_path(&item.digest);
            let used_at = fs::symlink_metadata(&path)
                .ok()
                .and_then(|meta| last_used(&path, &meta));
            if unused(used_at) {
                self.remove_entry(&item.digest)?;
                removed.push(item);
            }
        }
        let old = |meta: io::Result<fs::Metadata>| {
            meta.and_then(|m| m.modified()).is_ok_and(|t| t < cutoff)
        };
        for e in fs::read_dir(self.root.join("index"))? {
            let e = e?;
            if !old(e.metadata()) {
                continue;
            }
            // A copy's lock is held while a fetch stores a fresh copy of that index (renamed
            // over this one): removed without it, the age read here could be the old copy's
            // and the file unlinked the fresh one. So it is taken, without waiting (a copy
            // being refreshed is not old), and the age read again under it.
            let stem = e
                .file_name()
                .to_str()
                .and_then(|n| n.strip_suffix(".json"))
                .and_then(|hex| format!("sha256:{hex}").parse::<Sha256Digest>().ok())
                .map(|d| format!("index-{}", d.hex()));
            let _lock = match &stem {
                Some(stem) => match self.try_lock_named(stem)? {
                    Some(lock) => Some(lock),
                    None => continue,
                },
                // A name no fetch writes: no lock guards it.
                None => None,
            };
            if old(fs::symlink_metadata(e.path())) {
                let _ = fs::remove_file(e.path());
            }
        }
        let locks = self.remove_stale_locks()?;
        Ok(Pruned {
            artifacts: removed,
            locks,
        })
    }

    /// Keep the document of the index fetched from `url` (for `--offline`), with the URL it
    /// was retrieved from when a redirect moved it (`retrieved_from`: its references resolve
    /// against that URL, offline as online). Kept as one file, `{"skillbox_index_copy": 1,
    /// "retrieved_from": URL or null, "document": the index's text}`, so the two never come
    /// from different fetches.
    pub fn store_index(
        &self,
        url: &str,
        bytes: &[u8],
        retrieved_from: Option<&str>,
    ) -> io::Result<()> {
        let document = std::str::from_utf8(bytes)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        let bytes = serde_json::to_vec(&serde_json::json!({
            "skillbox_index_copy": 1,
            "retrieved_from": retrieved_from,
            "document": document,
        }))
        .map_err(io::Error::other)?;
        let hex = Sha256Digest::of_bytes(url.as_bytes()).hex();
        // Held while its temporary file exists, as a download holds its digest's lock: a
        // copy a killed fetch left in tmp/ is told from a live one by this lock being free.
        let _lock = self.lock_named(&format!("index-{hex}"))?;
        self.write_atomic(
            &self.index_path(url),
            &format!("w-index-{hex}-"),
            &bytes,
            "cache:index-copy",
        )
    }

    /// The last index fetched from `url`, if any: its document, and the URL it was retrieved
    /// from when that was not `url` ([`Cache::store_index`]). A copy an older skillbox kept
    /// (the document alone) was retrieved from `url` as far as anyone knows.
    pub fn load_index(&self, url: &str) -> io::Result<Option<(Vec<u8>, Option<String>)>> {
        let Some(bytes) = read_bounded(&self.index_path(url), MAX_INDEX_COPY)? else {
            return Ok(None);
        };
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Copy {
            skillbox_index_copy: u32,
            retrieved_from: Option<String>,
            document: String,
        }
        Ok(Some(match serde_json::from_slice::<Copy>(&bytes) {
            Ok(c) if c.skillbox_index_copy == 1 => (c.document.into_bytes(), c.retrieved_from),
            _ => (bytes, None),
        }))
    }

    /// Write `bytes` to a temporary file named `prefix` and six random characters in `tmp/`,
    /// then rename it to `path`. The caller holds the lock `prefix` names (see
    /// [`remove_abandoned`](Self::remove_abandoned)).
    fn write_atomic(&self, path: &Path, prefix: &str, bytes: &[u8], stop: &str) -> io::Result<()> {
        let mut tmp = tempfile::Builder::new()
            .prefix(prefix)
            .tempfile_in(self.root.join("tmp"))?;
        tmp.write_all(bytes)?;
        tmp.as_file().sync_all()?;
        stop_point(stop);
        tmp.persist(path).map_err(|e| e.error)?;
        Ok(())
    }
}

/// What [`Cache::prune`] removed.
#[derive(Debug, Clone, Default)]
pub struct Pruned {
    /// The artifacts, as `cache list` showed them.
    pub artifacts: Vec<Listed>,
    /// Lock files of artifacts and index copies no longer cached.
    pub locks: usize,
}

/// What `cache prune` removed from `tmp/` ([`Cache::remove_abandoned`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Abandoned {
    /// Partial downloads (`dl-`), and their bytes.
    pub downloads: usize,
    pub download_bytes: u64,
    /// Unfinished writes of an index copy or an artifact's record (`w-`), and their bytes.
    pub writes: usize,
    pub write_bytes: u64,
}

enum TmpKind {
    Download,
    Write,
}

/// What says whether a file in `tmp/` may still be in use.
enum Owner {
    /// The lock `locks/<stem>.lock`, held for as long as the file exists.
    Lock(String),
    /// Nothing: an older version's name, judged by its age.
    Old,
}

/// The kind of a `tmp/` file and what owns it, from its name; `None` for a name no fetch makes
/// (left alone).
fn tmp_owner(name: &str) -> Option<(TmpKind, Owner)> {
    let digest_stem = |rest: &str| {
        rest.split('-')
            .next()
            .and_then(|hex| format!("sha256:{hex}").parse::<Sha256Digest>().ok())
            .map(|d| d.hex())
    };
    let (kind, rest) = if let Some(rest) = name.strip_prefix("dl-") {
        (TmpKind::Download, rest)
    } else if let Some(rest) = name.strip_prefix("w-") {
        if let Some(url) = rest.strip_prefix("index-") {
            let stem = digest_stem(url)?;
            return Some((TmpKind::Write, Owner::Lock(format!("index-{stem}"))));
        }
        (TmpKind::Write, rest)
    } else {
        return None;
    };
    match digest_stem(rest) {
        Some(stem) => Some((kind, Owner::Lock(stem))),
        None if is_old_partial(rest) => Some((kind, Owner::Old)),
        None => None,
    }
}

/// What follows `dl-` or `w-` in the name of a temporary file made by a version from before
/// the names carried the digest: tempfile's six random ASCII letters and digits.
fn is_old_partial(rest: &str) -> bool {
    rest.len() == 6 && rest.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// The held lock of one digest (released when dropped, or when the process ends).
#[derive(Debug)]
pub struct DigestLock {
    _held: Flock<File>,
}

/// One cached artifact, as `cache list` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct Listed {
    pub digest: Sha256Digest,
    pub size: u64,
    /// The URL it was first downloaded from (redacted).
    pub url: Option<String>,
    /// When it was downloaded (RFC 3339).
    pub first_used: Option<String>,
    /// When a fetch last used it (RFC 3339).
    pub last_used: Option<String>,
    #[serde(skip)]
    pub last_used_at: Option<SystemTime>,
}

/// What `cache verify` found.
#[derive(Debug, Clone, Default, Serialize)]
pub struct VerifyReport {
    pub ok: Vec<Sha256Digest>,
    /// Removed, with why.
    pub removed: Vec<(Sha256Digest, String)>,
    /// Names under `sha256/` that are not digests (left alone).
    pub unknown: Vec<String>,
}

/// An age such as `30d`, `12h`, `90m`, `3600s` or `2w` (a bare number is seconds).
pub fn parse_age(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{s:?} is not an age (e.g. 30d, 12h, 90m, 3600s)"))?;
    let scale = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        "w" => 7 * 86_400,
        other => {
            return Err(format!(
                "unknown unit {other:?} in {s:?} (use s, m, h, d or w)"
            ));
        }
    };
    n.checked_mul(scale)
        .map(Duration::from_secs)
        .ok_or_else(|| format!("{s:?} is too large"))
}

/// Open (creating) a lock file; taken with [`Cache::take_lock`] only.
fn open_lock_file(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
        .open(path)
}

/// The pause `cache:lock:<stem>` ([`crate::stop_point`]): the lock file is open, not yet
/// locked. The point's name is only made in a debug build.
fn lock_opened(stem: &str) {
    #[cfg(debug_assertions)]
    stop_point(&format!("cache:lock:{stem}"));
    #[cfg(not(debug_assertions))]
    let _ = stem;
}

/// When the artifact at `path` (its metadata `meta`) was last used: its `.used` file's
/// modification time, else (no use recorded) the artifact's own.
fn last_used(path: &Path, meta: &fs::Metadata) -> Option<SystemTime> {
    fs::metadata(path.with_extension("used"))
        .and_then(|m| m.modified())
        .or_else(|_| meta.modified())
        .ok()
}

/// Whether anything (a symbolic link included) is at `path`.
fn exists(path: &Path) -> io::Result<bool> {
    match fs::symlink_metadata(path) {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

fn read_bounded(path: &Path, max: u64) -> io::Result<Option<Vec<u8>>> {
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    file.take(max + 1).read_to_end(&mut out)?;
    if out.len() as u64 > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} is larger than {max} bytes", path.display()),
        ));
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_index_copy_keeps_where_a_redirect_moved_it_and_an_older_copy_still_loads() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = Cache::open(dir.path()).expect("open");
        let url = "https://example.com/.well-known/agent-skills/index.json";
        let doc = br#"{"skills": []}"#;
        assert_eq!(cache.load_index(url).expect("load"), None);
        let moved = "https://example.com/new/index.json";
        cache.store_index(url, doc, Some(moved)).expect("store");
        assert_eq!(
            cache.load_index(url).expect("load"),
            Some((doc.to_vec(), Some(moved.to_owned())))
        );
        cache.store_index(url, doc, None).expect("store");
        assert_eq!(
            cache.load_index(url).expect("load"),
            Some((doc.to_vec(), None))
        );
        // An older skillbox kept the document alone: retrieved from the URL itself.
        std::fs::write(cache.index_path(url), doc).expect("write");
        assert_eq!(
            cache.load_index(url).expect("load"),
            Some((doc.to_vec(), None))
        );
        // A document that only looks like a copy (another key beside them) is a document.
        let odd =
            br#"{"skillbox_index_copy": 1, "retrieved_from": null, "document": "x", "skills": []}"#;
        std::fs::write(cache.index_path(url), odd).expect("write");
        assert_eq!(
            cache.load_index(url).expect("load"),
            Some((odd.to_vec(), None))
        );
    }

    #[test]
    fn commit_then_lookup_then_corruption_is_a_miss() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = Cache::open(dir.path()).expect("open");
        let mut p = cache
            .pending(&Sha256Digest::of_bytes(b"hello"))
            .expect("pending");
        p.write_all(b"hello").expect("write_all");
        let digest = p.finish();
        assert_eq!(digest, Sha256Digest::of_bytes(b"hello"));
        let origin = Origin {
            url: "u".into(),
            final_url: "u".into(),
            content_type: None,
            fetched_at: "t".into(),
        };
        let hit = cache.commit(p, &origin).expect("commit");
        assert_eq!(hit.size, 5);
        assert_eq!(hit.origin.as_ref(), Some(&origin));
        assert_eq!(
            fs::read_dir(dir.path().join("tmp"))
                .map(|d| d.count())
                .unwrap_or(99),
            0
        );
        fs::write(&hit.path, b"HELLO").expect("write");
        assert!(cache.lookup(&digest).expect("lookup").is_none());
        assert!(!hit.path.exists());
    }

    #[test]
    fn tmp_names_are_tied_to_the_lock_held_while_they_exist() {
        let hex = Sha256Digest::of_bytes(b"x").hex();
        let owner = |n: &str| match tmp_owner(n) {
            Some((TmpKind::Download, Owner::Lock(l))) => format!("dl {l}"),
            Some((TmpKind::Write, Owner::Lock(l))) => format!("w {l}"),
            Some((TmpKind::Download, Owner::Old)) => "dl old".into(),
            Some((TmpKind::Write, Owner::Old)) => "w old".into(),
            None => "none".into(),
        };
        assert_eq!(owner(&format!("dl-{hex}-Ab3xQ9")), format!("dl {hex}"));
        assert_eq!(owner(&format!("w-{hex}-Ab3xQ9")), format!("w {hex}"));
        assert_eq!(
            owner(&format!("w-index-{hex}-Ab3xQ9")),
            format!("w index-{hex}")
        );
        assert_eq!(owner("dl-Ab3xQ9"), "dl old");
        assert_eq!(owner("w-Ab3xQ9"), "w old");
        for other in [
            "w-index-Ab3xQ9",
            "w-notapartial",
            "dl-",
            "x-Ab3xQ9",
            "w-index-",
        ] {
            assert_eq!(owner(other), "none", "{other}");
        }
    }

    #[test]
    fn dropped_pending_leaves_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = Cache::open(dir.path()).expect("open");
        let mut p = cache
            .pending(&Sha256Digest::of_bytes(b"partial"))
            .expect("pending");
        p.write_all(b"partial").expect("write_all");
        drop(p);
        assert_eq!(
            fs::read_dir(dir.path().join("tmp"))
                .map(|d| d.count())
                .unwrap_or(99),
            0
        );
    }

    #[test]
    fn a_root_others_can_write_to_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path().join("cache");
        std::fs::create_dir(&root).expect("mkdir");
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o777)).expect("chmod");
        let Err(err) = Cache::open(&root) else {
            panic!("a 0777 cache root must be refused");
        };
        assert!(
            err.to_string().contains("writable by group or others"),
            "{err}"
        );
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&root, &link).expect("symlink");
        let Err(err) = Cache::open(&link) else {
            panic!("a symlinked cache root must be refused");
        };
        assert!(err.to_string().contains("symbolic link"), "{err}");
    }
}
