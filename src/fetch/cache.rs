//! A digest-keyed store of verified artifacts, plus the last copy of each index fetched.
//!
//! Layout under the root: `sha256/<hex>` (artifact bytes), `sha256/<hex>.json` (where they came
//! from: a hint for format detection and provenance, never trusted for anything else),
//! `index/<hex of the URL>.json` (index bytes, for `--offline`), `tmp/` (downloads in progress).
//! Every write is a temporary file in `tmp/` renamed into place (same filesystem, so the rename
//! is atomic). Every read re-hashes: a file that no longer matches its name is removed and
//! treated as absent.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tempfile::NamedTempFile;

use crate::digest::{Hasher, Sha256Digest};

/// Largest cached index copy read back (matches the largest index limit one could set).
const MAX_INDEX_COPY: u64 = 64 << 20;
/// Largest metadata file read back.
const MAX_META: u64 = 64 * 1024;

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
        for sub in ["", "sha256", "index", "tmp"] {
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

    /// A new download target in `tmp/`.
    pub fn pending(&self) -> io::Result<Pending> {
        let tmp = tempfile::Builder::new()
            .prefix("dl-")
            .tempfile_in(self.root.join("tmp"))?;
        Ok(Pending {
            tmp,
            hasher: Some(Hasher::new()),
            digest: None,
            bytes: 0,
        })
    }

    /// The artifact with this digest, re-hashed now; a mismatching file is removed.
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
            let _ = fs::remove_file(&path);
            let _ = fs::remove_file(path.with_extension("json"));
            return Ok(None);
        }
        let origin = read_bounded(&path.with_extension("json"), MAX_META)
            .ok()
            .flatten()
            .and_then(|b| serde_json::from_slice::<Origin>(&b).ok());
        Ok(Some(Hit {
            file,
            path,
            size,
            origin,
        }))
    }

    /// Move a verified download into place under its digest (atomic rename), with its origin.
    pub fn commit(&self, mut pending: Pending, origin: &Origin) -> io::Result<Hit> {
        let digest = pending.finish();
        let path = self.artifact_path(&digest);
        if let Ok(bytes) = serde_json::to_vec_pretty(origin) {
            // Metadata first: a crash between the two leaves a hint without bytes, never the reverse.
            let _ = self.write_atomic(&path.with_extension("json"), &bytes);
        }
        let Pending { tmp, .. } = pending;
        tmp.as_file().sync_all()?;
        tmp.persist(&path).map_err(|e| e.error)?;
        self.lookup(&digest)?.ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                "the cached artifact changed while being stored",
            )
        })
    }

    /// Keep the bytes of the index fetched from `url` (for `--offline`).
    pub fn store_index(&self, url: &str, bytes: &[u8]) -> io::Result<()> {
        self.write_atomic(&self.index_path(url), bytes)
    }

    /// The last index fetched from `url`, if any.
    pub fn load_index(&self, url: &str) -> io::Result<Option<Vec<u8>>> {
        read_bounded(&self.index_path(url), MAX_INDEX_COPY)
    }

    fn write_atomic(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        let mut tmp = tempfile::Builder::new()
            .prefix("w-")
            .tempfile_in(self.root.join("tmp"))?;
        tmp.write_all(bytes)?;
        tmp.as_file().sync_all()?;
        tmp.persist(path).map_err(|e| e.error)?;
        Ok(())
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
    fn commit_then_lookup_then_corruption_is_a_miss() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = Cache::open(dir.path()).expect("open");
        let mut p = cache.pending().expect("pending");
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
    fn dropped_pending_leaves_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = Cache::open(dir.path()).expect("open");
        let mut p = cache.pending().expect("pending");
        p.write_all(b"partial").expect("write_all");
        drop(p);
        assert_eq!(
            fs::read_dir(dir.path().join("tmp"))
                .map(|d| d.count())
                .unwrap_or(99),
            0
        );
    }
}
