//! Between the crate's own types and the wire types of `proto/skillbox/v1`: the header becomes a
//! checked [`Request`], an [`Outcome`] becomes an `ExtractResponse`, and back again for the
//! client. The broker and the client both use this one module, so neither depends on the
//! other, and the two directions cannot drift apart.
//!
//! Every match over our enums is exhaustive and every struct is destructured without `..`, so a
//! new reason code, flag or limit does not compile until it has a wire form.

use crate::digest::Sha256Digest;
use crate::extract::Request;
use crate::extract::detect::ArtifactType;
use crate::extract::inventory::{ArtifactFacts, Entry, Flag, Kind, Totals};
use crate::extract::overrides::LimitOverrides;
use crate::extract::policy::{HardlinkPolicy, Limits, LimitsError};
use crate::intake::Outcome;
use crate::proto as pb;
use crate::reason::{Reason, ReasonCode, Verdict};
use crate::sandbox::SandboxReport;
use crate::sandbox::wire::{ConfinementReport, RlimitPlan};
use crate::skill::frontmatter::Frontmatter;
use crate::skill::review::{Capabilities, Coverage, Finding, Mentions, Review, Script};

/// Largest answer the server sends and the client accepts (an inventory of 10,000 long names
/// fits well within it).
pub const MAX_RESPONSE_BYTES: usize = 64 * 1024 * 1024;

/// The runtime directory the default socket and staging root live in.
pub fn default_base_dir() -> std::path::PathBuf {
    if let Some(dir) =
        std::env::var_os("XDG_RUNTIME_DIR").filter(|d| std::path::Path::new(d).is_absolute())
    {
        return std::path::PathBuf::from(dir).join("skillbox");
    }
    let uid = nix::unistd::Uid::effective();
    if uid.is_root() {
        return std::path::PathBuf::from("/run/skillbox");
    }
    std::env::temp_dir().join(format!("skillbox-{}", uid.as_raw()))
}

/// The default Unix socket path (what `skillbox extract --server` means by `unix:` alone).
pub fn default_socket() -> std::path::PathBuf {
    default_base_dir().join("skillbox.sock")
}

/// A header field the server cannot accept; `field` names it (`header.limits.max_entries`). The
/// broker answers it as `INVALID_ARGUMENT`, the CLI as a usage error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {description}")]
pub struct InvalidField {
    pub field: String,
    pub description: String,
}

impl InvalidField {
    pub fn new(field: impl Into<String>, description: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            description: description.into(),
        }
    }
}

/// Bounds on the free-text header fields (bytes).
pub const MAX_MEDIA_TYPE: usize = 256;
pub const MAX_FILE_NAME: usize = 1024;
pub const MAX_URL: usize = 8192;
pub const MAX_SKILL_NAME: usize = 256;
pub const MAX_INDEX_DESCRIPTION: usize = 4096;
pub const MAX_CALLER_LABEL: usize = 128;

/// The answer bound of a request that sets none (`header.max_answer_bytes` 0): 4 MiB, the
/// receive limit of every stock gRPC client (grpcio, grpc-js, grpc-go, grpc-java) by default.
pub const DEFAULT_MAX_ANSWER_BYTES: usize = 4 * 1024 * 1024;

/// The smallest `header.max_answer_bytes` a request may set. Every answer fits in a few KiB but
/// an inventory's; a smaller bound is a mistake (a value meant in KiB or MiB), not a client.
pub const MIN_MAX_ANSWER_BYTES: usize = 64 * 1024;

/// A header that passed every check.
#[derive(Debug, Clone)]
pub struct Checked {
    pub request: Request,
    pub caller_label: Option<String>,
    /// The largest answer message the client can receive (`header.max_answer_bytes`, or
    /// [`DEFAULT_MAX_ANSWER_BYTES`]); at most [`MAX_RESPONSE_BYTES`].
    pub max_answer_bytes: usize,
}

