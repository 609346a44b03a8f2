//! Property checks shared by the fuzz targets (`fuzz/`) and the stable seed-replay test.
//!
//! Each `pub fn` here takes one fuzz input and panics when a property the design promises does
//! not hold; a fuzz target is a one-line call, and `tests/suite/fuzz_seeds.rs` replays the
//! committed seeds through the very same functions on stable Rust. Only public engine APIs are
//! used: the archive checks run the whole engine on the input and hold its answer against the
//! tree it left on disk. Not a stable API (hidden from the docs); never used by the binary.
//!
//! Archive inputs start with one configuration byte (see [`Config`]) so the fuzzer also
//! explores tight limits and every policy switch; the rest is the artifact.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File};
use std::io::{self, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::extract::inventory::{Entry, Flag, Kind};
use crate::extract::path::{Parsed, SafeRelPath, fold_key, hidden_char, nfc_key, nfkc_key};
use crate::extract::policy::{HardlinkPolicy, Limits};
use crate::extract::{ArtifactType, Request};
use crate::intake::Outcome;
use crate::reason::{ReasonCode, Verdict};
use crate::replay::verify_tree;
use crate::skill::frontmatter::{self, FrontmatterLimits};

/// What the first byte of an archive input selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config(pub u8);

/// How the tar target wraps the rest of its input before handing it to the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wrap {
    /// As is (the engine detects tar, gzip or zstd from the bytes).
    Raw,
    /// Gzip-compressed here, so mutations of the tar stream reach the gzip path.
    Gzip,
    /// Zstd-compressed here, likewise for the zstd path.
    Zstd,
}

impl Config {
    /// Bit 0: tight limits (a dozen entries, KiB-sized files, shallow short paths).
    pub const TIGHT: u8 = 1;
    /// Bit 1: do not require a root SKILL.md (lets arbitrary trees be accepted).
    pub const NO_SKILL_MD: u8 = 2;
    /// Bit 2: hard links to earlier files become copies.
    pub const COPY_HARDLINKS: u8 = 4;
    /// Bit 3: symlinks refused.
    pub const NO_SYMLINKS: u8 = 8;

    pub fn limits(self) -> Limits {
        let mut l = Limits::default();
        if self.0 & Self::TIGHT != 0 {
            l.max_entries = 12;
            l.max_expanded_bytes = 64 * 1024;
            l.max_file_bytes = 16 * 1024;
            l.max_ratio = 20;
            l.ratio_threshold_bytes = 4 * 1024;
            l.max_path_depth = 4;
            l.max_path_bytes = 48;
            l.max_component_bytes = 16;
            l.zstd_window_log_max = 16;
        }
        l.require_skill_md = self.0 & Self::NO_SKILL_MD == 0;
        if self.0 & Self::COPY_HARDLINKS != 0 {
            l.hardlinks = HardlinkPolicy::CopyInternal;
        }
        l.allow_symlinks = self.0 & Self::NO_SYMLINKS == 0;
        l
    }

    /// Bits 4-5 (tar target only): 1 gzip, 2 zstd, else raw.
    pub fn wrap(self) -> Wrap {
        match (self.0 >> 4) & 3 {
            1 => Wrap::Gzip,
            2 => Wrap::Zstd,
            _ => Wrap::Raw,
        }
    }
}

/// A scratch directory reused across inputs: one artifact file and fresh staging directories.
struct Workspace {
    dir: tempfile::TempDir,
    artifact: File,
    runs: u64,
}

thread_local! {
    static WORKSPACE: RefCell<Option<Workspace>> = const { RefCell::new(None) };
}

/// A Windows drive prefix (`C:`): absolute there, whatever comes before it in the raw name.
fn drive_like(p: &str) -> bool {
    let b = p.as_bytes();
    b.len() >= 2 && b[0].is_ascii_alphabetic() && b[1] == b':'
}

fn fail(what: impl std::fmt::Display) -> ! {
    panic!("fuzz property violated: {what}")
}

fn with_workspace<T>(f: impl FnOnce(&mut Workspace) -> T) -> T {
    WORKSPACE.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            let dir = tempfile::Builder::new()
                .prefix("skillbox-fuzz-")
                .tempdir()
                .unwrap_or_else(|e| fail(format!("no scratch dir: {e}")));
            let artifact = fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(dir.path().join("artifact"))
                .unwrap_or_else(|e| fail(format!("no artifact file: {e}")));
            *slot = Some(Workspace {
                dir,
                artifact,
                runs: 0,
            });
        }
        match slot.as_mut() {
            Some(ws) => f(ws),
            None => fail("workspace vanished"),
        }
    })
}

