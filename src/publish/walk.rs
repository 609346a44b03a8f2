//! Reading one skill folder of the publisher's source tree into a sorted, checked list of
//! entries, refusing what a consumer's engine would refuse.
//!
//! The walk never follows a symlink: a link is kept as a link, and only when its target,
//! resolved through the tree as the kernel would (in-tree links followed, `..` included), stays
//! inside the folder and names something there. Names go through the engine's own
//! [`SafeRelPath::parse`] and collision keys, and the default [`Limits`] are held here on the
//! source so the refusal names the file and the limit; the confined extraction of the built
//! artifact is still the final word. This module reads the source and never writes anything.
//!
//! What a publisher keeps beside a skill but never means to ship is left out at every level,
//! and every entry left out is reported (the top of each left-out subtree, never silently):
//! version-control metadata (`.git`, `.hg`, ...: history, remotes, hook samples) always, and
//! other hidden entries (`.env`, `.github`, editor files) unless the caller asks for them. A
//! left-out entry is never opened or descended into, and counts towards no limit. The first
//! [`LEFT_OUT_LISTED`] are listed by path and the rest counted, so a folder holding hundreds
//! of thousands of hidden files gives a bounded report.

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::extract::path::{self, Parsed, SafeRelPath};
use crate::extract::policy::Limits;
use crate::reason::{ReasonCode, display_name};

use super::{Refusal, RefusalCode};

/// Most symlinks followed while resolving one link's target (the kernel's own bound).
const MAX_LINK_HOPS: usize = 40;

/// Names of version-control metadata, left out wherever they appear, hidden entries published
/// or not: a repository's history, remotes (with credentials in their URLs) and hook samples
/// are never part of a skill. GNU tar's `--exclude-vcs` directories, and newer systems'.
const VCS_NAMES: &[&str] = &[
    ".git",
    ".hg",
    ".svn",
    ".bzr",
    "_darcs",
    ".jj",
    ".pijul",
    ".sl",
    ".fslckout",
    "_FOSSIL_",
    "CVS",
    "RCS",
    "SCCS",
    "{arch}",
    ".arch-ids",
];

/// At most this many left-out entries of one skill folder are listed by path (in the walk's
/// order); the rest are counted ([`LeftOutCounts`]). A thousand is more than a publisher reads
/// and still names every entry of any ordinary folder, while a folder of 200,000 hidden files
/// gives tens of kilobytes of output, not megabytes.
pub const LEFT_OUT_LISTED: usize = 1_000;

/// Which hidden entries (names starting with `.`) a walk keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Hidden {
    /// Left out and reported: a secret in `.env` is not shipped by accident.
    #[default]
    LeaveOut,
    /// Packed like any other entry (version-control metadata is still left out).
    Include,
}

/// Why an entry of a skill folder was not packed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LeftOutReason {
    /// Version-control metadata: never published.
    Vcs,
    /// A hidden name: published only when asked ([`Hidden::Include`]).
    Hidden,
    /// An editor's backup or autosave file (`notes.md~`, `#notes.md#`): never published.
    Backup,
}

/// One entry not packed (with everything beneath it, for a directory).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LeftOut {
    /// Its path in the folder, escaped for display; a directory's ends with `/`.
    pub path: String,
    pub reason: LeftOutReason,
}

/// How many left-out entries were not listed (past [`LEFT_OUT_LISTED`]), by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct LeftOutCounts {
    pub hidden: u64,
    pub vcs: u64,
    pub backup: u64,
}

impl LeftOutCounts {
    pub fn of(&self, reason: LeftOutReason) -> u64 {
        match reason {
            LeftOutReason::Hidden => self.hidden,
            LeftOutReason::Vcs => self.vcs,
            LeftOutReason::Backup => self.backup,
        }
    }

    pub fn total(&self) -> u64 {
        self.hidden + self.vcs + self.backup
    }

    fn add(&mut self, reason: LeftOutReason) {
        match reason {
            LeftOutReason::Hidden => self.hidden += 1,
            LeftOutReason::Vcs => self.vcs += 1,
            LeftOutReason::Backup => self.backup += 1,
        }
    }
}

/// Whether the entry named `name` is left out, and why.
fn left_out(name: &[u8], hidden: Hidden) -> Option<LeftOutReason> {
    if VCS_NAMES.iter().any(|v| v.as_bytes() == name) {
        Some(LeftOutReason::Vcs)
    } else if name.starts_with(b".") && hidden == Hidden::LeaveOut {
        Some(LeftOutReason::Hidden)
    } else if is_backup(name) {
        Some(LeftOutReason::Backup)
    } else {
        None
    }
}