/// Check the header against the server's limits and build the engine's request.
pub fn request_from_header(h: pb::ExtractHeader, server: &Limits) -> Result<Checked, InvalidField> {
    let pb::ExtractHeader {
        expected_digest,
        declared_type,
        media_type,
        file_name,
        url,
        limits,
        skill_name,
        index_description,
        caller_label,
        max_answer_bytes,
    } = h;
    let expected_digest = match expected_digest {
        Some(d) => Some(
            d.parse::<Sha256Digest>()
                .map_err(|e| InvalidField::new("header.expected_digest", e.to_string()))?,
        ),
        None => None,
    };
    let artifact_type = match pb::ArtifactType::try_from(declared_type) {
        Ok(pb::ArtifactType::SkillMd) => ArtifactType::SkillMd,
        Ok(pb::ArtifactType::Archive) => ArtifactType::Archive,
        Ok(pb::ArtifactType::Unspecified) | Err(_) => {
            return Err(InvalidField::new(
                "header.declared_type",
                "must be ARTIFACT_TYPE_SKILL_MD or ARTIFACT_TYPE_ARCHIVE",
            ));
        }
    };
    let media_type = text_field("header.media_type", media_type, MAX_MEDIA_TYPE)?;
    let file_name = text_field("header.file_name", file_name, MAX_FILE_NAME)?;
    let url = text_field("header.url", url, MAX_URL)?;
    let skill_name = text_field("header.skill_name", skill_name, MAX_SKILL_NAME)?;
    let index_description = bounded_field(
        "header.index_description",
        index_description,
        MAX_INDEX_DESCRIPTION,
    )?;
    let caller_label = text_field("header.caller_label", caller_label, MAX_CALLER_LABEL)?;
    let max_answer_bytes = answer_bound(max_answer_bytes)?;
    let limits = match limits {
        Some(l) => merge_limits(&l, server)?,
        None => server.clone(),
    };
    let mut request = Request::new(artifact_type, limits);
    request.expected_digest = expected_digest;
    request.media_type = media_type;
    request.file_name = file_name.or_else(|| url.as_deref().and_then(url_file_name));
    request.skill_name = skill_name;
    request.index_description = index_description;
    Ok(Checked {
        request,
        caller_label,
        max_answer_bytes,
    })
}

/// `header.max_answer_bytes`: 0 is the stock clients' 4 MiB; otherwise between
/// [`MIN_MAX_ANSWER_BYTES`] and the server's own send limit, [`MAX_RESPONSE_BYTES`] (a larger
/// bound could not be honoured: the server would fail to send what the client could take).
fn answer_bound(v: u64) -> Result<usize, InvalidField> {
    if v == 0 {
        return Ok(DEFAULT_MAX_ANSWER_BYTES);
    }
    match usize::try_from(v) {
        Ok(n) if (MIN_MAX_ANSWER_BYTES..=MAX_RESPONSE_BYTES).contains(&n) => Ok(n),
        _ => Err(InvalidField::new(
            "header.max_answer_bytes",
            format!(
                "{v} is out of range: 0 (for {DEFAULT_MAX_ANSWER_BYTES}, what stock gRPC clients receive), or {MIN_MAX_ANSWER_BYTES} to {MAX_RESPONSE_BYTES}, the largest message this server sends; set it to the client's own receive limit"
            ),
        )),
    }
}

/// A short, printable, single-line field.
fn text_field(field: &str, v: Option<String>, max: usize) -> Result<Option<String>, InvalidField> {
    let v = bounded_field(field, v, max)?;
    if let Some(s) = &v
        && s.chars().any(char::is_control)
    {
        return Err(InvalidField::new(
            field,
            "must not contain control characters",
        ));
    }
    Ok(v)
}

fn bounded_field(
    field: &str,
    v: Option<String>,
    max: usize,
) -> Result<Option<String>, InvalidField> {
    match v {
        Some(s) if s.len() > max => {
            Err(InvalidField::new(field, format!("longer than {max} bytes")))
        }
        other => Ok(other),
    }
}

/// The last path segment of a URL (no query or fragment), as a file name hint.
pub fn url_file_name(url: &str) -> Option<String> {
    let no_fragment = url.split('#').next().unwrap_or("");
    let path = no_fragment.split('?').next().unwrap_or("");
    let path = match path.find("://") {
        Some(i) => {
            let rest = &path[i + 3..];
            rest.find('/').map_or("", |j| &rest[j..])
        }
        None => path,
    };
    let last = path.rsplit('/').next().unwrap_or("");
    (!last.is_empty()).then(|| last.to_owned())
}

