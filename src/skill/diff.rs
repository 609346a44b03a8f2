//! What changed between two versions of a skill, and whether its capabilities grew.
//!
//! Input is two saved answers (the `extract --json` object, seen as a [`Version`]) with their
//! review reports; no package is opened. The verdict is `unchanged` when the artifact digests are equal,
//! `needs_review` when anything a reviewer must look at again appeared (a new or changed script
//! or executable, a new host, tool, credential touch, download, upload or risky command in code,
//! or a new review that left bytes unread), and `content_only` otherwise (documentation, assets,
//! renames, frontmatter text, and anything prose or data merely mentions). Growth is judged by content, not by position: a script moved to a
//! new path with the same bytes is a rename, a host that moved to another line is not new.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::digest::Sha256Digest;
use crate::extract::inventory::{Entry, Kind};
use crate::reason::{Verdict, display_name};
use crate::skill::review::{FindingKind, Review, Script, interpreter_by_name, interpreter_family};

/// The three answers, in increasing order of concern.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    Unchanged,
    ContentOnly,
    NeedsReview,
}

impl Change {
    pub fn as_str(self) -> &'static str {
        match self {
            Change::Unchanged => "unchanged",
            Change::ContentOnly => "content_only",
            Change::NeedsReview => "needs_review",
        }
    }
}

/// A capability the new version has and the old one did not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GrowthKind {
    NewScript,
    ChangedScript,
    NewExecutable,
    ChangedExecutable,
    NewTool,
    NewHost,
    NewCredential,
    NewDownload,
    NewUpload,
    NewRiskyCommand,
    /// The new version's review hit a bound: growth cannot be ruled out.
    IncompleteReview,
}

impl GrowthKind {
    pub fn as_str(self) -> &'static str {
        match self {
            GrowthKind::NewScript => "new_script",
            GrowthKind::ChangedScript => "changed_script",
            GrowthKind::NewExecutable => "new_executable",
            GrowthKind::ChangedExecutable => "changed_executable",
            GrowthKind::NewTool => "new_tool",
            GrowthKind::NewHost => "new_host",
            GrowthKind::NewCredential => "new_credential",
            GrowthKind::NewDownload => "new_download",
            GrowthKind::NewUpload => "new_upload",
            GrowthKind::NewRiskyCommand => "new_risky_command",
            GrowthKind::IncompleteReview => "incomplete_review",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Growth {
    pub kind: GrowthKind,
    /// The path, host, tool, credential or command.
    pub subject: String,
    /// Where it appears in the new version (`file:line`), or an interpreter, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rename {
    pub from: String,
    pub to: String,
}

/// File-level changes (regular files and symlinks; directories follow from them).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct FileChanges {
    pub added: Vec<String>,
    pub removed: Vec<String>,
    pub modified: Vec<String>,
    pub renamed: Vec<Rename>,
}

/// The whole comparison; the `diff --json` object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Diff {
    pub change: Change,
    pub old_digest: Option<Sha256Digest>,
    pub new_digest: Option<Sha256Digest>,
    /// Capabilities gained: non-empty exactly when `change` is `needs_review`.
    pub grown: Vec<Growth>,
    /// Capabilities dropped (informational).
    pub dropped: Vec<Growth>,
    pub files: FileChanges,
    /// Frontmatter fields whose value changed (`name`, `description`, ...).
    pub frontmatter_changed: Vec<String>,
}

/// Two answers that cannot be compared.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum DiffError {
    #[error("the {which} answer is a rejection; only accepted answers can be compared")]
    NotAccepted { which: &'static str },
    #[error("the {which} answer has no review report (produced by a skillbox without review?)")]
    NoReview { which: &'static str },
}

/// What the diff reads of one saved answer.
#[derive(Debug, Clone, Copy)]
pub struct Version<'a> {
    pub verdict: Verdict,
    /// The artifact's digest (equal digests: unchanged, nothing else is compared).
    pub digest: Option<Sha256Digest>,
    pub entries: &'a [Entry],
    pub review: Option<&'a Review>,
}

