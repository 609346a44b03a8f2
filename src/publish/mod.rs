//! The publisher's side: a directory of skill folders in, a reviewed, reproducible discovery
//! index out (`OUT/.well-known/agent-skills/index.json` and content-addressed artifacts).
//!
//! [`build`] walks each folder ([`walk`]: no symlink followed out, the engine's name rules and
//! default limits held on the source), encodes it reproducibly ([`pack`]), and runs every
//! artifact through the same confined extraction and review a consumer runs (the real sandboxed
//! child, digest checked), refusing what the engine rejects and showing what the review found
//! and what the install policy would decide. The index it writes is parsed back with
//! [`crate::index::parse`] before anything is kept. [`tree`] puts the result in place (new
//! artifacts first, the index last, each by a rename) or compares it with a published tree.
//!
//! This module never parses SKILL.md itself (the review in the confined child does, and its
//! frontmatter is what the index lists), never publishes a skill the engine rejects, never
//! writes a half-built index, and never deletes or replaces a file publish did not write (the
//! staging directories killed runs left are removed: [`stage`]).

pub mod pack;
pub mod stage;
pub mod stock;
pub mod tree;
pub mod walk;

use crate::stop_point::stop_point;
use std::fs::File;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use serde::Serialize;
use url::Url;

use crate::digest::Sha256Digest;
use crate::extract::policy::Limits;
use crate::extract::{ArtifactType, Request};
use crate::index::{self, IndexError, IndexLimits, SCHEMA_0_2_0};
use crate::intake::Outcome;
use crate::lifecycle::policy::{Decision, Facts, Policy};
use crate::reason::{Reason, ReasonCode, Verdict, display_name};
use crate::sandbox::{Sandbox, SandboxError};
use crate::skill::review::{Capabilities, Review, ReviewFlag};

pub use pack::Format;
pub use walk::{Hidden, LEFT_OUT_LISTED, LeftOut, LeftOutCounts, LeftOutReason};
use walk::{SourceKind, SourceTree, WalkError};

/// Where the index sits beneath the output directory (the discovery path).
pub const INDEX_DIR: &str = ".well-known/agent-skills";
/// The index file's name in [`INDEX_DIR`].
pub const INDEX_FILE: &str = "index.json";
/// Hex digits of the digest in an artifact's file name.
pub const NAME_HEX: usize = 12;

/// How to build.
#[derive(Debug, Clone)]
pub struct Options {
    pub format: Format,
    /// The mtime of every archive entry (seconds since the epoch): 0, or `SOURCE_DATE_EPOCH`.
    pub mtime: u64,
    /// The https URL the output directory is served at: entry URLs become absolute under it.
    /// `None`: URLs relative to the index.
    pub base_url: Option<Url>,
    /// Publish a folder holding only SKILL.md as an archive too (else as `skill-md`).
    pub archive_all: bool,
    /// The consumers' limits (the defaults: publishing never loosens them).
    pub limits: Limits,
    /// The install policy each skill is judged by, to show what a consumer will be asked.
    pub policy: Policy,
    /// Refuse a skill the policy would not approve on its own (needs approval or denied).
    pub deny_findings: bool,
    /// Whether hidden entries of a skill folder are packed (version-control metadata never is).
    pub hidden: Hidden,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            format: Format::TarGz,
            mtime: 0,
            base_url: None,
            archive_all: false,
            limits: Limits::default(),
            policy: Policy::default(),
            deny_findings: false,
            hidden: Hidden::LeaveOut,
        }
    }
}

/// Why a skill (or the index) cannot be published: the stable part scripts match on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RefusalCode {
    /// A skill folder with no regular SKILL.md at its root.
    MissingSkillMd,
    /// The folder name is not an Agent Skills name (or not UTF-8).
    InvalidSkillName,
    /// SKILL.md's `name` is not the folder's name.
    NameMismatch,
    /// The description cannot be listed (over 1,024 characters).
    InvalidDescription,
    /// A file name consumers refuse (not UTF-8, control characters, backslash, twins, ...).
    InvalidName,
    /// An absolute symlink, or one that leaves the folder.
    SymlinkEscape,
    /// A symlink to nothing in the folder.
    DanglingSymlink,
    /// A FIFO, socket or device, or a skill folder that is itself a symlink.
    SpecialFile,
    /// A file holding private key material (a PEM `PRIVATE KEY` block, an OpenSSH or PuTTY
    /// private key): published, it is public for good, so it is never packed.
    PrivateKey,
    /// Over one of the consumers' default limits (named in `detail`).
    Limit,
    /// The confined extraction rejected the built artifact (`reason` says why).
    Rejected,
    /// `--deny-findings`: the install policy would not approve it on its own.
    NotApproved,
}