/// Overlay the fields the request sets on the server's limits; each must be at least as strict.
pub fn merge_limits(p: &pb::Limits, server: &Limits) -> Result<Limits, InvalidField> {
    let pb::Limits {
        max_artifact_bytes,
        max_entries,
        max_expanded_bytes,
        max_file_bytes,
        max_ratio,
        ratio_threshold_bytes,
        max_path_depth,
        max_path_bytes,
        max_component_bytes,
        zstd_window_log_max,
        allow_symlinks,
        hardlinks,
        require_skill_md,
    } = *p;
    let hardlinks = match hardlinks.map(pb::HardlinkPolicy::try_from) {
        None => None,
        Some(Ok(pb::HardlinkPolicy::Reject)) => Some(HardlinkPolicy::Reject),
        Some(Ok(pb::HardlinkPolicy::CopyInternal)) => Some(HardlinkPolicy::CopyInternal),
        Some(Ok(pb::HardlinkPolicy::Unspecified) | Err(_)) => {
            return Err(InvalidField::new(
                "header.limits.hardlinks",
                "must be REJECT or COPY_INTERNAL",
            ));
        }
    };
    let l = LimitOverrides {
        max_artifact_bytes,
        max_entries,
        max_expanded_bytes,
        max_file_bytes,
        max_ratio,
        ratio_threshold_bytes,
        max_path_depth,
        max_path_bytes,
        max_component_bytes,
        zstd_window_log_max,
        allow_symlinks,
        hardlinks,
        require_skill_md,
        // Not a request field: the server's own setting applies to every request.
        accept_wrapper: None,
    }
    .apply(server);
    l.validate().map_err(|e| match e {
        LimitsError::OutOfRange { field, .. } => {
            InvalidField::new(format!("header.limits.{field}"), e.to_string())
        }
        other => InvalidField::new("header.limits", other.to_string()),
    })?;
    l.is_within(server).map_err(|field| {
        InvalidField::new(
            format!("header.limits.{field}"),
            "looser than the server's limit (see ServerInfo); a request may only tighten limits",
        )
    })?;
    Ok(l)
}

/// Every limit, for ServerInfo.
pub fn limits_to_proto(l: &Limits) -> pb::Limits {
    let Limits {
        max_artifact_bytes,
        max_entries,
        max_expanded_bytes,
        max_file_bytes,
        max_ratio,
        ratio_threshold_bytes,
        max_path_depth,
        max_path_bytes,
        max_component_bytes,
        zstd_window_log_max,
        allow_symlinks,
        hardlinks,
        require_skill_md,
        // Not on the wire: the server's own setting applies to every request.
        accept_wrapper: _,
    } = *l;
    pb::Limits {
        max_artifact_bytes: Some(max_artifact_bytes),
        max_entries: Some(max_entries),
        max_expanded_bytes: Some(max_expanded_bytes),
        max_file_bytes: Some(max_file_bytes),
        max_ratio: Some(max_ratio),
        ratio_threshold_bytes: Some(ratio_threshold_bytes),
        max_path_depth: Some(max_path_depth),
        max_path_bytes: Some(max_path_bytes),
        max_component_bytes: Some(max_component_bytes),
        zstd_window_log_max: Some(zstd_window_log_max),
        allow_symlinks: Some(allow_symlinks),
        hardlinks: Some(match hardlinks {
            HardlinkPolicy::Reject => pb::HardlinkPolicy::Reject,
            HardlinkPolicy::CopyInternal => pb::HardlinkPolicy::CopyInternal,
        } as i32),
        require_skill_md: Some(require_skill_md),
    }
}

/// The reason-code mapping; a new code fails to compile here until it has a wire number.
pub fn reason_code_to_proto(c: ReasonCode) -> pb::ReasonCode {
    use pb::ReasonCode as P;
    match c {
        ReasonCode::PathTraversal => P::PathTraversal,
        ReasonCode::AbsolutePath => P::AbsolutePath,
        ReasonCode::InvalidName => P::InvalidName,
        ReasonCode::LinkEscape => P::LinkEscape,
        ReasonCode::LinkTraversal => P::LinkTraversal,
        ReasonCode::Hardlink => P::Hardlink,
        ReasonCode::DeviceEntry => P::DeviceEntry,
        ReasonCode::DuplicatePath => P::DuplicatePath,
        ReasonCode::CaseCollision => P::CaseCollision,
        ReasonCode::UnicodeCollision => P::UnicodeCollision,
        ReasonCode::EntryCount => P::EntryCount,
        ReasonCode::ExpandedSize => P::ExpandedSize,
        ReasonCode::Ratio => P::Ratio,
        ReasonCode::FileSize => P::FileSize,
        ReasonCode::PathDepth => P::PathDepth,
        ReasonCode::PathLength => P::PathLength,
        ReasonCode::Encrypted => P::Encrypted,
        ReasonCode::UnsupportedMethod => P::UnsupportedMethod,
        ReasonCode::Corrupt => P::Corrupt,
        ReasonCode::CrcMismatch => P::CrcMismatch,
        ReasonCode::HeaderMismatch => P::HeaderMismatch,
        ReasonCode::OverlappingEntries => P::OverlappingEntries,
        ReasonCode::MissingSkillMd => P::MissingSkillMd,
        ReasonCode::FormatMismatch => P::FormatMismatch,
        ReasonCode::UnsupportedFormat => P::UnsupportedFormat,
        ReasonCode::DigestMismatch => P::DigestMismatch,
        ReasonCode::ArtifactSize => P::ArtifactSize,
        ReasonCode::Timeout => P::Timeout,
        ReasonCode::ResourceLimit => P::ResourceLimit,
        ReasonCode::SandboxViolation => P::SandboxViolation,
        ReasonCode::SandboxUnavailable => P::SandboxUnavailable,
        ReasonCode::InvalidSkillMd => P::InvalidSkillMd,
    }
}

