//! The policy core: every entry from every reader passes through [`Sink::add`].
//!
//! Readers only decode; the sink decides. It validates names, keeps the tree of what exists
//! (to catch duplicates, file/directory clashes, case and Unicode twins, and writes through
//! symlinks), enforces the count, size and ratio limits on bytes actually produced, writes
//! through [`Writer`], hashes while writing, and resolves symlinks once the tree is complete.
//!
//! The expansion ratio is a fixed output budget, `max_ratio` x the artifact's size, known
//! before the first byte is decoded: the verdict never depends on member order, and a bomb is
//! still stopped the moment its output passes the budget.

use std::io::{self, Read};
use std::os::fd::BorrowedFd;

use nix::errno::Errno;

use super::captured::{Captured, HEAD_BYTES, NUL_WINDOW};
use super::hashing::{self, Failure, FileHash, InlineBuf, Pending, Target, VIEW_CHUNK};
use super::input::{View, Views};
use super::inventory::{self, Entry, Flag, Kind, Totals};
use super::path::{Parsed, SafeRelPath, drive_like, fold_key, hidden_char, nfc_key, nfkc_key};
use super::policy::{HardlinkPolicy, Limits};
use super::writer::{self, Writer};
use super::{EngineError, Format, Stop};
use crate::digest::Sha256Digest;
use crate::names::NameMap;
use crate::reason::{Reason, ReasonCode, display_name};

/// Symlink hops followed when resolving a target, as Linux's `MAXSYMLINKS`.
const MAX_SYMLINK_HOPS: u32 = 40;

/// What an archive header says an entry is.
pub(crate) enum RawKind {
    File,
    Dir,
    Symlink(Vec<u8>),
    HardLink(Vec<u8>),
    /// Device, FIFO or socket: never created.
    Special(&'static str),
}

pub(crate) struct RawEntry<'n> {
    pub name: &'n [u8],
    pub kind: RawKind,
    /// Permission bits as the archive states them (only the low 12 bits are looked at).
    pub mode: u32,
    /// Uncompressed size the header claims, checked against what is produced (zip).
    pub declared_size: Option<u64>,
}

impl<'n> RawEntry<'n> {
    pub(crate) fn file(name: &'n [u8], mode: u32) -> Self {
        Self {
            name,
            kind: RawKind::File,
            mode,
            declared_size: None,
        }
    }
}

/// The collision keys of one path (see `path.rs`). An ASCII path is its own NFC and NFKC key:
/// those two are kept only for the other paths, and an ASCII key is looked up in `nodes`.
struct Keys {
    nfc: Option<String>,
    nfkc: Option<String>,
    fold: String,
}

struct Node {
    kind: Kind,
    explicit: bool,
    size: u64,
    mode: u32,
    sha256: Option<Sha256Digest>,
    target: Option<String>,
    flags: Vec<Flag>,
}

/// The parent of a top-level node in [`Tree`].
const ROOT: u32 = u32::MAX;

/// The staged tree by node, for resolving symlinks: each path's id, each node's parent, and
/// each (parent, name)'s child.
struct Tree<'s> {
    nodes: Vec<(&'s str, &'s Node)>,
    ids: NameMap<&'s str, u32>,
    parents: Vec<u32>,
    children: NameMap<(u32, &'s str), u32>,
}

impl<'s> Tree<'s> {
    fn new(map: &'s NameMap<String, Node>) -> Self {
        let nodes: Vec<(&str, &Node)> = map.iter().map(|(k, n)| (k.as_str(), n)).collect();
        let ids: NameMap<&str, u32> = nodes
            .iter()
            .enumerate()
            .map(|(i, (k, _))| (*k, i as u32))
            .collect();
        let mut parents = vec![ROOT; nodes.len()];
        let mut children = NameMap::with_capacity_and_hasher(nodes.len(), Default::default());
        for (i, (k, _)) in nodes.iter().enumerate() {
            let (parent, name) = match k.rsplit_once('/') {
                // Every parent is a node (`ensure_parents`); one that were not would leave its
                // children unreachable, never reachable elsewhere.
                Some((p, name)) => match ids.get(p) {
                    Some(&p) => (p, name),
                    None => continue,
                },
                None => (ROOT, *k),
            };
            parents[i] = parent;
            children.insert((parent, name), i as u32);
        }
        Self {
            nodes,
            ids,
            parents,
            children,
        }
    }

    fn kind(&self, id: u32) -> Kind {
        self.nodes[id as usize].1.kind
    }

    /// The directories holding node `id`, outermost first.
    fn ancestors(&self, id: u32) -> Vec<u32> {
        let mut out = Vec::new();
        let mut at = self.parents[id as usize];
        while at != ROOT {
            out.push(at);
            at = self.parents[at as usize];
        }
        out.reverse();
        out
    }
}

/// Where a symlink resolved, read from its own directory.
struct Resolved {
    stack: Vec<u32>,
    /// Hops it took, itself included.
    hops: u32,
    /// Whether it ends at a regular file (nothing may follow it then).
    file: bool,
}

/// What is left of a resolution: a component, or the end of the target of the symlink `.0`,
/// with `.1` hops taken once it was counted (the link being resolved is not: 0).
enum Step<'t> {
    Comp(&'t str),
    End(u32, u32),
}

/// An error carrying a verdict through `io::Read` implementations (decoder guards).
#[derive(Debug)]
pub(crate) struct ReasonError(pub Reason);

impl std::fmt::Display for ReasonError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.0.code, self.0.detail)
    }
}

impl std::error::Error for ReasonError {}

pub(crate) fn reason_io(reason: Reason) -> io::Error {
    io::Error::other(ReasonError(reason))
}

