//! What an extraction returns: the entries, their hashes and flags, and totals.
//!
//! The inventory is sorted by path and deterministic: the same artifact under the same limits
//! always yields byte-identical JSON. It is also what the supervising parent re-checks against
//! the staged tree, so every node that exists on disk is listed, implicit directories included.

use serde::{Deserialize, Serialize};

use crate::digest::Sha256Digest;
use crate::reason::{Reason, Verdict};

/// What kind of node an entry is on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    File,
    Dir,
    Symlink,
}

/// Facts about an entry a reviewer or policy engine cares about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Flag {
    /// Staged with mode 0755.
    Executable,
    /// A script, by shebang or by extension.
    Script,
    /// Looks like an archive (kept as an opaque file, never expanded).
    NestedArchive,
    /// The package's root `SKILL.md`.
    SkillMd,
    /// The archive asked for setuid/setgid/sticky or group/world-writable bits; they were dropped.
    ModeSanitised,
}

/// One staged node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    pub path: String,
    pub kind: Kind,
    /// Bytes written (files), target length (symlinks), 0 (directories).
    pub size: u64,
    /// Sanitised mode as an octal string, e.g. `"0644"`.
    pub mode: String,
    pub sha256: Option<Sha256Digest>,
    pub link_target: Option<String>,
    pub flags: Vec<Flag>,
}

/// The artifact as received.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArtifactFacts {
    /// SHA-256 of the exact bytes; null only when the artifact was refused before hashing
    /// (larger than `max_artifact_bytes`).
    pub digest: Option<Sha256Digest>,
    /// Detected format (`skill-md`, `zip`, `tar`, `tar.gz`, `tar.zst`), or null if detection
    /// did not get that far.
    pub format: Option<String>,
    pub size: u64,
}

/// Counts over the whole extraction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Totals {
    pub entries: u64,
    pub files: u64,
    pub dirs: u64,
    pub symlinks: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// `bytes_out / bytes_in`, rounded to two decimals.
    pub ratio: f64,
}

/// What the engine returns: the verdict, the facts and the inventory of the staged tree. The
/// review of that tree is not the engine's business: the intake layer above adds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Extraction {
    pub verdict: Verdict,
    pub reason: Option<Reason>,
    pub artifact: ArtifactFacts,
    pub entries: Vec<Entry>,
    pub totals: Totals,
    /// The `.skill` packager's wrapping directory taken off every name, when the limits
    /// accepted that layout (`accept_wrapper`); the intake checks it is the skill's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wrapper: Option<String>,
}

impl Extraction {
    /// A rejection: no entries survive, only the facts and totals at the moment of stopping.
    pub fn rejected(artifact: ArtifactFacts, totals: Totals, reason: Reason) -> Self {
        Self {
            verdict: Verdict::Rejected,
            reason: Some(reason),
            artifact,
            entries: Vec::new(),
            totals,
            wrapper: None,
        }
    }
}

const SCRIPT_EXTENSIONS: &[&str] = &[
    "sh",
    "bash",
    "zsh",
    "fish",
    "ksh",
    "py",
    "pyw",
    "rb",
    "pl",
    "pm",
    "php",
    "js",
    "mjs",
    "cjs",
    "ts",
    "lua",
    "ps1",
    "psm1",
    "bat",
    "cmd",
    "vbs",
    "applescript",
    "r",
    "tcl",
    "awk",
];

const ARCHIVE_EXTENSIONS: &[&str] = &[
    "zip", "tar", "gz", "tgz", "zst", "tzst", "bz2", "xz", "7z", "rar", "jar", "whl", "apk", "deb",
    "rpm",
];

/// Classify a file from its path and first bytes (up to 512 are enough).
pub fn file_flags(path: &str, head: &[u8], executable: bool, mode_sanitised: bool) -> Vec<Flag> {
    let ext = crate::names::extension(path);
    let mut flags = Vec::new();
    if executable {
        flags.push(Flag::Executable);
    }
    if head.starts_with(b"#!")
        || ext
            .as_deref()
            .is_some_and(|e| SCRIPT_EXTENSIONS.contains(&e))
    {
        flags.push(Flag::Script);
    }
    if super::detect::looks_like_archive(head)
        || ext
            .as_deref()
            .is_some_and(|e| ARCHIVE_EXTENSIONS.contains(&e))
    {
        flags.push(Flag::NestedArchive);
    }
    if path == "SKILL.md" {
        flags.push(Flag::SkillMd);
    }
    if mode_sanitised {
        flags.push(Flag::ModeSanitised);
    }
    flags
}

/// Ratio rounded to two decimals; 0 for an empty artifact.
pub fn ratio(bytes_out: u64, bytes_in: u64) -> f64 {
    if bytes_in == 0 {
        return 0.0;
    }
    ((bytes_out as f64 / bytes_in as f64) * 100.0).round() / 100.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_by_shebang_extension_and_magic() {
        assert_eq!(
            file_flags("scripts/run", b"#!/bin/sh\n", true, false),
            vec![Flag::Executable, Flag::Script]
        );
        assert_eq!(
            file_flags("x.PY", b"print()", false, false),
            vec![Flag::Script]
        );
        assert_eq!(
            file_flags("assets/blob", b"PK\x03\x04rest", false, false),
            vec![Flag::NestedArchive]
        );
        assert_eq!(
            file_flags("SKILL.md", b"---", false, true),
            vec![Flag::SkillMd, Flag::ModeSanitised]
        );
        assert!(file_flags(".sh", b"", false, false).is_empty());
    }
}