/// The inverse of [`reason_code_to_proto`]; `None` for UNSPECIFIED.
pub fn reason_code_from_proto(c: pb::ReasonCode) -> Option<ReasonCode> {
    ReasonCode::ALL
        .into_iter()
        .find(|&code| reason_code_to_proto(code) == c)
}

fn flag_to_proto(f: Flag) -> pb::EntryFlag {
    match f {
        Flag::Executable => pb::EntryFlag::Executable,
        Flag::Script => pb::EntryFlag::Script,
        Flag::NestedArchive => pb::EntryFlag::NestedArchive,
        Flag::SkillMd => pb::EntryFlag::SkillMd,
        Flag::ModeSanitised => pb::EntryFlag::ModeSanitised,
    }
}

fn flag_from_proto(f: pb::EntryFlag) -> Option<Flag> {
    match f {
        pb::EntryFlag::Executable => Some(Flag::Executable),
        pb::EntryFlag::Script => Some(Flag::Script),
        pb::EntryFlag::NestedArchive => Some(Flag::NestedArchive),
        pb::EntryFlag::SkillMd => Some(Flag::SkillMd),
        pb::EntryFlag::ModeSanitised => Some(Flag::ModeSanitised),
        pb::EntryFlag::Unspecified => None,
    }
}

pub fn reason_to_proto(r: &Reason) -> pb::Reason {
    let Reason {
        code,
        entry,
        detail,
        limit,
        observed,
    } = r;
    pb::Reason {
        code: reason_code_to_proto(*code) as i32,
        entry: entry.clone(),
        detail: detail.clone(),
        limit: *limit,
        observed: *observed,
        code_name: code.as_str().to_owned(),
    }
}

/// A value of ours that has no wire form (a fault of the server, never of the artifact).
#[derive(Debug, thiserror::Error)]
#[error("cannot encode the answer: {0}")]
pub struct Unencodable(pub String);

/// The stable snake_case spelling of one of our serde enums (`risky_command`).
fn wire_name<T: serde::Serialize + std::fmt::Debug>(v: &T) -> Result<String, Unencodable> {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::String(s)) => Ok(s),
        Ok(other) => Err(Unencodable(format!("{v:?} spells as {other}, not a name"))),
        Err(e) => Err(Unencodable(format!("{v:?}: {e}"))),
    }
}

fn from_wire_name<T: serde::de::DeserializeOwned>(
    what: &str,
    name: &str,
) -> Result<T, MalformedAnswer> {
    serde_json::from_value(serde_json::Value::String(name.to_owned()))
        .map_err(|_| bad(format!("unknown {what} {name:?}")))
}

fn names<T: serde::Serialize + std::fmt::Debug>(v: &[T]) -> Result<Vec<String>, Unencodable> {
    v.iter().map(wire_name).collect()
}

fn from_names<T: serde::de::DeserializeOwned>(
    what: &str,
    v: &[String],
) -> Result<Vec<T>, MalformedAnswer> {
    v.iter().map(|n| from_wire_name(what, n)).collect()
}

/// The answer for `outcome`; `staged` is (id, path) for an accepted, kept directory.
pub fn outcome_to_proto(
    o: &Outcome,
    staged: Option<(&str, &str)>,
) -> Result<pb::ExtractResponse, Unencodable> {
    outcome_to_proto_with(o, staged, None)
}

