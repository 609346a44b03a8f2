//! Replaying a corpus of artifacts against their expected verdicts (`skillbox replay DIR`).
//!
//! A corpus is a directory with a `manifest.json` (the format of the project's own
//! `corpus/manifest.json`, see docs/corpus-and-fuzzing.md) next to the artifacts. Every case runs
//! in its own confined child, confined exactly as `skillbox extract`'s, with a fresh parent
//! directory holding its staging directory: by default a spare forked ahead by one sandbox's
//! zygote in this process ([`Isolate::Spare`], what the broker does), or as its own `skillbox
//! extract --json` process with the parent as its working directory and `TMPDIR`
//! ([`Isolate::Process`]). Afterwards the parent must hold nothing but the staging directory
//! (accepted) or nothing at all (rejected), and an accepted staging tree must be exactly its
//! inventory.
//!
//! This module never parses an artifact itself: it only reads manifests, hands artifacts to
//! confined children (through the sandbox, or an `extract` process), and reads their answers.
//! Files no manifest names are run too and reported `unexpected`; a subdirectory with its own
//! `manifest.json` is a nested suite whose case names carry its path.
//!
//! By job: [`manifest`] reads the suites into cases, [`runner`] runs them, [`tree`] checks a
//! staged tree against its inventory, [`report`] prints the human, JSON and JUnit forms; this
//! file holds the types they share.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::fs::{self, File};
use std::io::{self, Read};
use std::os::fd::AsFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::digest::{Hasher, Sha256Digest};
use crate::extract::inventory::{Entry, Kind};
use crate::extract::overrides::LimitOverrides;
use crate::extract::policy::Limits;
use crate::extract::{ArtifactType, Request};
use crate::intake::Outcome;
use crate::reason::{ReasonCode, Verdict, display_name};
use crate::sandbox::{Sandbox, SandboxConfig};

mod manifest;
mod report;
mod runner;
mod tree;

pub use manifest::{collect, locate};
pub use report::{human, junit, to_json, xml_escape};
pub use runner::{Observer, run, run_observed};
pub use tree::verify_tree;

/// The manifest's file name inside a corpus directory.
pub const MANIFEST: &str = "manifest.json";
/// Manifests are small; anything larger is not one.
const MAX_MANIFEST_BYTES: u64 = 16 * 1024 * 1024;
/// Bound on a child's answer (an inventory of 10,000 entries is a few MiB).
const MAX_ANSWER_BYTES: u64 = 64 * 1024 * 1024;
/// A replay that could not start.
#[derive(Debug, thiserror::Error)]
// Not `non_exhaustive`: the CLI maps every variant to an exit status, and a new one must
// not compile until it has one.
pub enum ReplayError {
    #[error("{}", missing_manifest(path, suggestions))]
    MissingManifest {
        path: PathBuf,
        /// Directories below `path` that hold a manifest (what the caller may have meant).
        suggestions: Vec<PathBuf>,
    },
    #[error("{path}: the directory does not exist")]
    NoSuchDir { path: PathBuf },
    #[error("{path}: not a directory (give the corpus directory holding {MANIFEST})")]
    NotADir { path: PathBuf },
    #[error("{path}: cannot read: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error("{path}: malformed manifest: {message}")]
    Malformed { path: PathBuf, message: String },
    #[error("cannot prepare a scratch directory: {0}")]
    Scratch(#[source] io::Error),
    #[error("cannot find the skillbox binary to run cases with: {0}")]
    Exe(#[source] io::Error),
    #[error("cannot start the sandbox the cases run in: {0}")]
    Sandbox(#[source] crate::sandbox::SandboxError),
}

fn missing_manifest(path: &Path, suggestions: &[PathBuf]) -> String {
    let mut s = format!(
        "{} has no {MANIFEST} (nor has any directory above it); a corpus directory needs one naming its cases",
        path.display()
    );
    if !suggestions.is_empty() {
        let list: Vec<String> = suggestions
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        s.push_str(&format!("; did you mean {}?", list.join(" or ")));
    }
    s
}

/// Declared artifact type, as `skillbox extract --type` spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CaseType {
    #[serde(rename = "archive")]
    Archive,
    #[serde(rename = "skill-md")]
    SkillMd,
}

impl CaseType {
    fn as_str(self) -> &'static str {
        match self {
            CaseType::Archive => "archive",
            CaseType::SkillMd => "skill-md",
        }
    }
}

/// What a case must produce.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    pub verdict: Verdict,
    /// Null for accepted cases; for a rejected case null means "any reason".
    #[serde(default)]
    pub reason: Option<ReasonCode>,
}

/// A case ready to run: a manifest entry, or a file no manifest names.
#[derive(Debug, Clone)]
pub struct Case {
    /// Unique name; nested suites prefix their directory (`fuzz/zip_crash_1`).
    pub name: String,
    /// The artifact, relative to the replayed directory.
    pub file: PathBuf,
    /// `None` for an unexpected file: `extract` infers the type from the extension.
    pub kind: Option<CaseType>,
    pub media_type: Option<String>,
    pub limits: Option<Value>,
    pub digest: Option<String>,
    /// `None` for an unexpected file.
    pub expect: Option<Expect>,
    /// When present, the exact set of review finding kinds an accepted answer must carry.
    pub findings: Option<BTreeSet<String>>,
    pub description: Option<String>,
}