impl RefusalCode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::MissingSkillMd => "missing_skill_md",
            Self::InvalidSkillName => "invalid_skill_name",
            Self::NameMismatch => "name_mismatch",
            Self::InvalidDescription => "invalid_description",
            Self::InvalidName => "invalid_name",
            Self::SymlinkEscape => "symlink_escape",
            Self::DanglingSymlink => "dangling_symlink",
            Self::SpecialFile => "special_file",
            Self::PrivateKey => "private_key",
            Self::Limit => "limit",
            Self::Rejected => "rejected",
            Self::NotApproved => "not_approved",
        }
    }
}

/// One reason a skill is not published.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Refusal {
    /// The skill folder's name (escaped when it is not printable).
    pub skill: String,
    pub code: RefusalCode,
    /// The package-relative path concerned.
    pub path: Option<String>,
    pub detail: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed: Option<u64>,
    /// The engine's reason, for [`RefusalCode::Rejected`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<Box<Reason>>,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.skill, self.code.as_str())?;
        if let Some(p) = &self.path {
            write!(f, " {p}")?;
        }
        write!(f, ": {}", self.detail)
    }
}

/// A failure of the whole run. Exhaustive: the CLI maps each variant to an exit status.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// Not what the command takes (no skills directory, no skill in it, a bad output path).
    #[error("{0}")]
    Usage(String),
    /// The sources hold something consumers refuse: nothing was written.
    #[error("{} refusal(s); nothing was published: {}", .0.len(), first(.0))]
    Refused(Vec<Refusal>),
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    /// The confined child could not be confined here (or timed out, or broke its rules): a
    /// fault of this host or run, not a verdict on the sources.
    #[error(
        "{skill}: the check extraction could not run as a consumer's would: {reason}: {detail}"
    )]
    Confinement {
        skill: String,
        reason: ReasonCode,
        detail: String,
    },
    /// What the confined extraction staged, or the written index read back, is not what was
    /// built: a fault of the writer, never of the sources.
    #[error("internal check failed: {0}")]
    Inconsistent(String),
}

fn first(v: &[Refusal]) -> String {
    v.first().map(ToString::to_string).unwrap_or_default()
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> PublishError {
    let path = path.to_owned();
    move |source| PublishError::Io { path, source }
}

/// One skill folder found in the skills directory.
#[derive(Debug, Clone)]
pub struct SkillSource {
    pub name: String,
    pub dir: PathBuf,
}

/// The skill folders of `skills_dir`: the directory itself when it holds a SKILL.md, else each
/// immediate subdirectory (hidden ones, `.git` and the like, aside; plain files such as a
/// README are not skills). A subfolder that is a symlink, or whose name is not a skill name,
/// is refused.
pub fn discover(skills_dir: &Path) -> Result<(Vec<SkillSource>, Vec<Refusal>), PublishError> {
    let meta = std::fs::metadata(skills_dir).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => {
            PublishError::Usage(format!("{}: no such directory", skills_dir.display()))
        }
        _ => PublishError::Io {
            path: skills_dir.to_owned(),
            source: e,
        },
    })?;
    if !meta.is_dir() {
        return Err(PublishError::Usage(format!(
            "{}: not a directory of skill folders",
            skills_dir.display()
        )));
    }
    let mut refusals = Vec::new();
    if std::fs::symlink_metadata(skills_dir.join("SKILL.md")).is_ok() {
        let canonical = std::fs::canonicalize(skills_dir).map_err(io_err(skills_dir))?;
        let raw = canonical.file_name().unwrap_or_default();
        let skills = match skill_name(raw) {
            Ok(name) => vec![SkillSource {
                name,
                dir: skills_dir.to_owned(),
            }],
            Err(r) => {
                refusals.push(r);
                Vec::new()
            }
        };
        return Ok((skills, refusals));
    }
    let mut names: Vec<std::ffi::OsString> = std::fs::read_dir(skills_dir)
        .map_err(io_err(skills_dir))?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<Result<_, _>>()
        .map_err(io_err(skills_dir))?;
    names.sort_by(|a, b| a.as_encoded_bytes().cmp(b.as_encoded_bytes()));
    let mut skills = Vec::new();
    for raw in names {
        if raw.as_encoded_bytes().starts_with(b".") {
            continue;
        }
        let dir = skills_dir.join(&raw);
        let ft = std::fs::symlink_metadata(&dir)
            .map_err(io_err(&dir))?
            .file_type();
        if ft.is_symlink() {
            refusals.push(Refusal {
                skill: display_name(raw.as_encoded_bytes()),
                code: RefusalCode::SpecialFile,
                path: None,
                detail: "the skill folder is a symlink; publish never follows one (name the \
                         real folder, or move it here)"
                    .into(),
                limit: None,
                observed: None,
                reason: None,
            });
            continue;
        }
        if !ft.is_dir() {
            continue;
        }
        match skill_name(&raw) {
            Ok(name) => skills.push(SkillSource { name, dir }),
            Err(r) => refusals.push(r),
        }
    }
    if skills.is_empty() && refusals.is_empty() {
        return Err(PublishError::Usage(format!(
            "{}: no skill folders (a SKILL.md here, or subfolders holding one)",
            skills_dir.display()
        )));
    }
    Ok((skills, refusals))
}