/// [`outcome_to_proto`] with the request's confinement report.
pub fn outcome_to_proto_with(
    o: &Outcome,
    staged: Option<(&str, &str)>,
    sandbox: Option<pb::SandboxReport>,
) -> Result<pb::ExtractResponse, Unencodable> {
    let Outcome {
        verdict,
        reason,
        artifact,
        entries,
        totals,
        // Not on the wire yet: the wrapping directory is named in the CLI's answer only.
        wrapper: _,
        review,
    } = o;
    let ArtifactFacts {
        digest,
        format,
        size,
    } = artifact;
    let Totals {
        entries: n_entries,
        files,
        dirs,
        symlinks,
        bytes_in,
        bytes_out,
        ratio,
    } = totals;
    let (staging_id, staging_path) = staged
        .map(|(i, p)| (i.to_owned(), p.to_owned()))
        .unwrap_or_default();
    Ok(pb::ExtractResponse {
        verdict: match verdict {
            Verdict::Accepted => pb::Verdict::Accepted,
            Verdict::Rejected => pb::Verdict::Rejected,
        } as i32,
        reason: reason.as_ref().map(reason_to_proto),
        artifact: Some(pb::ArtifactFacts {
            digest: digest.map(|d| d.to_string()),
            format: format.clone(),
            size: *size,
        }),
        entries: entries.iter().map(entry_to_proto).collect(),
        totals: Some(pb::Totals {
            entries: *n_entries,
            files: *files,
            dirs: *dirs,
            symlinks: *symlinks,
            bytes_in: *bytes_in,
            bytes_out: *bytes_out,
            ratio: *ratio,
        }),
        staging_path,
        staging_id,
        review: review.as_ref().map(review_to_proto).transpose()?,
        sandbox,
    })
}

pub fn review_to_proto(r: &Review) -> Result<pb::Review, Unencodable> {
    let Review {
        frontmatter,
        flags,
        tools,
        scripts,
        capabilities,
        mentions,
        findings,
        coverage,
    } = r;
    let Capabilities {
        hosts,
        downloads,
        uploads,
        credentials,
        risky_commands,
        executables,
    } = capabilities;
    let Mentions {
        hosts: m_hosts,
        downloads: m_downloads,
        uploads: m_uploads,
        credentials: m_credentials,
        risky_commands: m_risky_commands,
    } = mentions;
    let Coverage {
        complete,
        files_scanned,
        bytes_scanned,
        truncated_files,
        unread_files,
        binary_files,
        findings_dropped,
        repeats_dropped,
        subjects_dropped,
        max_file_bytes,
        max_total_bytes,
        max_findings,
    } = coverage;
    Ok(pb::Review {
        frontmatter: frontmatter.as_ref().map(frontmatter_to_proto),
        flags: names(flags)?,
        tools: tools.clone(),
        scripts: scripts
            .iter()
            .map(script_to_proto)
            .collect::<Result<_, _>>()?,
        capabilities: Some(pb::Capabilities {
            hosts: hosts.clone(),
            downloads: downloads.clone(),
            credentials: credentials.clone(),
            risky_commands: risky_commands.clone(),
            executables: executables.clone(),
            uploads: uploads.clone(),
        }),
        mentions: Some(pb::Capabilities {
            hosts: m_hosts.clone(),
            downloads: m_downloads.clone(),
            credentials: m_credentials.clone(),
            risky_commands: m_risky_commands.clone(),
            executables: Vec::new(),
            uploads: m_uploads.clone(),
        }),
        findings: findings
            .iter()
            .map(finding_to_proto)
            .collect::<Result<_, _>>()?,
        coverage: Some(pb::Coverage {
            complete: *complete,
            files_scanned: *files_scanned,
            bytes_scanned: *bytes_scanned,
            truncated_files: truncated_files.clone(),
            unread_files: *unread_files,
            binary_files: *binary_files,
            findings_dropped: *findings_dropped,
            repeats_dropped: *repeats_dropped,
            subjects_dropped: *subjects_dropped,
            max_file_bytes: *max_file_bytes,
            max_total_bytes: *max_total_bytes,
            max_findings: *max_findings,
        }),
    })
}

fn frontmatter_to_proto(f: &Frontmatter) -> pb::Frontmatter {
    let Frontmatter {
        name,
        description,
        license,
        compatibility,
        metadata,
        allowed_tools,
        unknown_keys,
    } = f;
    pb::Frontmatter {
        name: name.clone(),
        description: description.clone(),
        license: license.clone(),
        compatibility: compatibility.clone(),
        metadata: metadata
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        allowed_tools: allowed_tools.clone(),
        unknown_keys: unknown_keys.clone(),
    }
}

fn script_to_proto(s: &Script) -> Result<pb::Script, Unencodable> {
    let Script {
        path,
        interpreter,
        size,
        sha256,
        executable,
        detected_by,
        run_with,
    } = s;
    Ok(pb::Script {
        path: path.clone(),
        interpreter: interpreter.clone(),
        size: *size,
        sha256: sha256.map(|d| d.to_string()),
        executable: *executable,
        detected_by: names(detected_by)?,
        run_with: run_with.clone().unwrap_or_default(),
    })
}

