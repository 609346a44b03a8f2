//! Replaying a corpus of artifacts against their expected verdicts (`skillbox replay DIR`).
//!
//! A corpus is a directory with a `manifest.json` (the format of the project's own
//! `corpus/manifest.json`, see docs/corpus-and-fuzzing.md) next to the artifacts. Every case runs as its own
//! `skillbox extract --json` process, exactly the path an operator's `extract` takes (and so
//! confined the same way), with a fresh parent directory as its working directory and
//! `TMPDIR`. Afterwards the parent must hold nothing but the staging directory (accepted) or
//! nothing at all (rejected), and an accepted staging tree must be exactly its inventory.
//!
//! This module never parses an artifact itself: it only reads manifests, spawns, and reads the
//! children's JSON answers. Files no manifest names are run too and reported `unexpected`; a
//! subdirectory with its own `manifest.json` is a nested suite whose case names carry its path.

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
use crate::extract::policy::Limits;
use crate::intake::Outcome;
use crate::reason::{ReasonCode, Verdict, display_name};

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
    #[error("{path}: no manifest (a corpus directory needs a {MANIFEST} naming its cases)")]
    MissingManifest { path: PathBuf },
    #[error("{path}: cannot read: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error("{path}: malformed manifest: {message}")]
    Malformed { path: PathBuf, message: String },
    #[error("cannot prepare a scratch directory: {0}")]
    Scratch(#[source] io::Error),
    #[error("cannot find the skillbox binary to run cases with: {0}")]
    Exe(#[source] io::Error),
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

/// One manifest entry as written in the file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCase {
    name: String,
    file: String,
    #[serde(rename = "type")]
    kind: CaseType,
    #[serde(default)]
    media_type: Option<String>,
    #[serde(default)]
    limits: Option<Value>,
    #[serde(default)]
    digest: Option<String>,
    expect: Expect,
    /// Kinds of review findings an accepted case must report, exactly (`corpus/review/`).
    #[serde(default)]
    findings: Option<BTreeSet<String>>,
    #[serde(default)]
    description: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawManifest {
    version: u32,
    cases: Vec<RawCase>,
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
    pub timeout: Duration,
    /// The `skillbox` binary whose `extract` runs each case.
    pub exe: PathBuf,
    pub extract_args: Vec<String>,
}

/// Load every suite under `dir` and list the cases, unexpected files included.
pub fn collect(dir: &Path) -> Result<Vec<Case>, ReplayError> {
    let mut cases = Vec::new();
    let mut covered = BTreeSet::new();
    load_suite(dir, Path::new(""), &mut cases, &mut covered)?;
    let mut files = Vec::new();
    scan(dir, Path::new(""), &mut files).map_err(|source| ReplayError::Read {
        path: dir.to_owned(),
        source,
    })?;
    let mut names: BTreeSet<String> = cases.iter().map(|c| c.name.clone()).collect();
    for rel in files {
        if covered.contains(&rel) {
            continue;
        }
        let mut name = rel.to_string_lossy().into_owned();
        while !names.insert(name.clone()) {
            name.push('~');
        }
        cases.push(Case {
            name,
            file: rel,
            kind: None,
            media_type: None,
            limits: None,
            digest: None,
            expect: None,
            findings: None,
            description: None,
        });
    }
    Ok(cases)
}

/// Read `dir/<prefix>/manifest.json` and, recursively, every nested suite below it.
fn load_suite(
    root: &Path,
    prefix: &Path,
    cases: &mut Vec<Case>,
    covered: &mut BTreeSet<PathBuf>,
) -> Result<(), ReplayError> {
    let suite_dir = root.join(prefix);
    let path = suite_dir.join(MANIFEST);
    let malformed = |message: String| ReplayError::Malformed {
        path: path.clone(),
        message,
    };
    let meta = match fs::metadata(&path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(ReplayError::MissingManifest { path });
        }
        Err(source) => return Err(ReplayError::Read { path, source }),
    };
    if !meta.is_file() {
        return Err(malformed("not a regular file".into()));
    }
    if meta.len() > MAX_MANIFEST_BYTES {
        return Err(malformed(format!("larger than {MAX_MANIFEST_BYTES} bytes")));
    }
    let text = fs::read(&path).map_err(|source| ReplayError::Read {
        path: path.clone(),
        source,
    })?;
    let raw: RawManifest = serde_json::from_slice(&text).map_err(|e| malformed(e.to_string()))?;
    if raw.version != 1 {
        return Err(malformed(format!(
            "version {} is not supported (expected 1)",
            raw.version
        )));
    }
    let mut seen = BTreeSet::new();
    for (i, c) in raw.cases.into_iter().enumerate() {
        let at = |msg: String| malformed(format!("cases[{i}] ({:?}): {msg}", c.name));
        if c.name.is_empty() {
            return Err(at("empty name".into()));
        }
        if !seen.insert(c.name.clone()) {
            return Err(at("duplicate case name".into()));
        }
        let file = Path::new(&c.file);
        if c.file.is_empty()
            || !file
                .components()
                .all(|p| matches!(p, Component::Normal(_) | Component::CurDir))
        {
            return Err(at(format!(
                "file {:?} must be a relative path without `..`",
                c.file
            )));
        }
        if c.expect.verdict == Verdict::Accepted && c.expect.reason.is_some() {
            return Err(at("an accepted case cannot name a reason".into()));
        }
        if let Some(limits) = &c.limits {
            let parsed: Limits =
                serde_json::from_value(limits.clone()).map_err(|e| at(format!("limits: {e}")))?;
            parsed.validate().map_err(|e| at(format!("limits: {e}")))?;
        }
        if let Some(d) = &c.digest {
            d.parse::<Sha256Digest>()
                .map_err(|e| at(format!("digest: {e}")))?;
        }
        let rel: PathBuf = prefix.join(file.components().collect::<PathBuf>());
        covered.insert(rel.clone());
        let name = if prefix.as_os_str().is_empty() {
            c.name
        } else {
            format!("{}/{}", prefix.display(), c.name)
        };
        cases.push(Case {
            name,
            file: rel,
            kind: Some(c.kind),
            media_type: c.media_type,
            limits: c.limits,
            digest: c.digest,
            expect: Some(c.expect),
            findings: c.findings,
            description: c.description,
        });
    }
    // Nested suites: any subdirectory with its own manifest.
    let mut subdirs = Vec::new();
    find_suites(&suite_dir, Path::new(""), &mut subdirs).map_err(|source| ReplayError::Read {
        path: suite_dir.clone(),
        source,
    })?;
    for sub in subdirs {
        load_suite(root, &prefix.join(sub), cases, covered)?;
    }
    Ok(())
}

/// Subdirectories (relative to `base`) that hold a manifest, not descending into them.
fn find_suites(base: &Path, rel: &Path, out: &mut Vec<PathBuf>) -> io::Result<()> {
    let mut entries: Vec<_> = fs::read_dir(base.join(rel))?.collect::<io::Result<_>>()?;
    entries.sort_by_key(fs::DirEntry::file_name);
    for e in entries {
        if !e.file_type()?.is_dir() {
            continue;
        }
        let sub = rel.join(e.file_name());
        if base.join(&sub).join(MANIFEST).exists() {
            out.push(sub);
        } else {
            find_suites(base, &sub, out)?;
        }
    }
    Ok(())
}

/// Whether a file in a corpus is bookkeeping rather than a case.
fn is_bookkeeping(name: &str, at_suite_root: bool) -> bool {
    let upper = name.to_ascii_uppercase();
    (at_suite_root && name == MANIFEST)
        || upper.starts_with("README")
        || upper.starts_with("CHECKSUMS")
}

/// Every artifact file under `base` (relative paths), skipping bookkeeping files.
fn scan(base: &Path, rel: &Path, out: &mut Vec<PathBuf>) -> io::Result<()> {
    let here = base.join(rel);
    let at_suite_root = here.join(MANIFEST).is_file();
    let mut entries: Vec<_> = fs::read_dir(&here)?.collect::<io::Result<_>>()?;
    entries.sort_by_key(fs::DirEntry::file_name);
    for e in entries {
        let name = e.file_name();
        let ty = e.file_type()?;
        let sub = rel.join(&name);
        if ty.is_dir() {
            scan(base, &sub, out)?;
        } else if !is_bookkeeping(&name.to_string_lossy(), at_suite_root) {
            out.push(sub);
        }
    }
    Ok(())
}

/// Run every case under `dir` in parallel.
pub fn run(dir: &Path, opts: &Options) -> Result<Report, ReplayError> {
    let start = Instant::now();
    let cases = collect(dir)?;
    let scratch = tempfile::Builder::new()
        .prefix("skillbox-replay-")
        .tempdir()
        .map_err(ReplayError::Scratch)?;
    fs::create_dir(scratch.path().join("io")).map_err(ReplayError::Scratch)?;
    fs::create_dir(scratch.path().join("cases")).map_err(ReplayError::Scratch)?;
    let dir_abs = dir.canonicalize().map_err(|source| ReplayError::Read {
        path: dir.to_owned(),
        source,
    })?;
    let jobs = opts.jobs.clamp(1, cases.len().max(1));
    let next = AtomicUsize::new(0);
    let results: Mutex<BTreeMap<usize, CaseResult>> = Mutex::new(BTreeMap::new());
    std::thread::scope(|s| {
        for _ in 0..jobs {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(case) = cases.get(i) else { break };
                    let r = run_case(i, case, &dir_abs, scratch.path(), opts);
                    if let Ok(mut m) = results.lock() {
                        m.insert(i, r);
                    }
                }
            });
        }
    });
    let results = results.into_inner().unwrap_or_default();
    Ok(Report {
        dir: dir.to_owned(),
        jobs,
        duration: start.elapsed(),
        cases: results.into_values().collect(),
    })
}