/// A folder name is the skill's name: UTF-8 and the Agent Skills naming rules.
fn skill_name(raw: &std::ffi::OsStr) -> Result<String, Refusal> {
    let refuse = |detail: String| Refusal {
        skill: display_name(raw.as_encoded_bytes()),
        code: RefusalCode::InvalidSkillName,
        path: None,
        detail,
        limit: None,
        observed: None,
        reason: None,
    };
    let name = raw
        .to_str()
        .ok_or_else(|| refuse("the folder name is not valid UTF-8".into()))?;
    index::check_name(name).map_err(|why| {
        refuse(format!(
            "the folder name is the skill's name, and {why} (Agent Skills naming)"
        ))
    })?;
    Ok(name.to_owned())
}

/// What the review found, as a publisher needs to see it: what consumers' policies ask about.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Findings {
    pub tools: Vec<String>,
    /// Script paths with their interpreter (`scripts/run.sh (sh)`).
    pub scripts: Vec<String>,
    pub capabilities: Capabilities,
    /// Findings by kind (`skill_md_rule`, `unknown_key`, `broken_link`, ...), with counts.
    pub kinds: std::collections::BTreeMap<String, usize>,
    pub review_complete: bool,
}

impl Findings {
    fn of(r: &Review) -> Self {
        let mut kinds = std::collections::BTreeMap::new();
        for f in &r.findings {
            *kinds.entry(f.kind.as_str().to_owned()).or_insert(0) += 1;
        }
        Self {
            tools: r.tools.clone(),
            scripts: r
                .scripts
                .iter()
                .map(|s| match &s.interpreter {
                    Some(i) => format!("{} ({i})", s.path),
                    None => s.path.clone(),
                })
                .collect(),
            capabilities: r.capabilities.clone(),
            kinds,
            review_complete: r.coverage.complete,
        }
    }
}

/// One skill as built and verified.
#[derive(Debug, Clone, Serialize)]
pub struct Published {
    pub name: String,
    #[serde(rename = "type")]
    pub artifact_type: index::EntryType,
    pub description: String,
    pub digest: Sha256Digest,
    pub size: u64,
    /// The entry's `url` as the index lists it.
    pub url: String,
    /// The artifact's path beneath the output directory.
    pub path: String,
    /// Entries in the package (files, directories, symlinks).
    pub entries: usize,
    /// What the folder holds that the package does not (hidden entries, version-control
    /// metadata), each the top of a left-out subtree: the first [`LEFT_OUT_LISTED`] in the
    /// walk's order (each directory's names in byte order, a directory's entries right after
    /// it).
    pub left_out: Vec<LeftOut>,
    /// How many more were left out than are listed, by reason (zero unless over
    /// [`LEFT_OUT_LISTED`]).
    pub left_out_unlisted: LeftOutCounts,
    /// Entries others could not read in the sources while SKILL.md was: published, anyone
    /// reads them ([`walk::SourceTree::not_shared`]).
    pub not_shared: Vec<String>,
    /// Why the stock `skills` npm CLI will not install it, though the draft allows it
    /// ([`stock::will_not_install`]); empty when it installs it. A warning, never a refusal.
    pub skills_cli_leaves_out: Vec<stock::StockWarning>,
    /// How that CLI installs it otherwise than it was packed ([`stock::installs_otherwise`]):
    /// a path cut, executable bits dropped. A warning, never a refusal.
    pub skills_cli_changes: Vec<stock::StockChange>,
    pub findings: Findings,
    /// What the install policy decides for it on a first install.
    pub decision: Decision,
    /// How its check extraction was confined (`confined (landlock ..., seccomp on, uid ...)`).
    pub sandbox: String,
    /// The full review report.
    #[serde(skip)]
    pub review: Review,
}