fn finding_to_proto(f: &Finding) -> Result<pb::Finding, Unencodable> {
    let Finding {
        kind,
        context,
        file,
        line,
        excerpt,
        subject,
    } = f;
    Ok(pb::Finding {
        kind: wire_name(kind)?,
        context: wire_name(context)?,
        file: file.clone(),
        line: *line,
        excerpt: excerpt.clone(),
        subject: subject.clone(),
    })
}

/// How a request was confined, for the answer.
pub fn sandbox_to_proto(r: &SandboxReport) -> Result<pb::SandboxReport, Unencodable> {
    let SandboxReport {
        confined,
        enforcement,
        seccomp_profile,
        verify,
        child,
        hashed_inline: _,
    } = r;
    let child = match child {
        None => None,
        Some(c) => {
            let ConfinementReport {
                uid,
                gid,
                landlock_abi,
                landlock,
                landlock_features,
                no_new_privs,
                seccomp,
                rlimits,
                missing,
            } = c;
            Some(pb::ChildConfinement {
                uid: *uid,
                gid: *gid,
                landlock_abi: *landlock_abi,
                landlock: landlock.as_str().to_owned(),
                landlock_features: landlock_features.clone(),
                no_new_privs: *no_new_privs,
                seccomp: *seccomp,
                rlimits: rlimits.map(
                    |RlimitPlan {
                         address_space_bytes,
                         cpu_seconds,
                         file_size_bytes,
                         open_files,
                     }| pb::Rlimits {
                        address_space_bytes,
                        cpu_seconds,
                        file_size_bytes,
                        open_files,
                    },
                ),
                missing: missing.clone(),
            })
        }
    };
    Ok(pb::SandboxReport {
        confined: *confined,
        enforcement: wire_name(enforcement)?,
        seccomp_profile: seccomp_profile.clone(),
        verify: wire_name(verify)?,
        child,
    })
}

/// The client side of [`sandbox_to_proto`]: the `sandbox` object of `skillbox extract --json`,
/// the same shape the local CLI prints.
pub fn sandbox_from_proto(r: &pb::SandboxReport) -> serde_json::Value {
    let child = r.child.as_ref().map(|c| {
        serde_json::json!({
            "uid": c.uid,
            "gid": c.gid,
            "landlock_abi": c.landlock_abi,
            "landlock": c.landlock,
            "landlock_features": c.landlock_features,
            "no_new_privs": c.no_new_privs,
            "seccomp": c.seccomp,
            "rlimits": c.rlimits.map(|l| serde_json::json!({
                "address_space_bytes": l.address_space_bytes,
                "cpu_seconds": l.cpu_seconds,
                "file_size_bytes": l.file_size_bytes,
                "open_files": l.open_files,
            })),
            "missing": c.missing,
        })
    });
    serde_json::json!({
        "confined": r.confined,
        "enforcement": r.enforcement,
        "seccomp_profile": r.seccomp_profile,
        "verify": r.verify,
        "child": child,
    })
}

fn review_from_proto(r: &pb::Review) -> Result<Review, MalformedAnswer> {
    let c = r.capabilities.clone().unwrap_or_default();
    let v = r.coverage.clone().unwrap_or_default();
    let mut scripts = Vec::with_capacity(r.scripts.len());
    for s in &r.scripts {
        scripts.push(Script {
            path: s.path.clone(),
            interpreter: s.interpreter.clone(),
            size: s.size,
            sha256: s
                .sha256
                .as_deref()
                .map(str::parse)
                .transpose()
                .map_err(|e| bad(format!("script digest: {e}")))?,
            executable: s.executable,
            detected_by: from_names("script signal", &s.detected_by)?,
            run_with: Some(s.run_with.clone()),
        });
    }
    let mut findings = Vec::with_capacity(r.findings.len());
    for f in &r.findings {
        findings.push(Finding {
            kind: from_wire_name("finding kind", &f.kind)?,
            context: from_wire_name("finding context", &f.context)?,
            file: f.file.clone(),
            line: f.line,
            excerpt: f.excerpt.clone(),
            subject: f.subject.clone(),
        });
    }
    Ok(Review {
        frontmatter: r.frontmatter.as_ref().map(|f| Frontmatter {
            name: f.name.clone(),
            description: f.description.clone(),
            license: f.license.clone(),
            compatibility: f.compatibility.clone(),
            metadata: f
                .metadata
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            allowed_tools: f.allowed_tools.clone(),
            unknown_keys: f.unknown_keys.clone(),
        }),
        flags: from_names("review flag", &r.flags)?,
        tools: r.tools.clone(),
        scripts,
        capabilities: Capabilities {
            hosts: c.hosts,
            downloads: c.downloads,
            credentials: c.credentials,
            risky_commands: c.risky_commands,
            executables: c.executables,
            uploads: c.uploads,
        },
        mentions: {
            let m = r.mentions.clone().unwrap_or_default();
            Mentions {
                hosts: m.hosts,
                downloads: m.downloads,
                uploads: m.uploads,
                credentials: m.credentials,
                risky_commands: m.risky_commands,
            }
        },
        findings,
        coverage: Coverage {
            complete: v.complete,
            files_scanned: v.files_scanned,
            bytes_scanned: v.bytes_scanned,
            truncated_files: v.truncated_files,
            unread_files: v.unread_files,
            binary_files: v.binary_files,
            findings_dropped: v.findings_dropped,
            repeats_dropped: v.repeats_dropped,
            subjects_dropped: v.subjects_dropped,
            max_file_bytes: v.max_file_bytes,
            max_total_bytes: v.max_total_bytes,
            max_findings: v.max_findings,
        },
    })
}

