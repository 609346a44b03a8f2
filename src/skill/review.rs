//! The review report: what an accepted package's bytes ask to do.

use serde::{Deserialize, Serialize};

/// One observation about the package (a script, a URL, a credential path, ...).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    /// Stable snake_case kind, e.g. `external_reference`, `risky_command`.
    pub kind: String,
    /// Package-relative file the finding is in.
    pub file: String,
    /// 1-based line, when the finding is in text.
    pub line: Option<u64>,
    /// Short excerpt, control characters escaped, bounded length.
    pub excerpt: String,
}

/// The report attached to every accepted answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Review {
    pub findings: Vec<Finding>,
}