fn run_case(i: usize, case: &Case, dir: &Path, scratch: &Path, opts: &Options) -> CaseResult {
    let start = Instant::now();
    let mut result = CaseResult {
        name: case.name.clone(),
        file: case.file.to_string_lossy().into_owned(),
        status: Status::Error,
        expected: case.expect.clone(),
        got: None,
        problems: Vec::new(),
        duration: Duration::ZERO,
    };
    match execute(i, case, dir, scratch, opts, &mut result.problems) {
        Some(got) => {
            let mut status = match &case.expect {
                None => Status::Unexpected,
                Some(e) if matches(e, &got) => Status::Pass,
                Some(_) => Status::Fail,
            };
            if status == Status::Pass && !result.problems.is_empty() {
                status = Status::Fail;
            }
            result.status = status;
            result.got = Some(got);
        }
        None => {
            result.status = if case.expect.is_none() {
                Status::Unexpected
            } else {
                Status::Error
            }
        }
    }
    result.duration = start.elapsed();
    result
}

fn matches(expect: &Expect, got: &Got) -> bool {
    expect.verdict == got.verdict
        && (expect.reason.is_none() && got.verdict == Verdict::Rejected
            || expect.reason == got.reason)
}

/// Run one case; `None` when it produced no usable answer (the problems say why).
fn execute(
    i: usize,
    case: &Case,
    dir: &Path,
    scratch: &Path,
    opts: &Options,
    problems: &mut Vec<String>,
) -> Option<Got> {
    let artifact = dir.join(&case.file);
    match fs::metadata(&artifact) {
        Ok(m) if m.is_file() => {}
        Ok(_) => {
            problems.push(format!("{} is not a regular file", case.file.display()));
            return None;
        }
        Err(e) => {
            problems.push(format!("cannot read {}: {e}", case.file.display()));
            return None;
        }
    }
    // A fresh, empty parent per case: the child's cwd and TMPDIR, so stray writes show up.
    let parent = scratch.join("cases").join(i.to_string());
    let io_dir = scratch.join("io");
    if let Err(e) = fs::create_dir(&parent) {
        problems.push(format!("cannot create the case directory: {e}"));
        return None;
    }
    let staging = parent.join("staging");
    let mut cmd = Command::new(&opts.exe);
    cmd.arg("extract")
        .arg(&artifact)
        .arg("--json")
        .arg("--out")
        .arg(&staging);
    if let Some(kind) = case.kind {
        cmd.arg("--type").arg(kind.as_str());
    }
    if let Some(mt) = &case.media_type {
        cmd.arg("--media-type").arg(mt);
    }
    if let Some(d) = &case.digest {
        cmd.arg("--digest").arg(d);
    }
    if let Some(limits) = &case.limits {
        let path = io_dir.join(format!("{i}.limits.json"));
        if let Err(e) = fs::write(&path, limits.to_string()) {
            problems.push(format!("cannot write the limits file: {e}"));
            return None;
        }
        cmd.arg("--limits").arg(path);
    }
    cmd.args(&opts.extract_args);
    let out_path = io_dir.join(format!("{i}.out"));
    let err_path = io_dir.join(format!("{i}.err"));
    let (Ok(out), Ok(err)) = (File::create(&out_path), File::create(&err_path)) else {
        problems.push("cannot create the output files".into());
        return None;
    };
    cmd.current_dir(&parent)
        .env("TMPDIR", &parent)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err);
    let status = wait(cmd, opts.timeout, problems);
    let answer = status.and_then(|status| read_answer(status, &out_path, &err_path, problems));
    check_containment(&parent, answer.as_ref().map(|(o, _)| o), problems);
    if let Ok(dir) = File::open(&parent) {
        let _ = crate::extract::writer::clear_beneath(dir.as_fd(), 0);
    }
    let _ = fs::remove_dir(&parent);
    let (o, v) = answer?;
    // A reason is printed to terminals and logs: hostile names must arrive escaped.
    if let Some(r) = &o.reason {
        if r.entry
            .iter()
            .chain(std::iter::once(&r.detail))
            .any(|t| t.chars().any(char::is_control))
        {
            problems
                .push("the reason carries a raw control character (unescaped hostile name)".into());
        }
    }
    // Finding kinds are read from the JSON: the report's shape belongs to the review.
    let findings: BTreeSet<String> = v["review"]["findings"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|f| f["kind"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    if let Some(want) = &case.findings {
        if o.verdict == Verdict::Accepted && *want != findings {
            let show = |s: &BTreeSet<String>| s.iter().cloned().collect::<Vec<_>>().join(", ");
            problems.push(format!(
                "review findings [{}], expected [{}]",
                show(&findings),
                show(want)
            ));
        }
    }
    Some(Got {
        verdict: o.verdict,
        reason: o.reason.as_ref().map(|r| r.code),
        detail: o.reason.as_ref().map(|r| r.detail.clone()),
        entry: o.reason.as_ref().and_then(|r| r.entry.clone()),
        findings,
    })
}

/// Spawn and wait, killing the child past the timeout.
fn wait(mut cmd: Command, timeout: Duration, problems: &mut Vec<String>) -> Option<ExitStatus> {
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            problems.push(format!("cannot run skillbox extract: {e}"));
            return None;
        }
    };
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(1);
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                problems.push(format!(
                    "timed out after {}s and was killed",
                    timeout.as_secs()
                ));
                return None;
            }
            Ok(None) => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            Err(e) => {
                problems.push(format!("cannot wait for skillbox extract: {e}"));
                let _ = child.kill();
                return None;
            }
        }
    }
}