/// Run the engine on `bytes` under `limits` in a fresh staging directory and check every
/// property of its answer. Returns the accepted inventory (for round trips), if any.
fn extract_checked(bytes: &[u8], limits: &Limits) -> Option<Vec<Entry>> {
    with_workspace(|ws| {
        ws.artifact.set_len(0).unwrap_or_else(|e| fail(e));
        ws.artifact
            .write_all_at(bytes, 0)
            .unwrap_or_else(|e| fail(e));
    });
    let mut accepted = None;
    run_engine(ArtifactType::Archive, limits, |o, staging| {
        accepted = check_outcome(o, staging, limits, bytes.len() as u64);
    });
    accepted
}

/// Run the engine on the workspace's artifact in a fresh staging directory; `inspect` sees the
/// answer and the staged tree before it is removed. Checks the properties every answer shares:
/// a verdict rather than a fault, nothing beside the staging directory, nothing staged on
/// rejection.
fn run_engine(
    kind: ArtifactType,
    limits: &Limits,
    inspect: impl FnOnce(&Outcome, &Path),
) -> Outcome {
    with_workspace(|ws| {
        ws.runs += 1;
        let staging = ws.dir.path().join(format!("staging-{}", ws.runs));
        fs::create_dir(&staging).unwrap_or_else(|e| fail(e));
        let dir = File::open(&staging).unwrap_or_else(|e| fail(e));
        let req = Request::new(kind, limits.clone());
        let outcome = match crate::intake::run(&ws.artifact, dir.as_fd(), &req) {
            Ok(o) => o,
            Err(e) => fail(format!("engine fault instead of a verdict: {e}")),
        };
        if outcome.verdict == Verdict::Rejected {
            let left = fs::read_dir(&staging).unwrap_or_else(|e| fail(e)).count();
            if left != 0 {
                fail(format!(
                    "rejected ({:?}) but left {left} nodes in staging",
                    outcome.reason
                ));
            }
        }
        inspect(&outcome, &staging);
        // Nothing beside the artifact and this staging directory may exist in the workspace.
        let mut names: Vec<String> = fs::read_dir(ws.dir.path())
            .unwrap_or_else(|e| fail(e))
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        let mut want = vec!["artifact".to_owned(), format!("staging-{}", ws.runs)];
        want.sort();
        if names != want {
            fail(format!("written outside the staging directory: {names:?}"));
        }
        let _ = crate::extract::writer::clear_beneath(dir.as_fd(), 0);
        drop(dir);
        fs::remove_dir(&staging).unwrap_or_else(|e| fail(format!("cannot remove staging: {e}")));
        outcome
    })
}

/// The properties of one answer; returns the inventory when accepted.
fn check_outcome(
    o: &Outcome,
    staging: &Path,
    limits: &Limits,
    bytes_in: u64,
) -> Option<Vec<Entry>> {
    match o.verdict {
        Verdict::Rejected => {
            let Some(reason) = &o.reason else {
                fail("rejected without a reason")
            };
            if !o.entries.is_empty() {
                fail(format!(
                    "rejected ({}) but lists {} entries",
                    reason.code,
                    o.entries.len()
                ));
            }
            let left: Vec<_> = fs::read_dir(staging)
                .unwrap_or_else(|e| fail(e))
                .filter_map(Result::ok)
                .collect();
            if !left.is_empty() {
                fail(format!(
                    "rejected ({}: {}) but left {} nodes in staging",
                    reason.code,
                    reason.detail,
                    left.len()
                ));
            }
            // Reasons are printed to terminals and logs: hostile bytes must arrive escaped.
            let raw = reason
                .entry
                .iter()
                .chain(std::iter::once(&reason.detail))
                .any(|t| t.chars().any(char::is_control));
            if raw {
                fail(format!(
                    "reason {:?} carries a raw control character",
                    reason
                ));
            }
            None
        }
        Verdict::Accepted => {
            if let Some(r) = &o.reason {
                fail(format!("accepted with a reason: {r:?}"));
            }
            if o.review.is_none() {
                fail("accepted without a review report");
            }
            check_inventory(&o.entries, limits);
            check_totals(o, bytes_in, limits);
            if let Err(diffs) = verify_tree(staging, &o.entries) {
                fail(format!("staged tree differs from the inventory: {diffs:?}"));
            }
            check_links_on_disk(staging, &o.entries);
            Some(o.entries.clone())
        }
    }
}