/// How one case went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Pass,
    Fail,
    /// The file has no manifest entry (it was run anyway).
    Unexpected,
    /// The case could not be run to an answer (missing file, crash, timeout, bad output).
    Error,
}

impl Status {
    fn label(self) -> &'static str {
        match self {
            Status::Pass => "PASS",
            Status::Fail => "FAIL",
            Status::Unexpected => "UNEXPECTED",
            Status::Error => "ERROR",
        }
    }
}

/// What the engine answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Got {
    pub verdict: Verdict,
    pub reason: Option<ReasonCode>,
    pub detail: Option<String>,
    pub entry: Option<String>,
    /// Kinds of the review findings (accepted answers).
    pub findings: BTreeSet<String>,
}

/// The result of one case.
#[derive(Debug, Clone, Serialize)]
pub struct CaseResult {
    pub name: String,
    pub file: String,
    pub status: Status,
    pub expected: Option<Expect>,
    pub got: Option<Got>,
    /// Everything that is wrong besides the verdict (containment, tree, exit status, ...).
    pub problems: Vec<String>,
    #[serde(serialize_with = "ser_secs")]
    pub duration: Duration,
}

fn ser_secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64((d.as_secs_f64() * 1000.0).round() / 1000.0)
}

/// The whole run.
#[derive(Debug, Clone)]
pub struct Report {
    pub dir: PathBuf,
    pub jobs: usize,
    /// How the children were started: `spare` or `process` ([`Isolate::name`]).
    pub isolate: &'static str,
    pub duration: Duration,
    pub cases: Vec<CaseResult>,
}

impl Report {
    pub fn count(&self, status: Status) -> usize {
        self.cases.iter().filter(|c| c.status == status).count()
    }

    /// True when every case matched and no file was unexpected.
    pub fn all_passed(&self) -> bool {
        self.cases.iter().all(|c| c.status == Status::Pass)
    }
}

/// How to run the cases.
#[derive(Debug, Clone)]
pub struct Options {
    pub jobs: usize,
    /// How long one case may run before its child is killed and the case is an error.
    pub timeout: Duration,
    pub isolate: Isolate,
}

/// Where each case's confined child comes from. Either way the child is confined exactly as
/// `skillbox extract`'s is, and the case gets a fresh parent directory holding its staging
/// directory; the reports of the two are the same case by case.
#[derive(Debug, Clone)]
pub enum Isolate {
    /// Each case as its own `skillbox extract --json` process (`exe`), which starts its own
    /// child: two `exec`s per case. `extract_args` are passed on to every `extract`.
    Process {
        exe: PathBuf,
        extract_args: Vec<String>,
    },
    /// Each case in a confined child of one [`Sandbox`] in this process, taken from its
    /// zygote's pre-started spares (`SandboxConfig::zygote_max_forks` above 0): no `exec` per
    /// case, and the parent's checks run here exactly as `extract` runs them.
    Spare(Box<SpareOptions>),
}

impl Isolate {
    /// `spare` or `process`, as `--isolate` spells it.
    pub fn name(&self) -> &'static str {
        match self {
            Isolate::Process { .. } => "process",
            Isolate::Spare(_) => "spare",
        }
    }
}

/// What `extract`'s flags would have set, for [`Isolate::Spare`].
#[derive(Debug, Clone)]
pub struct SpareOptions {
    /// Confinement, as `extract`'s sandbox flags give it. Its `timeout` is lowered to the
    /// replay's per-case timeout when that is shorter.
    pub sandbox: SandboxConfig,
    /// `extract`'s limit flags: applied over each case's `limits`, as flags override a limits
    /// file.
    pub overrides: LimitOverrides,
}

#[cfg(test)]
mod tests {
    use super::runner::matches;
    use super::*;

    #[test]
    fn xml_escape_covers_markup_and_forbidden_characters() {
        assert_eq!(xml_escape("a<b>&\"c'"), "a&lt;b&gt;&amp;&quot;c&apos;");
        assert_eq!(xml_escape("x\u{1}y\u{1b}"), "x\\u{1}y\\u{1b}");
        assert_eq!(xml_escape("é\n"), "é&#10;");
    }

    #[test]
    fn a_rejected_case_without_a_reason_matches_any_reason() {
        let got = Got {
            verdict: Verdict::Rejected,
            reason: Some(ReasonCode::Corrupt),
            detail: None,
            entry: None,
            findings: BTreeSet::new(),
        };
        assert!(matches(
            &Expect {
                verdict: Verdict::Rejected,
                reason: None
            },
            &got
        ));
        assert!(matches(
            &Expect {
                verdict: Verdict::Rejected,
                reason: Some(ReasonCode::Corrupt)
            },
            &got
        ));
        assert!(!matches(
            &Expect {
                verdict: Verdict::Rejected,
                reason: Some(ReasonCode::Ratio)
            },
            &got
        ));
        assert!(!matches(
            &Expect {
                verdict: Verdict::Accepted,
                reason: None
            },
            &got
        ));
    }
}
