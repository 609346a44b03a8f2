//! The discovery index (`/.well-known/agent-skills/index.json`): bounded parsing, the `$schema`
//! decision, per-entry validation, and URL resolution against the index URL.
//!
//! `$schema` equal to [`SCHEMA_0_2_0`] is processed; any other value is refused whole (the
//! format may have changed under us); no `$schema` is the v0.1.0 compatibility path, whose
//! entries are listed but are never installable because v0.1.0 carries no digests. An entry
//! that breaks a rule is skipped with its reason, never repaired or guessed at; unknown fields
//! are ignored. This module parses and reports; it never fetches.

use std::collections::HashMap;

use serde::Serialize;
use serde_json::Value;
use url::Url;

use crate::digest::Sha256Digest;
use crate::reason::display_name;
use crate::urls::{self, UrlForm};

/// The only `$schema` this version processes.
pub const SCHEMA_0_2_0: &str = "https://schemas.agentskills.io/discovery/0.2.0/schema.json";
/// Agent Skills spec: a description is at most 1,024 characters.
pub const MAX_DESCRIPTION_CHARS: usize = 1024;
/// Agent Skills spec: a name is 1 to 64 characters.
pub const MAX_NAME_CHARS: usize = 64;

/// Bounds on an index, checked before and while it is parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexLimits {
    pub max_bytes: u64,
    pub max_entries: usize,
}

impl Default for IndexLimits {
    fn default() -> Self {
        Self {
            max_bytes: 1 << 20,
            max_entries: 1000,
        }
    }
}

/// Which format the index was read as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Version {
    #[serde(rename = "0.2.0")]
    V0_2_0,
    /// No `$schema`: the v0.1.0 compatibility path.
    #[serde(rename = "0.1.0")]
    V0_1_0,
}

/// The artifact an entry points at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum EntryType {
    #[serde(rename = "skill-md")]
    SkillMd,
    #[serde(rename = "archive")]
    Archive,
}

impl EntryType {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::SkillMd => "skill-md",
            Self::Archive => "archive",
        }
    }
}

/// An entry's URL: as written, its form, and (with a base, or when absolute) its target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EntryUrl {
    pub as_listed: String,
    pub form: UrlForm,
    pub resolved: Option<Url>,
    /// The target's origin is not the index's; it must pass the origin allow-list on its own.
    pub cross_origin: bool,
}

/// One valid entry.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Entry {
    /// Zero-based position in `skills`.
    pub position: usize,
    pub name: String,
    #[serde(rename = "type")]
    pub artifact_type: Option<EntryType>,
    pub description: String,
    pub url: Option<EntryUrl>,
    pub digest: Option<Sha256Digest>,
    /// The entry object exactly as listed (unknown fields included).
    #[serde(skip)]
    pub as_listed: Value,
}

/// Why an entry was skipped (the stable part: scripts match on it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SkipCode {
    NotAnObject,
    MissingField,
    InvalidName,
    UnknownType,
    InvalidDescription,
    InvalidUrl,
    InvalidDigest,
    DuplicateName,
}

/// An entry that was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Skipped {
    pub position: usize,
    /// The entry's name when it had a printable one (control characters escaped, bounded).
    pub name: Option<String>,
    pub code: SkipCode,
    pub reason: String,
}

/// A parsed index.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Index {
    /// `$schema` as found (`null` when absent).
    pub schema: Option<String>,
    pub version: Version,
    /// Whether any entry can be fetched for installation (false on the v0.1.0 path).
    pub installable: bool,
    pub base_url: Option<Url>,
    pub entries: Vec<Entry>,
    pub skipped: Vec<Skipped>,
    pub warnings: Vec<String>,
}

