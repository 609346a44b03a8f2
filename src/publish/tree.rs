//! Putting a built index in place, or comparing it with a published tree (the CI gate).
//!
//! A new output directory is the staging directory renamed into place. Into an existing one,
//! every new artifact is renamed in first (content-addressed names: an existing file of that
//! name must already hold those bytes, or nothing is written), and the index last, by one
//! rename: a reader sees the previous index or the new one, never a half-written file, and the
//! artifacts any index names are there before it. A failure removes what this run created and
//! leaves the previous tree as it was. This module never deletes or replaces a file it did not
//! write, and never writes through a symlink in the output tree.

use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::{Built, INDEX_DIR, INDEX_FILE, PublishError, io_err};

const FILE_MODE: u32 = 0o644;
const DIR_MODE: u32 = 0o755;

/// Write `bytes` to a new file at `path` (mode 0644, whatever the umask), creating missing
/// parents (0755), and flush it to disk.
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
    if out_exists(out)? {
        into_existing(built, out)
    } else {
        fresh(built, out)
    }
}

/// OUT_DIR as publish and `--check` take it: absent (`false`), or a directory itself, never
/// a symlink to one (`true`).
fn out_exists(out: &Path) -> Result<bool, PublishError> {
    match std::fs::symlink_metadata(out) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(PublishError::Io {
            path: out.to_owned(),
            source: e,
        }),
        Ok(m) if m.is_dir() => Ok(true),
        Ok(m) if m.file_type().is_symlink() => Err(PublishError::Usage(format!(
            "--out {}: is a symlink; publish does not write through one (give the directory \
             it points at)",
            out.display()
        ))),
        Ok(_) => Err(PublishError::Usage(format!(
            "--out {}: exists and is not a directory",
            out.display()
        ))),
    }
}

