//! The parent <-> child messages and their framing: a little-endian `u32` length, then that many
//! bytes. Every read is bounded before a byte of payload is buffered, and a frame decoder
//! refuses trailing bytes, so a child cannot smuggle a second answer behind the first.
//!
//! The request (parent -> child, on fd 0) is three frames: the JSON [`ChildRequest`], the raw
//! seccomp BPF program the parent compiled, and, once the parent has copied the artifact into
//! the memfd, hashed and sealed it, the 32-byte SHA-256 of the sealed bytes. The child confines
//! itself while the parent seals; it reads the third frame before a byte of the artifact. The
//! answer (child -> parent, on fd 1) is one frame of JSON [`ChildAnswer`]. Nothing here trusts the child: the parent decodes with serde into
//! closed types and then checks the content (see `supervise` and `recheck`).

use std::io::{self, Read};

use serde::{Deserialize, Serialize};

use super::probe::{Probe, ProbeResult};
use crate::extract::Request;
use crate::intake::Outcome;

/// Largest request frame (JSON); requests are a few hundred bytes.
pub const MAX_REQUEST_BYTES: usize = 64 * 1024;
/// The third request frame: a SHA-256 digest, raw.
pub const SEALED_DIGEST_BYTES: usize = 32;
/// Largest BPF program frame: seccomp's limit of 4096 instructions of 8 bytes each.
pub const MAX_BPF_BYTES: usize = 4096 * 8;
/// Default bound on the child's answer. An inventory of 10,000 entries stays below it unless
/// its names and link targets are near the length limits and made of characters JSON escapes;
/// the child answers such a package `resource_limit` rather than send it (`child.rs`), so
/// anything larger is a misbehaving child.
pub const DEFAULT_MAX_ANSWER_BYTES: usize = 32 * 1024 * 1024;

/// A frame that cannot be accepted.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    #[error("frame of {len} bytes exceeds the bound of {max}")]
    TooLarge { len: u64, max: usize },
    #[error("frame truncated: {got} of {want} bytes")]
    Truncated { got: usize, want: usize },
    #[error("{0} unexpected bytes after the frame")]
    Trailing(usize),
    #[error("cannot read a frame: {0}")]
    Io(#[from] io::Error),
}

/// Bytes of a frame's length prefix (the payload's length, a little-endian `u32`).
pub const PREFIX: usize = 4;

/// One frame: length prefix and payload.
pub fn frame(payload: &[u8]) -> io::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(PREFIX + payload.len());
    out.extend_from_slice(&[0; PREFIX]);
    out.extend_from_slice(payload);
    with_length(out)
}

/// One frame of `msg` as JSON, serialized in place after its length prefix: for a 10,000-entry
/// answer (about 2 MB) no second buffer and no copy of the payload into it.
pub fn json_frame<T: Serialize + ?Sized>(msg: &T) -> io::Result<Vec<u8>> {
    let mut out = vec![0u8; PREFIX];
    serde_json::to_writer(&mut out, msg).map_err(io::Error::other)?;
    with_length(out)
}

/// `out`, [`PREFIX`] placeholder bytes and a payload, with the payload's length put in their
/// place.
fn with_length(mut out: Vec<u8>) -> io::Result<Vec<u8>> {
    let len = u32::try_from(out.len() - PREFIX)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "frame over 4 GiB"))?;
    out[..PREFIX].copy_from_slice(&len.to_le_bytes());
    Ok(out)
}

/// The payload length a frame header announces, refused above `max` before anything is read.
fn announced(header: [u8; 4], max: usize) -> Result<usize, WireError> {
    let len = u32::from_le_bytes(header);
    let too_large = WireError::TooLarge {
        len: u64::from(len),
        max,
    };
    match usize::try_from(len) {
        Ok(want) if want <= max => Ok(want),
        _ => Err(too_large),
    }
}

/// Read one frame from a blocking reader, refusing lengths above `max` before reading them.
pub fn read_frame(mut r: impl Read, max: usize) -> Result<Vec<u8>, WireError> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len)?;
    let want = announced(len, max)?;
    let mut buf = Vec::with_capacity(want);
    let got = r.take(want as u64).read_to_end(&mut buf)?;
    if got != want {
        return Err(WireError::Truncated { got, want });
    }
    Ok(buf)
}

/// Decode a buffer that must hold exactly one frame of at most `max` payload bytes.
pub fn single_frame(buf: &[u8], max: usize) -> Result<&[u8], WireError> {
    let Some((len, rest)) = buf.split_first_chunk::<4>() else {
        return Err(WireError::Truncated {
            got: buf.len(),
            want: 4,
        });
    };
    let want = announced(*len, max)?;
    match rest.len().cmp(&want) {
        std::cmp::Ordering::Less => Err(WireError::Truncated {
            got: rest.len(),
            want,
        }),
        std::cmp::Ordering::Greater => Err(WireError::Trailing(rest.len() - want)),
        std::cmp::Ordering::Equal => Ok(rest),
    }
}

/// Whether a confinement step that cannot be applied stops the child (the default) or is
/// recorded and skipped (`--allow-unconfined`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Enforcement {
    Required,
    AllowUnconfined,
}

/// The unprivileged identity a root-started child switches to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ids {
    pub uid: u32,
    pub gid: u32,
}

/// Resource limits the child sets on itself (soft = hard unless noted).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RlimitPlan {
    /// RLIMIT_AS, bytes of address space.
    pub address_space_bytes: u64,
    /// RLIMIT_CPU soft limit (SIGXCPU); the hard limit is one second more (SIGKILL).
    pub cpu_seconds: u64,
    /// RLIMIT_FSIZE: largest file the child can write (beyond it: SIGXFSZ).
    pub file_size_bytes: u64,
    /// RLIMIT_NOFILE.
    pub open_files: u64,
}