/// An editor's backup (`notes.md~`: Emacs, Vim with `backup` set, gedit, nano) or autosave
/// (`#notes.md#`: Emacs) file: a stale copy of a file beside it, never meant to ship. The
/// hidden ones (Vim's `.notes.md.swp`, Emacs's lock `.#notes.md`) are hidden entries.
fn is_backup(name: &[u8]) -> bool {
    (name.len() > 1 && name.ends_with(b"~"))
        || (name.len() > 2 && name.starts_with(b"#") && name.ends_with(b"#"))
}

/// The first line of a private key in any of the text forms keys are kept in: PEM (`-----BEGIN
/// RSA PRIVATE KEY-----`, `EC`, `DSA`, `ENCRYPTED`, PKCS#8's plain `PRIVATE KEY`), OpenSSH's
/// (`OPENSSH PRIVATE KEY`), PGP's (`-----BEGIN PGP PRIVATE KEY BLOCK-----`) and PuTTY's.
/// Where in the file it is, if anywhere: a key pasted into a Markdown file is found too.
fn private_key_at(bytes: &[u8]) -> Option<usize> {
    // Two passes, each linear in the file (a file of a million headers with no END line takes
    // no longer than any other): where each label's last END line starts, then the first
    // BEGIN line with a private key's label and that label's END after it. The whole block,
    // END naming the same label: a text that only names the header (a page on how to spot
    // keys) is not a key.
    let mut last_end: HashMap<&[u8], usize> = HashMap::new();
    for (at, label) in armor_lines(bytes, b"-----END ") {
        last_end.insert(label, at);
    }
    let key = armor_lines(bytes, b"-----BEGIN ").find(|&(at, label)| {
        (label.ends_with(b"PRIVATE KEY") || label.ends_with(b"PRIVATE KEY BLOCK"))
            && last_end.get(label).is_some_and(|&end| end > at)
    });
    if let Some((at, _)) = key {
        return Some(at);
    }
    // PuTTY's format: its first line, and the key's private half further on.
    let at = find(bytes, b"PuTTY-User-Key-File-")?;
    ((at == 0 || bytes[at - 1] == b'\n') && find(&bytes[at..], b"\nPrivate-Lines: ").is_some())
        .then_some(at)
}

/// Each `-----BEGIN LABEL-----` (or END, as `marker` says) in `bytes`: where it starts and its
/// label (at most 80 bytes, no `-` in it).
fn armor_lines<'b>(
    bytes: &'b [u8],
    marker: &'static [u8],
) -> impl Iterator<Item = (usize, &'b [u8])> + 'b {
    let mut from = 0;
    std::iter::from_fn(move || {
        loop {
            let at = from + find(bytes.get(from..)?, marker)?;
            from = at + marker.len();
            let rest = &bytes[from..];
            let Some(end) = rest.iter().take(80).position(|&b| b == b'-') else {
                continue;
            };
            if rest[end..].starts_with(b"-----") {
                return Some((at, &rest[..end]));
            }
        }
    })
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// What one source entry is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceKind {
    Dir,
    /// A regular file's bytes and whether any execute bit was set.
    File {
        bytes: Vec<u8>,
        executable: bool,
    },
    /// A relative symlink that resolves inside the folder; its target as written.
    Symlink {
        target: String,
    },
}

/// One entry of a skill folder: its package-relative path (`/`-separated, validated).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceEntry {
    pub path: String,
    pub kind: SourceKind,
}

/// A walked skill folder: every entry, sorted by path bytes, and what was left out.
#[derive(Debug, Clone)]
pub struct SourceTree {
    pub entries: Vec<SourceEntry>,
    /// Entries not packed, each the top of a left-out subtree: the first [`LEFT_OUT_LISTED`]
    /// in the walk's order (each directory's names in byte order, a directory's entries right
    /// after it).
    pub left_out: Vec<LeftOut>,
    /// The left-out entries past those listed, counted.
    pub left_out_unlisted: LeftOutCounts,
    /// Entries packed that others could not read in the sources (a file without the
    /// others-read bit, a directory without others-search), while SKILL.md was readable by
    /// them: the publisher kept these private, and once published anyone reads them. Empty
    /// when SKILL.md is private too (a umask of 077 makes every file so, and says nothing).
    pub not_shared: Vec<String>,
}

impl SourceTree {
    /// The tree holds exactly one entry, a regular `SKILL.md`: publishable as `skill-md`.
    pub fn only_skill_md(&self) -> Option<&[u8]> {
        match self.entries.as_slice() {
            [
                SourceEntry {
                    path,
                    kind: SourceKind::File { bytes, .. },
                },
            ] if path == "SKILL.md" => Some(bytes),
            _ => None,
        }
    }
}