/// Every accepted entry satisfies every policy bound.
fn check_inventory(entries: &[Entry], limits: &Limits) {
    let mut kinds: BTreeMap<&str, Kind> = BTreeMap::new();
    let mut nfc = BTreeSet::new();
    let mut nfkc = BTreeSet::new();
    let mut fold = BTreeSet::new();
    let mut expanded: u64 = 0;
    // Members are at most max_entries, and so are the implicit directories beside them.
    let leaves = entries.iter().filter(|e| e.kind != Kind::Dir).count() as u64;
    if leaves > limits.max_entries || entries.len() as u64 > 2 * limits.max_entries {
        fail(format!(
            "{} entries ({leaves} files and links) accepted, limit {}",
            entries.len(),
            limits.max_entries
        ));
    }
    for pair in entries.windows(2) {
        if pair[0].path.as_bytes() >= pair[1].path.as_bytes() {
            fail(format!(
                "inventory not strictly sorted at {:?}, {:?}",
                pair[0].path, pair[1].path
            ));
        }
    }
    for e in entries {
        match SafeRelPath::parse(e.path.as_bytes(), limits) {
            Ok(Parsed::Path(p)) if p.as_str() == e.path => {}
            other => fail(format!(
                "accepted path {:?} does not re-parse to itself: {other:?}",
                e.path
            )),
        }
        check_normal_form(&e.path);
        if !nfc.insert(nfc_key(&e.path)) {
            fail(format!(
                "{:?} has a Unicode-normalisation twin in the inventory",
                e.path
            ));
        }
        if !nfkc.insert(nfkc_key(&e.path)) {
            fail(format!(
                "{:?} has a compatibility (NFKC) twin in the inventory",
                e.path
            ));
        }
        if !fold.insert(fold_key(&e.path)) {
            fail(format!(
                "{:?} has a case-fold twin in the inventory",
                e.path
            ));
        }
        if let Some((parent, _)) = e.path.rsplit_once('/')
            && kinds.get(parent) != Some(&Kind::Dir)
        {
            fail(format!(
                "{:?} is listed before or without its parent directory",
                e.path
            ));
        }
        kinds.insert(&e.path, e.kind);
        let executable = e.flags.contains(&Flag::Executable);
        match e.kind {
            Kind::File => {
                if e.size > limits.max_file_bytes {
                    fail(format!(
                        "{:?}: {} bytes accepted, limit {}",
                        e.path, e.size, limits.max_file_bytes
                    ));
                }
                expanded += e.size;
                let want = if executable { "0755" } else { "0644" };
                if e.mode != want || e.sha256.is_none() || e.link_target.is_some() {
                    fail(format!(
                        "file {:?} has mode {} (executable flag {executable}), sha256 {:?}",
                        e.path, e.mode, e.sha256
                    ));
                }
                if e.flags.contains(&Flag::SkillMd) != (e.path == "SKILL.md") {
                    fail(format!("skill_md flag wrong on {:?}", e.path));
                }
            }
            Kind::Dir => {
                if e.mode != "0755"
                    || e.size != 0
                    || e.sha256.is_some()
                    || e.link_target.is_some()
                    || executable
                {
                    fail(format!("directory {:?} is {e:?}", e.path));
                }
            }
            Kind::Symlink => {
                if !limits.allow_symlinks {
                    fail(format!(
                        "symlink {:?} accepted although symlinks are refused",
                        e.path
                    ));
                }
                let Some(t) = e.link_target.as_deref() else {
                    fail(format!("symlink {:?} without a target", e.path))
                };
                if t.is_empty()
                    || t.starts_with('/')
                    || t.contains('\\')
                    || t.chars().any(char::is_control)
                {
                    fail(format!("symlink {:?} has target {t:?}", e.path));
                }
                // Inside under the lexical reading too: `..` cancels the text before it.
                let mut depth = e.path.matches('/').count() as i64;
                for comp in t.split('/') {
                    match comp {
                        "" | "." => {}
                        ".." => depth -= 1,
                        _ => depth += 1,
                    }
                    if depth < 0 {
                        fail(format!(
                            "symlink {:?} -> {t:?} leaves the root when read as text",
                            e.path
                        ));
                    }
                }
                if t.chars().any(|c| hidden_char(c).is_some()) || drive_like(t) {
                    fail(format!("symlink {:?} has target {t:?}", e.path));
                }
                if t.len() as u64 > limits.max_path_bytes || e.size != t.len() as u64 {
                    fail(format!(
                        "symlink {:?} target {t:?} length {}",
                        e.path, e.size
                    ));
                }
            }
        }
    }
    if expanded > limits.max_expanded_bytes {
        fail(format!(
            "{expanded} bytes accepted, limit {}",
            limits.max_expanded_bytes
        ));
    }
    if limits.require_skill_md && kinds.get("SKILL.md") != Some(&Kind::File) {
        fail("accepted without a regular SKILL.md at the root");
    }
}

fn check_totals(o: &Outcome, bytes_in: u64, limits: &Limits) {
    let t = &o.totals;
    let count = |k: Kind| o.entries.iter().filter(|e| e.kind == k).count() as u64;
    let out: u64 = o
        .entries
        .iter()
        .filter(|e| e.kind == Kind::File)
        .map(|e| e.size)
        .sum();
    if t.entries != o.entries.len() as u64
        || t.files != count(Kind::File)
        || t.dirs != count(Kind::Dir)
        || t.symlinks != count(Kind::Symlink)
        || t.bytes_in != bytes_in
        || t.bytes_out != out
    {
        fail(format!(
            "totals {t:?} do not add up ({} entries, {out} bytes out, {bytes_in} in)",
            o.entries.len()
        ));
    }
    if out > limits.ratio_threshold_bytes && out > limits.max_ratio.saturating_mul(bytes_in) {
        fail(format!(
            "{out} bytes out of {bytes_in} in passes the ratio limit {}",
            limits.max_ratio
        ));
    }
}