/// Everything built, in a staging directory laid out as the output directory.
#[derive(Debug)]
pub struct Built {
    pub skills: Vec<Published>,
    /// The index document's exact bytes.
    pub index: Vec<u8>,
    /// The staging directory (removed when dropped, unless [`tree::write`] renamed it).
    pub stage: tempfile::TempDir,
    /// This run's lock on `stage`, held while it exists under its staging name (declared
    /// after it: fields drop in order, so the directory is removed before the lock goes).
    pub stage_lock: stage::StageLock,
}

impl Built {
    /// Every file of the output, as paths beneath the output directory: artifacts, then the
    /// index last.
    pub fn files(&self) -> Vec<String> {
        let mut v: Vec<String> = self.skills.iter().map(|s| s.path.clone()).collect();
        v.push(format!("{INDEX_DIR}/{INDEX_FILE}"));
        v
    }
}

/// The index document (fields in this order; serde_json never reorders a struct).
#[derive(Serialize)]
struct IndexDoc<'a> {
    #[serde(rename = "$schema")]
    schema: &'a str,
    skills: Vec<IndexEntry<'a>>,
}

#[derive(Serialize)]
struct IndexEntry<'a> {
    name: &'a str,
    #[serde(rename = "type")]
    artifact_type: &'a str,
    description: &'a str,
    url: &'a str,
    digest: String,
}

/// Build every skill of `skills` into a new staging directory created in `stage_in`, verifying
/// each artifact in a confined child of `sandbox`. `prior` refusals (from [`discover`]) count
/// as if found here: any refusal at all, and nothing is kept.
pub fn build(
    skills: &[SkillSource],
    prior: Vec<Refusal>,
    opts: &Options,
    sandbox: &Sandbox,
    stage_in: &Path,
) -> Result<Built, PublishError> {
    // An index with no entry, written over a published one, would withdraw every skill.
    if skills.is_empty() && prior.is_empty() {
        return Err(PublishError::Usage(
            "no skill to publish; an empty index is never written".into(),
        ));
    }
    // What killed runs left (their locks free), before this run adds its own: staging
    // directories beside OUT_DIR, check extractions in the temporary directory.
    stage::remove_abandoned(stage_in, stage::RUN_PREFIX);
    stage::remove_abandoned(&std::env::temp_dir(), stage::VERIFY_RUN_PREFIX);
    let (stage, stage_lock) = stage::create(stage_in, stage::RUN_PREFIX)?;
    let mut refusals = prior;
    let mut published = Vec::new();
    for skill in skills {
        match build_one(skill, opts, sandbox, stage.path())? {
            Ok(p) => published.push(p),
            Err(mut r) => refusals.append(&mut r),
        }
    }
    if !refusals.is_empty() {
        return Err(PublishError::Refused(refusals));
    }
    published.sort_by(|a, b| a.name.cmp(&b.name));
    let index = index_document(&published)?;
    read_back(&index, &published, opts)?;
    let at = stage.path().join(INDEX_DIR).join(INDEX_FILE);
    tree::write_file(&at, &index)?;
    stop_point("publish:staged");
    Ok(Built {
        skills: published,
        index,
        stage,
        stage_lock,
    })
}