fn tail(path: &Path) -> String {
    let text = fs::read(path).unwrap_or_default();
    let start = text.len().saturating_sub(2000);
    display_name(String::from_utf8_lossy(&text[start..]).trim().as_bytes())
}

/// Decode the child's JSON answer and hold it against its exit status.
fn read_answer(
    status: ExitStatus,
    out: &Path,
    err: &Path,
    problems: &mut Vec<String>,
) -> Option<(Outcome, Value)> {
    let mut text = Vec::new();
    let read = File::open(out).and_then(|f| f.take(MAX_ANSWER_BYTES + 1).read_to_end(&mut text));
    let code = status.code();
    let answer: Option<(Outcome, Value)> = match read {
        Ok(_) if text.len() as u64 > MAX_ANSWER_BYTES => {
            problems.push(format!("answer larger than {MAX_ANSWER_BYTES} bytes"));
            None
        }
        Ok(_) => serde_json::from_slice::<Value>(&text).ok().and_then(|v| {
            serde_json::from_value::<Outcome>(v.clone())
                .ok()
                .map(|o| (o, v))
        }),
        Err(e) => {
            problems.push(format!("cannot read the answer: {e}"));
            None
        }
    };
    let expected_code = answer.as_ref().map(|(o, _)| match o.verdict {
        Verdict::Accepted => 0,
        Verdict::Rejected => 3,
    });
    match (code, expected_code) {
        (Some(c), Some(e)) if c == e => answer,
        (Some(c), Some(_)) => {
            problems.push(format!(
                "exit status {c} does not match the verdict in the answer"
            ));
            answer
        }
        (code, None) => {
            let how = match code {
                Some(c) => format!("exited with status {c}"),
                None => format!("was killed ({status})"),
            };
            problems.push(format!(
                "skillbox extract {how} without a verdict: {}",
                tail(err)
            ));
            None
        }
        (None, Some(_)) => {
            problems.push(format!("skillbox extract was killed ({status})"));
            None
        }
    }
}