/// Why the index as a whole was not processed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
// Not `non_exhaustive`: the CLI maps every variant to an exit status, and a new one must
// not compile until it has one.
pub enum IndexError {
    #[error(
        "unrecognised $schema {found:?}: this skillbox processes {SCHEMA_0_2_0} only; refusing to guess at another format"
    )]
    UnrecognisedSchema { found: String },
    /// Over `--max-index-bytes`, read from a file or fetched: one error, one exit status.
    /// `size` is the real size when it is known (a regular file, a declared Content-Length),
    /// else `None`: reading stopped past the limit.
    #[error("index is {}, the limit is {max} bytes", size_text(*.size, *.max))]
    TooLarge { size: Option<u64>, max: u64 },
    #[error("index lists {count} entries, the limit is {max}")]
    TooManyEntries { count: usize, max: usize },
    #[error("index is not valid JSON: {0}")]
    NotJson(String),
    #[error("index must be a JSON object with a `skills` array")]
    NotAnIndex,
}

fn size_text(size: Option<u64>, max: u64) -> String {
    match size {
        Some(n) => format!("{n} bytes"),
        None => format!("more than {max} bytes"),
    }
}

/// What looking a skill up by name found.
#[derive(Debug, Clone, Copy)]
pub enum Lookup<'a> {
    Found(&'a Entry),
    Skipped(&'a Skipped),
    Absent,
}

impl Index {
    pub fn find(&self, name: &str) -> Lookup<'_> {
        if let Some(e) = self.entries.iter().find(|e| e.name == name) {
            return Lookup::Found(e);
        }
        match self
            .skipped
            .iter()
            .find(|s| s.name.as_deref() == Some(name))
        {
            Some(s) => Lookup::Skipped(s),
            None => Lookup::Absent,
        }
    }
}

/// Agent Skills naming: 1-64 of `a-z`, `0-9`, `-`; no leading, trailing or doubled hyphen.
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("name is empty".into());
    }
    if name.chars().count() > MAX_NAME_CHARS {
        return Err(format!("name is longer than {MAX_NAME_CHARS} characters"));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !matches!(c, 'a'..='z' | '0'..='9' | '-'))
    {
        return Err(format!(
            "name may hold only a-z, 0-9 and '-' (found {:?})",
            c.escape_default().to_string()
        ));
    }
    if name.starts_with('-') || name.ends_with('-') {
        return Err("name may not start or end with '-'".into());
    }
    if name.contains("--") {
        return Err("name may not contain '--'".into());
    }
    Ok(())
}

/// Why an index file could not be read. Exhaustive: the CLI maps each variant to an exit code.
#[derive(Debug)]
pub enum ReadError {
    /// Over the byte bound: the same error a fetched index over it gives.
    Index(IndexError),
    /// Cannot open or read it (the message names the path).
    Io(String),
}

/// Read an index file, never more than `max` bytes plus one. A regular file's real size is
/// known before reading; for anything else (a pipe) reading stops past the bound and the size
/// is reported as more than `max`.
pub fn read_file(path: &std::path::Path, max: u64) -> Result<Vec<u8>, ReadError> {
    use std::io::Read;
    let shown = path.display();
    let file = std::fs::File::open(path)
        .map_err(|e| ReadError::Io(format!("cannot open {shown}: {e}")))?;
    let meta = file
        .metadata()
        .map_err(|e| ReadError::Io(format!("cannot read {shown}: {e}")))?;
    if meta.is_file() && meta.len() > max {
        return Err(ReadError::Index(IndexError::TooLarge {
            size: Some(meta.len()),
            max,
        }));
    }
    let mut bytes = Vec::new();
    file.take(max.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| ReadError::Io(format!("cannot read {shown}: {e}")))?;
    if bytes.len() as u64 > max {
        return Err(ReadError::Index(IndexError::TooLarge { size: None, max }));
    }
    Ok(bytes)
}

/// Parse an index. `base` is the URL it was fetched from (references resolve against it).
pub fn parse(bytes: &[u8], base: Option<&Url>, limits: &IndexLimits) -> Result<Index, IndexError> {
    parse_retrieved(bytes, base, base, limits)
}

