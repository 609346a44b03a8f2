//! URLs: strict parsing of absolute URLs and RFC 3986 section 5 reference resolution against a
//! base (the index URL, or the request URL for a redirect's `Location`).
//!
//! Resolution is done by the `url` crate, never by string concatenation. That crate follows the
//! WHATWG URL standard, which resolves references as RFC 3986 section 5 does for `https` URLs but
//! also repairs malformed input (strips tabs and newlines, trims spaces, reads `\` as `/`). A
//! reference that would need such repair is refused here first, so what is resolved is what was
//! written.
//!
//! Every URL enters the program through [`parse_absolute`] or [`resolve`] (and a reference's
//! text through [`redact_str`]), and each of them replaces user information (`user:password@`)
//! with the marker [`REDACTED`] before anything else sees the value: what is printed, logged,
//! cached or recorded can then never carry the secret, and the fetch policy still sees that a
//! URL had credentials (the marker is user information too) and refuses it.

use std::borrow::Cow;
use std::fmt;

use serde::Serialize;
use url::Url;

/// Longest URL or reference accepted, in bytes.
pub const MAX_URL_BYTES: usize = 2048;

/// The syntactic form of a URI reference (RFC 3986 section 4.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum UrlForm {
    /// `scheme:...`
    Absolute,
    /// `//host/path`, scheme-relative.
    NetworkPath,
    /// `/path`
    PathAbsolute,
    /// `path`, `../path`, `?query`, ...
    Relative,
}

impl UrlForm {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Absolute => "absolute",
            Self::NetworkPath => "network-path",
            Self::PathAbsolute => "path-absolute",
            Self::Relative => "relative",
        }
    }

    /// The form of `reference` (already free of whitespace and backslashes).
    pub fn of(reference: &str) -> Self {
        // RFC 3986 3.1: scheme = ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ), then ":".
        let scheme_len = reference
            .char_indices()
            .find(|(i, c)| {
                !(c.is_ascii_alphabetic()
                    || (*i > 0 && (c.is_ascii_digit() || matches!(c, '+' | '-' | '.'))))
            })
            .map(|(i, _)| i)
            .unwrap_or(reference.len());
        if scheme_len > 0 && reference[scheme_len..].starts_with(':') {
            Self::Absolute
        } else if reference.starts_with("//") {
            Self::NetworkPath
        } else if reference.starts_with('/') {
            Self::PathAbsolute
        } else {
            Self::Relative
        }
    }
}

impl fmt::Display for UrlForm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a URL or reference was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UrlError {
    #[error("empty URL")]
    Empty,
    #[error("URL is {len} bytes, the limit is {max}")]
    TooLong { len: usize, max: usize },
    #[error(
        "URL contains {found} at byte {at}; it must be written without whitespace, control characters or backslashes"
    )]
    ForbiddenChar { found: String, at: usize },
    #[error("a {form} reference needs a base URL to resolve against (give the index URL)")]
    NoBase { form: UrlForm },
    #[error("not a valid URL: {0}")]
    Invalid(String),
    #[error("URL has no host")]
    NoHost,
}

fn precheck(s: &str) -> Result<(), UrlError> {
    if s.is_empty() {
        return Err(UrlError::Empty);
    }
    if s.len() > MAX_URL_BYTES {
        return Err(UrlError::TooLong {
            len: s.len(),
            max: MAX_URL_BYTES,
        });
    }
    if let Some((at, c)) = s
        .char_indices()
        .find(|(_, c)| c.is_whitespace() || c.is_control() || *c == '\\')
    {
        return Err(UrlError::ForbiddenChar {
            found: c.escape_default().to_string(),
            at,
        });
    }
    Ok(())
}

/// What replaces the user information of a URL: `https://user:pw@host/` becomes
/// `https://***@host/`. It is itself user information, so a redacted URL is still refused by
/// the `no_userinfo` rule, and it is never a credential.
pub const REDACTED: &str = "***";

/// Replace `url`'s user information (name and password) with [`REDACTED`]. Returns whether
/// there was any.
pub fn redact(url: &mut Url) -> bool {
    if url.username().is_empty() && url.password().is_none() {
        return false;
    }
    // Both setters only fail for URLs without a host, which carry no user information.
    let _ = url.set_password(None);
    let _ = url.set_username(REDACTED);
    true
}

/// A copy of `url` with its user information replaced by [`REDACTED`].
pub fn redacted(url: &Url) -> Url {
    let mut u = url.clone();
    redact(&mut u);
    u
}