/// Nothing outside the staging directory, nothing at all after a rejection, and an accepted
/// staging tree that is exactly its inventory.
fn check_containment(parent: &Path, answer: Option<&Outcome>, problems: &mut Vec<String>) {
    let names: Vec<String> = match fs::read_dir(parent) {
        Ok(rd) => rd
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect(),
        Err(e) => {
            problems.push(format!("cannot list the case directory: {e}"));
            return;
        }
    };
    let accepted = answer.is_some_and(|o| o.verdict == Verdict::Accepted);
    let mut stray: Vec<String> = names
        .iter()
        .filter(|n| !(accepted && n.as_str() == "staging"))
        .cloned()
        .collect();
    stray.sort();
    if !stray.is_empty() {
        let what = if accepted {
            "outside the staging directory"
        } else {
            "after a rejection"
        };
        problems.push(format!(
            "left on disk {what}: {}",
            display_name(stray.join(", ").as_bytes())
        ));
    }
    if let Some(o) = answer.filter(|o| o.verdict == Verdict::Accepted) {
        let staging = parent.join("staging");
        if !staging.is_dir() {
            problems.push("accepted, but the staging directory is missing".into());
        } else if let Err(mut diffs) = verify_tree(&staging, &o.entries) {
            diffs.truncate(10);
            problems.extend(diffs.into_iter().map(|d| format!("staged tree: {d}")));
        }
    }
}