/// Every kept symlink resolves, on disk, to an existing node inside the staging directory.
fn check_links_on_disk(staging: &Path, entries: &[Entry]) {
    let root = staging.canonicalize().unwrap_or_else(|e| fail(e));
    for e in entries.iter().filter(|e| e.kind == Kind::Symlink) {
        match staging.join(&e.path).canonicalize() {
            Ok(p) if p.starts_with(&root) => {}
            Ok(p) => fail(format!(
                "symlink {:?} resolves outside the staging directory, to {}",
                e.path,
                p.display()
            )),
            Err(err) => fail(format!(
                "symlink {:?} -> {:?} does not resolve: {err}",
                e.path, e.link_target
            )),
        }
    }
}

/// A normalised path: non-empty components, no `.`/`..`, no `//`, no leading or trailing `/`,
/// no control characters or backslashes.
fn check_normal_form(p: &str) {
    let bad = p.is_empty()
        || p.starts_with('/')
        || p.ends_with('/')
        || p.contains("//")
        || p.contains('\\')
        || p.chars().any(char::is_control)
        || p.split('/').any(|c| c.is_empty() || c == "." || c == "..");
    if bad {
        fail(format!("{p:?} is not in normal form"));
    }
}

/// Build a plain tar of an accepted inventory from the staged tree (contents from disk).
fn tar_of(staging: &Path, entries: &[Entry]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for e in entries {
        let mut h = tar::Header::new_gnu();
        h.set_mtime(0);
        h.set_mode(u32::from_str_radix(&e.mode, 8).unwrap_or(0o644));
        let r = match e.kind {
            Kind::Dir => {
                h.set_entry_type(tar::EntryType::Directory);
                h.set_size(0);
                b.append_data(&mut h, &e.path, io::empty())
            }
            Kind::File => {
                let data = fs::read(staging.join(&e.path)).unwrap_or_else(|err| fail(err));
                h.set_entry_type(tar::EntryType::Regular);
                h.set_size(data.len() as u64);
                b.append_data(&mut h, &e.path, data.as_slice())
            }
            Kind::Symlink => {
                h.set_entry_type(tar::EntryType::Symlink);
                h.set_size(0);
                b.append_link(&mut h, &e.path, e.link_target.as_deref().unwrap_or(""))
            }
        };
        r.unwrap_or_else(|err| fail(format!("cannot re-pack {:?}: {err}", e.path)));
    }
    b.into_inner().unwrap_or_else(|err| fail(err))
}

/// Extract, and when accepted re-pack the staged tree as a plain tar and extract that: the
/// inventory must come back identical (up to `mode_sanitised`, which a clean re-pack drops).
fn archive_round_trip(bytes: &[u8], limits: &Limits) {
    // Keep the staged tree of the first run for the re-pack: extract again into a kept dir.
    let Some(first) = extract_checked(bytes, limits) else {
        return;
    };
    // An empty tree (possible only without the SKILL.md requirement) packs to an all-zero tar,
    // which has no magic and is refused as `unsupported_format`: nothing to round-trip.
    if first.is_empty() {
        return;
    }
    let repacked = with_workspace(|ws| {
        let keep = ws.dir.path().join("repack-source");
        fs::create_dir(&keep).unwrap_or_else(|e| fail(e));
        let dir = File::open(&keep).unwrap_or_else(|e| fail(e));
        let req = Request::new(ArtifactType::Archive, limits.clone());
        let o = crate::intake::run(&ws.artifact, dir.as_fd(), &req).unwrap_or_else(|e| fail(e));
        if o.entries != first {
            fail("the same artifact gave two different inventories");
        }
        let tar = tar_of(&keep, &o.entries);
        let _ = crate::extract::writer::clear_beneath(dir.as_fd(), 0);
        drop(dir);
        fs::remove_dir(&keep).unwrap_or_else(|e| fail(e));
        tar
    });
    let relaxed = Limits {
        max_artifact_bytes: Limits::default()
            .max_artifact_bytes
            .max(repacked.len() as u64),
        ..limits.clone()
    };
    let Some(second) = extract_checked(&repacked, &relaxed) else {
        fail("the re-packed tar of an accepted tree was rejected");
    };
    let strip = |v: &[Entry]| -> Vec<Entry> {
        v.iter()
            .cloned()
            .map(|mut e| {
                e.flags.retain(|f| *f != Flag::ModeSanitised);
                e
            })
            .collect()
    };
    if strip(&first) != strip(&second) {
        fail("the re-packed tar extracts to a different inventory");
    }
}