/// Compare two saved answers.
pub fn diff(old: &Version<'_>, new: &Version<'_>) -> Result<Diff, DiffError> {
    let (od, nd) = (old.digest, new.digest);
    let mut d = Diff {
        change: Change::Unchanged,
        old_digest: od,
        new_digest: nd,
        grown: Vec::new(),
        dropped: Vec::new(),
        files: FileChanges::default(),
        frontmatter_changed: Vec::new(),
    };
    if od.is_some() && od == nd {
        return Ok(d);
    }
    for (which, o) in [("old", old), ("new", new)] {
        if o.verdict != Verdict::Accepted {
            return Err(DiffError::NotAccepted { which });
        }
    }
    let (Some(or), Some(nr)) = (old.review, new.review) else {
        let which = if old.review.is_none() { "old" } else { "new" };
        return Err(DiffError::NoReview { which });
    };

    d.files = file_changes(old, new);
    let sha = |o: &Version<'_>| -> BTreeMap<String, Option<Sha256Digest>> {
        o.entries
            .iter()
            .filter(|e| e.kind == Kind::File)
            .map(|e| (e.path.clone(), e.sha256))
            .collect()
    };
    let (old_sha, new_sha) = (sha(old), sha(new));

    // Scripts and executables: by content, so a pure rename is not growth. But the same
    // bytes run by another interpreter are another program (a polyglot `a.sh` renamed `a.py`,
    // or `bash x.txt` become `python3 x.txt`): a script is known only when an old one with its
    // bytes ran the way it runs (see `runs_as_before`).
    let old_scripts: BTreeMap<&str, &Script> =
        or.scripts.iter().map(|s| (s.path.as_str(), s)).collect();
    let mut old_by_sha: HashMap<Sha256Digest, Vec<&Script>> = HashMap::new();
    for s in &or.scripts {
        if let Some(h) = s.sha256 {
            old_by_sha.entry(h).or_default().push(s);
        }
    }
    for s in &nr.scripts {
        let at = s.interpreter.clone();
        let same_bytes = |o: &&Script| o.sha256 == s.sha256 && runs_as_before(o, s);
        let kind = match old_scripts.get(s.path.as_str()) {
            Some(prev) if same_bytes(prev) => continue,
            Some(_) => GrowthKind::ChangedScript,
            None => match s.sha256.and_then(|h| old_by_sha.get(&h)) {
                Some(olds) if olds.iter().any(same_bytes) => continue,
                // Old bytes under a new name that another interpreter runs.
                Some(_) => GrowthKind::ChangedScript,
                None => GrowthKind::NewScript,
            },
        };
        d.grown.push(Growth {
            kind,
            subject: s.path.clone(),
            at,
        });
    }
    let new_script_paths: BTreeSet<&str> = nr.scripts.iter().map(|s| s.path.as_str()).collect();
    let new_script_shas: HashSet<Sha256Digest> =
        nr.scripts.iter().filter_map(|s| s.sha256).collect();
    for s in &or.scripts {
        if !new_script_paths.contains(s.path.as_str())
            && !s.sha256.is_some_and(|h| new_script_shas.contains(&h))
        {
            d.dropped.push(Growth {
                kind: GrowthKind::NewScript,
                subject: s.path.clone(),
                at: None,
            });
        }
    }
    let old_exec: BTreeSet<&str> = or
        .capabilities
        .executables
        .iter()
        .map(String::as_str)
        .collect();
    let old_exec_shas: HashSet<Sha256Digest> = old_exec
        .iter()
        .filter_map(|p| old_sha.get(*p).copied().flatten())
        .collect();
    for p in &nr.capabilities.executables {
        if new_script_paths.contains(p.as_str()) {
            continue; // judged as a script above
        }
        let h = new_sha.get(p).copied().flatten();
        if old_exec.contains(p.as_str()) {
            if old_sha.get(p).copied().flatten() != h {
                d.grown.push(Growth {
                    kind: GrowthKind::ChangedExecutable,
                    subject: p.clone(),
                    at: None,
                });
            }
        } else if !h.is_some_and(|h| old_exec_shas.contains(&h)) {
            d.grown.push(Growth {
                kind: GrowthKind::NewExecutable,
                subject: p.clone(),
                at: None,
            });
        }
    }

    // Subjects: tools, hosts, credentials, downloads, risky commands.
    // Capabilities come from code only (scripts, code blocks): what prose or data mentions is
    // in `mentions` and never grows anything on its own.
    let sets: [(GrowthKind, &[String], &[String], FindingKind); 6] = [
        (
            GrowthKind::NewTool,
            &or.tools[..],
            &nr.tools[..],
            FindingKind::RequestedTool,
        ),
        (
            GrowthKind::NewHost,
            &or.capabilities.hosts,
            &nr.capabilities.hosts,
            FindingKind::ExternalReference,
        ),
        (
            GrowthKind::NewCredential,
            &or.capabilities.credentials,
            &nr.capabilities.credentials,
            FindingKind::CredentialTouch,
        ),
        (
            GrowthKind::NewDownload,
            &or.capabilities.downloads,
            &nr.capabilities.downloads,
            FindingKind::Download,
        ),
        (
            GrowthKind::NewUpload,
            &or.capabilities.uploads,
            &nr.capabilities.uploads,
            FindingKind::Upload,
        ),
        (
            GrowthKind::NewRiskyCommand,
            &or.capabilities.risky_commands,
            &nr.capabilities.risky_commands,
            FindingKind::RiskyCommand,
        ),
    ];
    for (kind, o, n, fk) in sets {
        let os: BTreeSet<&String> = o.iter().collect();
        let ns: BTreeSet<&String> = n.iter().collect();
        for s in ns.difference(&os) {
            d.grown.push(Growth {
                kind,
                subject: (*s).clone(),
                at: located(nr, fk, s),
            });
        }
        for s in os.difference(&ns) {
            d.dropped.push(Growth {
                kind,
                subject: (*s).clone(),
                at: None,
            });
        }
    }
    if !nr.coverage.complete {
        d.grown.push(Growth {
            kind: GrowthKind::IncompleteReview,
            subject: "the new version's review hit its bounds".into(),
            at: None,
        });
    }

    d.frontmatter_changed = frontmatter_changes(or, nr);
    d.grown
        .sort_by(|a, b| (a.kind, &a.subject).cmp(&(b.kind, &b.subject)));
    d.change = if d.grown.is_empty() {
        Change::ContentOnly
    } else {
        Change::NeedsReview
    };
    Ok(d)
}