/// [`parse`] for an index retrieved from `base` when `typed` was asked for (a redirect moved
/// it): references resolve against `base`, where the document is (RFC 3986 5.1.3), and an
/// entry is cross-origin when its target's origin is not `typed`'s.
pub fn parse_retrieved(
    bytes: &[u8],
    base: Option<&Url>,
    typed: Option<&Url>,
    limits: &IndexLimits,
) -> Result<Index, IndexError> {
    if bytes.len() as u64 > limits.max_bytes {
        return Err(IndexError::TooLarge {
            size: Some(bytes.len() as u64),
            max: limits.max_bytes,
        });
    }
    let root: Value =
        serde_json::from_slice(bytes).map_err(|e| IndexError::NotJson(e.to_string()))?;
    let Value::Object(root) = root else {
        return Err(IndexError::NotAnIndex);
    };
    let (schema, version) = match root.get("$schema") {
        None => (None, Version::V0_1_0),
        Some(Value::String(s)) if s == SCHEMA_0_2_0 => (Some(s.clone()), Version::V0_2_0),
        Some(Value::String(s)) => {
            return Err(IndexError::UnrecognisedSchema {
                found: display_name(s.as_bytes()),
            });
        }
        Some(other) => {
            return Err(IndexError::UnrecognisedSchema {
                found: display_name(other.to_string().as_bytes()),
            });
        }
    };
    let Some(Value::Array(skills)) = root.get("skills") else {
        return Err(IndexError::NotAnIndex);
    };
    if skills.len() > limits.max_entries {
        return Err(IndexError::TooManyEntries {
            count: skills.len(),
            max: limits.max_entries,
        });
    }
    let mut index = Index {
        schema,
        version,
        installable: version == Version::V0_2_0,
        base_url: base.cloned(),
        entries: Vec::new(),
        skipped: Vec::new(),
        warnings: Vec::new(),
    };
    if version == Version::V0_1_0 {
        index.warnings.push(
            "no $schema: read as a v0.1.0 index (compatibility path). v0.1.0 entries carry no digests, \
             so nothing from this index can be fetched for installation"
                .into(),
        );
    }
    for (position, raw) in skills.iter().enumerate() {
        match entry(position, raw, version, base, typed) {
            Ok(e) => index.entries.push(e),
            Err(s) => index.skipped.push(s),
        }
    }
    // A name listed twice is ambiguous: skip every occurrence rather than pick one. Counted
    // over every entry with a valid name, those skipped for another reason included: an
    // occurrence with a broken digest or URL still says the name is listed twice, and must not
    // leave the other one selectable (the index's author cannot have meant both).
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for raw in skills {
        if let Some(name) = raw.get("name").and_then(Value::as_str)
            && check_name(name).is_ok()
        {
            *counts.entry(name).or_default() += 1;
        }
    }
    let (dups, kept): (Vec<Entry>, Vec<Entry>) = std::mem::take(&mut index.entries)
        .into_iter()
        .partition(|e| counts.get(e.name.as_str()).copied().unwrap_or(0) > 1);
    index.entries = kept;
    for e in dups {
        index.skipped.push(Skipped {
            position: e.position,
            name: Some(e.name.clone()),
            code: SkipCode::DuplicateName,
            reason: format!(
                "name {:?} is listed more than once; every occurrence is skipped",
                e.name
            ),
        });
    }
    index.skipped.sort_by_key(|s| s.position);
    for s in &index.skipped {
        index
            .warnings
            .push(format!("entry {} skipped: {}", s.position, s.reason));
    }
    Ok(index)
}