/// Fuzz target `zip`: the zip reader through the whole engine.
pub fn zip(data: &[u8]) {
    let Some((&cfg, body)) = data.split_first() else {
        return;
    };
    archive_round_trip(body, &Config(cfg).limits());
}

/// Fuzz target `tar`: the tar family (plain, gzip, zstd) through the whole engine.
pub fn tar(data: &[u8]) {
    let Some((&cfg, body)) = data.split_first() else {
        return;
    };
    let cfg = Config(cfg);
    let bytes = match cfg.wrap() {
        Wrap::Raw => body.to_vec(),
        Wrap::Gzip => {
            let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            enc.write_all(body)
                .and_then(|()| enc.finish())
                .unwrap_or_else(|e| fail(e))
        }
        Wrap::Zstd => zstd::encode_all(body, 1).unwrap_or_else(|e| fail(e)),
    };
    archive_round_trip(&bytes, &cfg.limits());
}

/// What the path rules (docs/limits.md) say about a name, independently of `path.rs`
/// (only the list of invisible characters is shared): the normalised path (`None` for the
/// root) or every rule the name breaks.
fn path_model(raw: &[u8], l: &Limits) -> Result<Option<String>, BTreeSet<ReasonCode>> {
    let Ok(name) = std::str::from_utf8(raw) else {
        return Err(BTreeSet::from([ReasonCode::InvalidName]));
    };
    let mut broken = BTreeSet::new();
    if name
        .chars()
        .any(|c| c.is_control() || hidden_char(c).is_some())
    {
        broken.insert(ReasonCode::InvalidName);
    }
    let comps: Vec<&str> = name
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect();
    // A drive letter is judged on the normalised name: `./C:/x` is `C:/x`. On Windows a
    // leading backslash is a root and two are a UNC name.
    let absolute = name.starts_with('/')
        || name.starts_with('\\')
        || drive_like(name)
        || comps.first().is_some_and(|c| drive_like(c));
    if absolute {
        broken.insert(ReasonCode::AbsolutePath);
    }
    if name.contains('\\') && !absolute {
        // Backslash a separator, as Windows reads it: `..` there climbs out.
        if name.split(['/', '\\']).any(|c| c == "..") {
            broken.insert(ReasonCode::PathTraversal);
        } else {
            broken.insert(ReasonCode::InvalidName);
        }
    }
    if raw.len() as u64 > l.max_path_bytes {
        broken.insert(ReasonCode::PathLength);
    }
    if comps.contains(&"..") {
        broken.insert(ReasonCode::PathTraversal);
    }
    if comps.iter().any(|c| c.len() as u64 > l.max_component_bytes) {
        broken.insert(ReasonCode::PathLength);
    }
    if comps.len() as u64 > l.max_path_depth {
        broken.insert(ReasonCode::PathDepth);
    }
    if comps.iter().any(|c| windows_aliases(c)) {
        broken.insert(ReasonCode::InvalidName);
    }
    // What compatibility normalisation (NFKC) makes a separator or a dot component, or a
    // component the rules above refuse in ASCII (`Ｃ：x` is `C:x`, `ＣＯＮ` is `CON`), with the
    // reason the ASCII spelling gets; the byte limits hold for the raw name only.
    for (i, c) in comps.iter().enumerate() {
        let nfkc = nfkc_key(c);
        if nfkc == *c {
            continue;
        }
        if nfkc.contains(['/', '\\']) || nfkc == "." {
            broken.insert(ReasonCode::InvalidName);
        } else if nfkc == ".." {
            broken.insert(ReasonCode::PathTraversal);
        } else {
            if nfkc
                .chars()
                .any(|ch| ch.is_control() || hidden_char(ch).is_some())
                || windows_aliases(&nfkc)
            {
                broken.insert(ReasonCode::InvalidName);
            }
            if i == 0 && drive_like(&nfkc) {
                broken.insert(ReasonCode::AbsolutePath);
            }
        }
    }
    if !broken.is_empty() {
        return Err(broken);
    }
    Ok(if comps.is_empty() {
        None
    } else {
        Some(comps.join("/"))
    })
}

/// A component Windows reads as another name or a device, or that hides a joiner.
fn windows_aliases(c: &str) -> bool {
    if c == ".." {
        return false;
    }
    let chars: Vec<char> = c.chars().collect();
    let stray_joiner = chars.iter().enumerate().any(|(i, ch)| {
        ['\u{200c}', '\u{200d}'].contains(ch)
            && (i == 0
                || i + 1 == chars.len()
                || chars[i - 1].is_ascii()
                || chars[i + 1].is_ascii())
    });
    let base = c
        .split('.')
        .next()
        .unwrap_or("")
        .trim_end_matches(' ')
        .to_lowercase();
    let device = ["con", "prn", "aux", "nul", "conin$", "conout$"].contains(&base.as_str())
        || ["com", "lpt"].iter().any(|p| {
            base.strip_prefix(p).is_some_and(|n| {
                [
                    "1", "2", "3", "4", "5", "6", "7", "8", "9", "\u{b9}", "\u{b2}", "\u{b3}",
                ]
                .contains(&n)
            })
        });
    c.ends_with('.') || c.ends_with(' ') || c.contains(':') || stray_joiner || device
}

