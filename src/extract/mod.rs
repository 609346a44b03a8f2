//! The extraction engine: verified artifact bytes in, a staged tree plus an inventory out, or a
//! rejection with a reason, and never anything in between.
//!
//! It is written to run inside the confined child unchanged: its only inputs are a readable
//! file (read through a mapping when it is a sealed memfd, which nobody can change under it, and
//! with positioned reads otherwise), a directory fd to create entries beneath,
//! and a [`Request`]. It never opens a path by name outside that directory and never spawns.
//! On rejection everything it created is removed before it returns, unless the caller takes
//! that on itself ([`RejectedTree::Left`]: the confined child, whose parent removes it).

pub mod captured;
pub mod detect;
pub mod hashing;
pub mod inventory;
pub mod overrides;
pub mod path;
pub mod policy;
pub mod writer;

mod input;
mod sink;
mod tar;
mod zip;
mod zip_records;

use std::fs::File;
use std::io;
use std::os::fd::BorrowedFd;
use std::os::unix::fs::FileExt;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::digest::{Hasher, Sha256Digest};
use crate::reason::{Reason, ReasonCode, Verdict};
pub use captured::Captured;
pub use detect::{ArtifactType, Format};
#[cfg(test)]
pub(crate) use input::sealed;
use inventory::{ArtifactFacts, Extraction, Totals};
use policy::Limits;
#[cfg(test)]
pub(crate) use sink::keeps_bytes;

/// What to extract and under which rules.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    pub artifact_type: ArtifactType,
    /// Media type hint (e.g. an HTTP Content-Type), preferred over the file name.
    pub media_type: Option<String>,
    /// File name or URL path hint; its extension is used when the media type is absent/generic.
    pub file_name: Option<String>,
    /// When present, the artifact's SHA-256 must equal it (`digest_mismatch` otherwise).
    pub expected_digest: Option<Sha256Digest>,
    pub limits: Limits,
    /// Skill name as the discovery index lists it. Never read by the engine: carried through the
    /// child to the review (the intake layer runs it after the engine), which compares it with
    /// SKILL.md.
    #[serde(default)]
    pub skill_name: Option<String>,
    /// Description as the discovery index lists it; like `skill_name`, for the review only.
    #[serde(default)]
    pub index_description: Option<String>,
    /// SHA-256 the trusted parent computed over the exact bytes it sealed into the artifact
    /// memfd (which can no longer change). When set, the engine reports it instead of hashing
    /// the artifact a second time; `expected_digest` is still compared against it.
    #[serde(default)]
    pub sealed_digest: Option<Sha256Digest>,
}

impl Request {
    /// A request with no hints, no expected digest and no index facts.
    pub fn new(artifact_type: ArtifactType, limits: Limits) -> Self {
        Self {
            artifact_type,
            media_type: None,
            file_name: None,
            expected_digest: None,
            limits,
            skill_name: None,
            index_description: None,
            sealed_digest: None,
        }
    }

    /// The request for a local file at `path`, as `skillbox extract FILE` (and each case of
    /// `replay`) builds it: the file's name as the format hint; a `.skill` file (what the skill
    /// packagers write: one wrapping directory) with its wrapper accepted; the type `given`, else
    /// a SKILL.md for a `.md` name and an archive otherwise.
    pub fn for_local_file(path: &Path, given: Option<ArtifactType>, mut limits: Limits) -> Self {
        let file_name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        let lower = file_name.as_deref().map(str::to_ascii_lowercase);
        let ends = |ext: &str| lower.as_deref().is_some_and(|n| n.ends_with(ext));
        limits.accept_wrapper |= ends(".skill");
        let artifact_type = given.unwrap_or(if ends(".md") {
            ArtifactType::SkillMd
        } else {
            ArtifactType::Archive
        });
        Self {
            file_name,
            ..Self::new(artifact_type, limits)
        }
    }
}