fn entry(
    position: usize,
    raw: &Value,
    version: Version,
    base: Option<&Url>,
    typed: Option<&Url>,
) -> Result<Entry, Skipped> {
    let skip = |name: Option<&str>, code: SkipCode, reason: String| Skipped {
        position,
        name: name.map(|n| display_name(n.as_bytes())),
        code,
        reason,
    };
    let Value::Object(obj) = raw else {
        return Err(skip(
            None,
            SkipCode::NotAnObject,
            "entry is not a JSON object".into(),
        ));
    };
    let field = |key: &'static str, name: Option<&str>| -> Result<Option<String>, Skipped> {
        match obj.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(skip(
                name,
                SkipCode::MissingField,
                format!("`{key}` must be a string"),
            )),
        }
    };
    let required = |key: &'static str, name: Option<&str>| -> Result<String, Skipped> {
        field(key, name)?.ok_or_else(|| {
            skip(
                name,
                SkipCode::MissingField,
                format!("required field `{key}` is missing"),
            )
        })
    };
    let name_owned = required("name", None)?;
    let name = name_owned.as_str();
    check_name(name).map_err(|r| skip(Some(name), SkipCode::InvalidName, r))?;
    let description_owned = required("description", Some(name))?;
    let description = description_owned.as_str();
    let chars = description.chars().count();
    if chars > MAX_DESCRIPTION_CHARS {
        return Err(skip(
            Some(name),
            SkipCode::InvalidDescription,
            format!("description is {chars} characters, the limit is {MAX_DESCRIPTION_CHARS}"),
        ));
    }
    if description.trim().is_empty() {
        return Err(skip(
            Some(name),
            SkipCode::InvalidDescription,
            "description is empty".into(),
        ));
    }
    let strict = version == Version::V0_2_0;
    let type_text = if strict {
        Some(required("type", Some(name))?)
    } else {
        field("type", Some(name))?
    };
    let artifact_type = match type_text.as_deref() {
        None => None,
        Some("skill-md") => Some(EntryType::SkillMd),
        Some("archive") => Some(EntryType::Archive),
        Some(other) if strict => {
            return Err(skip(
                Some(name),
                SkipCode::UnknownType,
                format!(
                    "unknown type {:?} (known: skill-md, archive)",
                    display_name(other.as_bytes())
                ),
            ));
        }
        Some(_) => None,
    };
    let url_text = if strict {
        Some(required("url", Some(name))?)
    } else {
        field("url", Some(name))?
    };
    let url = match url_text.as_deref() {
        None => None,
        Some(text) => Some(
            entry_url(text, base, typed).map_err(|r| skip(Some(name), SkipCode::InvalidUrl, r))?,
        ),
    };
    let digest = if strict {
        let text = required("digest", Some(name))?;
        Some(
            text.parse::<Sha256Digest>()
                .map_err(|e| skip(Some(name), SkipCode::InvalidDigest, e.to_string()))?,
        )
    } else {
        None
    };
    Ok(Entry {
        position,
        name: name.to_owned(),
        artifact_type,
        description: description.to_owned(),
        url,
        digest,
        as_listed: listed_redacted(raw),
    })
}

/// The index document with every entry's `url` redacted as [`Entry::as_listed`] is, for a copy
/// that is kept (the cache's index copy for `--offline`): `None` when no URL held user
/// information, so the bytes are kept exactly as received.
pub fn redacted_document(bytes: &[u8]) -> Option<Vec<u8>> {
    let mut root: Value = serde_json::from_slice(bytes).ok()?;
    let mut changed = false;
    for e in root.get_mut("skills")?.as_array_mut()? {
        let redacted = listed_redacted(e);
        if redacted != *e {
            *e = redacted;
            changed = true;
        }
    }
    changed.then(|| serde_json::to_vec(&root).ok()).flatten()
}

/// The entry object as listed, but with any user information in its `url` replaced by the
/// marker: the object is shown and recorded as provenance, and a secret must reach neither.
fn listed_redacted(raw: &Value) -> Value {
    let mut v = raw.clone();
    if let Some(Value::String(u)) = v.get_mut("url")
        && let std::borrow::Cow::Owned(r) = urls::redact_str(u)
    {
        *u = r;
    }
    v
}