/// The file name beneath [`INDEX_DIR`] of an artifact: content-addressed, so a URL once
/// published never changes meaning.
fn artifact_path(name: &str, ty: index::EntryType, digest: &Sha256Digest, f: Format) -> String {
    let hex = digest.hex();
    let short = &hex[..NAME_HEX.min(hex.len())];
    match ty {
        index::EntryType::SkillMd => format!("{name}/{short}/SKILL.md"),
        index::EntryType::Archive => format!("{name}/{name}-{short}.{}", f.extension()),
    }
}

fn build_one(
    skill: &SkillSource,
    opts: &Options,
    sandbox: &Sandbox,
    stage: &Path,
) -> Result<Result<Published, Vec<Refusal>>, PublishError> {
    let tree = match walk::walk(&skill.dir, &skill.name, &opts.limits, opts.hidden) {
        Ok(t) => t,
        Err(WalkError::Refused(r)) => return Ok(Err(r)),
        Err(WalkError::Io { path, source }) => return Err(PublishError::Io { path, source }),
    };
    let refuse = |code: RefusalCode, detail: String| Refusal {
        skill: skill.name.clone(),
        code,
        path: None,
        detail,
        limit: None,
        observed: None,
        reason: None,
    };
    let (ty, bytes) = match tree.only_skill_md() {
        Some(md) if !opts.archive_all => (index::EntryType::SkillMd, md.to_vec()),
        _ => (
            index::EntryType::Archive,
            pack::pack(&tree, opts.format, opts.mtime).map_err(io_err(&skill.dir))?,
        ),
    };
    let size = bytes.len() as u64;
    if size > opts.limits.max_artifact_bytes {
        let mut r = refuse(
            RefusalCode::Limit,
            format!(
                "the artifact is {size} bytes, over the consumers' default max_artifact_bytes ({})",
                opts.limits.max_artifact_bytes
            ),
        );
        r.limit = Some(opts.limits.max_artifact_bytes);
        r.observed = Some(size);
        return Ok(Err(vec![r]));
    }
    let digest = Sha256Digest::of_bytes(&bytes);
    let rel = artifact_path(&skill.name, ty, &digest, opts.format);
    let at = stage.join(INDEX_DIR).join(&rel);
    tree::write_file(&at, &bytes)?;

    let (outcome, confinement) = verify(&at, ty, &digest, &skill.name, opts, sandbox)?;
    let review = match (&outcome.verdict, outcome.review) {
        (Verdict::Accepted, Some(review)) => review,
        (Verdict::Accepted, None) => {
            return Err(PublishError::Inconsistent(format!(
                "{}: an accepted answer without a review",
                skill.name
            )));
        }
        (Verdict::Rejected, _) => {
            let reason = outcome.reason.clone();
            if let Some(why) = reason.as_ref().filter(|why| host_fault(why.code)) {
                return Err(PublishError::Confinement {
                    skill: skill.name.clone(),
                    reason: why.code,
                    detail: why.detail.clone(),
                });
            }
            let mut r = refuse(
                RefusalCode::Rejected,
                match &reason {
                    Some(why) => format!(
                        "the consumers' engine rejects the built artifact: {}: {}",
                        why.code, why.detail
                    ),
                    None => "the consumers' engine rejects the built artifact".into(),
                },
            );
            r.path = reason.as_ref().and_then(|why| why.entry.clone());
            r.reason = reason.map(Box::new);
            return Ok(Err(vec![r]));
        }
    };
    same_tree(&skill.name, &tree, &outcome.entries, ty)?;
    let Some(fm) = review.frontmatter.clone() else {
        return Ok(Err(vec![refuse(
            RefusalCode::MissingSkillMd,
            "the review found no SKILL.md frontmatter".into(),
        )]));
    };
    let mut refusals = Vec::new();
    if review.flags.contains(&ReviewFlag::NameMismatch) || fm.name != skill.name {
        let mut r = refuse(
            RefusalCode::NameMismatch,
            format!(
                "SKILL.md names the skill {}, but its folder is {}; they must be equal",
                display_name(fm.name.as_bytes()),
                skill.name
            ),
        );
        r.path = Some("SKILL.md".into());
        refusals.push(r);
    }
    let chars = fm.description.chars().count();
    if chars > index::MAX_DESCRIPTION_CHARS {
        let mut r = refuse(
            RefusalCode::InvalidDescription,
            format!(
                "the description is {chars} characters; an index lists at most {}",
                index::MAX_DESCRIPTION_CHARS
            ),
        );
        r.path = Some("SKILL.md".into());
        refusals.push(r);
    }
    let decision = opts.policy.decide(&review, &Facts::default(), None);
    if opts.deny_findings {
        match &decision {
            Decision::Approved { .. } => {}
            Decision::NeedsApproval { findings } => refusals.push(refuse(
                RefusalCode::NotApproved,
                format!(
                    "--deny-findings: the install policy asks a person about: {}",
                    findings.join(", ")
                ),
            )),
            Decision::Denied { rule } => refusals.push(refuse(
                RefusalCode::NotApproved,
                format!("--deny-findings: the install policy denies it: {rule}"),
            )),
        }
    }
    if !refusals.is_empty() {
        return Ok(Err(refusals));
    }
    let url = match &opts.base_url {
        None => rel.clone(),
        Some(base) => base
            .join(&format!("{INDEX_DIR}/{rel}"))
            .map_err(|e| PublishError::Usage(format!("--base-url: {e}")))?
            .to_string(),
    };
    let skills_cli_leaves_out = stock::will_not_install(&tree, ty, opts.format, &fm.description);
    let skills_cli_changes = stock::installs_otherwise(&tree, ty, opts.format);
    Ok(Ok(Published {
        name: skill.name.clone(),
        artifact_type: ty,
        description: fm.description,
        digest,
        size,
        url,
        path: format!("{INDEX_DIR}/{rel}"),
        entries: tree.entries.len(),
        left_out: tree.left_out.clone(),
        left_out_unlisted: tree.left_out_unlisted,
        not_shared: tree.not_shared.clone(),
        skills_cli_leaves_out,
        skills_cli_changes,
        findings: Findings::of(&review),
        decision,
        sandbox: confinement,
        review,
    }))
}