/// What the child is asked to do once confined.
#[expect(
    clippy::large_enum_variant,
    reason = "one job per child process; boxing buys nothing"
)]
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Job {
    /// Run the extraction engine.
    Extract(Request),
    /// Run one escape or misbehaviour probe (tests and `doctor`); see `probe.rs`.
    Probe(Probe),
}

/// What this build's sources hash to (build.rs). The parent sends it and the child refuses a
/// request from another build: a `skillbox-child` left from an older build (`cargo run` rebuilds
/// only `skillbox`) would otherwise run another engine and review without a word.
pub const SOURCE_ID: &str = env!("SKILLBOX_SOURCE_ID");

/// The first frame on the child's fd 0.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ChildRequest {
    /// The parent's [`SOURCE_ID`].
    pub build: String,
    /// Our pid: after setting the parent-death signal the child checks it still has this parent.
    pub parent_pid: u32,
    /// Identity to switch to when the child starts as root; `None` keeps root (refused unless
    /// unconfined operation is allowed).
    pub run_as: Option<Ids>,
    pub rlimits: RlimitPlan,
    pub enforcement: Enforcement,
    /// What the BPF frame is: the whole profile, or the second stage of a spare's filter.
    #[serde(default)]
    pub seccomp_stage: SeccompStage,
    /// Other requests keep the parent's cores busy: a small artifact is then extracted on the
    /// child's one main thread, without its hashing thread ([`crate::extract::hashing::BUSY_INLINE_BELOW`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub busy: bool,
    pub job: Job,
}

/// Which program the request's BPF frame carries.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SeccompStage {
    /// The whole profile (an exec'd child).
    #[default]
    Whole,
    /// The second stage, which only completes a first stage installed before the order (a
    /// zygote's spare, see `seccomp::Profile::stages`); refused without it.
    Second,
}

/// How far the kernel enforced the child's Landlock ruleset.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LandlockStatus {
    /// Every right we handle is restricted.
    FullyEnforced,
    /// The required rights are restricted; an optional feature (a newer ABI's) is missing.
    PartiallyEnforced,
    /// Not restricted at all (only ever accepted under `allow_unconfined`).
    #[default]
    NotEnforced,
}

impl LandlockStatus {
    /// The name used in answers and logs (`fully_enforced`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::FullyEnforced => "fully_enforced",
            Self::PartiallyEnforced => "partially_enforced",
            Self::NotEnforced => "not_enforced",
        }
    }
}

impl std::fmt::Display for LandlockStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the child managed to apply, reported back (informational: the parent cannot verify it
/// after the fact; `doctor` and the tests check it from outside via /proc).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfinementReport {
    pub uid: u32,
    pub gid: u32,
    /// Landlock ABI offered by the kernel (0: none).
    pub landlock_abi: i32,
    pub landlock: LandlockStatus,
    /// Optional Landlock features that were in force (e.g. `scope_signal`).
    pub landlock_features: Vec<String>,
    pub no_new_privs: bool,
    pub seccomp: bool,
    pub rlimits: Option<RlimitPlan>,
    /// Steps that could not be applied (only non-empty under `allow_unconfined`).
    pub missing: Vec<String>,
}

/// The child's one answer frame.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ChildAnswer {
    pub report: ConfinementReport,
    pub result: JobResult,
    /// The extraction hashed every file on the main thread although the hashing thread was
    /// there (the request was `busy` and the artifact small).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hashed_inline: bool,
}

impl ChildAnswer {
    /// The answer of a job that did not take the busy path (`hashed_inline` false).
    pub fn new(report: ConfinementReport, result: JobResult) -> Self {
        ChildAnswer {
            report,
            result,
            hashed_inline: false,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobResult {
    /// The engine's outcome (accepted or rejected).
    Extracted(Box<Outcome>),
    /// The engine could not do its job (an I/O fault, not a verdict).
    EngineFault { detail: String },
    /// Confinement could not be applied as required; the job was not run.
    Unavailable { step: String, detail: String },
    /// A probe's result.
    Probe(ProbeResult),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_bounds_hold() {
        let f = frame(b"hello").unwrap_or_default();
        assert_eq!(single_frame(&f, 5).ok(), Some(&b"hello"[..]));
        assert!(matches!(
            single_frame(&f, 4),
            Err(WireError::TooLarge { len: 5, max: 4 })
        ));
        assert!(matches!(
            single_frame(&f[..6], 5),
            Err(WireError::Truncated { got: 2, want: 5 })
        ));
        let mut two = f.clone();
        two.push(0);
        assert!(matches!(single_frame(&two, 5), Err(WireError::Trailing(1))));
        assert!(matches!(
            single_frame(&[1, 0], 5),
            Err(WireError::Truncated { .. })
        ));
        assert_eq!(read_frame(&f[..], 5).ok(), Some(b"hello".to_vec()));
        // A huge declared length is refused before anything is allocated.
        let huge = [0xff, 0xff, 0xff, 0xff, 0];
        assert!(matches!(
            read_frame(&huge[..], 1024),
            Err(WireError::TooLarge { .. })
        ));
        assert!(matches!(
            read_frame(&f[..7], 5),
            Err(WireError::Truncated { .. })
        ));
        // Serialized in place: the same bytes as the payload framed afterwards.
        let msg = serde_json::json!({"a": [1, 2, "\u{e9}\"x"], "b": null});
        let payload = serde_json::to_vec(&msg).unwrap_or_default();
        let framed = json_frame(&msg).unwrap_or_default();
        assert_eq!(framed, frame(&payload).unwrap_or_default());
        assert_eq!(single_frame(&framed, 64).ok(), Some(&payload[..]));
    }
}