fn entry_url(text: &str, base: Option<&Url>, typed: Option<&Url>) -> Result<EntryUrl, String> {
    match urls::resolve_from(text, base, typed) {
        Ok(r) => Ok(EntryUrl {
            as_listed: r.as_listed,
            form: r.form,
            resolved: Some(r.url),
            cross_origin: r.cross_origin,
        }),
        Err(urls::UrlError::NoBase { form }) => Ok(EntryUrl {
            as_listed: urls::redact_str(text).into_owned(),
            form,
            resolved: None,
            cross_origin: false,
        }),
        Err(e) => Err(format!("url: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn base() -> Url {
        Url::parse("https://example.com/.well-known/agent-skills/index.json").expect("parse")
    }

    fn parse_str(s: &str) -> Result<Index, IndexError> {
        parse(s.as_bytes(), Some(&base()), &IndexLimits::default())
    }

    #[test]
    fn names_follow_the_agent_skills_rules() {
        for ok in ["a", "pdf-processing", "x1-2-3", &"a".repeat(64)] {
            assert!(check_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "-a",
            "a-",
            "a--b",
            "A",
            "a_b",
            "a b",
            "ä",
            &"a".repeat(65),
        ] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn schema_decides_the_path() {
        let v2 = format!(
            r#"{{"$schema":"{SCHEMA_0_2_0}","skills":[{{"name":"a","type":"skill-md","description":"d","url":"a/SKILL.md","digest":"{D}","extra":1}}]}}"#
        );
        let i = parse_str(&v2).expect("parse_str");
        assert_eq!(i.version, Version::V0_2_0);
        assert!(i.installable);
        assert_eq!(i.entries.len(), 1);
        assert_eq!(
            i.entries[0]
                .url
                .as_ref()
                .and_then(|u| u.resolved.as_ref())
                .map(Url::as_str),
            Some("https://example.com/.well-known/agent-skills/a/SKILL.md")
        );
        let other = r#"{"$schema":"https://schemas.agentskills.io/discovery/9.0.0/schema.json","skills":[]}"#;
        assert!(matches!(
            parse_str(other),
            Err(IndexError::UnrecognisedSchema { .. })
        ));
        assert!(matches!(
            parse_str(r#"{"$schema":7,"skills":[]}"#),
            Err(IndexError::UnrecognisedSchema { .. })
        ));
        let v1 = parse_str(r#"{"skills":[{"name":"a","description":"d","files":["SKILL.md"]}]}"#)
            .expect("parse_str");
        assert_eq!(v1.version, Version::V0_1_0);
        assert!(!v1.installable);
        assert_eq!(v1.entries.len(), 1);
        assert!(v1.warnings.iter().any(|w| w.contains("no digests")));
    }

    #[test]
    fn bad_entries_are_skipped_with_reasons() {
        let e = |body: &str| format!(r#"{{"$schema":"{SCHEMA_0_2_0}","skills":[{body}]}}"#);
        let cases = [
            (format!(r#"{{"name":"a","type":"plugin","description":"d","url":"u","digest":"{D}"}}"#), SkipCode::UnknownType),
            (format!(r#"{{"name":"Bad","type":"archive","description":"d","url":"u","digest":"{D}"}}"#), SkipCode::InvalidName),
            (r#"{"name":"a","type":"archive","description":"d","url":"u","digest":"sha256:ABC"}"#.to_owned(), SkipCode::InvalidDigest),
            (format!(r#"{{"name":"a","type":"archive","description":"d","digest":"{D}"}}"#), SkipCode::MissingField),
            (format!(r#"{{"name":"a","type":"archive","description":"{}","url":"u","digest":"{D}"}}"#, "x".repeat(1025)), SkipCode::InvalidDescription),
            (format!(r#"{{"name":"a","type":"archive","description":"d","url":"a b","digest":"{D}"}}"#), SkipCode::InvalidUrl),
            ("[]".to_owned(), SkipCode::NotAnObject),
        ];
        for (body, code) in cases {
            let i = parse_str(&e(&body)).expect("parse_str");
            assert!(i.entries.is_empty(), "{body}");
            assert_eq!(i.skipped.first().map(|s| s.code), Some(code), "{body}");
        }
        let ok = format!(
            r#"{{"name":"a","type":"archive","description":"{}","url":"u","digest":"{D}"}}"#,
            "é".repeat(1024)
        );
        assert_eq!(parse_str(&e(&ok)).map(|i| i.entries.len()).ok(), Some(1));
    }

    #[test]
    fn duplicates_are_all_skipped() {
        let one = format!(
            r#"{{"name":"a","type":"archive","description":"d","url":"u","digest":"{D}"}}"#
        );
        let i = parse_str(&format!(
            r#"{{"$schema":"{SCHEMA_0_2_0}","skills":[{one},{one}]}}"#
        ))
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(i.entries.is_empty());
        assert_eq!(i.skipped.len(), 2);
        assert!(matches!(i.find("a"), Lookup::Skipped(_)));
    }

    /// A name listed twice is skipped everywhere, even when one occurrence is skipped for
    /// another reason: the other is never selectable, in either order.
    #[test]
    fn a_duplicate_skipped_for_another_reason_still_skips_the_other() {
        let good = format!(
            r#"{{"name":"demo","type":"archive","description":"d","url":"u","digest":"{D}"}}"#
        );
        let bad_digest =
            r#"{"name":"demo","type":"archive","description":"d","url":"u","digest":"sha256:ABC"}"#;
        let bad_url = format!(
            r#"{{"name":"demo","type":"archive","description":"d","url":"a b","digest":"{D}"}}"#
        );
        let other = format!(
            r#"{{"name":"other","type":"archive","description":"d","url":"u","digest":"{D}"}}"#
        );
        for (skills, codes) in [
            (
                format!("{good},{bad_digest},{other}"),
                [SkipCode::DuplicateName, SkipCode::InvalidDigest],
            ),
            (
                format!("{bad_digest},{good},{other}"),
                [SkipCode::InvalidDigest, SkipCode::DuplicateName],
            ),
            (
                format!("{bad_url},{other},{good}"),
                [SkipCode::InvalidUrl, SkipCode::DuplicateName],
            ),
        ] {
            let i = parse_str(&format!(
                r#"{{"$schema":"{SCHEMA_0_2_0}","skills":[{skills}]}}"#
            ))
            .unwrap_or_else(|e| panic!("{e}"));
            assert!(matches!(i.find("demo"), Lookup::Skipped(_)), "{skills}");
            let names: Vec<&str> = i.entries.iter().map(|e| e.name.as_str()).collect();
            assert_eq!(names, ["other"], "{skills}");
            let got: Vec<SkipCode> = i.skipped.iter().map(|s| s.code).collect();
            assert_eq!(got, codes, "{skills}");
        }
        // An invalid name is no name: it does not make a valid one a duplicate.
        let i = parse_str(&format!(
            r#"{{"$schema":"{SCHEMA_0_2_0}","skills":[{good},{{"name":"Demo","type":"archive","description":"d","url":"u","digest":"{D}"}}]}}"#
        ))
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(i.find("demo"), Lookup::Found(_)));
    }

    #[test]
    fn bounds_hold() {
        let limits = IndexLimits {
            max_bytes: 10,
            max_entries: 1,
        };
        assert!(matches!(
            parse(b"{\"skills\":[]}", None, &limits),
            Err(IndexError::TooLarge { .. })
        ));
        let limits = IndexLimits {
            max_bytes: 1000,
            max_entries: 1,
        };
        assert!(matches!(
            parse(b"{\"skills\":[1,2]}", None, &limits),
            Err(IndexError::TooManyEntries { .. })
        ));
        assert!(matches!(
            parse(b"[]", None, &limits),
            Err(IndexError::NotAnIndex)
        ));
        assert!(matches!(
            parse(b"{", None, &limits),
            Err(IndexError::NotJson(_))
        ));
    }
}