/// Reasons that say the confined run itself failed here, not that the package is bad: the
/// sources are not refused for them (a consumer's host would decide on its own).
fn host_fault(code: ReasonCode) -> bool {
    matches!(
        code,
        ReasonCode::SandboxUnavailable | ReasonCode::SandboxViolation | ReasonCode::Timeout
    )
}

/// The consumer's path: the artifact file, its digest expected, the folder name as the index
/// will list it, extracted and reviewed in a confined child, then the staged tree removed.
fn verify(
    artifact: &Path,
    ty: index::EntryType,
    digest: &Sha256Digest,
    name: &str,
    opts: &Options,
    sandbox: &Sandbox,
) -> Result<(Outcome, String), PublishError> {
    let file = File::open(artifact).map_err(io_err(artifact))?;
    let req = Request {
        file_name: artifact
            .file_name()
            .map(|n| n.to_string_lossy().into_owned()),
        expected_digest: Some(*digest),
        skill_name: Some(name.to_owned()),
        ..Request::new(
            match ty {
                index::EntryType::SkillMd => ArtifactType::SkillMd,
                index::EntryType::Archive => ArtifactType::Archive,
            },
            opts.limits.clone(),
        )
    };
    // Locked while it exists, so a killed run's is removed by the next run (`stage.rs`).
    let (staging, lock) = stage::create(&std::env::temp_dir(), stage::VERIFY_RUN_PREFIX)?;
    let confined = sandbox.extract(&file, staging.path(), &req);
    stop_point("publish:verify");
    // Beneath the fd, never following a link: the staged tree may hold symlinks.
    if let Ok(dir) = File::open(staging.path()) {
        let _ = crate::extract::writer::clear_beneath(dir.as_fd(), 0);
    }
    // The directory removed before its lock goes.
    drop(staging);
    drop(lock);
    let confined = confined?;
    Ok((confined.outcome, confined.sandbox.summary()))
}