/// Fuzz target `path`: validation against an independent model, idempotence, normal form,
/// and the collision keys. Input: a config byte (bit 0: tight limits), then a name, and
/// optionally `0xFF` and a second name for the collision-key properties.
pub fn path(data: &[u8]) {
    let Some((&cfg, rest)) = data.split_first() else {
        return;
    };
    let limits = Config(cfg & Config::TIGHT).limits();
    let (a, b) = match rest.iter().position(|&x| x == 0xff) {
        Some(i) => (&rest[..i], Some(&rest[i + 1..])),
        None => (rest, None),
    };
    let got = SafeRelPath::parse(a, &limits);
    match (&got, path_model(a, &limits)) {
        (Ok(Parsed::Path(p)), Ok(Some(m))) if p.as_str() == m => {
            check_normal_form(p.as_str());
            check_components(p.as_str());
            check_nfkc_form(p.as_str(), &limits);
            if p.as_str().len() > a.len() {
                fail(format!("normalising {a:?} made it longer"));
            }
            match SafeRelPath::parse(p.as_str().as_bytes(), &limits) {
                Ok(Parsed::Path(q)) if q == *p => {}
                other => fail(format!("parse is not idempotent on {p:?}: {other:?}")),
            }
            if p.components().count() as u64 > limits.max_path_depth {
                fail(format!("{p:?} is deeper than the limit"));
            }
        }
        (Ok(Parsed::Root), Ok(None)) => {}
        (Err(r), Err(broken)) if broken.contains(&r.code) => {
            if r.entry
                .as_deref()
                .is_none_or(|e| e.chars().any(char::is_control))
            {
                fail(format!(
                    "rejection of {a:?} names no printable entry: {r:?}"
                ));
            }
        }
        (got, model) => fail(format!("parse({a:?}) = {got:?}, the rules say {model:?}")),
    }
    let Ok(sa) = std::str::from_utf8(a) else {
        return;
    };
    check_keys(sa);
    if let Some(sb) = b.and_then(|b| std::str::from_utf8(b).ok()) {
        check_keys(sb);
        if nfc_key(sa) == nfc_key(sb) && fold_key(sa) != fold_key(sb) {
            fail(format!(
                "{sa:?} and {sb:?} are Unicode twins but not case-fold twins"
            ));
        }
        if nfkc_key(sa) == nfkc_key(sb) && fold_key(sa) != fold_key(sb) {
            fail(format!(
                "{sa:?} and {sb:?} are compatibility twins but not case-fold twins"
            ));
        }
    }
}

fn check_keys(s: &str) {
    let n = nfc_key(s);
    let f = fold_key(s);
    if nfc_key(&n) != n {
        fail(format!("nfc_key is not idempotent on {s:?}"));
    }
    if fold_key(&f) != f {
        fail(format!("fold_key is not idempotent on {s:?}"));
    }
    if fold_key(&n) != f {
        fail(format!("{s:?} and its NFC form fold differently"));
    }
    if fold_key(&nfkc_key(s)) != f || nfkc_key(&nfkc_key(s)) != nfkc_key(s) {
        fail(format!("{s:?} and its NFKC form fold differently"));
    }
    // Twins that differ only in ASCII case collide on every case-insensitive filesystem.
    if fold_key(&s.to_ascii_uppercase()) != fold_key(&s.to_ascii_lowercase()) {
        fail(format!("ASCII case variants of {s:?} fold differently"));
    }
}

/// The collision keys of a name the parser accepted (the only names the extraction keys) keep
/// its components: compatibility characters that would make a separator (`／`, `℆`) are
/// refused by the parser ([`SafeRelPath::parse`]), so no key of an accepted path holds more or
/// fewer components than the path, and a key of one entry never reads as a key of a path
/// beneath another.
fn check_components(p: &str) {
    let parts = p.split('/').count();
    for (kind, key) in [
        ("NFC", nfc_key(p)),
        ("NFKC", nfkc_key(p)),
        ("fold", fold_key(p)),
    ] {
        if key.split('/').count() != parts {
            fail(format!(
                "the {kind} collision key {key:?} of the accepted {p:?} changes its components"
            ));
        }
    }
}