/// Whether `new` (a script with `old`'s bytes) runs as `old` did: its name calls for the same
/// interpreter (`a.sh` and `b.sh`, not `a.py`), and the package's commands run it with no
/// program they did not run `old` with (interpreters compared by family: `python3` is
/// `python`). The shebang is in the bytes, so the same either way. An old answer saved before
/// `run_with` was recorded is compared by name alone.
fn runs_as_before(old: &Script, new: &Script) -> bool {
    let by_name = |s: &Script| interpreter_by_name(&s.path).map(interpreter_family);
    if by_name(old) != by_name(new) {
        return false;
    }
    let (Some(o), Some(n)) = (&old.run_with, &new.run_with) else {
        return true;
    };
    let o: HashSet<String> = o.iter().map(|p| interpreter_family(p)).collect();
    n.iter().all(|p| o.contains(&interpreter_family(p)))
}

/// `file:line` of the first finding of `kind` about `subject`.
fn located(r: &Review, kind: FindingKind, subject: &str) -> Option<String> {
    let f = r
        .findings
        .iter()
        .find(|f| f.kind == kind && f.context.is_code() && f.subject.as_deref() == Some(subject))
        .or_else(|| {
            r.findings
                .iter()
                .find(|f| f.kind == kind && f.subject.as_deref() == Some(subject))
        })?;
    Some(match f.line {
        Some(l) => format!("{}:{l}", f.file),
        None => f.file.clone(),
    })
}