/// Compare the tree beneath `root` (never following symlinks) with an inventory: the same
/// paths, kinds, sizes, modes, link targets and file hashes. Returns every difference.
pub fn verify_tree(root: &Path, entries: &[Entry]) -> Result<(), Vec<String>> {
    let mut on_disk = BTreeMap::new();
    let mut diffs = Vec::new();
    if let Err(e) = walk(root, "", &mut on_disk, 0) {
        return Err(vec![format!("cannot walk the tree: {e}")]);
    }
    let mut listed = BTreeSet::new();
    for e in entries {
        if !listed.insert(e.path.as_str()) {
            diffs.push(format!("{:?} is listed twice", e.path));
        }
        let Some(meta) = on_disk.get(&e.path) else {
            diffs.push(format!("{:?} is listed but not on disk", e.path));
            continue;
        };
        let ft = meta.file_type();
        let kind = if ft.is_symlink() {
            Kind::Symlink
        } else if ft.is_dir() {
            Kind::Dir
        } else if ft.is_file() {
            Kind::File
        } else {
            diffs.push(format!("{:?} is a special file on disk", e.path));
            continue;
        };
        if kind != e.kind {
            diffs.push(format!(
                "{:?} is a {kind:?} on disk, listed as {:?}",
                e.path, e.kind
            ));
            continue;
        }
        let path = root.join(&e.path);
        match kind {
            Kind::File => {
                if meta.len() != e.size {
                    diffs.push(format!(
                        "{:?} has {} bytes on disk, listed {}",
                        e.path,
                        meta.len(),
                        e.size
                    ));
                }
                if let Some(want) = e.sha256 {
                    match hash_nofollow(&path) {
                        Ok(got) if got == want => {}
                        Ok(got) => {
                            diffs.push(format!("{:?} hashes to {got}, listed {want}", e.path))
                        }
                        Err(err) => diffs.push(format!("{:?} cannot be read: {err}", e.path)),
                    }
                } else {
                    diffs.push(format!("{:?} is a file without a sha256", e.path));
                }
            }
            Kind::Symlink => match fs::read_link(&path) {
                Ok(t) if Some(t.to_string_lossy().as_ref()) == e.link_target.as_deref() => {}
                Ok(t) => diffs.push(format!(
                    "{:?} points at {t:?} on disk, listed {:?}",
                    e.path, e.link_target
                )),
                Err(err) => diffs.push(format!("{:?} cannot be read: {err}", e.path)),
            },
            Kind::Dir => {}
        }
        if kind != Kind::Symlink {
            let mode = format!("{:04o}", meta.mode() & 0o7777);
            if mode != e.mode {
                diffs.push(format!(
                    "{:?} has mode {mode} on disk, listed {}",
                    e.path, e.mode
                ));
            }
        }
    }
    for path in on_disk.keys() {
        if !listed.contains(path.as_str()) {
            diffs.push(format!(
                "{:?} is on disk but not listed",
                display_name(path.as_bytes())
            ));
        }
    }
    if diffs.is_empty() { Ok(()) } else { Err(diffs) }
}