/// The NFKC form of a name the parser accepted is a name it accepts as it is, the limits on
/// the raw name's bytes aside: a tool that normalises names (the reason the twin checks key by
/// NFKC) writes only names the parser would have taken, never `C:x` for `Ｃ：x`.
fn check_nfkc_form(p: &str, limits: &Limits) {
    let nfkc = nfkc_key(p);
    let relaxed = Limits {
        max_path_bytes: u64::MAX,
        max_component_bytes: u64::MAX,
        ..limits.clone()
    };
    match SafeRelPath::parse(nfkc.as_bytes(), &relaxed) {
        Ok(Parsed::Path(q)) if q.as_str() == nfkc => {}
        other => fail(format!(
            "the NFKC form {nfkc:?} of the accepted {p:?} parses as {other:?}"
        )),
    }
}

fn check_frontmatter(md: &[u8], p: &frontmatter::Parsed) {
    let fm = &p.frontmatter;
    if fm.name.trim().is_empty() || fm.description.trim().is_empty() {
        fail(format!(
            "accepted frontmatter with a blank name or description: {fm:?}"
        ));
    }
    if !p.key_lines.contains_key("name") || !p.key_lines.contains_key("description") {
        fail(format!("name/description have no line: {:?}", p.key_lines));
    }
    if let Some(k) = fm
        .unknown_keys
        .iter()
        .find(|k| !p.key_lines.contains_key(*k))
    {
        fail(format!("unknown key {k:?} has no line"));
    }
    // YAML counts a lone CR as a line break too (YAML 1.2, 5.4), so lines are counted its way.
    let lines = 1 + md
        .iter()
        .enumerate()
        .filter(|&(i, &b)| b == b'\n' || (b == b'\r' && md.get(i + 1) != Some(&b'\n')))
        .count() as u64;
    let key_lines = p.key_lines.values().copied();
    if let Some(l) = p
        .issues
        .iter()
        .map(|i| i.line)
        .chain(key_lines)
        .find(|&l| l == 0 || l > lines)
    {
        fail(format!("line {l} is outside SKILL.md's {lines} lines"));
    }
    let name_issue = p.issues.iter().any(|i| i.key == "name" && !i.unknown_key);
    if name_issue == frontmatter::name_violations(&fm.name).is_empty() {
        fail(format!(
            "name {:?}: issues and name_violations disagree",
            fm.name
        ));
    }
    if fm.allowed_tools.iter().any(String::is_empty) {
        fail(format!("empty allowed tool in {:?}", fm.allowed_tools));
    }
}

/// Fuzz target `skill_md`: SKILL.md frontmatter parsing, alone and through the engine. Input:
/// a config byte (bit 0: tight frontmatter budgets), then the SKILL.md bytes.
pub fn skill_md(data: &[u8]) {
    let Some((&cfg, md)) = data.split_first() else {
        return;
    };
    let default = FrontmatterLimits::default();
    let tight = FrontmatterLimits {
        max_bytes: 512,
        max_depth: 4,
        max_nodes: 48,
        max_scalar_bytes: 512,
    };
    let limits = if cfg & 1 != 0 { tight } else { default };
    let first = frontmatter::parse(md, &limits);
    if frontmatter::parse(md, &limits) != first {
        fail("the same SKILL.md parsed two ways");
    }
    match &first {
        Err(r) => {
            if r.code != ReasonCode::InvalidSkillMd || r.entry.as_deref() != Some("SKILL.md") {
                fail(format!("frontmatter refused with {r:?}"));
            }
            if r.detail.chars().any(char::is_control) {
                fail(format!(
                    "frontmatter reason carries a raw control character: {:?}",
                    r.detail
                ));
            }
        }
        Ok(p) => check_frontmatter(md, p),
    }
    // Looser budgets never turn an accepted frontmatter into a refused or different one.
    let with_default = if limits == default {
        first.clone()
    } else {
        frontmatter::parse(md, &default)
    };
    if let Ok(p) = &first
        && with_default.as_ref().ok() != Some(p)
    {
        fail(format!(
            "accepted under tight budgets but not identically under defaults: {with_default:?}"
        ));
    }
    // Line endings are not content: the CRLF spelling of an accepted document says the same.
    if first.is_ok() && !md.contains(&b'\r') {
        let crlf: Vec<u8> = md
            .iter()
            .flat_map(|&b| {
                if b == b'\n' {
                    vec![b'\r', b'\n']
                } else {
                    vec![b]
                }
            })
            .collect();
        let doubled = FrontmatterLimits {
            max_bytes: limits.max_bytes * 2,
            max_scalar_bytes: limits.max_scalar_bytes * 2,
            ..limits
        };
        match (frontmatter::parse(&crlf, &doubled), &first) {
            (Ok(c), Ok(p)) if c.frontmatter == p.frontmatter && c.key_lines == p.key_lines => {}
            (c, _) => fail(format!(
                "the CRLF spelling parses differently: {c:?} vs {first:?}"
            )),
        }
    }
    // Through the engine: staged byte for byte when accepted, nothing when refused, and the
    // verdict is the frontmatter's.
    with_workspace(|ws| {
        ws.artifact.set_len(0).unwrap_or_else(|e| fail(e));
        ws.artifact.write_all_at(md, 0).unwrap_or_else(|e| fail(e));
    });
    let outcome = run_engine(ArtifactType::SkillMd, &Limits::default(), |o, staging| {
        if o.verdict == Verdict::Accepted {
            let staged = fs::read(staging.join("SKILL.md")).unwrap_or_else(|e| fail(e));
            if staged != md || o.entries.len() != 1 {
                fail("an accepted SKILL.md is not staged byte for byte as the only entry");
            }
        }
    });
    match (&outcome.verdict, &with_default) {
        (Verdict::Accepted, Ok(_)) => {}
        (Verdict::Rejected, Err(_)) => {}
        (Verdict::Rejected, Ok(_))
            if outcome
                .reason
                .as_ref()
                .is_some_and(|r| r.code == ReasonCode::FormatMismatch) => {}
        (v, fm) => fail(format!(
            "engine says {v:?} ({:?}), frontmatter says {fm:?}",
            outcome.reason
        )),
    }
}