/// Walk the skill folder `root` (named `skill` in refusals) under `limits`, keeping hidden
/// entries or not as `hidden` says. `Err` carries every refusal found (the walk goes on past a
/// refusal so the publisher sees them all, up to the limits), or an I/O error that stopped it.
pub fn walk(
    root: &Path,
    skill: &str,
    limits: &Limits,
    hidden: Hidden,
) -> Result<SourceTree, WalkError> {
    let mut w = Walker {
        skill,
        limits,
        hidden,
        left_out: Vec::new(),
        left_out_unlisted: LeftOutCounts::default(),
        entries: BTreeMap::new(),
        refusals: Vec::new(),
        folded: HashMap::new(),
        total_bytes: 0,
        full: false,
        private: Vec::new(),
        skill_md_shared: false,
    };
    w.dir(root, "")?;
    w.links();
    let has_skill_md = matches!(w.entries.get("SKILL.md"), Some(SourceKind::File { .. }));
    if w.refusals.is_empty() && !has_skill_md {
        let refusal = w.refuse(
            RefusalCode::MissingSkillMd,
            None,
            "the folder holds no regular file SKILL.md at its root".into(),
        );
        w.refusals.push(refusal);
    }
    if !w.refusals.is_empty() {
        return Err(WalkError::Refused(w.refusals));
    }
    Ok(SourceTree {
        entries: w
            .entries
            .into_iter()
            .map(|(path, kind)| SourceEntry { path, kind })
            .collect(),
        left_out: w.left_out,
        left_out_unlisted: w.left_out_unlisted,
        not_shared: if w.skill_md_shared {
            w.private
        } else {
            Vec::new()
        },
    })
}

/// Why a walk failed.
#[derive(Debug, thiserror::Error)]
pub enum WalkError {
    #[error("{} refusal(s)", .0.len())]
    Refused(Vec<Refusal>),
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

struct Walker<'a> {
    skill: &'a str,
    limits: &'a Limits,
    hidden: Hidden,
    /// The first [`LEFT_OUT_LISTED`], in walk order (names sorted, a directory's entries right
    /// after it).
    left_out: Vec<LeftOut>,
    left_out_unlisted: LeftOutCounts,
    /// Sorted by path bytes (`String`'s order is its bytes' order).
    entries: BTreeMap<String, SourceKind>,
    refusals: Vec<Refusal>,
    /// Case-folded and Unicode-normalised keys seen, for the engine's twin rule.
    folded: HashMap<String, String>,
    total_bytes: u64,
    /// `max_entries` was reached and refused: the walk is over.
    full: bool,
    /// Entries others cannot read (or, a directory, search) in the sources, in walk order.
    private: Vec<String>,
    /// SKILL.md is readable by others in the sources.
    skill_md_shared: bool,
}