/// No output directory yet: the staging directory becomes it, by one rename.
fn fresh(built: Built, out: &Path) -> Result<Vec<Written>, PublishError> {
    let stage = built.stage.path().to_owned();
    std::fs::set_permissions(&stage, std::fs::Permissions::from_mode(DIR_MODE))
        .map_err(io_err(&stage))?;
    sync_tree_dirs(&stage)?;
    let files = built.files();
    std::fs::rename(&stage, out).map_err(io_err(out))?;
    // Renamed: the directory is `out` now, and must outlive the TempDir value.
    let _ = built.stage.keep();
    if let Some(parent) = out.parent().filter(|p| !p.as_os_str().is_empty()) {
        sync_dir(parent)?;
    }
    Ok(files
        .into_iter()
        .map(|path| Written {
            path,
            status: FileStatus::Written,
        })
        .collect())
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

/// What this run created in an existing output tree, removed again on failure.
#[derive(Default)]
struct Created {
    files: Vec<PathBuf>,
    dirs: Vec<PathBuf>,
}

impl Created {
    fn undo(&self) {
        for f in self.files.iter().rev() {
            let _ = std::fs::remove_file(f);
        }
        for d in self.dirs.iter().rev() {
            let _ = std::fs::remove_dir(d);
        }
    }
}

fn into_existing(built: Built, out: &Path) -> Result<Vec<Written>, PublishError> {
    // Checked before anything is written: every directory on the way is a real one, and every
    // artifact already there holds the bytes its content-addressed name promises.
    let mut plan = Vec::new();
    for s in &built.skills {
        let target = out.join(&s.path);
        no_links_on_the_way(out, &s.path)?;
        let present = match std::fs::symlink_metadata(&target) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
            Err(e) => {
                return Err(PublishError::Io {
                    path: target,
                    source: e,
                });
            }
            Ok(m) if m.is_file() => {
                let have = std::fs::read(&target).map_err(io_err(&target))?;
                let want = std::fs::read(built.stage.path().join(&s.path))
                    .map_err(io_err(&built.stage.path().join(&s.path)))?;
                if have != want {
                    return Err(PublishError::Usage(format!(
                        "{} exists with other bytes than its name promises; a published URL \
                         never changes meaning, so it is not replaced (remove it if it is \
                         not what you published)",
                        target.display()
                    )));
                }
                true
            }
            Ok(_) => {
                return Err(PublishError::Usage(format!(
                    "{} exists and is not a regular file",
                    target.display()
                )));
            }
        };
        plan.push((s.path.clone(), present));
    }
    let index_rel = format!("{INDEX_DIR}/{INDEX_FILE}");
    no_links_on_the_way(out, &index_rel)?;
    let index_at = out.join(&index_rel);
    let old_index = match std::fs::symlink_metadata(&index_at) {
        Ok(m) if m.is_file() => Some(std::fs::read(&index_at).map_err(io_err(&index_at))?),
        Ok(_) => {
            return Err(PublishError::Usage(format!(
                "{} exists and is not a regular file",
                index_at.display()
            )));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => {
            return Err(PublishError::Io {
                path: index_at,
                source: e,
            });
        }
    };
    let mut created = Created::default();
    let result = place(&built, out, &plan, old_index.as_deref(), &mut created);
    if result.is_err() {
        created.undo();
    }
    result
}

fn place(
    built: &Built,
    out: &Path,
    plan: &[(String, bool)],
    old_index: Option<&[u8]>,
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
        let target = out.join(rel);
        if let Some(parent) = target.parent() {
            create_dirs(parent, created)?;
        }
        rename_new(&built.stage.path().join(rel), &target)?;
        created.files.push(target.clone());
        report.push(Written {
            path: rel.clone(),
            status: FileStatus::Written,
        });
    }
    // The new artifacts' names are on disk before the index that lists them.
    let mut dirs: std::collections::BTreeSet<PathBuf> = std::collections::BTreeSet::new();
    for d in &created.dirs {
        dirs.extend(d.parent().map(Path::to_owned));
    }
    for f in &created.files {
        dirs.extend(f.parent().map(Path::to_owned));
    }
    for d in &dirs {
        sync_dir(d)?;
    }
    let index_rel = format!("{INDEX_DIR}/{INDEX_FILE}");
    let status = if old_index == Some(built.index.as_slice()) {
        FileStatus::Unchanged
    } else {
        let target = out.join(&index_rel);
        if let Some(parent) = target.parent() {
            create_dirs(parent, created)?;
        }
        // The commit point: one rename replaces the previous index.
        std::fs::rename(built.stage.path().join(&index_rel), &target).map_err(io_err(&target))?;
        if let Some(parent) = target.parent() {
            sync_dir(parent)?;
        }
        FileStatus::Written
    };
    report.push(Written {
        path: index_rel,
        status,
    });
    Ok(report)
}

/// Rename `from` to `to`, which must not exist: a hard link then an unlink, so a file that
/// appeared at `to` meanwhile is never replaced.
fn rename_new(from: &Path, to: &Path) -> Result<(), PublishError> {
    std::fs::hard_link(from, to).map_err(io_err(to))?;
    std::fs::remove_file(from).map_err(io_err(from))
}

fn create_dirs(dir: &Path, created: &mut Created) -> Result<(), PublishError> {
    match std::fs::symlink_metadata(dir) {
        Ok(m) if m.is_dir() => return Ok(()),
        Ok(_) => {
            return Err(PublishError::Usage(format!(
                "{} is not a directory",
                dir.display()
            )));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            return Err(PublishError::Io {
                path: dir.to_owned(),
                source: e,
            });
        }
    }
    if let Some(parent) = dir.parent() {
        create_dirs(parent, created)?;
    }
    std::fs::create_dir(dir).map_err(io_err(dir))?;
    created.dirs.push(dir.to_owned());
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(DIR_MODE)).map_err(io_err(dir))
}