/// A failure that is not a verdict about the artifact: the engine could not do its job.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    #[error("cannot read the artifact: {0}")]
    Artifact(#[source] io::Error),
    #[error("cannot write to the staging directory: {0}")]
    Staging(#[source] io::Error),
    #[error("cannot clear the staging directory after a rejection: {0}")]
    Cleanup(#[source] io::Error),
}

/// What becomes of the staged tree of a package the engine rejects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RejectedTree {
    /// Removed before the engine returns: nothing of a rejected package is left. What every
    /// in-process caller gets ([`extract`], [`extract_capturing`], `intake::run`).
    #[default]
    Cleared,
    /// Left as it stands for the caller, who must remove it. The confined child's choice only:
    /// its parent removes the staging directory after every answer but an acceptance anyway,
    /// once the child is gone and outside its deadline, so emptying it in the child too only
    /// spent the child's time (16 s of its 30 on a disk mounted `discard`, for the corpus's
    /// 9,990 links; docs/sandbox.md). Nothing is written after the rejection either way: the
    /// hashing thread finishes what it was handed (checked against the limits before) first.
    Left,
}

/// Why processing stopped early.
#[derive(Debug)]
pub(crate) enum Stop {
    Reject(Reason),
    Fault(EngineError),
}

impl From<Reason> for Stop {
    fn from(r: Reason) -> Self {
        Stop::Reject(r)
    }
}

/// Extract `artifact` beneath `staging` according to `req`.
///
/// Returns `Ok` with an accepted or rejected [`Extraction`]; `Err` only for operational faults
/// (after which the caller must discard the staging directory).
pub fn extract(
    artifact: &File,
    staging: BorrowedFd<'_>,
    req: &Request,
) -> Result<Extraction, EngineError> {
    extract_capturing(artifact, staging, req).map(|(e, _)| e)
}

/// [`extract`], also returning the first bytes of each file as written ([`Captured`]), which
/// the review reads instead of the staged copy. Empty unless the extraction was accepted.
pub fn extract_capturing(
    artifact: &File,
    staging: BorrowedFd<'_>,
    req: &Request,
) -> Result<(Extraction, Captured), EngineError> {
    extract_capturing_as(artifact, staging, req, RejectedTree::Cleared)
}

/// [`extract_capturing`], with `rejected_tree` saying whether the tree of a rejection (or of a
/// fault) is removed here or left to the caller ([`RejectedTree`]).
pub fn extract_capturing_as(
    artifact: &File,
    staging: BorrowedFd<'_>,
    req: &Request,
    rejected_tree: RejectedTree,
) -> Result<(Extraction, Captured), EngineError> {
    let size = artifact.metadata().map_err(EngineError::Artifact)?.len();
    let mut facts = ArtifactFacts {
        digest: None,
        format: None,
        size,
    };
    let totals = Totals {
        bytes_in: size,
        ..Totals::default()
    };
    let rejected = Extraction::rejected;

    if size > req.limits.max_artifact_bytes {
        let reason = Reason::new(
            ReasonCode::ArtifactSize,
            "artifact is larger than the limit",
        )
        .limit(req.limits.max_artifact_bytes, size);
        return Ok((rejected(facts, totals, reason), Captured::default()));
    }

    // 1. Digest over the exact bytes, before any parsing.
    let digest = match req.sealed_digest {
        Some(d) => d,
        None => hash_all(artifact, size).map_err(EngineError::Artifact)?,
    };
    facts.digest = Some(digest);
    if let Some(expected) = req.expected_digest
        && expected != digest
    {
        let reason = Reason::new(
            ReasonCode::DigestMismatch,
            format!("expected {expected}, the bytes received hash to {digest}"),
        );
        return Ok((rejected(facts, totals, reason), Captured::default()));
    }

    // 2. Format from the magic bytes, hints cross-checked.
    let mut head = [0u8; 512];
    let head_len = read_head(artifact, &mut head).map_err(EngineError::Artifact)?;
    // The end too: a zip behind a self-extracting stub is recognised by its end record.
    let tail_from = size.saturating_sub(detect::TAIL_BYTES as u64);
    let mut tail = vec![0u8; usize::try_from(size - tail_from).unwrap_or(0)];
    let tail_len = read_at_most(artifact, &mut tail, tail_from).map_err(EngineError::Artifact)?;
    let format = match detect::decide(
        req.artifact_type,
        &head[..head_len],
        &tail[..tail_len],
        req.media_type.as_deref(),
        req.file_name.as_deref(),
    ) {
        Ok(f) => f,
        Err(reason) => return Ok((rejected(facts, totals, reason), Captured::default())),
    };
    facts.format = Some(format.as_str().to_owned());

    // 3. Stream entries through the policy into the staging directory.
    let mut sink = sink::Sink::new(&req.limits, staging, size);
    let mut result =
        run_format(format, artifact, size, &mut sink).and_then(|()| sink.finish(format));
    // The `.skill` packager's layout (one wrapping directory), when the limits accept it: the
    // child cannot rename, so the first tree is cleared and the same verified bytes are read
    // again with the wrapper taken off every name. Each pass is held to every limit.
    let wrapper = result.as_ref().ok().and_then(|()| sink.wrapper());
    if let Some(w) = &wrapper {
        sink.clear().map_err(EngineError::Cleanup)?;
        sink = sink::Sink::new(&req.limits, staging, size).unwrapping(w.clone());
        result = run_format(format, artifact, size, &mut sink).and_then(|()| sink.finish(format));
    }
    match result {
        Ok(()) => {
            let (entries, totals, captured) = sink.into_inventory(size);
            let extraction = Extraction {
                verdict: Verdict::Accepted,
                reason: None,
                artifact: facts,
                entries,
                totals,
                wrapper,
            };
            Ok((extraction, captured))
        }
        Err(stop) => {
            let totals = sink.partial_totals(size);
            // Nothing of a rejected artifact may survive: removed here, or by the caller that
            // asked for the tree (the confined child's parent, outside the child's deadline).
            match rejected_tree {
                RejectedTree::Cleared => sink.clear(),
                RejectedTree::Left => sink.leave(),
            }
            .map_err(EngineError::Cleanup)?;
            match stop {
                Stop::Reject(reason) => Ok((rejected(facts, totals, reason), Captured::default())),
                Stop::Fault(err) => Err(err),
            }
        }
    }
}

fn run_format(
    format: Format,
    artifact: &File,
    size: u64,
    sink: &mut sink::Sink<'_>,
) -> Result<(), Stop> {
    let buffered = input::SeekBuf::new(artifact, size, 64 * 1024);
    match format {
        Format::SkillMd => {
            let mut r = buffered;
            sink.add(sink::RawEntry::file(b"SKILL.md", 0o644), &mut r)
        }
        Format::Zip => zip::read(buffered, sink),
        // A sealed memfd: members are written and hashed from the mapping, not copied out.
        Format::Tar => match buffered.views() {
            Some(views) => tar::read_mapped(buffered, views, sink),
            None => tar::read(buffered, sink),
        },
        Format::TarGz => {
            let decoder = tar::GzMembers::new(buffered);
            tar::read_decoded(decoder, sink)
        }
        Format::TarZst => {
            let mut decoder = zstd::stream::read::Decoder::with_buffer(buffered)
                .map_err(|e| Stop::Fault(EngineError::Artifact(e)))?;
            // Bound decoder memory: a frame asking for a larger window is refused, not honoured.
            decoder
                .window_log_max(sink.limits().zstd_window_log_max)
                .map_err(|e| Stop::Fault(EngineError::Artifact(e)))?;
            tar::read_decoded(decoder, sink)
        }
    }
}

fn hash_all(file: &File, size: u64) -> io::Result<Sha256Digest> {
    let mut hasher = Hasher::new();
    let mut buf = vec![0u8; 256 * 1024];
    let mut off = 0u64;
    while off < size {
        let want = usize::try_from((size - off).min(buf.len() as u64)).unwrap_or(buf.len());
        let n = file.read_at(&mut buf[..want], off)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "artifact shrank while being read",
            ));
        }
        hasher.update(&buf[..n]);
        off += n as u64;
    }
    Ok(hasher.finish().0)
}

fn read_head(file: &File, head: &mut [u8]) -> io::Result<usize> {
    read_at_most(file, head, 0)
}

fn read_at_most(file: &File, head: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut filled = 0;
    while filled < head.len() {
        let n = file.read_at(&mut head[filled..], offset + filled as u64)?;
        if n == 0 {
            break;
        }
        filled += n;
    }
    Ok(filled)
}