impl Walker<'_> {
    fn refuse(&self, code: RefusalCode, path: Option<&str>, detail: String) -> Refusal {
        Refusal {
            skill: self.skill.to_owned(),
            code,
            path: path.map(str::to_owned),
            detail,
            limit: None,
            observed: None,
            reason: None,
        }
    }

    fn refuse_limit(&mut self, path: Option<&str>, limit: &str, max: u64, observed: u64) {
        let mut r = self.refuse(
            RefusalCode::Limit,
            path,
            format!("over the consumers' default {limit} ({observed} > {max})"),
        );
        r.limit = Some(max);
        r.observed = Some(observed);
        self.refusals.push(r);
    }

    fn io(&self, path: &Path) -> impl FnOnce(std::io::Error) -> WalkError {
        let path = path.to_owned();
        move |source| WalkError::Io { path, source }
    }

    /// Past this many refusals the walk stops: the publisher has enough to fix.
    fn enough(&self) -> bool {
        self.refusals.len() >= 50
    }

    fn dir(&mut self, dir: &Path, prefix: &str) -> Result<(), WalkError> {
        let mut names: Vec<std::ffi::OsString> = std::fs::read_dir(dir)
            .map_err(self.io(dir))?
            .map(|e| e.map(|e| e.file_name()))
            .collect::<Result<_, _>>()
            .map_err(self.io(dir))?;
        // Creation order (what read_dir returns) must not matter: sorted by bytes.
        names.sort_by(|a, b| a.as_encoded_bytes().cmp(b.as_encoded_bytes()));
        for name in names {
            if self.full {
                return Ok(());
            }
            // Before anything else: a left-out entry is not read, checked or counted.
            if let Some(reason) = left_out(name.as_encoded_bytes(), self.hidden) {
                if self.left_out.len() >= LEFT_OUT_LISTED {
                    // Counted, not listed (nor looked at): the report stays bounded.
                    self.left_out_unlisted.add(reason);
                    continue;
                }
                let full = dir.join(&name);
                let meta = std::fs::symlink_metadata(&full).map_err(self.io(&full))?;
                let slash = if meta.is_dir() { "/" } else { "" };
                self.left_out.push(LeftOut {
                    path: format!("{prefix}{}{slash}", shown(name.as_encoded_bytes())),
                    reason,
                });
                continue;
            }
            if self.entries.len() as u64 >= self.limits.max_entries {
                self.full = true;
                let n = self.entries.len() as u64 + 1;
                let at = format!("{prefix}{}", display_name(name.as_encoded_bytes()));
                self.refuse_limit(Some(&at), "max_entries", self.limits.max_entries, n);
                return Ok(());
            }
            if self.enough() {
                return Ok(());
            }
            let full = dir.join(&name);
            let raw = name.as_encoded_bytes();
            let Some(name) = name.to_str() else {
                let shown = format!("{prefix}{}", display_name(raw));
                let r = self.refuse(
                    RefusalCode::InvalidName,
                    Some(&shown),
                    "the name is not valid UTF-8; consumers refuse it (invalid_name)".into(),
                );
                self.refusals.push(r);
                continue;
            };
            let rel = format!("{prefix}{name}");
            let Some(path) = self.checked_name(&rel) else {
                continue;
            };
            // lstat: a symlink is looked at, never through.
            let meta = std::fs::symlink_metadata(&full).map_err(self.io(&full))?;
            let ft = meta.file_type();
            // The publisher's own view of who may read it; the package's modes are fixed
            // (0644/0755) whatever it is, so it is only reported.
            let others = if ft.is_dir() { 0o005 } else { 0o004 };
            if (ft.is_dir() || ft.is_file()) && meta.mode() & others != others {
                self.private.push(path.clone());
            } else if path == "SKILL.md" && ft.is_file() {
                self.skill_md_shared = true;
            }
            if ft.is_dir() {
                self.entries.insert(path.clone(), SourceKind::Dir);
                self.dir(&full, &format!("{path}/"))?;
            } else if ft.is_file() {
                self.file(&full, &path, &meta)?;
            } else if ft.is_symlink() {
                let target = std::fs::read_link(&full).map_err(self.io(&full))?;
                match target.into_os_string().into_string() {
                    Ok(t) => match self.link_target(&t) {
                        Ok(t) => {
                            self.entries.insert(path, SourceKind::Symlink { target: t });
                        }
                        Err(why) => {
                            let r = self.refuse(RefusalCode::InvalidName, Some(&path), why);
                            self.refusals.push(r);
                        }
                    },
                    Err(t) => {
                        let r = self.refuse(
                            RefusalCode::InvalidName,
                            Some(&path),
                            format!(
                                "the link target {} is not valid UTF-8",
                                display_name(t.as_encoded_bytes())
                            ),
                        );
                        self.refusals.push(r);
                    }
                }
            } else {
                let what = special_kind(&ft);
                let r = self.refuse(
                    RefusalCode::SpecialFile,
                    Some(&path),
                    format!("a {what} is not a file a package can carry (device_entry)"),
                );
                self.refusals.push(r);
            }
        }
        Ok(())
    }

    /// A link target as the engine takes it (no control, bidi or invisible characters, no
    /// backslash, within `max_path_bytes`), written in its plain form: empty and `.`
    /// components dropped (`./a//b` is `a/b`, the same file to the kernel), as tar writers
    /// store it anyway, so every format carries the same target.
    fn link_target(&self, t: &str) -> Result<String, String> {
        let shown = display_name(t.as_bytes());
        if t.chars()
            .any(|c| c.is_control() || path::hidden_char(c).is_some())
        {
            return Err(format!(
                "the link target {shown} holds control, bidirectional or invisible characters"
            ));
        }
        if t.contains('\\') {
            return Err(format!("the link target {shown} holds a backslash"));
        }
        if t.len() as u64 > self.limits.max_path_bytes {
            return Err(format!(
                "the link target is {} bytes, over the consumers' default max_path_bytes ({})",
                t.len(),
                self.limits.max_path_bytes
            ));
        }
        let plain: Vec<&str> = t
            .split('/')
            .filter(|c| !c.is_empty() && *c != ".")
            .collect();
        Ok(match (t.starts_with('/'), plain.is_empty()) {
            // Absolute: kept as written, to be refused as an escape by name.
            (true, _) => t.to_owned(),
            (false, true) if t.is_empty() => String::new(),
            (false, true) => ".".to_owned(),
            (false, false) => plain.join("/"),
        })
    }

    /// The engine's name rules, then its twin rule: a name a consumer's engine would refuse
    /// is refused here with the engine's reason.
    fn checked_name(&mut self, rel: &str) -> Option<String> {
        match SafeRelPath::parse(rel.as_bytes(), self.limits) {
            Ok(Parsed::Path(p)) if p.as_str() == rel => {
                let key = path::fold_key(&path::nfkc_key(p.as_str()));
                if let Some(first) = self.folded.get(&key) {
                    let r = self.refuse(
                        RefusalCode::InvalidName,
                        Some(rel),
                        format!(
                            "{rel:?} and {first:?} are one name to a case-insensitive or \
                             Unicode-normalising file system; consumers refuse the pair \
                             (case_collision / unicode_collision)"
                        ),
                    );
                    self.refusals.push(r);
                    return None;
                }
                self.folded.insert(key, rel.to_owned());
                Some(rel.to_owned())
            }
            Ok(_) => {
                let r = self.refuse(
                    RefusalCode::InvalidName,
                    Some(rel),
                    "the name does not survive the engine's normalisation unchanged".into(),
                );
                self.refusals.push(r);
                None
            }
            Err(reason) => {
                let limit = match reason.code {
                    ReasonCode::PathDepth => Some("max_path_depth"),
                    ReasonCode::PathLength if reason.detail.contains("component") => {
                        Some("max_component_bytes")
                    }
                    ReasonCode::PathLength => Some("max_path_bytes"),
                    _ => None,
                };
                let mut r = match limit {
                    Some(l) => self.refuse(
                        RefusalCode::Limit,
                        Some(rel),
                        format!("over the consumers' default {l}: {}", reason.detail),
                    ),
                    None => self.refuse(
                        RefusalCode::InvalidName,
                        Some(&display_name(rel.as_bytes())),
                        format!("{} ({})", reason.detail, reason.code),
                    ),
                };
                r.limit = reason.limit;
                r.observed = reason.observed;
                self.refusals.push(r);
                None
            }
        }
    }

    fn file(&mut self, full: &Path, path: &str, meta: &std::fs::Metadata) -> Result<(), WalkError> {
        let max = self.limits.max_file_bytes;
        if meta.len() > max {
            self.refuse_limit(Some(path), "max_file_bytes", max, meta.len());
            return Ok(());
        }
        // O_NOFOLLOW: the file checked above must not have become a link to elsewhere.
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(full)
            .map_err(self.io(full))?;
        let mut bytes = Vec::new();
        file.take(max.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(self.io(full))?;
        let size = bytes.len() as u64;
        if size > max {
            self.refuse_limit(Some(path), "max_file_bytes", max, size);
            return Ok(());
        }
        self.total_bytes = self.total_bytes.saturating_add(size);
        if self.total_bytes > self.limits.max_expanded_bytes {
            let (max, seen) = (self.limits.max_expanded_bytes, self.total_bytes);
            self.refuse_limit(Some(path), "max_expanded_bytes", max, seen);
            return Ok(());
        }
        // A private key is refused, never warned about: once published under a
        // content-addressed URL it is public for good, and no consumer needs one.
        if let Some(at) = private_key_at(&bytes) {
            let line = bytes[..at].iter().filter(|&&b| b == b'\n').count() + 1;
            let r = self.refuse(
                RefusalCode::PrivateKey,
                Some(path),
                format!("holds a private key (line {line}); a published file is public for good"),
            );
            self.refusals.push(r);
            return Ok(());
        }
        let executable = meta.mode() & 0o111 != 0;
        self.entries
            .insert(path.to_owned(), SourceKind::File { bytes, executable });
        Ok(())
    }

    /// Every symlink must be relative and resolve, through the tree, to something in it.
    fn links(&mut self) {
        let links: Vec<(String, String)> = self
            .entries
            .iter()
            .filter_map(|(p, k)| match k {
                SourceKind::Symlink { target } => Some((p.clone(), target.clone())),
                SourceKind::Dir | SourceKind::File { .. } => None,
            })
            .collect();
        for (link, target) in links {
            if let Err((code, why)) = self.resolve_link(&link, &target) {
                let r = self.refuse(
                    code,
                    Some(&link),
                    format!("symlink -> {}: {why}", display_name(target.as_bytes())),
                );
                self.refusals.push(r);
            }
        }
    }

    fn resolve_link(&self, link: &str, target: &str) -> Result<(), (RefusalCode, String)> {
        if target.is_empty() {
            return Err((RefusalCode::DanglingSymlink, "the target is empty".into()));
        }
        if target.starts_with('/') {
            return Err((
                RefusalCode::SymlinkEscape,
                "an absolute target leaves the package (link_escape)".into(),
            ));
        }
        let parent: Vec<&str> = match link.rfind('/') {
            Some(i) => link[..i].split('/').collect(),
            None => Vec::new(),
        };
        let mut hops = 0;
        let resolved = self.resolve(parent, target, &mut hops)?;
        let joined = resolved.join("/");
        if joined.is_empty() || self.entries.contains_key(&joined) {
            return Ok(());
        }
        Err((
            RefusalCode::DanglingSymlink,
            format!(
                "it points at {}, which {}",
                display_name(joined.as_bytes()),
                self.absent(&joined)
            ),
        ))
    }

    /// Why `path`, not an entry, is not in the package: never there, or left out. When some
    /// left-out entries were counted rather than listed, a path under none of the listed ones
    /// is judged by the names on its way (`x/.git/y` is left out wherever it is).
    fn absent(&self, path: &str) -> &'static str {
        let under = |lo: &LeftOut| {
            let top = lo.path.trim_end_matches('/');
            path == top || path.strip_prefix(top).is_some_and(|r| r.starts_with('/'))
        };
        let listed = self
            .left_out
            .iter()
            .find(|lo| under(lo))
            .map(|lo| lo.reason);
        let by_name = || {
            path.split('/')
                .find_map(|c| left_out(c.as_bytes(), self.hidden))
                .filter(|_| self.left_out_unlisted.total() > 0)
        };
        match listed.or_else(by_name) {
            Some(LeftOutReason::Vcs) => "is left out of the package (version-control metadata)",
            Some(LeftOutReason::Hidden) => {
                "is left out of the package (hidden; --include-hidden packs it)"
            }
            Some(LeftOutReason::Backup) => "is left out of the package (an editor backup)",
            None => "is not in the folder",
        }
    }

    /// A component the resolution goes on from must be a directory of the package (the root
    /// included), as the kernel requires: `gone/../x` or `.hidden/../x`, with `gone` or
    /// `.hidden` not packed, points at nothing once extracted.
    fn through_dir(&self, at: &[&str]) -> Result<(), (RefusalCode, String)> {
        let here = at.join("/");
        match self.entries.get(&here) {
            _ if here.is_empty() => Ok(()),
            Some(SourceKind::Dir) => Ok(()),
            Some(SourceKind::File { .. } | SourceKind::Symlink { .. }) => Err((
                RefusalCode::DanglingSymlink,
                format!(
                    "it goes through {}, which is not a directory",
                    display_name(here.as_bytes())
                ),
            )),
            None => Err((
                RefusalCode::DanglingSymlink,
                format!(
                    "it goes through {}, which {}",
                    display_name(here.as_bytes()),
                    self.absent(&here)
                ),
            )),
        }
    }

    /// Resolve `target` from the directory `at` as the kernel would, following the tree's own
    /// links on the way; `..` past the folder's root is an escape.
    fn resolve<'p>(
        &'p self,
        mut at: Vec<&'p str>,
        target: &'p str,
        hops: &mut usize,
    ) -> Result<Vec<&'p str>, (RefusalCode, String)> {
        let comps: Vec<&'p str> = target.split('/').collect();
        for (i, comp) in comps.iter().copied().enumerate() {
            match comp {
                "" | "." => {}
                ".." => {
                    if at.pop().is_none() {
                        return Err((
                            RefusalCode::SymlinkEscape,
                            "the target climbs out of the package (link_escape)".into(),
                        ));
                    }
                }
                c => {
                    at.push(c);
                    let here = at.join("/");
                    if let Some((key, SourceKind::Symlink { target: next })) =
                        self.entries.get_key_value(&here)
                    {
                        *hops += 1;
                        if *hops > MAX_LINK_HOPS {
                            return Err((
                                RefusalCode::DanglingSymlink,
                                "too many levels of symbolic links".into(),
                            ));
                        }
                        if next.starts_with('/') {
                            return Err((
                                RefusalCode::SymlinkEscape,
                                format!("it goes through {key}, whose target is absolute"),
                            ));
                        }
                        at.pop();
                        at = self.resolve(at, next, hops)?;
                    }
                    if i + 1 < comps.len() {
                        self.through_dir(&at)?;
                    }
                }
            }
        }
        Ok(at)
    }
}