pub fn entry_to_proto(e: &Entry) -> pb::Entry {
    let Entry {
        path,
        kind,
        size,
        mode,
        sha256,
        link_target,
        flags,
    } = e;
    pb::Entry {
        path: path.clone(),
        kind: match kind {
            Kind::File => pb::EntryKind::File,
            Kind::Dir => pb::EntryKind::Dir,
            Kind::Symlink => pb::EntryKind::Symlink,
        } as i32,
        size: *size,
        mode: u32::from_str_radix(mode, 8).unwrap_or(0),
        sha256: sha256.map(|d| d.to_string()),
        link_target: link_target.clone(),
        flags: flags.iter().map(|&f| flag_to_proto(f) as i32).collect(),
    }
}

/// A response the client cannot turn back into an [`Outcome`].
#[derive(Debug, thiserror::Error)]
#[error("malformed answer from the server: {0}")]
pub struct MalformedAnswer(pub String);

fn bad(s: impl Into<String>) -> MalformedAnswer {
    MalformedAnswer(s.into())
}

/// The client side: the same [`Outcome`] the local engine would have printed.
pub fn outcome_from_proto(r: &pb::ExtractResponse) -> Result<Outcome, MalformedAnswer> {
    let verdict = match pb::Verdict::try_from(r.verdict) {
        Ok(pb::Verdict::Accepted) => Verdict::Accepted,
        Ok(pb::Verdict::Rejected) => Verdict::Rejected,
        Ok(pb::Verdict::Unspecified) | Err(_) => return Err(bad(format!("verdict {}", r.verdict))),
    };
    let reason = match &r.reason {
        None => None,
        Some(p) => {
            let code = match pb::ReasonCode::try_from(p.code)
                .ok()
                .and_then(reason_code_from_proto)
            {
                Some(c) => c,
                // A code newer than this client: fall back on its stable spelling.
                None => serde_json::from_value(serde_json::Value::String(p.code_name.clone()))
                    .map_err(|_| {
                        bad(format!(
                            "unknown reason code {} ({:?})",
                            p.code, p.code_name
                        ))
                    })?,
            };
            Some(Reason {
                code,
                entry: p.entry.clone(),
                detail: p.detail.clone(),
                limit: p.limit,
                observed: p.observed,
            })
        }
    };
    let a = r.artifact.clone().unwrap_or_default();
    let digest = match a.digest {
        Some(d) => Some(
            d.parse::<Sha256Digest>()
                .map_err(|e| bad(format!("artifact digest: {e}")))?,
        ),
        None => None,
    };
    let t = r.totals.unwrap_or_default();
    let mut entries = Vec::with_capacity(r.entries.len());
    for e in &r.entries {
        let kind = match pb::EntryKind::try_from(e.kind) {
            Ok(pb::EntryKind::File) => Kind::File,
            Ok(pb::EntryKind::Dir) => Kind::Dir,
            Ok(pb::EntryKind::Symlink) => Kind::Symlink,
            Ok(pb::EntryKind::Unspecified) | Err(_) => {
                return Err(bad(format!("entry kind {}", e.kind)));
            }
        };
        let sha256 = match &e.sha256 {
            Some(d) => Some(
                d.parse::<Sha256Digest>()
                    .map_err(|err| bad(format!("entry digest: {err}")))?,
            ),
            None => None,
        };
        let flags = e
            .flags
            .iter()
            .filter_map(|&f| pb::EntryFlag::try_from(f).ok().and_then(flag_from_proto))
            .collect();
        entries.push(Entry {
            path: e.path.clone(),
            kind,
            size: e.size,
            mode: format!("{:04o}", e.mode),
            sha256,
            link_target: e.link_target.clone(),
            flags,
        });
    }
    let review = r.review.as_ref().map(review_from_proto).transpose()?;
    Ok(Outcome {
        verdict,
        reason,
        artifact: ArtifactFacts {
            digest,
            format: a.format,
            size: a.size,
        },
        entries,
        totals: Totals {
            entries: t.entries,
            files: t.files,
            dirs: t.dirs,
            symlinks: t.symlinks,
            bytes_in: t.bytes_in,
            bytes_out: t.bytes_out,
            ratio: t.ratio,
        },
        wrapper: None,
        review,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_code_has_its_wire_name_and_round_trips() {
        for code in ReasonCode::ALL {
            let p = reason_code_to_proto(code);
            assert_eq!(
                p.as_str_name(),
                format!("REASON_CODE_{}", code.as_str().to_ascii_uppercase())
            );
            assert_eq!(reason_code_from_proto(p), Some(code));
        }
        assert_eq!(reason_code_from_proto(pb::ReasonCode::Unspecified), None);
    }

    fn header() -> pb::ExtractHeader {
        pb::ExtractHeader {
            declared_type: pb::ArtifactType::Archive as i32,
            ..Default::default()
        }
    }

    fn field_of(e: InvalidField) -> String {
        e.field
    }

    #[test]
    fn header_checks_name_the_field() {
        let server = Limits::default();
        let with = |edit: fn(&mut pb::ExtractHeader, &Limits)| {
            let mut h = header();
            edit(&mut h, &server);
            h
        };
        let cases = [
            (
                with(|h, _| h.expected_digest = Some("sha256:ABC".into())),
                "header.expected_digest",
            ),
            (pb::ExtractHeader::default(), "header.declared_type"),
            (
                with(|h, server| {
                    h.limits = Some(pb::Limits {
                        max_entries: Some(server.max_entries + 1),
                        ..Default::default()
                    });
                }),
                "header.limits.max_entries",
            ),
            (
                with(|h, _| {
                    h.limits = Some(pb::Limits {
                        max_entries: Some(0),
                        ..Default::default()
                    });
                }),
                "header.limits.max_entries",
            ),
            (
                with(|h, _| h.caller_label = Some("a\nb".into())),
                "header.caller_label",
            ),
            (
                with(|h, _| h.max_answer_bytes = MIN_MAX_ANSWER_BYTES as u64 - 1),
                "header.max_answer_bytes",
            ),
            (
                with(|h, _| h.max_answer_bytes = MAX_RESPONSE_BYTES as u64 + 1),
                "header.max_answer_bytes",
            ),
            (
                with(|h, _| h.max_answer_bytes = u64::MAX),
                "header.max_answer_bytes",
            ),
        ];
        for (h, field) in cases {
            let refused = request_from_header(h, &server)
                .err()
                .unwrap_or_else(|| panic!("{field}: accepted"));
            assert_eq!(field_of(refused), field);
        }
    }

    #[test]
    fn tighter_limits_and_url_hints_apply() {
        let server = Limits::default();
        let mut h = header();
        h.limits = Some(pb::Limits {
            max_entries: Some(5),
            allow_symlinks: Some(false),
            ..Default::default()
        });
        h.url = Some("https://example.com/skills/pdf-1.2.tar.gz?sig=abc#frag".into());
        let c = request_from_header(h, &server).expect("request_from_header");
        assert_eq!(c.request.limits.max_entries, 5);
        assert!(!c.request.limits.allow_symlinks);
        assert_eq!(c.request.file_name.as_deref(), Some("pdf-1.2.tar.gz"));
        assert_eq!(url_file_name("https://example.com"), None);
        assert_eq!(url_file_name("https://example.com/dir/"), None);
    }

    #[test]
    fn the_answer_bound_is_4_mib_unless_set_within_the_servers() {
        let bound = |v: u64| {
            let mut h = header();
            h.max_answer_bytes = v;
            request_from_header(h, &Limits::default())
                .expect("request_from_header")
                .max_answer_bytes
        };
        assert_eq!(bound(0), 4_194_304);
        assert_eq!(bound(MIN_MAX_ANSWER_BYTES as u64), MIN_MAX_ANSWER_BYTES);
        assert_eq!(bound(MAX_RESPONSE_BYTES as u64), MAX_RESPONSE_BYTES);
    }

    #[test]
    fn limits_round_trip_through_server_info() {
        let l = Limits {
            max_entries: 7,
            hardlinks: HardlinkPolicy::CopyInternal,
            ..Limits::default()
        };
        let merged = merge_limits(&limits_to_proto(&l), &l).expect("merge_limits");
        assert_eq!(merged, l);
    }
}