/// What the engine staged must be what was packed: same paths, kinds, bytes, executable bits
/// (archives only: a lone SKILL.md carries no mode) and link targets. A difference is a fault
/// of the writer, and nothing is published.
fn same_tree(
    name: &str,
    tree: &SourceTree,
    staged: &[crate::extract::inventory::Entry],
    ty: index::EntryType,
) -> Result<(), PublishError> {
    let modes_kept = match ty {
        index::EntryType::Archive => true,
        index::EntryType::SkillMd => false,
    };
    use crate::extract::inventory::Kind;
    let bad = |what: String| Err(PublishError::Inconsistent(format!("{name}: {what}")));
    if staged.len() != tree.entries.len() {
        return bad(format!(
            "{} entries staged, {} packed",
            staged.len(),
            tree.entries.len()
        ));
    }
    let mut staged: Vec<&crate::extract::inventory::Entry> = staged.iter().collect();
    staged.sort_by(|a, b| a.path.cmp(&b.path));
    for (s, e) in staged.iter().zip(&tree.entries) {
        if s.path != e.path {
            return bad(format!("staged {}, packed {}", s.path, e.path));
        }
        let ok = match (&e.kind, s.kind) {
            (SourceKind::Dir, Kind::Dir) => true,
            (SourceKind::File { bytes, executable }, Kind::File) => {
                s.sha256 == Some(Sha256Digest::of_bytes(bytes))
                    && (!modes_kept || (s.mode == "0755") == *executable)
            }
            (SourceKind::Symlink { target }, Kind::Symlink) => {
                s.link_target.as_deref() == Some(target.as_str())
            }
            (SourceKind::Dir | SourceKind::File { .. } | SourceKind::Symlink { .. }, _) => false,
        };
        if !ok {
            return bad(format!("{} was staged other than it was packed", s.path));
        }
    }
    Ok(())
}

fn index_document(skills: &[Published]) -> Result<Vec<u8>, PublishError> {
    let doc = IndexDoc {
        schema: SCHEMA_0_2_0,
        skills: skills
            .iter()
            .map(|s| IndexEntry {
                name: &s.name,
                artifact_type: s.artifact_type.as_str(),
                description: &s.description,
                url: &s.url,
                digest: s.digest.to_string(),
            })
            .collect(),
    };
    let mut bytes = serde_json::to_vec_pretty(&doc)
        .map_err(|e| PublishError::Inconsistent(format!("index: {e}")))?;
    bytes.push(b'\n');
    Ok(bytes)
}

/// The index must be one every consumer accepts: parsed back by the same code `skillbox index
/// check` and `fetch` use, every entry listed, none skipped, each resolving to its artifact.
fn read_back(bytes: &[u8], skills: &[Published], opts: &Options) -> Result<(), PublishError> {
    let bad = |m: String| PublishError::Inconsistent(format!("the index read back: {m}"));
    let at = match &opts.base_url {
        Some(b) => b.join(&format!("{INDEX_DIR}/{INDEX_FILE}")),
        None => Url::parse("https://publisher.invalid/.well-known/agent-skills/index.json"),
    }
    .map_err(|e| bad(e.to_string()))?;
    let parsed = match index::parse(bytes, Some(&at), &IndexLimits::default()) {
        Ok(p) => p,
        Err(e @ (IndexError::TooLarge { .. } | IndexError::TooManyEntries { .. })) => {
            return Err(PublishError::Refused(vec![Refusal {
                skill: "(index)".into(),
                code: RefusalCode::Limit,
                path: Some(format!("{INDEX_DIR}/{INDEX_FILE}")),
                detail: format!("over the consumers' default index bounds: {e}"),
                limit: None,
                observed: None,
                reason: None,
            }]));
        }
        Err(
            e @ (IndexError::UnrecognisedSchema { .. }
            | IndexError::NotJson(_)
            | IndexError::NotAnIndex),
        ) => return Err(bad(e.to_string())),
    };
    if let Some(s) = parsed.skipped.first() {
        return Err(bad(format!("entry {} skipped: {}", s.position, s.reason)));
    }
    if parsed.entries.len() != skills.len() {
        return Err(bad(format!(
            "{} entries, {} built",
            parsed.entries.len(),
            skills.len()
        )));
    }
    for (e, s) in parsed.entries.iter().zip(skills) {
        let want = at.join(&s.path.replacen(&format!("{INDEX_DIR}/"), "", 1));
        let resolved = e.url.as_ref().and_then(|u| u.resolved.as_ref());
        if e.name != s.name
            || e.digest != Some(s.digest)
            || e.artifact_type != Some(s.artifact_type)
            || want.ok().as_ref() != resolved
        {
            return Err(bad(format!("entry {} is not what was built", e.name)));
        }
    }
    Ok(())
}