/// A name as output may show it: control, bidirectional and invisible characters escaped.
fn shown(raw: &[u8]) -> String {
    display_name(raw)
        .chars()
        .flat_map(|c| {
            let escaped: Vec<char> = if path::hidden_char(c).is_some() {
                c.escape_unicode().collect()
            } else {
                vec![c]
            };
            escaped
        })
        .collect()
}

fn special_kind(ft: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if ft.is_fifo() {
        "FIFO"
    } else if ft.is_socket() {
        "socket"
    } else if ft.is_block_device() {
        "block device"
    } else if ft.is_char_device() {
        "character device"
    } else {
        "special file"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusals(r: Result<SourceTree, WalkError>) -> Vec<Refusal> {
        match r {
            Err(WalkError::Refused(v)) => v,
            Err(e) => panic!("{e}"),
            Ok(t) => panic!("accepted: {:?}", t.entries),
        }
    }

    #[test]
    fn links_resolve_through_the_tree() {
        let d = tempfile::tempdir().expect("tempdir");
        let r = d.path();
        std::fs::write(r.join("SKILL.md"), "x").expect("write");
        std::fs::create_dir_all(r.join("a/b")).expect("mkdir");
        std::fs::write(r.join("a/b/f"), "x").expect("write");
        std::os::unix::fs::symlink("a/b", r.join("l1")).expect("link");
        std::os::unix::fs::symlink("l1/f", r.join("l2")).expect("link");
        std::os::unix::fs::symlink("../SKILL.md", r.join("a/up")).expect("link");
        let t = walk(r, "s", &Limits::default(), Hidden::LeaveOut).expect("walk");
        let paths: Vec<&str> = t.entries.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, ["SKILL.md", "a", "a/b", "a/b/f", "a/up", "l1", "l2"]);

        // Lexically inside, but through l1 it climbs out: l1/../../x is b/../../x = ../x.
        std::os::unix::fs::symlink("l1/../../x", r.join("l3")).expect("link");
        let v = refusals(walk(r, "s", &Limits::default(), Hidden::LeaveOut));
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(v[0].code, RefusalCode::DanglingSymlink, "{v:?}");
        std::fs::remove_file(r.join("l3")).expect("rm");
        std::os::unix::fs::symlink("l1/../../../x", r.join("l4")).expect("link");
        let v = refusals(walk(r, "s", &Limits::default(), Hidden::LeaveOut));
        assert_eq!(v[0].code, RefusalCode::SymlinkEscape, "{v:?}");
    }

    #[test]
    fn hidden_and_vcs_entries_are_left_out_at_every_level_and_not_counted() {
        let d = tempfile::tempdir().expect("tempdir");
        let r = d.path();
        std::fs::write(r.join("SKILL.md"), "x").expect("write");
        for dir in [".git/objects", "a/.svn", "a/_darcs", "a/.cache", "b"] {
            std::fs::create_dir_all(r.join(dir)).expect("mkdir");
        }
        for f in [".env", "a/.env", "a/f", "b/.jj", ".git/objects/x"] {
            std::fs::write(r.join(f), "x").expect("write");
        }
        let left = |t: &SourceTree| -> Vec<(String, LeftOutReason)> {
            t.left_out
                .iter()
                .map(|l| (l.path.clone(), l.reason))
                .collect()
        };
        use LeftOutReason::{Hidden as H, Vcs as V};
        // Three entries packed, however many are left out: no limit counts them.
        let limits = Limits {
            max_entries: 4,
            ..Limits::default()
        };
        let t = walk(r, "s", &limits, Hidden::LeaveOut).expect("walk");
        let paths: Vec<&str> = t.entries.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, ["SKILL.md", "a", "a/f", "b"]);
        let want = [
            (".env", H),
            (".git/", V),
            ("a/.cache/", H),
            ("a/.env", H),
            ("a/.svn/", V),
            ("a/_darcs/", V),
            ("b/.jj", V),
        ];
        let want: Vec<(String, LeftOutReason)> =
            want.iter().map(|(p, r)| (p.to_string(), *r)).collect();
        assert_eq!(left(&t), want);
        let t = walk(r, "s", &Limits::default(), Hidden::Include).expect("walk");
        let paths: Vec<&str> = t.entries.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            [".env", "SKILL.md", "a", "a/.cache", "a/.env", "a/f", "b"]
        );
        let vcs: Vec<(String, LeftOutReason)> = want.into_iter().filter(|(_, r)| *r == V).collect();
        assert_eq!(left(&t), vcs);

        // Through a left-out directory and back is through nothing, once packed.
        std::os::unix::fs::symlink(".git/../SKILL.md", r.join("l")).expect("link");
        let v = refusals(walk(r, "s", &Limits::default(), Hidden::LeaveOut));
        assert_eq!(v[0].code, RefusalCode::DanglingSymlink, "{v:?}");
        assert!(v[0].detail.contains("version-control"), "{v:?}");
    }

    #[test]
    fn limits_are_named() {
        let d = tempfile::tempdir().expect("tempdir");
        let r = d.path();
        std::fs::write(r.join("SKILL.md"), "x").expect("write");
        std::fs::write(r.join("big"), vec![0u8; 100]).expect("write");
        let limits = Limits {
            max_file_bytes: 99,
            ..Limits::default()
        };
        let v = refusals(walk(r, "s", &limits, Hidden::LeaveOut));
        assert_eq!(v[0].code, RefusalCode::Limit);
        assert!(v[0].detail.contains("max_file_bytes"), "{v:?}");
        assert_eq!((v[0].limit, v[0].observed), (Some(99), Some(100)));
        std::fs::remove_file(r.join("big")).expect("rm");
        for d in ["a", "b", "c"] {
            std::fs::create_dir_all(r.join(d).join("x")).expect("mkdir");
        }
        let limits = Limits {
            max_entries: 4,
            ..Limits::default()
        };
        let v = refusals(walk(r, "s", &limits, Hidden::LeaveOut));
        assert_eq!(v.len(), 1, "one refusal, then the walk stops: {v:?}");
        assert!(v[0].detail.contains("max_entries"), "{v:?}");
        assert_eq!((v[0].limit, v[0].observed), (Some(4), Some(5)));
    }

    #[test]
    fn editor_backups_are_left_out_and_private_keys_refused() {
        let d = tempfile::tempdir().expect("tempdir");
        let r = d.path();
        std::fs::write(r.join("SKILL.md"), "x").expect("write");
        std::fs::create_dir_all(r.join("docs")).expect("mkdir");
        for f in [
            "SKILL.md~",
            "docs/#guide.md#",
            "docs/guide.md",
            "~",
            "#",
            "##",
            "a#b~c",
        ] {
            std::fs::write(r.join(f), "x").expect("write");
        }
        let t = walk(r, "s", &Limits::default(), Hidden::LeaveOut).expect("walk");
        let paths: Vec<&str> = t.entries.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            ["#", "##", "SKILL.md", "a#b~c", "docs", "docs/guide.md", "~"]
        );
        let left: Vec<(&str, LeftOutReason)> = t
            .left_out
            .iter()
            .map(|l| (l.path.as_str(), l.reason))
            .collect();
        assert_eq!(
            left,
            [
                ("SKILL.md~", LeftOutReason::Backup),
                ("docs/#guide.md#", LeftOutReason::Backup)
            ]
        );
        // --include-hidden does not pack them: they are not hidden, just stale copies.
        let t = walk(r, "s", &Limits::default(), Hidden::Include).expect("walk");
        assert_eq!(t.left_out.len(), 2, "{:?}", t.left_out);

        // Private keys, in every text form, wherever they sit in a file.
        let keys: [&[u8]; 5] = [
            b"-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----\n",
            b"-----BEGIN PRIVATE KEY-----\r\nMIIE\r\n-----END PRIVATE KEY-----\r\n",
            b"# Setup\n\n```\n-----BEGIN OPENSSH PRIVATE KEY-----\nb3Bl\n-----END OPENSSH PRIVATE KEY-----\n```\n",
            b"-----BEGIN PGP PRIVATE KEY BLOCK-----\n\nlQ\n-----END PGP PRIVATE KEY BLOCK-----\n",
            b"PuTTY-User-Key-File-3: ssh-ed25519\nEncryption: none\nPublic-Lines: 1\nAAAA\nPrivate-Lines: 1\nAAAA\n",
        ];
        for key in keys {
            std::fs::write(r.join("docs/guide.md"), key).expect("write");
            let v = refusals(walk(r, "s", &Limits::default(), Hidden::LeaveOut));
            assert_eq!(v.len(), 1, "{v:?}");
            assert_eq!(v[0].code, RefusalCode::PrivateKey, "{v:?}");
            assert_eq!(v[0].path.as_deref(), Some("docs/guide.md"), "{v:?}");
        }
        // Naming a key's header, a public key, a certificate: not keys.
        let many_headers = b"-----BEGIN RSA PRIVATE KEY-----\n".repeat(100_000);
        let not_keys: [&[u8]; 6] = [
            &many_headers,
            b"-----END EC PRIVATE KEY-----\nthen -----BEGIN EC PRIVATE KEY-----\n",
            b"A key file starts with -----BEGIN RSA PRIVATE KEY----- and is never shared.\n",
            b"-----BEGIN PUBLIC KEY-----\nMIIB\n-----END PUBLIC KEY-----\n",
            b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
            b"Convert a PuTTY-User-Key-File-3 file with puttygen.\n",
        ];
        for text in not_keys {
            std::fs::write(r.join("docs/guide.md"), text).expect("write");
            walk(r, "s", &Limits::default(), Hidden::LeaveOut).expect("walk");
        }
    }
}