/// The same for text that may hold a URL or a reference with an authority (`scheme://...`,
/// `//...`), as written and not yet parsed: the user information (everything before the last
/// `@` of the authority, which ends at the first `/`, `?` or `#`, as RFC 3986 3.2 reads it) is
/// replaced by [`REDACTED`]. Text without an authority comes back unchanged.
pub fn redact_str(s: &str) -> Cow<'_, str> {
    let start = match s.find("//") {
        // Only the `//` that opens an authority: after a scheme, or at the very start.
        Some(i) if i == 0 || (UrlForm::of(s) == UrlForm::Absolute && s[..i].ends_with(':')) => {
            i + 2
        }
        _ => return Cow::Borrowed(s),
    };
    let rest = &s[start..];
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..end].rfind('@') {
        Some(at) => Cow::Owned(format!("{}{REDACTED}{}", &s[..start], &rest[at..])),
        None => Cow::Borrowed(s),
    }
}

/// A URL that cannot carry a secret: built only through [`RedactedUrl::new`], which replaces
/// user information with [`REDACTED`]. Shown and serialised as the redacted URL. For stores and
/// records (the install lifecycle's provenance) that must never hold a password.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct RedactedUrl(Url);

impl RedactedUrl {
    pub fn new(mut url: Url) -> Self {
        redact(&mut url);
        Self(url)
    }

    /// Parse text (an absolute URL) and redact it.
    pub fn parse(s: &str) -> Result<Self, UrlError> {
        parse_absolute(s).map(Self)
    }

    pub fn as_url(&self) -> &Url {
        &self.0
    }

    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }

    /// Whether the URL had user information (now the marker).
    pub fn had_userinfo(&self) -> bool {
        !self.0.username().is_empty()
    }
}

impl From<Url> for RedactedUrl {
    fn from(url: Url) -> Self {
        Self::new(url)
    }
}

impl fmt::Display for RedactedUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.as_str())
    }
}

/// Parse an absolute URL with a host (the index URL, an allowed origin, a proxy). User
/// information is replaced by [`REDACTED`] (see [`redact`]).
pub fn parse_absolute(s: &str) -> Result<Url, UrlError> {
    let mut url = parse_absolute_keeping_userinfo(s)?;
    redact(&mut url);
    Ok(url)
}

/// As [`parse_absolute`], but the user information is kept: only for a proxy URL, whose
/// credentials are sent to the proxy, and never for anything that is shown or stored.
pub(crate) fn parse_absolute_keeping_userinfo(s: &str) -> Result<Url, UrlError> {
    precheck(s)?;
    if UrlForm::of(s) != UrlForm::Absolute {
        return Err(UrlError::Invalid(format!(
            "{:?} is not an absolute URL (scheme://host/...)",
            redact_str(s)
        )));
    }
    let url = Url::parse(s).map_err(|e| UrlError::Invalid(e.to_string()))?;
    if url.host().is_none() {
        return Err(UrlError::NoHost);
    }
    Ok(url)
}

/// A reference resolved against its base.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Resolved {
    /// The reference exactly as written.
    pub as_listed: String,
    pub form: UrlForm,
    /// The target URI (RFC 3986 5.2), fragment removed (it is never sent).
    pub url: Url,
    /// The target's origin differs from the base's: it earns no trust from the base.
    pub cross_origin: bool,
}

