//! The stable vocabulary of outcomes: verdicts and reason codes.
//!
//! Reason codes are part of the public contract (CLI JSON, gRPC enum, corpus manifests): a code
//! is never renamed or reused. Adding one means handling it everywhere it is matched; there are
//! no wildcard arms over [`ReasonCode`].

use serde::{Deserialize, Serialize};

/// Why an artifact was rejected. Serialised in `snake_case`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ReasonCode {
    PathTraversal,
    AbsolutePath,
    InvalidName,
    LinkEscape,
    LinkTraversal,
    Hardlink,
    DeviceEntry,
    DuplicatePath,
    CaseCollision,
    UnicodeCollision,
    EntryCount,
    ExpandedSize,
    Ratio,
    FileSize,
    PathDepth,
    PathLength,
    Encrypted,
    UnsupportedMethod,
    Corrupt,
    CrcMismatch,
    HeaderMismatch,
    OverlappingEntries,
    MissingSkillMd,
    FormatMismatch,
    UnsupportedFormat,
    DigestMismatch,
    ArtifactSize,
    Timeout,
    ResourceLimit,
    SandboxViolation,
    SandboxUnavailable,
    /// SKILL.md frontmatter missing, unparsable, over its bounds, or without name/description.
    InvalidSkillMd,
}

impl ReasonCode {
    /// Every code, in declaration order (for docs, tests and the gRPC mapping).
    pub const ALL: [ReasonCode; 32] = [
        Self::PathTraversal,
        Self::AbsolutePath,
        Self::InvalidName,
        Self::LinkEscape,
        Self::LinkTraversal,
        Self::Hardlink,
        Self::DeviceEntry,
        Self::DuplicatePath,
        Self::CaseCollision,
        Self::UnicodeCollision,
        Self::EntryCount,
        Self::ExpandedSize,
        Self::Ratio,
        Self::FileSize,
        Self::PathDepth,
        Self::PathLength,
        Self::Encrypted,
        Self::UnsupportedMethod,
        Self::Corrupt,
        Self::CrcMismatch,
        Self::HeaderMismatch,
        Self::OverlappingEntries,
        Self::MissingSkillMd,
        Self::FormatMismatch,
        Self::UnsupportedFormat,
        Self::DigestMismatch,
        Self::ArtifactSize,
        Self::Timeout,
        Self::ResourceLimit,
        Self::SandboxViolation,
        Self::SandboxUnavailable,
        Self::InvalidSkillMd,
    ];

    /// The wire spelling, e.g. `path_traversal`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::PathTraversal => "path_traversal",
            Self::AbsolutePath => "absolute_path",
            Self::InvalidName => "invalid_name",
            Self::LinkEscape => "link_escape",
            Self::LinkTraversal => "link_traversal",
            Self::Hardlink => "hardlink",
            Self::DeviceEntry => "device_entry",
            Self::DuplicatePath => "duplicate_path",
            Self::CaseCollision => "case_collision",
            Self::UnicodeCollision => "unicode_collision",
            Self::EntryCount => "entry_count",
            Self::ExpandedSize => "expanded_size",
            Self::Ratio => "ratio",
            Self::FileSize => "file_size",
            Self::PathDepth => "path_depth",
            Self::PathLength => "path_length",
            Self::Encrypted => "encrypted",
            Self::UnsupportedMethod => "unsupported_method",
            Self::Corrupt => "corrupt",
            Self::CrcMismatch => "crc_mismatch",
            Self::HeaderMismatch => "header_mismatch",
            Self::OverlappingEntries => "overlapping_entries",
            Self::MissingSkillMd => "missing_skill_md",
            Self::FormatMismatch => "format_mismatch",
            Self::UnsupportedFormat => "unsupported_format",
            Self::DigestMismatch => "digest_mismatch",
            Self::ArtifactSize => "artifact_size",
            Self::Timeout => "timeout",
            Self::ResourceLimit => "resource_limit",
            Self::SandboxViolation => "sandbox_violation",
            Self::SandboxUnavailable => "sandbox_unavailable",
            Self::InvalidSkillMd => "invalid_skill_md",
        }
    }
}

impl std::fmt::Display for ReasonCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A rejection: the code, the entry it concerns (if any), a human detail, and for limit
/// violations the limit and the value observed when decoding stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reason {
    pub code: ReasonCode,
    pub entry: Option<String>,
    pub detail: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed: Option<u64>,
}

impl Reason {
    pub fn new(code: ReasonCode, detail: impl Into<String>) -> Self {
        Self {
            code,
            entry: None,
            detail: detail.into(),
            limit: None,
            observed: None,
        }
    }

    /// Attach the (lossily printed, control-escaped) entry name this reason concerns.
    pub fn entry(mut self, name: impl Into<String>) -> Self {
        self.entry = Some(name.into());
        self
    }

    /// A limit was passed: `observed` is what had been produced or counted when we stopped.
    pub fn limit(mut self, limit: u64, observed: u64) -> Self {
        self.limit = Some(limit);
        self.observed = Some(observed);
        self
    }
}

/// Accepted or rejected; the only two verdicts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Accepted,
    Rejected,
}

/// Print an untrusted byte string for humans and logs: lossy UTF-8, control characters escaped,
/// bounded length. Names from archives are hostile; never print them raw.
pub fn display_name(raw: &[u8]) -> String {
    const MAX: usize = 300;
    let s = String::from_utf8_lossy(raw);
    let mut out = String::with_capacity(s.len().min(MAX + 8));
    for ch in s.chars() {
        if out.len() >= MAX {
            out.push('…');
            break;
        }
        // Bidirectional overrides and isolates too: they reorder what a terminal shows, so a
        // name could read as another (`evil\u{202e}dm.exe`).
        if ch.is_control()
            || matches!(ch, '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
        {
            out.extend(ch.escape_default());
        } else {
            out.push(ch);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_serialise_as_their_wire_names() {
        for code in ReasonCode::ALL {
            let json = serde_json::to_string(&code).unwrap_or_default();
            assert_eq!(json, format!("\"{}\"", code.as_str()));
        }
    }

    #[test]
    fn display_name_escapes_controls() {
        assert_eq!(display_name(b"a\nb\x1b[31m"), "a\\nb\\u{1b}[31m");
        assert_eq!(
            display_name("evil\u{202e}fdp.exe\u{2066}".as_bytes()),
            "evil\\u{202e}fdp.exe\\u{2066}"
        );
    }
}