/// Turn a decoding error into a verdict. Errors raised by our own guards carry their reason;
/// library errors are classified by kind and message (checksums -> `crc_mismatch`).
pub(crate) fn classify(err: &io::Error, entry: Option<&[u8]>) -> Reason {
    let mut messages = vec![err.to_string()];
    let mut cur: Option<&(dyn std::error::Error + 'static)> = err
        .get_ref()
        .map(|e| e as &(dyn std::error::Error + 'static));
    let mut depth = 0;
    while let Some(e) = cur {
        if let Some(ReasonError(r)) = e.downcast_ref::<ReasonError>() {
            return r.clone();
        }
        if let Some(inner) = e.downcast_ref::<io::Error>()
            && let Some(ReasonError(r)) = inner
                .get_ref()
                .and_then(|x| x.downcast_ref::<ReasonError>())
        {
            return r.clone();
        }
        messages.push(e.to_string());
        cur = e.source();
        depth += 1;
        if depth > 16 {
            break;
        }
    }
    let text = messages.join(": ");
    let lower = text.to_ascii_lowercase();
    let code = if lower.contains("checksum") || lower.contains("crc") {
        ReasonCode::CrcMismatch
    } else if lower.contains("too much memory") || lower.contains("window") {
        ReasonCode::ResourceLimit
    } else {
        ReasonCode::Corrupt
    };
    let detail = if err.kind() == io::ErrorKind::UnexpectedEof {
        format!("truncated: {}", display_name(text.as_bytes()))
    } else {
        display_name(text.as_bytes())
    };
    let reason = Reason::new(code, detail);
    match entry {
        Some(name) => reason.entry(display_name(name)),
        None => reason,
    }
}

pub(crate) struct Sink<'a> {
    limits: &'a Limits,
    writer: Writer<'a>,
    nodes: NameMap<String, Node>,
    nfc: NameMap<String, String>,
    nfkc: NameMap<String, String>,
    fold: NameMap<String, String>,
    /// Archive members seen (`max_entries`).
    members: u64,
    /// Parent directories created without a member of their own (also at most `max_entries`).
    implicit_dirs: u64,
    bytes_out: u64,
    /// The size of the artifact: what the ratio budget is a multiple of.
    artifact_size: u64,
    buf: InlineBuf,
    /// Digests of written files, some still being computed on the hashing thread: set on their
    /// nodes by [`Sink::finish`].
    pending: Vec<(String, Pending<'static>)>,
    /// The `.skill` packager's wrapping directory: when set, `<wrapper>/` is taken off every
    /// name and anything outside it is refused. Found by a first pass (see [`Sink::wrapper`]).
    unwrap: Option<String>,
    /// Set by [`Sink::finish`] when the tree is one wrapping directory holding `SKILL.md`.
    wrapped: Option<String>,
    /// The first bytes of each file written, for the review (bounded: `captured.rs`).
    captured: Captured,
    /// Whether member data is being decompressed (set by the format readers): then this thread
    /// is the one that limits, and the hashing thread also writes files.
    decoding: bool,
}

/// A member of an uncompressed archive at least this large is written by this thread: copying
/// it is all this thread has to do, while the hashing thread hashes it. Smaller ones are handed
/// over when the hashing thread will only hash them (kept for the review, or binary), so this
/// thread's share is their creation, not their writes; one that thread also scans for the
/// review's triggers is written here (the 2,000-file tar -8 ms; bench-results/throughput.md).
const HAND_OVER_STORED_BELOW: u64 = 1024 * 1024;

/// The file the review always reads whole (its frontmatter decides whether there is a skill).
const SKILL_MD: &str = "SKILL.md";

/// Kept bytes are given back only for a file of at least this size: a smaller one would free
/// less than a page, and its head alone (an allocation, an entry) costs about as much as its
/// bytes (10,000 tiny files were 4-10 % slower with every one given back).
const GIVE_BACK_MIN: u64 = 4096;

/// Whether the kept bytes of the file of `len` bytes at `path` may be given back at its end:
/// not SKILL.md (always read whole), nor one under [`GIVE_BACK_MIN`].
fn may_give_back(path: &str, len: u64) -> bool {
    path != SKILL_MD && len >= GIVE_BACK_MIN
}

/// Whether the engine keeps the bytes of the file of `len` bytes at `path` that starts with
/// `head` for the review (within the bounds), rather than only its head: it keeps them unless
/// the review would read no more than the head, when the head shows `nul` (a NUL in its first
/// `NUL_WINDOW` bytes: binary) or a trigger pass `scanned` all of it and marked nothing
/// (`FileScan`'s contract, `hashing.rs`). Kept all the same: a file whose bytes may not be
/// given back ([`may_give_back`]), one that starts with a shebang line longer than the head
/// kept (the review quotes it), and one the review reads whole for what it runs whatever its
/// trigger lines (a Markdown file, a script: `names::read_for_runs`).
pub(crate) fn keeps_bytes(
    path: &str,
    head: &[u8],
    len: u64,
    nul: bool,
    scanned: Option<&hashing::Scanned>,
) -> bool {
    let marks_nothing =
        |s: &hashing::Scanned| s.covered == len && s.complete == len && s.marks.is_empty();
    let kept = &head[..head.len().min(HEAD_BYTES)];
    !may_give_back(path, len)
        || (kept.starts_with(b"#!") && !kept.contains(&b'\n'))
        || (!nul && crate::names::read_for_runs(path, kept))
        || !(nul || scanned.is_some_and(marks_nothing))
}

/// Where a file's contents come from.
enum Data<'d, 'f> {
    /// A reader (a decoder, a zip entry, the artifact).
    Stream(&'d mut dyn Read),
    /// The mapped artifact, from this offset (a plain tarball's member).
    Mapped(&'d mut Views<'f>, u64),
}

/// Whether a mapped member shows a NUL in its first [`NUL_WINDOW`] bytes (in the window that
/// holds its start), which the trigger pass takes for binary and stops at. Only where the work
/// goes depends on it: the bytes are checked, hashed and written the same either way, and a
/// view that cannot be had here is reported when the member is read.
fn starts_binary(data: &mut Data<'_, '_>, declared: Option<u64>) -> bool {
    let Data::Mapped(views, at) = data else {
        return false;
    };
    let end = at.saturating_add(declared.unwrap_or(0).min(NUL_WINDOW as u64));
    match views.view(*at, end, NUL_WINDOW) {
        Ok(Some(v)) => memchr::memchr(0, v.bytes()).is_some(),
        _ => false,
    }
}

/// Whether `components`, applied as text from a directory `depth` levels below the root, pass
/// above the root at any point.
fn lexical_escape<'c>(depth: usize, components: impl Iterator<Item = &'c str>) -> bool {
    let mut depth = depth;
    for comp in components {
        match comp {
            "" | "." => {}
            ".." => match depth.checked_sub(1) {
                Some(d) => depth = d,
                None => return true,
            },
            _ => depth += 1,
        }
    }
    false
}

/// A [`FileHash`] failure of the file at `path`.
fn hash_failed(f: Failure, path: &str) -> Stop {
    match f {
        Failure::Read(e) => classify(&e, Some(path.as_bytes())).into(),
        Failure::Write(e) => write_failed(e, path),
        Failure::Fault(e) => Stop::Fault(EngineError::Staging(e)),
    }
}

fn write_failed(err: io::Error, path: &str) -> Stop {
    match err.raw_os_error().map(Errno::from_raw) {
        // Our walk never follows symlinks: hitting one, or a non-directory, means an entry tried
        // to go through something that is not a directory we made.
        Some(Errno::ELOOP) | Some(Errno::ENOTDIR) => Stop::Reject(
            Reason::new(
                ReasonCode::LinkTraversal,
                "a parent of this entry is not a directory we created",
            )
            .entry(path),
        ),
        Some(Errno::EEXIST) => Stop::Reject(
            Reason::new(ReasonCode::DuplicatePath, "the path already exists").entry(path),
        ),
        Some(Errno::EFBIG) => Stop::Reject(
            Reason::new(
                ReasonCode::ResourceLimit,
                "the file-size resource limit was reached",
            )
            .entry(path),
        ),
        _ => Stop::Fault(EngineError::Staging(err)),
    }
}

impl<'a> Sink<'a> {
    pub(crate) fn new(limits: &'a Limits, staging: BorrowedFd<'a>, artifact_size: u64) -> Self {
        Self {
            limits,
            writer: Writer::new(staging),
            nodes: NameMap::default(),
            nfc: NameMap::default(),
            nfkc: NameMap::default(),
            fold: NameMap::default(),
            members: 0,
            implicit_dirs: 0,
            bytes_out: 0,
            artifact_size,
            buf: InlineBuf::default(),
            pending: Vec::new(),
            unwrap: None,
            wrapped: None,
            decoding: false,
            captured: Captured::default(),
        }
    }

    /// A sink that takes `wrapper/` off every entry name (the second pass over a wrapped
    /// `.skill` archive).
    pub(crate) fn unwrapping(mut self, wrapper: String) -> Self {
        self.unwrap = Some(wrapper);
        self
    }

    /// After a successful [`Sink::finish`]: the wrapping directory, when the tree was one (and
    /// the limits accept it). The caller extracts again with [`Sink::unwrapping`].
    pub(crate) fn wrapper(&self) -> Option<String> {
        self.wrapped.clone()
    }

    /// A name with the wrapping directory taken off: `None` for the wrapper itself.
    fn strip_wrapper(&self, path: SafeRelPath, raw: &[u8]) -> Result<Option<SafeRelPath>, Stop> {
        let Some(w) = &self.unwrap else {
            return Ok(Some(path));
        };
        if path.as_str() == w {
            return Ok(None);
        }
        let outside = || -> Stop {
            Reason::new(
                ReasonCode::MissingSkillMd,
                format!(
                    "entry outside the wrapping directory {}",
                    display_name(w.as_bytes())
                ),
            )
            .entry(display_name(raw))
            .into()
        };
        let rest = path
            .as_str()
            .strip_prefix(w.as_str())
            .and_then(|r| r.strip_prefix('/'))
            .ok_or_else(outside)?;
        match SafeRelPath::parse(rest.as_bytes(), self.limits)? {
            Parsed::Path(p) => Ok(Some(p)),
            Parsed::Root => Err(outside()),
        }
    }

    /// Tell whether the members that follow are decompressed on their way in.
    pub(crate) fn set_decoding(&mut self, decoding: bool) {
        self.decoding = decoding;
    }

    pub(crate) fn limits(&self) -> &Limits {
        self.limits
    }

    /// Count one archive member (including ones that create nothing, e.g. `./`).
    fn count_member(&mut self) -> Result<(), Stop> {
        self.members += 1;
        if self.members > self.limits.max_entries {
            return Err(
                Reason::new(ReasonCode::EntryCount, "too many members in the archive")
                    .limit(self.limits.max_entries, self.members)
                    .into(),
            );
        }
        Ok(())
    }

    /// The output budget: `max_ratio` x `artifact_size` bytes, once past the threshold.
    /// `produced` counts bytes actually decoded, never sizes a header declares.
    pub(crate) fn check_budget(
        limits: &Limits,
        produced: u64,
        artifact_size: u64,
    ) -> Result<(), Reason> {
        let budget = limits.max_ratio.saturating_mul(artifact_size);
        if produced > limits.ratio_threshold_bytes && produced > budget {
            let observed = produced / artifact_size.max(1);
            return Err(Reason::new(
                ReasonCode::Ratio,
                format!(
                    "{produced} bytes produced from a {artifact_size}-byte artifact: past the \
                     budget of {budget} bytes ({} x its size)",
                    limits.max_ratio
                ),
            )
            .limit(limits.max_ratio, observed));
        }
        Ok(())
    }

    pub(crate) fn artifact_size(&self) -> u64 {
        self.artifact_size
    }

    fn count_implicit_dir(&mut self) -> Result<(), Stop> {
        self.implicit_dirs += 1;
        if self.implicit_dirs > self.limits.max_entries {
            return Err(Reason::new(
                ReasonCode::EntryCount,
                "too many parent directories the archive does not list",
            )
            .limit(self.limits.max_entries, self.implicit_dirs)
            .into());
        }
        Ok(())
    }

    /// Refuse a new path whose Unicode or case-folded spelling is already taken.
    fn check_twins(&self, path: &str) -> Result<Keys, Stop> {
        // Most names are ASCII: NFC and NFKC are the identity there (`path.rs`), so such a
        // path needs neither key made nor kept.
        let ascii = path.is_ascii();
        let nfc = (!ascii).then(|| nfc_key(path));
        if let Some(other) = self.twin(&self.nfc, nfc.as_deref().unwrap_or(path)) {
            return Err(Reason::new(
                ReasonCode::UnicodeCollision,
                format!(
                    "same name as {:?} after Unicode normalisation",
                    display_name(other.as_bytes())
                ),
            )
            .entry(path)
            .into());
        }
        let nfkc = (!ascii).then(|| nfkc_key(path));
        if let Some(other) = self.twin(&self.nfkc, nfkc.as_deref().unwrap_or(path)) {
            return Err(Reason::new(
                ReasonCode::UnicodeCollision,
                format!(
                    "same name as {:?} after compatibility normalisation (NFKC)",
                    display_name(other.as_bytes())
                ),
            )
            .entry(path)
            .into());
        }
        let fold = fold_key(path);
        if let Some(other) = self.fold.get(&fold) {
            return Err(Reason::new(
                ReasonCode::CaseCollision,
                format!(
                    "same name as {:?} on a case-insensitive filesystem",
                    display_name(other.as_bytes())
                ),
            )
            .entry(path)
            .into());
        }
        Ok(Keys { nfc, nfkc, fold })
    }

    /// The staged path whose key in `keys` (the NFC or the NFKC map) is `key`: one of the
    /// non-ASCII paths the map holds, or, for an ASCII key, the ASCII path that is its own key.
    /// (Never the path being checked: it is not staged yet.)
    fn twin<'s>(&'s self, keys: &'s NameMap<String, String>, key: &str) -> Option<&'s str> {
        if let Some(other) = keys.get(key) {
            return Some(other);
        }
        if !key.is_ascii() {
            return None;
        }
        self.nodes.get_key_value(key).map(|(k, _)| k.as_str())
    }

    fn insert(&mut self, path: String, keys: Keys, node: Node) {
        if let Some(k) = keys.nfc {
            self.nfc.insert(k, path.clone());
        }
        if let Some(k) = keys.nfkc {
            self.nfkc.insert(k, path.clone());
        }
        self.fold.insert(keys.fold, path.clone());
        self.nodes.insert(path, node);
    }

    /// Make sure every parent of `path` is a directory, creating missing ones (implicitly).
    fn ensure_parents(&mut self, path: &SafeRelPath) -> Result<(), Stop> {
        let Some(parent) = path.parent() else {
            return Ok(());
        };
        let mut end = 0;
        let parent = parent.to_owned();
        loop {
            end = parent[end..].find('/').map_or(parent.len(), |i| end + i);
            let prefix = &parent[..end];
            match self.nodes.get(prefix).map(|n| n.kind) {
                Some(Kind::Dir) => {}
                Some(Kind::File) => {
                    return Err(Reason::new(
                        ReasonCode::DuplicatePath,
                        format!("{prefix:?} is a file, not a directory"),
                    )
                    .entry(path.as_str())
                    .into());
                }
                Some(Kind::Symlink) => {
                    return Err(Reason::new(
                        ReasonCode::LinkTraversal,
                        format!("{prefix:?} is a symlink"),
                    )
                    .entry(path.as_str())
                    .into());
                }
                None => {
                    let keys = self.check_twins(prefix)?;
                    self.count_implicit_dir()?;
                    self.writer
                        .mkdir(prefix)
                        .map_err(|e| write_failed(e, prefix))?;
                    let node = Node {
                        kind: Kind::Dir,
                        explicit: false,
                        size: 0,
                        mode: 0o755,
                        sha256: None,
                        target: None,
                        flags: Vec::new(),
                    };
                    self.insert(prefix.to_owned(), keys, node);
                }
            }
            if end == parent.len() {
                return Ok(());
            }
            end += 1;
        }
    }

    /// Admit one archive entry; `data` yields its content (files) and is otherwise unused.
    pub(crate) fn add(&mut self, raw: RawEntry<'_>, data: &mut dyn Read) -> Result<(), Stop> {
        self.add_from(raw, Data::Stream(data))
    }

    /// Admit one entry of a plain tarball whose data lies at `at` in the mapped artifact: read in
    /// place (`Views`), never copied into a buffer. The header frames the member: its declared
    /// size is all that is read, and a member cut short by the artifact's end is `corrupt`.
    pub(crate) fn add_mapped(
        &mut self,
        raw: RawEntry<'_>,
        views: &mut Views<'_>,
        at: u64,
    ) -> Result<(), Stop> {
        self.add_from(raw, Data::Mapped(views, at))
    }

    fn add_from(&mut self, raw: RawEntry<'_>, data: Data<'_, '_>) -> Result<(), Stop> {
        self.count_member()?;
        let path = match SafeRelPath::parse(raw.name, self.limits)? {
            Parsed::Path(p) => p,
            Parsed::Root => {
                return match raw.kind {
                    // `./` in a tarball is the root itself: nothing to create.
                    RawKind::Dir => Ok(()),
                    _ => Err(
                        Reason::new(ReasonCode::InvalidName, "entry has an empty name")
                            .entry(display_name(raw.name))
                            .into(),
                    ),
                };
            }
        };
        // A name ending in `/` (or `/.`) is a directory to GNU tar, bsdtar, Python and unzip
        // whatever the header's type says (a tar `0` header named `d/` is a directory there,
        // its data read as further members); staging it as a file here would be another tree.
        if !matches!(raw.kind, RawKind::Dir)
            && (raw.name.ends_with(b"/") || raw.name.ends_with(b"/."))
        {
            return Err(Reason::new(
                ReasonCode::InvalidName,
                "a name ending in / is a directory to other tools, but this entry is not one",
            )
            .entry(display_name(raw.name))
            .into());
        }
        let path = match self.strip_wrapper(path, raw.name)? {
            Some(p) => p,
            // The wrapping directory itself becomes the root: nothing to create.
            None if matches!(raw.kind, RawKind::Dir) => return Ok(()),
            None => {
                return Err(Reason::new(
                    ReasonCode::MissingSkillMd,
                    "the wrapping directory's name is also a non-directory entry",
                )
                .entry(display_name(raw.name))
                .into());
            }
        };
        if let RawKind::Special(what) = raw.kind {
            return Err(Reason::new(
                ReasonCode::DeviceEntry,
                format!("{what} entries are never extracted"),
            )
            .entry(path.as_str())
            .into());
        }
        self.ensure_parents(&path)?;
        let is_dir = matches!(raw.kind, RawKind::Dir);
        let keys = match self.nodes.get_mut(path.as_str()) {
            Some(node) if is_dir && node.kind == Kind::Dir && !node.explicit => {
                // An explicit directory entry after its implicit creation: fine, once. It is a
                // member now, no longer an implicit directory.
                node.explicit = true;
                self.implicit_dirs = self.implicit_dirs.saturating_sub(1);
                if raw.mode & 0o7022 != 0 {
                    node.flags.push(Flag::ModeSanitised);
                }
                return Ok(());
            }
            Some(node) => {
                let what = match node.kind {
                    Kind::Dir => "a directory",
                    Kind::File => "a file",
                    Kind::Symlink => "a symlink",
                };
                return Err(Reason::new(
                    ReasonCode::DuplicatePath,
                    format!("the archive already created {what} here"),
                )
                .entry(path.as_str())
                .into());
            }
            None => self.check_twins(path.as_str())?,
        };
        let sanitised = raw.mode & 0o7022 != 0;
        let node = match raw.kind {
            RawKind::Dir => {
                self.writer
                    .mkdir(path.as_str())
                    .map_err(|e| write_failed(e, path.as_str()))?;
                let flags = if sanitised {
                    vec![Flag::ModeSanitised]
                } else {
                    Vec::new()
                };
                Node {
                    kind: Kind::Dir,
                    explicit: true,
                    size: 0,
                    mode: 0o755,
                    sha256: None,
                    target: None,
                    flags,
                }
            }
            RawKind::File => self.write_file(&path, raw.mode, raw.declared_size, data)?,
            RawKind::Symlink(target) => self.make_symlink(&path, &target)?,
            RawKind::HardLink(target) => self.copy_hardlink(&path, raw.mode, &target)?,
            RawKind::Special(what) => {
                return Err(Reason::new(
                    ReasonCode::DeviceEntry,
                    format!("{what} entries are never extracted"),
                )
                .entry(path.as_str())
                .into());
            }
        };
        self.insert(path.as_str().to_owned(), keys, node);
        Ok(())
    }

    fn write_file(
        &mut self,
        path: &SafeRelPath,
        mode: u32,
        declared: Option<u64>,
        data: Data<'_, '_>,
    ) -> Result<Node, Stop> {
        let p = path.as_str();
        if let Some(d) = declared {
            self.check_declared(p, d)?;
        }
        let executable = mode & 0o111 != 0;
        let final_mode = writer::umask_cleared();
        let mut capture = self.captured.begin_sized(declared);
        let mut data = data;
        // Hashed while written: on the hashing thread when the process has one (the confined
        // child), inline otherwise (`hashing.rs`). That thread may also write a file that
        // needs nothing more of us (created with its final mode); every chunk is checked below
        // before it is written, by whichever thread. A stored member is handed over when that
        // thread will not also run the trigger pass over it (kept for the review, whose scan
        // runs here, or binary), or when it has room for one more file: writing every one it
        // scans too left it the slower of the two.
        let room = hashing::room_here();
        let hand_over = final_mode
            && (self.decoding
                || (declared.is_some_and(|d| d < HAND_OVER_STORED_BELOW)
                    && (capture.is_some() || room || starts_binary(&mut data, declared))));
        // Such a file is also created by whichever thread writes it first when it is small (the
        // hashing thread then takes it whole if it has room for it: `hashing.rs`) or that thread
        // has room for it now: its parent is reached here, now (a planted symlink on the way is
        // refused at once), and a create the hashing thread fails comes back with the file's
        // digest, refused then as it would have been here. Otherwise it is created here:
        // creating every file there left that thread the slower of the two.
        let small = declared.is_some_and(|d| hashing::small(d, matches!(data, Data::Mapped(..))));
        let (file, final_mode) = if hand_over && (small || room) && hashing::helps_here() {
            match self.writer.deferred(p, executable) {
                Ok(Some(create)) => (Target::Create(create), true),
                Ok(None) => self.create_now(p, executable)?,
                Err(e) => return Err(write_failed(e, p)),
            }
        } else {
            self.create_now(p, executable)?
        };
        let mut head: Vec<u8> = Vec::new();
        // A NUL in the first NUL_WINDOW bytes (what the review takes for binary), for the head
        // kept of a file whose bytes are not.
        let mut nul = false;
        let mut written: u64 = 0;
        let mut hash = FileHash::new(file, hand_over);
        let mut buf = std::mem::take(&mut self.buf);
        let limits = self.limits;
        let artifact_size = self.artifact_size;
        let bytes_out = &mut self.bytes_out;
        let captured = &mut self.captured;
        // Scanned for the review where it is hashed, here or on the helper, when not kept for
        // it; when kept, here too if its bytes may be given back at its end (below).
        hash.scan_here(capture.is_none() || declared.is_some_and(|d| may_give_back(p, d)));
        // A member read in place that lies whole in its first view is kept as that view, not
        // copied (`Captured::keep_view`): the sealed artifact's bytes are the bytes written.
        let mut kept_view: Option<View> = None;
        let streamed = loop {
            let expect = declared.map(|d| d.saturating_sub(written));
            let from = written;
            let view = match &mut data {
                Data::Stream(_) => None,
                Data::Mapped(views, at) => {
                    let end = at.saturating_add(declared.unwrap_or(0));
                    match views.view(at.saturating_add(from), end, VIEW_CHUNK) {
                        Ok(Some(view)) => Some(view),
                        Ok(None) => break Ok(()),
                        Err(e) => break Err(hash_failed(Failure::Read(e), p)),
                    }
                }
            };
            if from == 0
                && let (Some(start), Some(v)) = (capture, &view)
                && declared == Some(v.len as u64)
                && captured.may_keep_view(start, v)
            {
                kept_view = Some(v.clone());
            }
            let copying = kept_view.is_none();
            let check = |chunk: &[u8]| -> Result<(), Stop> {
                let n = chunk.len();
                written += n as u64;
                *bytes_out += n as u64;
                // The header is held to its size: a member that lies small stops at the lie.
                if declared.is_some_and(|d| written > d) {
                    return Err(Reason::new(
                        ReasonCode::Corrupt,
                        format!(
                            "the data holds more than the {} bytes its header declares",
                            declared.unwrap_or(0)
                        ),
                    )
                    .entry(p)
                    .into());
                }
                // Limits are checked on bytes produced, before they reach the disk.
                if written > limits.max_file_bytes {
                    return Err(
                        Reason::new(ReasonCode::FileSize, "file is larger than the limit")
                            .entry(p)
                            .limit(limits.max_file_bytes, written)
                            .into(),
                    );
                }
                if *bytes_out > limits.max_expanded_bytes {
                    return Err(Reason::new(
                        ReasonCode::ExpandedSize,
                        "the archive expands to more than the limit",
                    )
                    .entry(p)
                    .limit(limits.max_expanded_bytes, *bytes_out)
                    .into());
                }
                Self::check_budget(limits, *bytes_out, artifact_size).map_err(|r| r.entry(p))?;
                if head.len() < 512 {
                    let take = (512 - head.len()).min(n);
                    head.extend_from_slice(&chunk[..take]);
                }
                // Bytes of the file before this chunk.
                let seen = written - n as u64;
                if !nul && seen < NUL_WINDOW as u64 {
                    let look = n.min(NUL_WINDOW - seen as usize);
                    nul = memchr::memchr(0, &chunk[..look]).is_some();
                }
                if copying
                    && let Some(start) = capture
                    && !captured.push(start, chunk)
                {
                    capture = None;
                }
                Ok(())
            };
            let n = match (view, &mut data) {
                (Some(view), _) => {
                    hash.fill_view(view, expect.unwrap_or(0), check, |f| hash_failed(f, p))
                }
                (None, Data::Stream(r)) => {
                    hash.fill(&mut buf, expect, *r, check, |f| hash_failed(f, p))
                }
                // A mapped member without a view has ended (the loop broke above).
                (None, Data::Mapped(..)) => break Ok(()),
            };
            match n {
                Ok(0) => break Ok(()),
                Ok(_) => {}
                Err(e) => break Err(e),
            }
        };
        self.buf = buf;
        streamed?;
        if let Some(declared) = declared
            && declared != written
        {
            return Err(Reason::new(
                ReasonCode::Corrupt,
                format!("header declares {declared} bytes, the data holds {written}"),
            )
            .entry(p)
            .into());
        }
        let (digest, file) = hash.finish().map_err(|f| hash_failed(f, p))?;
        // The review reads nothing past the head of a file the head shows binary (a NUL in its
        // first NUL_WINDOW bytes), nor of one whose trigger pass, run here over all of it,
        // marked nothing: such a file's kept bytes are given back, so the next file's reuse
        // their pages (fresh pages cost a busy child about a third of its faults:
        // bench-results/load.md), and its head is kept instead.
        match capture {
            Some(start)
                if keeps_bytes(p, &head, written, nul, digest.scanned_here())
                    || !self.captured.keep_head(p, &head, nul) =>
            {
                match kept_view {
                    Some(view) => {
                        if !self.captured.keep_view(p, start, view) {
                            self.captured.keep_head(p, &head, nul);
                        }
                    }
                    None => self.captured.commit(p, start),
                }
            }
            Some(start) => self.captured.give_back(start),
            None => {
                self.captured.keep_head(p, &head, nul);
            }
        }
        if !final_mode {
            let Some(file) = &file else {
                return Err(Stop::Fault(EngineError::Staging(io::Error::other(
                    "a file without its final mode was handed over",
                ))));
            };
            Writer::finish_file(file, executable).map_err(|e| write_failed(e, p))?;
        }
        drop(file);
        let flags = inventory::file_flags(p, &head, executable, mode & 0o7022 != 0);
        // Set on the node by `finish`, once the hashing thread has it.
        self.pending.push((p.to_owned(), digest));
        Ok(Node {
            kind: Kind::File,
            explicit: true,
            size: written,
            mode: if executable { 0o755 } else { 0o644 },
            sha256: None,
            target: None,
            flags,
        })
    }

    /// Create regular file `p` here, now: the file, and whether it has its final mode already.
    fn create_now(&mut self, p: &str, executable: bool) -> Result<(Target, bool), Stop> {
        let (file, final_mode) = self
            .writer
            .create_file_as(p, executable)
            .map_err(|e| write_failed(e, p))?;
        Ok((Target::Open(file), final_mode))
    }

    /// Refuse before decoding a member whose declared size already passes a limit. The header
    /// is held to that size afterwards (a shorter stream is `corrupt`), so such a member is
    /// refused either way: this only refuses it sooner (a bomb in milliseconds), with the
    /// reason its honest decoding would reach. A small declared size is never trusted.
    fn check_declared(&self, p: &str, declared: u64) -> Result<(), Stop> {
        let l = self.limits;
        if declared > l.max_file_bytes {
            return Err(Reason::new(
                ReasonCode::FileSize,
                format!("the header declares {declared} bytes, more than the limit"),
            )
            .entry(p)
            .limit(l.max_file_bytes, declared)
            .into());
        }
        let total = self.bytes_out.saturating_add(declared);
        if total > l.max_expanded_bytes {
            return Err(Reason::new(
                ReasonCode::ExpandedSize,
                "with this member's declared size the archive expands to more than the limit",
            )
            .entry(p)
            .limit(l.max_expanded_bytes, total)
            .into());
        }
        Self::check_budget(l, total, self.artifact_size).map_err(|r| Stop::Reject(r.entry(p)))
    }

    fn make_symlink(&mut self, path: &SafeRelPath, target: &[u8]) -> Result<Node, Stop> {
        let p = path.as_str();
        let reject =
            |detail: &str| -> Stop { Reason::new(ReasonCode::LinkEscape, detail).entry(p).into() };
        if !self.limits.allow_symlinks {
            return Err(reject("symlinks are not allowed by policy"));
        }
        let Ok(t) = std::str::from_utf8(target) else {
            return Err(
                Reason::new(ReasonCode::InvalidName, "symlink target is not valid UTF-8")
                    .entry(p)
                    .into(),
            );
        };
        if t.is_empty()
            || t.chars()
                .any(|c| c.is_control() || hidden_char(c).is_some())
        {
            return Err(Reason::new(
                ReasonCode::InvalidName,
                "symlink target is empty or has control, bidirectional or invisible characters",
            )
            .entry(p)
            .into());
        }
        // Read the way Windows would (backslash a separator, `C:` a drive, `\\` a root): a
        // target that is absolute or walks out there escapes as surely as `/etc` does here.
        if t.starts_with('\\') || drive_like(t) {
            return Err(reject("symlink target is absolute on Windows"));
        }
        if t.contains('\\') {
            let parent = path.parent().map_or(0, |d| d.split('/').count());
            if lexical_escape(parent, t.split(['/', '\\'])) {
                return Err(reject(
                    "symlink target climbs out of the package with `..` between backslashes",
                ));
            }
            return Err(Reason::new(
                ReasonCode::InvalidName,
                "symlink target contains a backslash",
            )
            .entry(p)
            .into());
        }
        if t.len() as u64 > self.limits.max_path_bytes {
            return Err(
                Reason::new(ReasonCode::PathLength, "symlink target is too long")
                    .entry(p)
                    .limit(self.limits.max_path_bytes, t.len() as u64)
                    .into(),
            );
        }
        if t.starts_with('/') {
            return Err(reject("symlink target is absolute"));
        }
        // Whether it stays inside and points at something is decided once the tree is complete.
        self.writer.symlink(p, t).map_err(|e| write_failed(e, p))?;
        Ok(Node {
            kind: Kind::Symlink,
            explicit: true,
            size: t.len() as u64,
            mode: 0o777,
            sha256: None,
            target: Some(t.to_owned()),
            flags: Vec::new(),
        })
    }

    fn copy_hardlink(
        &mut self,
        path: &SafeRelPath,
        mode: u32,
        target: &[u8],
    ) -> Result<Node, Stop> {
        let p = path.as_str();
        let refuse =
            |detail: &str| -> Stop { Reason::new(ReasonCode::Hardlink, detail).entry(p).into() };
        if self.limits.hardlinks == HardlinkPolicy::Reject {
            return Err(refuse("hard links are not allowed by policy"));
        }
        let source = match SafeRelPath::parse(target, self.limits) {
            Ok(Parsed::Path(s)) => match self.strip_wrapper(s, target) {
                Ok(Some(s)) => s,
                _ => return Err(refuse("hard link target is outside the wrapping directory")),
            },
            _ => {
                return Err(refuse(
                    "hard link target is not a valid name inside the archive",
                ));
            }
        };
        let source_mode = match self.nodes.get(source.as_str()) {
            Some(n) if n.kind == Kind::File => n.mode,
            _ => {
                return Err(refuse(
                    "hard link target is not a regular file extracted earlier",
                ));
            }
        };
        // A hard link is the target's inode: GNU tar and bsdtar give it the target's mode and
        // ignore the link header's, so the copy takes the target's execute bits, never more.
        // Python's tarfile instead chmods that inode to the header's mode, making the target
        // executable too: an execute bit only the link header grants would be one the review
        // never saw, so such a link is refused.
        if mode & 0o111 != 0 && source_mode & 0o111 == 0 {
            return Err(refuse(
                "hard link header grants execute its target lacks (Python's tarfile would make \
                 both executable, GNU tar and bsdtar neither)",
            ));
        }
        // The source's bytes may still be on their way to the disk on the hashing thread: wait
        // for every file in flight before reading one back.
        self.settle()?;
        let mut src = self
            .writer
            .open_for_copy(source.as_str())
            .map_err(|e| write_failed(e, source.as_str()))?;
        // The copy counts as produced bytes: link farms cannot multiply output for free. Its
        // execute bits are the target's; the header's setuid, setgid, sticky and write-by-others
        // bits are still flagged as sanitised (0o7022 holds no execute bit).
        self.write_file(
            path,
            source_mode | (mode & 0o7022),
            None,
            Data::Stream(&mut src),
        )
    }

    /// Wait for every file still with the hashing thread: its digest set on its node, its
    /// bytes written and the file closed.
    fn settle(&mut self) -> Result<(), Stop> {
        for (path, pending) in std::mem::take(&mut self.pending) {
            // The helper's write of the file failed, if it wrote it: refused as it would have
            // been on this thread.
            let (digest, scanned) = pending
                .resolve_scanned()
                .map_err(|e| write_failed(e, &path))?;
            if let Some(node) = self.nodes.get_mut(&path) {
                node.sha256 = Some(digest);
            }
            if let Some(scanned) = scanned {
                self.captured.keep_scan(path, scanned);
            }
        }
        Ok(())
    }

    /// Checks that need the complete tree: symlink targets, and `SKILL.md` at the root.
    pub(crate) fn finish(&mut self, format: Format) -> Result<(), Stop> {
        self.settle()?;
        let mut links: Vec<(&String, &Node)> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.kind == Kind::Symlink)
            .collect();
        links.sort_by(|a, b| a.0.cmp(b.0));
        // Indexed only when there is a link to resolve: most packages have none.
        if !links.is_empty() {
            let tree = Tree::new(&self.nodes);
            let mut memo = NameMap::default();
            for (path, node) in links {
                let target = node.target.as_deref().unwrap_or("");
                self.resolve(&tree, &mut memo, path, target)
                    .map_err(|detail| {
                        Stop::Reject(
                            Reason::new(ReasonCode::LinkEscape, detail).entry(path.as_str()),
                        )
                    })?;
            }
        }
        if format != Format::SkillMd && self.limits.require_skill_md {
            match self.nodes.get(SKILL_MD).map(|n| n.kind) {
                Some(Kind::File) => {}
                Some(Kind::Dir) | Some(Kind::Symlink) => {
                    return Err(Reason::new(
                        ReasonCode::MissingSkillMd,
                        "SKILL.md at the root is not a regular file",
                    )
                    .into());
                }
                // One wrapper at most: the second pass never unwraps again.
                None if self.limits.accept_wrapper && self.unwrap.is_none() => {
                    self.wrapped = Some(self.wrapping_dir()?);
                }
                None => {
                    // The `.skill` packager's layout, not accepted here: its SKILL.md is the
                    // entry, so that the command line can tell a person what would take it
                    // (the reason code stays the same).
                    if !self.limits.accept_wrapper
                        && let Ok(w) = self.wrapping_dir()
                    {
                        return Err(Reason::new(
                            ReasonCode::MissingSkillMd,
                            format!(
                                "no SKILL.md at the archive root: everything is inside one \
                                 directory, {}, which holds it (the `.skill` packager's layout)",
                                display_name(w.as_bytes())
                            ),
                        )
                        .entry(format!("{w}/SKILL.md"))
                        .into());
                    }
                    let hint = if self.nodes.keys().any(|k| k.ends_with("/SKILL.md")) {
                        " (one exists in a subdirectory; the package root must hold it)"
                    } else {
                        ""
                    };
                    return Err(Reason::new(
                        ReasonCode::MissingSkillMd,
                        format!("no SKILL.md at the archive root{hint}"),
                    )
                    .into());
                }
            }
        }
        Ok(())
    }

    /// The `.skill` packager's layout, `<name>/SKILL.md` inside one top-level directory that
    /// holds everything: that directory's name, or why the tree is not that layout.
    fn wrapping_dir(&self) -> Result<String, Stop> {
        let refuse =
            |detail: String| -> Stop { Reason::new(ReasonCode::MissingSkillMd, detail).into() };
        let tops: std::collections::BTreeSet<&str> = self
            .nodes
            .keys()
            .map(|k| k.split('/').next().unwrap_or(k))
            .collect();
        let mut it = tops.iter();
        let (Some(w), None) = (it.next(), it.next()) else {
            return Err(refuse(format!(
                "no SKILL.md at the archive root, and {} top-level entries, not one wrapping directory",
                tops.len()
            )));
        };
        let is_dir = self.nodes.get(*w).is_some_and(|n| n.kind == Kind::Dir);
        let has_skill = self
            .nodes
            .get(format!("{w}/SKILL.md").as_str())
            .is_some_and(|n| n.kind == Kind::File);
        if !is_dir || !has_skill {
            return Err(refuse(format!(
                "no SKILL.md at the archive root or in the wrapping directory {}",
                display_name(w.as_bytes())
            )));
        }
        Ok((*w).to_owned())
    }

    /// Resolve a symlink twice, and require both readings to stay inside. Lexically first, as
    /// a tool that copies or normalises path text does (`sub/../..` is `..` whatever `sub` is);
    /// then the way the kernel would, over the package's own tree: every component must exist
    /// in the package and no step may leave the root.
    ///
    /// The kernel's reading walks `tree` by node, so a step costs one short lookup whatever
    /// the path's length, and a symlink already resolved (`memo`) is crossed in one step: the
    /// work is the targets' total length. (Walking by path text, and every link again through
    /// every link it crosses, let 10,000 links through a 40-link chain of `x/../x/..` targets,
    /// 30 MB of tar, hold the child until its timeout.)
    fn resolve(
        &self,
        tree: &Tree<'_>,
        memo: &mut NameMap<u32, Resolved>,
        link_path: &str,
        target: &str,
    ) -> Result<(), String> {
        let depth = link_path.split('/').count() - 1;
        if lexical_escape(depth, target.split('/')) {
            return Err(format!(
                "symlink target {target:?} leaves the package root when read as text \
                 (`..` cancelling the component before it)"
            ));
        }
        let Some(&link) = tree.ids.get(link_path) else {
            return Err(format!("symlink {link_path:?} is not in the package"));
        };
        let mut stack = tree.ancestors(link);
        // Any component still to walk after a regular file, even an empty one or `.` (`f/`,
        // `f/.`): the kernel resolves none of them through a file (ENOTDIR), so such a link
        // points at nothing, as a dangling one does.
        let more = |pending: &[Step<'_>]| pending.iter().any(|s| matches!(s, Step::Comp(_)));
        let through_file = || format!("symlink target {target:?} goes through a regular file");
        let loops = || format!("symlink target {target:?} loops");
        let mut pending: Vec<Step<'_>> = vec![Step::End(link, 0)];
        pending.extend(target.split('/').rev().map(Step::Comp));
        let mut hops = 0u32;
        while let Some(step) = pending.pop() {
            let comp = match step {
                // Every component of that link's target is behind us: where it led, and the hops
                // it took, hold wherever it is met again.
                Step::End(id, after) => {
                    let file = stack.last().is_some_and(|t| tree.kind(*t) == Kind::File);
                    memo.insert(
                        id,
                        Resolved {
                            stack: stack.clone(),
                            hops: hops - after + 1,
                            file,
                        },
                    );
                    continue;
                }
                Step::Comp(c) => c,
            };
            match comp {
                "" | "." => continue,
                ".." => {
                    if stack.pop().is_none() {
                        return Err(format!("symlink target {target:?} leaves the package root"));
                    }
                    continue;
                }
                _ => {}
            }
            let parent = stack.last().copied().unwrap_or(ROOT);
            let Some(&id) = tree.children.get(&(parent, comp)) else {
                return Err(format!(
                    "symlink target {target:?} points at nothing in the package"
                ));
            };
            let (_, node) = tree.nodes[id as usize];
            match node.kind {
                Kind::Dir => stack.push(id),
                Kind::File => {
                    if more(&pending) {
                        return Err(through_file());
                    }
                    stack.push(id);
                }
                Kind::Symlink => {
                    if let Some(r) = memo.get(&id) {
                        hops += r.hops;
                        if hops > MAX_SYMLINK_HOPS {
                            return Err(loops());
                        }
                        if r.file && more(&pending) {
                            return Err(through_file());
                        }
                        stack.clone_from(&r.stack);
                        continue;
                    }
                    hops += 1;
                    if hops > MAX_SYMLINK_HOPS {
                        return Err(loops());
                    }
                    let inner = node.target.as_deref().unwrap_or("");
                    if inner.starts_with('/') {
                        return Err(format!(
                            "symlink target {target:?} leads to an absolute symlink"
                        ));
                    }
                    // Its target is read from its own directory: where the stack is now.
                    pending.push(Step::End(id, hops));
                    pending.extend(inner.split('/').rev().map(Step::Comp));
                }
            }
        }
        Ok(())
    }

    fn totals(&self, bytes_in: u64) -> Totals {
        let count = |k: Kind| self.nodes.values().filter(|n| n.kind == k).count() as u64;
        Totals {
            entries: self.nodes.len() as u64,
            files: count(Kind::File),
            dirs: count(Kind::Dir),
            symlinks: count(Kind::Symlink),
            bytes_in,
            bytes_out: self.bytes_out,
            ratio: inventory::ratio(self.bytes_out, bytes_in),
        }
    }

    /// Totals at the moment processing stopped (reported with a rejection).
    pub(crate) fn partial_totals(&self, bytes_in: u64) -> Totals {
        Totals {
            entries: 0,
            files: 0,
            dirs: 0,
            symlinks: 0,
            ..self.totals(bytes_in)
        }
    }

    pub(crate) fn clear(&mut self) -> io::Result<()> {
        self.writer.clear()
    }

    /// Stop writing and leave the tree as it stands (for the caller to remove).
    pub(crate) fn leave(&mut self) -> io::Result<()> {
        self.writer.leave()
    }

    /// The sorted inventory, the totals and the kept file bytes of an accepted extraction.
    pub(crate) fn into_inventory(self, bytes_in: u64) -> (Vec<Entry>, Totals, Captured) {
        let totals = self.totals(bytes_in);
        let entries: Vec<Entry> = self
            .nodes
            .into_iter()
            .map(|(path, n)| Entry {
                path,
                kind: n.kind,
                size: n.size,
                mode: format!("{:04o}", n.mode),
                sha256: n.sha256,
                link_target: n.target,
                flags: n.flags,
            })
            .collect();
        // Sorted through their indices: an entry is some 150 bytes, and a stable sort of the
        // entries themselves moved each about ten times (on 10,000 tiny files, 4.8 M instructions
        // a request more, 7.3 M of them in memcpy: bench-results/throughput.md). The paths are
        // the map's keys, so no two are equal and an unstable sort gives the one order.
        let mut order: Vec<usize> = (0..entries.len()).collect();
        order.sort_unstable_by(|&a, &b| entries[a].path.as_bytes().cmp(entries[b].path.as_bytes()));
        let mut slots: Vec<Option<Entry>> = entries.into_iter().map(Some).collect();
        // Every index is in `order` once, so each slot is taken once and none is skipped.
        let entries = order.into_iter().filter_map(|i| slots[i].take()).collect();
        (entries, totals, self.captured)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mapped_member_is_binary_by_a_nul_in_its_first_window_only() {
        let mut art = vec![b'x'; 4 * NUL_WINDOW];
        // A member at 100: a NUL at its byte 10 (binary), another member at 20,000 with none
        // in its first window but one just past it (text), and one whose NUL lies past its size.
        art[110] = 0;
        art[20_000 + NUL_WINDOW] = 0;
        let sealed = super::super::input::sealed(&art);
        let mut views = Views::new(&sealed, art.len() as u64).expect("views");
        let mut at =
            |pos: u64, size: u64| starts_binary(&mut Data::Mapped(&mut views, pos), Some(size));
        assert!(at(100, 5_000));
        assert!(!at(20_000, 2 * NUL_WINDOW as u64));
        assert!(!at(100, 10), "the NUL lies past the member's end");
        assert!(at(110, 1), "the NUL is the member's only byte");
        assert!(!at(art.len() as u64, 0), "nothing left to look at");
        let mut stream: &[u8] = b"\0\0\0";
        assert!(
            !starts_binary(&mut Data::Stream(&mut stream), Some(3)),
            "a stream is not looked ahead into"
        );
    }
}