/// Fuzz target `wire`: the parent<->child framing and message decoding (`sandbox::wire`), as
/// both sides use it. Input: a config byte (bits 0-3 pick a small frame bound), then raw bytes
/// read as a frame, then decoded as the parent decodes an answer and the child a request.
pub fn wire(data: &[u8]) {
    use crate::sandbox::wire::{self, ChildAnswer, ChildRequest, WireError};
    let Some((&cfg, raw)) = data.split_first() else {
        return;
    };
    let small = 16usize << (cfg & 15);
    for max in [small, wire::DEFAULT_MAX_ANSWER_BYTES] {
        let declared = raw
            .get(..4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize);
        match (wire::single_frame(raw, max), declared) {
            (Ok(p), Some(len)) => {
                if len > max || raw.len() != 4 + len || p != &raw[4..] {
                    fail(format!(
                        "single_frame accepted a frame of {len} bytes (bound {max}) in {} bytes",
                        raw.len()
                    ));
                }
                // The stream reader agrees with the buffer decoder on a well-formed frame.
                match wire::read_frame(raw, max) {
                    Ok(v) if v == p => {}
                    other => fail(format!("read_frame disagrees with single_frame: {other:?}")),
                }
            }
            (Err(WireError::TooLarge { len, .. }), Some(d)) if len as usize == d && d > max => {}
            (Err(WireError::Truncated { .. }), Some(d)) if raw.len() < 4 + d => {}
            (Err(WireError::Truncated { .. }), None) => {}
            (Err(WireError::Trailing(n)), Some(d)) if raw.len() == 4 + d + n && n > 0 => {}
            (r, d) => fail(format!(
                "single_frame({} bytes, bound {max}, declared {d:?}) = {r:?}",
                raw.len()
            )),
        }
        // A reader never returns more than the bound, whatever the stream says.
        if let Ok(v) = wire::read_frame(raw, max)
            && v.len() > max
        {
            fail(format!(
                "read_frame returned {} bytes over the bound {max}",
                v.len()
            ));
        }
    }
    // Round trip: framing any payload and decoding it yields the payload.
    let framed = wire::frame(raw).unwrap_or_else(|e| fail(e));
    if wire::single_frame(&framed, raw.len()).ok() != Some(raw) {
        fail("frame/single_frame do not round-trip");
    }
    // Decoding: what either side accepts re-encodes to something it decodes to the same value.
    fn round_trip<T: serde::Serialize + serde::de::DeserializeOwned>(what: &str, payload: &[u8]) {
        let Ok(first) = serde_json::from_slice::<T>(payload) else {
            return;
        };
        let v1 = serde_json::to_value(&first).unwrap_or_else(|e| fail(e));
        let text = serde_json::to_vec(&first).unwrap_or_else(|e| fail(e));
        let second: T = serde_json::from_slice(&text)
            .unwrap_or_else(|e| fail(format!("{what} does not re-decode: {e}")));
        let v2 = serde_json::to_value(&second).unwrap_or_else(|e| fail(e));
        if v1 != v2 {
            fail(format!("{what} changes across a re-encode: {v1} vs {v2}"));
        }
    }
    let payload = wire::single_frame(raw, wire::DEFAULT_MAX_ANSWER_BYTES).unwrap_or(raw);
    round_trip::<ChildAnswer>("a child answer", payload);
    round_trip::<ChildRequest>("a child request", payload);
}

/// The directory of committed seeds for a target (`fuzz/corpus/<target>` in the repository).
pub fn seed_dir(manifest_dir: &Path, target: &str) -> PathBuf {
    manifest_dir.join("fuzz").join("corpus").join(target)
}