fn walk(
    root: &Path,
    rel: &str,
    out: &mut BTreeMap<String, fs::Metadata>,
    depth: u32,
) -> io::Result<()> {
    if depth > 256 {
        return Err(io::Error::other("tree deeper than 256 levels"));
    }
    for e in fs::read_dir(root.join(rel))? {
        let e = e?;
        let name = e.file_name();
        let join = |name: &str| {
            if rel.is_empty() {
                name.to_owned()
            } else {
                format!("{rel}/{name}")
            }
        };
        let Some(name) = name.to_str() else {
            // Never created by the engine (names are UTF-8); listed so the diff shows it.
            out.insert(join(&name.to_string_lossy()), e.metadata()?);
            continue;
        };
        let path = join(name);
        // DirEntry::metadata does not follow symlinks.
        let meta = e.metadata()?;
        if meta.is_dir() {
            walk(root, &path, out, depth + 1)?;
        }
        out.insert(path, meta);
    }
    Ok(())
}

fn hash_nofollow(path: &Path) -> io::Result<Sha256Digest> {
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(path)?;
    let mut reader = io::BufReader::new(file);
    let mut hasher = Hasher::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = reader.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher.finish().0)
}

fn describe_expect(e: &Expect) -> String {
    match (e.verdict, e.reason) {
        (Verdict::Accepted, _) => "accepted".into(),
        (Verdict::Rejected, Some(r)) => format!("rejected ({r})"),
        (Verdict::Rejected, None) => "rejected (any reason)".into(),
    }
}

fn describe_got(g: &Got) -> String {
    match (g.verdict, g.reason) {
        (Verdict::Accepted, _) => "accepted".into(),
        (Verdict::Rejected, Some(r)) => format!("rejected ({r})"),
        (Verdict::Rejected, None) => "rejected (no reason)".into(),
    }
}

/// The lines explaining a case that did not pass (shared by the text and JUnit reports).
fn explain(c: &CaseResult) -> Vec<(&'static str, String)> {
    let mut lines = Vec::new();
    match &c.expected {
        Some(e) => lines.push(("expected", describe_expect(e))),
        None => lines.push(("expected", "(no manifest entry)".into())),
    }
    match &c.got {
        Some(g) => {
            lines.push(("got", describe_got(g)));
            if let Some(d) = &g.detail {
                let entry = g
                    .entry
                    .as_deref()
                    .map(|e| format!(" [entry: {e}]"))
                    .unwrap_or_default();
                lines.push(("detail", format!("{d}{entry}")));
            }
        }
        None => lines.push(("got", "(no answer)".into())),
    }
    for p in &c.problems {
        lines.push(("problem", p.clone()));
    }
    lines
}

/// The human summary: one block per case that did not pass, then the totals.
pub fn human(report: &Report) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "replay {}: {} cases, {} jobs",
        report.dir.display(),
        report.cases.len(),
        report.jobs
    );
    for c in report.cases.iter().filter(|c| c.status != Status::Pass) {
        // Names come from file names and manifests: never print them raw to a terminal.
        let _ = writeln!(
            s,
            "{:<10}  {}  [{}]",
            c.status.label(),
            display_name(c.name.as_bytes()),
            display_name(c.file.as_bytes())
        );
        for (label, text) in explain(c) {
            let _ = writeln!(s, "    {label:<9} {}", display_name(text.as_bytes()));
        }
    }
    let _ = writeln!(
        s,
        "{} cases: {} passed, {} failed, {} unexpected, {} errors ({:.2}s)",
        report.cases.len(),
        report.count(Status::Pass),
        report.count(Status::Fail),
        report.count(Status::Unexpected),
        report.count(Status::Error),
        report.duration.as_secs_f64()
    );
    s
}