/// No component of `rel` beneath `out` may be a symlink: publish writes only into directories
/// of the output tree itself.
fn no_links_on_the_way(out: &Path, rel: &str) -> Result<(), PublishError> {
    let mut at = out.to_owned();
    for comp in rel.split('/') {
        at.push(comp);
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(PublishError::Usage(format!(
                    "{} is a symlink; publish does not write through links in the output tree",
                    at.display()
                )));
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => {
                return Err(PublishError::Io {
                    path: at,
                    source: e,
                });
            }
        }
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
}

/// Compare `built` with the tree published at `out`: the index byte for byte, and every
/// artifact it names. Files the index does not name (older artifacts, the rest of a site) are
/// not compared. Read as publish writes: OUT_DIR itself a symlink is refused as publish
/// refuses it, and a file that is a symlink, or reached through one, is a difference, never
/// followed (publish would refuse to write through it, so the tree is not what it builds).
pub fn check(built: &Built, out: &Path) -> Result<Vec<Difference>, PublishError> {
    out_exists(out)?;
    let mut diffs = Vec::new();
    for rel in built.files() {
        let want = std::fs::read(built.stage.path().join(&rel))
            .map_err(io_err(&built.stage.path().join(&rel)))?;
        // Past what it should hold, a file differs; an index is read whole up to the
        // consumers' bound, to name the entries that differ.
        let limit = (want.len() as u64 + 1).max(crate::index::IndexLimits::default().max_bytes);
        let differs = |detail: String| Difference {
            path: rel.clone(),
            kind: DifferenceKind::Differs,
            detail,
        };
        match read_published(out, &rel, limit)? {
            Found::Missing => diffs.push(Difference {
                path: rel,
                kind: DifferenceKind::Missing,
                detail: "the sources build it; the published tree lacks it".into(),
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
                let detail = if rel.ends_with(INDEX_FILE) {
                    index_changes(&have, &want)
                } else {
                    "other bytes than the sources build".into()
                };
                diffs.push(Difference {
                    path: rel,
                    kind: DifferenceKind::Differs,
                    detail,
                });
            }
        }
    }
    Ok(diffs)
}

/// What [`check`] found at a published path.
enum Found {
    Missing,
    /// This prefix of the path (relative to OUT_DIR) is a symlink.
    Link(String),
    /// This prefix is neither the directory nor the regular file publish writes there.
    NotFile(String),
    /// The regular file's bytes (up to the limit asked for).
    Bytes(Vec<u8>),
}

/// The file at `rel` beneath `out`, read as publish writes it: every directory on the way
/// looked at with lstat, never followed; the file opened with O_NOFOLLOW (a link swapped in
/// after the look fails with ELOOP) and O_NONBLOCK (a FIFO there cannot stall the check), and
/// read only if it is a regular file.
fn read_published(out: &Path, rel: &str, limit: u64) -> Result<Found, PublishError> {
    let comps: Vec<&str> = rel.split('/').collect();
    let mut at = out.to_owned();
    for (i, comp) in comps.iter().enumerate() {
        at.push(comp);
        let shown = comps[..=i].join("/");
        if i + 1 == comps.len() {
            break;
        }
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.file_type().is_symlink() => return Ok(Found::Link(shown)),
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Ok(Found::NotFile(shown)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Found::Missing),
            Err(e) => {
                return Err(PublishError::Io {
                    path: at,
                    source: e,
                });
            }
        }
    }
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(&at)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Found::Missing),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Ok(Found::Link(rel.into())),
        Err(e) => {
            return Err(PublishError::Io {
                path: at,
                source: e,
            });
        }
    };
    if !file.metadata().map_err(io_err(&at))?.is_file() {
        return Ok(Found::NotFile(rel.into()));
    }
    let mut have = Vec::new();
    file.take(limit)
        .read_to_end(&mut have)
        .map_err(io_err(&at))?;
    Ok(Found::Bytes(have))
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