fn file_changes(old: &Version<'_>, new: &Version<'_>) -> FileChanges {
    // A symlink is identified by its target; a file by its digest.
    let ident = |o: &Version<'_>| -> BTreeMap<String, String> {
        o.entries
            .iter()
            .filter_map(|e| match e.kind {
                Kind::File => Some((
                    e.path.clone(),
                    format!(
                        "file:{}",
                        e.sha256.map(|h| h.to_string()).unwrap_or_default()
                    ),
                )),
                Kind::Symlink => Some((
                    e.path.clone(),
                    format!("link:{}", e.link_target.clone().unwrap_or_default()),
                )),
                Kind::Dir => None,
            })
            .collect()
    };
    let (o, n) = (ident(old), ident(new));
    let mut fc = FileChanges::default();
    let mut removed: Vec<(&String, &String)> =
        o.iter().filter(|(p, _)| !n.contains_key(*p)).collect();
    for (p, id) in &n {
        match o.get(p) {
            Some(prev) if prev == id => {}
            Some(_) => fc.modified.push(p.clone()),
            None => match removed.iter().position(|(_, rid)| *rid == id) {
                Some(i) => {
                    let (from, _) = removed.remove(i);
                    fc.renamed.push(Rename {
                        from: from.clone(),
                        to: p.clone(),
                    });
                }
                None => fc.added.push(p.clone()),
            },
        }
    }
    fc.removed = removed.into_iter().map(|(p, _)| p.clone()).collect();
    fc
}

fn frontmatter_changes(o: &Review, n: &Review) -> Vec<String> {
    let (Some(a), Some(b)) = (&o.frontmatter, &n.frontmatter) else {
        return if o.frontmatter.is_some() != n.frontmatter.is_some() {
            vec!["frontmatter".into()]
        } else {
            Vec::new()
        };
    };
    let mut out = Vec::new();
    let mut cmp = |name: &str, same: bool| {
        if !same {
            out.push(name.to_owned());
        }
    };
    cmp("name", a.name == b.name);
    cmp("description", a.description == b.description);
    cmp("license", a.license == b.license);
    cmp("compatibility", a.compatibility == b.compatibility);
    cmp("metadata", a.metadata == b.metadata);
    cmp("allowed-tools", a.allowed_tools == b.allowed_tools);
    cmp("unknown keys", a.unknown_keys == b.unknown_keys);
    out
}

/// The human rendering: verdict line, grown capabilities first, then files, then frontmatter.
/// Every untrusted string is escaped.
pub fn render(d: &Diff) -> String {
    let digest = |h: Option<Sha256Digest>| h.map_or_else(|| "-".to_owned(), |h| h.to_string());
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{}  {} -> {}",
        d.change.as_str(),
        digest(d.old_digest),
        digest(d.new_digest)
    );
    if !d.grown.is_empty() {
        let _ = writeln!(s, "  grown capabilities ({}):", d.grown.len());
        for g in &d.grown {
            let at =
                g.at.as_deref()
                    .map(|a| format!("  ({})", display_name(a.as_bytes())))
                    .unwrap_or_default();
            let _ = writeln!(
                s,
                "    + {:<18} {}{at}",
                g.kind.as_str(),
                display_name(g.subject.as_bytes())
            );
        }
    }
    if !d.dropped.is_empty() {
        let _ = writeln!(s, "  dropped ({}):", d.dropped.len());
        for g in &d.dropped {
            let what = g.kind.as_str().replacen("new_", "", 1);
            let _ = writeln!(
                s,
                "    - {:<18} {}",
                what,
                display_name(g.subject.as_bytes())
            );
        }
    }
    let f = &d.files;
    if d.change != Change::Unchanged {
        let _ = writeln!(
            s,
            "  files: {} added, {} removed, {} modified, {} renamed",
            f.added.len(),
            f.removed.len(),
            f.modified.len(),
            f.renamed.len()
        );
        for p in &f.added {
            let _ = writeln!(s, "    + {}", display_name(p.as_bytes()));
        }
        for p in &f.removed {
            let _ = writeln!(s, "    - {}", display_name(p.as_bytes()));
        }
        for p in &f.modified {
            let _ = writeln!(s, "    ~ {}", display_name(p.as_bytes()));
        }
        for r in &f.renamed {
            let _ = writeln!(
                s,
                "    > {} -> {}",
                display_name(r.from.as_bytes()),
                display_name(r.to.as_bytes())
            );
        }
    }
    if !d.frontmatter_changed.is_empty() {
        let _ = writeln!(
            s,
            "  frontmatter changed: {}",
            d.frontmatter_changed.join(", ")
        );
    }
    s
}