/// The `--json` object.
pub fn to_json(report: &Report) -> Value {
    json!({
        "dir": report.dir.to_string_lossy(),
        "ok": report.all_passed(),
        "summary": {
            "total": report.cases.len(),
            "passed": report.count(Status::Pass),
            "failed": report.count(Status::Fail),
            "unexpected": report.count(Status::Unexpected),
            "errors": report.count(Status::Error),
            "seconds": (report.duration.as_secs_f64() * 1000.0).round() / 1000.0,
        },
        "cases": report.cases,
    })
}

/// Escape text for XML 1.0 content and attribute values. Characters XML cannot carry at all
/// (most C0 controls, U+FFFE/U+FFFF) are written as `\u{..}` so the report stays well formed.
pub fn xml_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for ch in text.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\n' => out.push_str("&#10;"),
            '\r' => out.push_str("&#13;"),
            '\t' => out.push_str("&#9;"),
            c if (c as u32) < 0x20 || c == '\u{fffe}' || c == '\u{ffff}' => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

/// JUnit XML: one `testsuite`, one `testcase` per case; mismatches and unexpected files are
/// `failure`s, cases that could not run are `error`s.
pub fn junit(report: &Report) -> String {
    let mut s = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let failures = report.count(Status::Fail) + report.count(Status::Unexpected);
    let errors = report.count(Status::Error);
    let secs = |d: Duration| format!("{:.3}", d.as_secs_f64());
    let suite = xml_escape(&format!("skillbox replay {}", report.dir.display()));
    let _ = writeln!(
        s,
        "<testsuites name=\"{suite}\" tests=\"{}\" failures=\"{failures}\" errors=\"{errors}\" time=\"{}\">",
        report.cases.len(),
        secs(report.duration)
    );
    let _ = writeln!(
        s,
        "  <testsuite name=\"{suite}\" tests=\"{}\" failures=\"{failures}\" errors=\"{errors}\" skipped=\"0\" time=\"{}\">",
        report.cases.len(),
        secs(report.duration)
    );
    for c in &report.cases {
        let classname = match Path::new(&c.file)
            .parent()
            .map(|p| p.to_string_lossy().replace('/', "."))
        {
            Some(p) if !p.is_empty() => format!("replay.{p}"),
            _ => "replay".into(),
        };
        let _ = write!(
            s,
            "    <testcase classname=\"{}\" name=\"{}\" file=\"{}\" time=\"{}\"",
            xml_escape(&classname),
            xml_escape(&c.name),
            xml_escape(&c.file),
            secs(c.duration)
        );
        let (tag, kind) = match c.status {
            Status::Pass => {
                s.push_str("/>\n");
                continue;
            }
            Status::Fail => ("failure", "mismatch"),
            Status::Unexpected => ("failure", "unexpected"),
            Status::Error => ("error", "error"),
        };
        let lines = explain(c);
        let message = match (&c.expected, &c.got) {
            (None, _) => "no manifest entry for this file".to_owned(),
            (Some(e), Some(g)) if !matches(e, g) => {
                format!("expected {}, got {}", describe_expect(e), describe_got(g))
            }
            _ => c
                .problems
                .first()
                .cloned()
                .unwrap_or_else(|| "no answer".into()),
        };
        let body: String = lines.iter().map(|(l, t)| format!("{l}: {t}\n")).collect();
        let _ = writeln!(
            s,
            ">\n      <{tag} type=\"{kind}\" message=\"{}\">{}</{tag}>\n    </testcase>",
            xml_escape(&message),
            xml_escape(&body)
        );
    }
    s.push_str("  </testsuite>\n</testsuites>\n");
    s
}

#[cfg(test)]
mod tests {
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