/// Resolve `reference` against `base` per RFC 3986 section 5. An absolute reference needs no
/// base; every other form does.
pub fn resolve(reference: &str, base: Option<&Url>) -> Result<Resolved, UrlError> {
    precheck(reference)?;
    let form = UrlForm::of(reference);
    let mut url = match (form, base) {
        (UrlForm::Absolute, _) => Url::parse(reference),
        (_, Some(base)) => base.join(reference),
        (_, None) => return Err(UrlError::NoBase { form }),
    }
    .map_err(|e| UrlError::Invalid(e.to_string()))?;
    if url.host().is_none() {
        return Err(UrlError::NoHost);
    }
    url.set_fragment(None);
    redact(&mut url);
    let cross_origin = base.is_some_and(|b| b.origin() != url.origin());
    Ok(Resolved {
        as_listed: redact_str(reference).into_owned(),
        form,
        url,
        cross_origin,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> Url {
        Url::parse("https://example.com/.well-known/agent-skills/index.json").expect("parse")
    }

    fn target(r: &str) -> String {
        resolve(r, Some(&base()))
            .map(|r| r.url.to_string())
            .unwrap_or_else(|e| format!("error: {e}"))
    }

    #[test]
    fn forms_resolve_per_rfc3986() {
        assert_eq!(
            target("demo/SKILL.md"),
            "https://example.com/.well-known/agent-skills/demo/SKILL.md"
        );
        assert_eq!(
            target("./demo.zip"),
            "https://example.com/.well-known/agent-skills/demo.zip"
        );
        assert_eq!(
            target("../x/y.tar.gz"),
            "https://example.com/.well-known/x/y.tar.gz"
        );
        assert_eq!(target("../../../../a"), "https://example.com/a");
        assert_eq!(
            target("/skills/demo.zip"),
            "https://example.com/skills/demo.zip"
        );
        assert_eq!(
            target("//cdn.example.net/d.zip"),
            "https://cdn.example.net/d.zip"
        );
        assert_eq!(
            target("https://other.example/d.zip#frag"),
            "https://other.example/d.zip"
        );
        assert_eq!(
            target("?v=2"),
            "https://example.com/.well-known/agent-skills/index.json?v=2"
        );
    }

    #[test]
    fn forms_are_classified() {
        assert_eq!(UrlForm::of("https://a/b"), UrlForm::Absolute);
        assert_eq!(UrlForm::of("//a/b"), UrlForm::NetworkPath);
        assert_eq!(UrlForm::of("/a/b"), UrlForm::PathAbsolute);
        assert_eq!(UrlForm::of("a/b"), UrlForm::Relative);
        assert_eq!(UrlForm::of("./a:b"), UrlForm::Relative);
        assert_eq!(UrlForm::of("1a:b"), UrlForm::Relative);
    }

    #[test]
    fn cross_origin_is_flagged() {
        let r = resolve("//cdn.example.net/d.zip", Some(&base())).expect("resolve");
        assert!(r.cross_origin);
        let r = resolve("https://example.com:8443/d.zip", Some(&base())).expect("resolve");
        assert!(r.cross_origin);
        let r = resolve("d.zip", Some(&base())).expect("resolve");
        assert!(!r.cross_origin);
    }

    #[test]
    fn user_information_never_survives_entry() {
        let marker = "pw-MARKER-1";
        let u = parse_absolute(&format!("https://alice:{marker}@example.com/i.json"))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(u.as_str(), "https://***@example.com/i.json");
        for reference in [
            format!("https://bob:{marker}@cdn.example/x.zip"),
            format!("//bob:{marker}@cdn.example/x.zip"),
            format!("https://{marker}@cdn.example/x.zip"),
            format!("https://a:b@c:{marker}@cdn.example/x.zip"),
        ] {
            let r = resolve(&reference, Some(&base())).unwrap_or_else(|e| panic!("{e}"));
            assert!(!r.as_listed.contains(marker), "{}", r.as_listed);
            assert!(!r.url.as_str().contains(marker), "{}", r.url);
            assert_eq!(r.url.username(), REDACTED);
            assert!(!redact_str(&reference).contains(marker));
        }
        // A relative reference against a base with credentials inherits the marker, not them.
        let b = parse_absolute(&format!("https://u:{marker}@example.com/a/i.json"))
            .unwrap_or_else(|e| panic!("{e}"));
        let r = resolve("x.zip", Some(&b)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.url.as_str(), "https://***@example.com/a/x.zip");
        // Text without an authority is left alone, `@` in a path included.
        assert_eq!(redact_str("a/b@c"), "a/b@c");
        assert_eq!(redact_str("/p?q=//x@y"), "/p?q=//x@y");
        assert_eq!(redact_str("https://h/p@q"), "https://h/p@q");
        let red = RedactedUrl::new(
            Url::parse(&format!("https://u:{marker}@h/")).unwrap_or_else(|e| panic!("{e}")),
        );
        assert!(red.had_userinfo());
        assert!(!red.to_string().contains(marker));
        assert!(
            !serde_json::to_string(&red)
                .unwrap_or_default()
                .contains(marker)
        );
        let err = parse_absolute(&format!("u:{marker}@h/x")).err();
        assert!(err.is_some_and(|e| !e.to_string().contains(marker)));
    }

    #[test]
    fn lenient_inputs_are_refused() {
        for bad in [
            "a b",
            "a\tb",
            "https://ex\nample.com/",
            "\\\\evil.com/x",
            " /x",
            "",
        ] {
            assert!(resolve(bad, Some(&base())).is_err(), "{bad:?}");
        }
        assert!(matches!(
            resolve("a/b", None),
            Err(UrlError::NoBase {
                form: UrlForm::Relative
            })
        ));
        assert!(resolve(&"a".repeat(MAX_URL_BYTES + 1), Some(&base())).is_err());
    }
}
