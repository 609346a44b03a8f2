//! URLs: strict parsing of absolute URLs and RFC 3986 section 5 reference resolution against a
//! base (the index URL, or the request URL for a redirect's `Location`).
//!
//! Resolution is done by the `url` crate, never by string concatenation. That crate follows the
//! WHATWG URL standard, which resolves references as RFC 3986 section 5 does for `https` URLs but
//! also repairs malformed input (strips tabs and newlines, trims spaces, reads `\` as `/`). A
//! reference that would need such repair is refused here first, so what is resolved is what was
//! written.
//!
//! The same leniency reaches the authority: for the special schemes (`http`, `https`, `ws`,
//! `wss`, `ftp`) the crate skips any run of `/` and `\` after `scheme:`, so `https:host`,
//! `https:/host` and `https:///host` all name `host`, and against an `https` base `///host/x` is
//! a network-path reference. RFC 3986 reads none of them so; they are refused too: a special
//! scheme must be followed by exactly `//` and the host, and no reference starts with `///`.
//!
//! Every URL enters the program through [`parse_absolute`] or [`resolve`] (and a reference's
//! text through [`redact_str`]), and each of them replaces user information (`user:password@`)
//! with the marker [`REDACTED`] before anything else sees the value: what is printed, logged,
//! cached or recorded can then never carry the secret, and the fetch policy still sees that a
//! URL had credentials (the marker is user information too) and refuses it. [`redact_str`]
//! masks text as leniently as the crate reads it, so it also covers what is refused above, and
//! [`redact_refused`] masks text repeated in a refusal or a parse error, up to its last `@`.
//! [`redact_message`] and [`redact_text`] apply the same masks to free text (messages) and to
//! recorded values: every masker of URL text in the program is one of these.
//!
//! A URL a person types (the index URL, `--base`, `--allow-origin`, a proxy) enters through
//! [`parse_typed`], which also refuses text that reads as credentials cut short by an
//! unescaped `/`, `?` or `#` in the password ([`check_typed`]).

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
    /// A special scheme not followed by exactly `//` and the host: a lenient parser would skip
    /// or supply the slashes (and could find user information behind them).
    #[error(
        "{scheme}: must be followed by exactly \"//\" and the host ({scheme}://HOST/...); a URL that needs repair is refused, not repaired"
    )]
    SchemeSlashes { scheme: String },
    /// A reference starting with `///`: RFC 3986 reads an empty authority, a lenient parser
    /// skips the slashes and reads a host (and user information) after them.
    #[error(
        "a reference may not start with \"///\" (a network-path reference is //HOST/...); a URL that needs repair is refused, not repaired"
    )]
    TripleSlash,
    /// Typed text that reads as `USER:PASSWORD@HOST` with a `/`, `?` or `#` in the password
    /// (see [`check_typed`]). The message never repeats the text: callers prefix it masked.
    #[error(
        "looks like USER:PASSWORD@HOST with a \"/\", \"?\" or \"#\" in the password, which a URL parser reads as the host USER, a port and a path (the rest of the password sent to USER); write them percent-encoded in a password (\"/\" as %2F, \"?\" as %3F, \"#\" as %23), and an \"@\" meant in the path or query as %40"
    )]
    SplitCredentials,
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

/// The schemes the url crate treats as special (WHATWG) and that have an authority: after
/// `scheme:` it skips any run of `/` and `\`, where RFC 3986 requires exactly `//`.
const SPECIAL_SCHEMES: [&str; 5] = ["http", "https", "ws", "wss", "ftp"];

/// Refuse the forms whose authority the url crate would find where RFC 3986 sees none (or
/// another): `https:host`, `https:/host`, `https:///host` and a reference `///host`. `s` has
/// passed [`precheck`] (no backslash, whitespace or control character) and has form `form`.
fn check_slashes(s: &str, form: UrlForm) -> Result<(), UrlError> {
    match form {
        UrlForm::Absolute => {
            let (scheme, rest) = s.split_once(':').unwrap_or((s, ""));
            let special = SPECIAL_SCHEMES
                .iter()
                .any(|sp| scheme.eq_ignore_ascii_case(sp));
            let exact = rest.strip_prefix("//").is_some_and(|r| !r.starts_with('/'));
            if special && !exact {
                return Err(UrlError::SchemeSlashes {
                    // Only the scheme: it is one of five short words, never a secret.
                    scheme: scheme.to_owned(),
                });
            }
        }
        UrlForm::NetworkPath | UrlForm::PathAbsolute | UrlForm::Relative => {
            if s.starts_with("///") {
                return Err(UrlError::TripleSlash);
            }
        }
    }
    Ok(())
}

/// What replaces the user information of a URL: `https://user:pw@host/` becomes
/// `https://***@host/`. It is itself user information, so a redacted URL is still refused by
/// the `no_userinfo` rule, and it is never a credential.
pub const REDACTED: &str = "***";

/// How masked user information is written. Which text is masked is the same either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Masked {
    /// Replaced by [`REDACTED`]: `https://***@host/` (the fetch commands; the reader sees
    /// there were credentials).
    Marker,
    /// Removed with its `@`: `https://host/` (the install lifecycle's records: a stored URL
    /// keeps nothing of the user information; its messages use the marker).
    Removed,
}

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

/// The same for text that may hold a URL or a reference, as written and not yet parsed (or
/// refused): everything before the last `@` of whatever the url crate could read as an
/// authority is replaced by [`REDACTED`]. Text without one comes back unchanged.
///
/// Text that passes the strict rules here and parses (alone, or as a reference against an
/// `https` base) has its authority where the crate reads it: up to the first `/`, `?` or `#`,
/// so an `@` in a path or query (`/x@y`, `https://h/p@q`) is left alone. Any other text is
/// masked as [`redact_refused`] does, to its last `@` anywhere: a password holding an unencoded
/// `/`, `?` or `#` (`https://u:tok/en@h/`, base64 tokens often do) ends the parser's authority
/// early, no `@` is seen there, and the text fails to parse; a scoped mask would echo it.
///
/// Conservative by construction, since the text is what gets printed: the crate drops leading
/// C0 controls and spaces and every tab and newline, and for a special scheme skips any run of
/// `/` and `\` after `scheme:` (`https:u:pw@h`, `https:///u:pw@h` carry `u:pw`), so here, for
/// any scheme, the authority starts after `scheme:` and any run of `/` and `\`; without a
/// scheme, after a run of at least two (`//`, `///`, `\\` against a base). So no text returned
/// here parses, in any of those ways, with user information other than the marker.
pub fn redact_str(s: &str) -> Cow<'_, str> {
    redact_str_as(s, Masked::Marker)
}

/// [`redact_str`], the user information written as `how` says.
pub fn redact_str_as(s: &str, how: Masked) -> Cow<'_, str> {
    if !parses_cleanly(s) {
        return redact_refused_as(s, how);
    }
    let Some((chars, start)) = authority_start(s, false) else {
        return Cow::Borrowed(s);
    };
    let end = chars[start..]
        .iter()
        .position(|(_, c)| matches!(c, '/' | '?' | '#'))
        .map_or(chars.len(), |n| start + n);
    mask(s, &chars, start, end, how)
}

/// Mask text that is refused or does not parse, to be repeated in a message: from where an
/// authority could start (after `scheme:` and any run of `/` and `\`; without a scheme, at
/// the start after any slashes) to the LAST `@` anywhere in the text. Where a parser would end
/// the authority is unknown for such text (a password may hold `/`, `?`, `#`, or parse as a
/// port and path: `http://u:123/x@h`), so everything that could be user information is hidden,
/// more rather than less. Text without `@` comes back unchanged.
pub fn redact_refused(s: &str) -> Cow<'_, str> {
    redact_refused_as(s, Masked::Marker)
}

/// [`redact_refused`], the user information written as `how` says.
pub fn redact_refused_as(s: &str, how: Masked) -> Cow<'_, str> {
    match authority_start(s, true) {
        Some((chars, start)) => {
            let end = chars.len();
            mask(s, &chars, start, end, how)
        }
        None => Cow::Borrowed(s),
    }
}

/// Mask every URL in free text (a message such as `URL: why`), never parsing the text: in
/// each word holding one (words end at `"`, `'`, `>`, `)` and whitespace other than the tabs
/// and newlines a lenient parser drops from a URL), from the URL to the end of the word is
/// masked as [`redact_refused`] masks, to the last `@` of the word, since a password may hold
/// `/`, `?` or `#` and over-masking an `@` in a path costs a message nothing.
/// A URL is `scheme://` (or `://` alone), one of the special schemes and a colon
/// (`https:u:pw@h`), or a word starting with two slashes or backslashes (`//u:pw@h`,
/// `\\u:pw@h`): whatever a lenient parser reads user information from. Text without one comes
/// back unchanged.
pub fn redact_message(text: &str, how: Masked) -> Cow<'_, str> {
    // Tabs and newlines do not end a word: a lenient parser drops them inside a URL.
    let ends_word = |c: char| {
        (c.is_whitespace() && !matches!(c, '\t' | '\n' | '\r'))
            || matches!(c, '"' | '\'' | '>' | ')')
    };
    let mut out = String::new();
    let mut copied = 0; // bytes of `text` already in `out`
    let mut at = 0;
    while at < text.len() {
        let end = text[at..].find(ends_word).map_or(text.len(), |i| at + i);
        if let Some(start) = url_in_word(&text[at..end]).map(|i| at + i)
            && let Cow::Owned(masked) = redact_refused_as(&text[start..end], how)
        {
            out.push_str(&text[copied..start]);
            out.push_str(&masked);
            copied = end;
        }
        // Past the word and the character that ended it.
        at = text[end..]
            .chars()
            .next()
            .map_or(text.len(), |c| end + c.len_utf8());
    }
    if copied == 0 {
        return Cow::Borrowed(text);
    }
    out.push_str(&text[copied..]);
    Cow::Owned(out)
}

/// Where the first URL in `word` starts (see [`redact_message`]): at its scheme, or after the
/// colon of a `://` without one, or at the start of a word opening with two slashes.
fn url_in_word(word: &str) -> Option<usize> {
    if word
        .chars()
        .filter(|c| !matches!(c, '\t' | '\n' | '\r'))
        .take(2)
        .filter(|c| matches!(c, '/' | '\\'))
        .count()
        == 2
    {
        return Some(0);
    }
    let is_scheme_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.');
    word.match_indices(':').find_map(|(colon, _)| {
        // The scheme: the run of scheme characters before the colon, from its first letter.
        let run = word[..colon]
            .char_indices()
            .rev()
            .find(|(_, c)| !is_scheme_char(*c))
            .map_or(0, |(i, c)| i + c.len_utf8());
        let scheme_start = word[run..colon]
            .find(|c: char| c.is_ascii_alphabetic())
            .map(|i| run + i);
        let special = scheme_start.is_some_and(|st| {
            SPECIAL_SCHEMES
                .iter()
                .any(|sp| word[st..colon].eq_ignore_ascii_case(sp))
        });
        // From the scheme, so the mask starts after it; without one, after the colon.
        (special || word[colon + 1..].starts_with("//")).then(|| scheme_start.unwrap_or(colon + 1))
    })
}

/// Mask a value that may be one URL or free text (a recorded field): an absolute URL that
/// passes the strict rules and parses is masked where the parser reads its user information
/// ([`redact_str`]), so an `@` in its path stays (`https://h/@scope/x`); anything else as a
/// message ([`redact_message`]).
pub fn redact_text(text: &str, how: Masked) -> Cow<'_, str> {
    if UrlForm::of(text) == UrlForm::Absolute && parses_cleanly(text) {
        redact_str_as(text, how)
    } else {
        redact_message(text, how)
    }
}

/// Whether `s` passes the strict rules and parses: absolute, or as a reference against an
/// `https` base. Only then is its authority where [`redact_str`]'s scoped mask assumes.
fn parses_cleanly(s: &str) -> bool {
    if precheck(s).is_err() {
        return false;
    }
    let form = UrlForm::of(s);
    if check_slashes(s, form).is_err() {
        return false;
    }
    match form {
        UrlForm::Absolute => Url::parse(s).is_ok(),
        _ => Url::parse("https://example.invalid/")
            .and_then(|b| b.join(s))
            .is_ok(),
    }
}

/// The characters the url crate reads from `s` (leading C0 controls and spaces, tabs and
/// newlines dropped) with their byte positions, and the index in them where an authority
/// would start. Without a scheme and without a run of two slashes there is none, unless
/// `loose` (text that is refused: it may be anything, the start of the text is taken).
fn authority_start(s: &str, loose: bool) -> Option<(Vec<(usize, char)>, usize)> {
    let lead = s.len() - s.trim_start_matches(|c: char| c <= ' ').len();
    let chars: Vec<(usize, char)> = s[lead..]
        .char_indices()
        .map(|(i, c)| (lead + i, c))
        .filter(|(_, c)| !matches!(c, '\t' | '\n' | '\r'))
        .collect();
    // RFC 3986 3.1 (and WHATWG): scheme = ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ), then ":".
    let scheme_end = match chars.first() {
        Some((_, c)) if c.is_ascii_alphabetic() => chars
            .iter()
            .position(|(_, c)| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
            .filter(|&k| chars[k].1 == ':'),
        _ => None,
    };
    let slashes = |from: usize| {
        chars[from..]
            .iter()
            .take_while(|(_, c)| matches!(c, '/' | '\\'))
            .count()
    };
    let start = match scheme_end {
        Some(colon) => colon + 1 + slashes(colon + 1),
        None => match slashes(0) {
            n if n >= 2 || loose => n,
            _ => return None,
        },
    };
    Some((chars, start))
}

/// `s` with the characters from `start` to the last `@` before `end` replaced by [`REDACTED`]
/// (or removed, that `@` included, as `how` says).
fn mask<'a>(
    s: &'a str,
    chars: &[(usize, char)],
    start: usize,
    end: usize,
    how: Masked,
) -> Cow<'a, str> {
    match chars[start..end].iter().rposition(|(_, c)| *c == '@') {
        Some(n) => {
            let (from, at) = (chars[start].0, chars[start + n].0);
            Cow::Owned(match how {
                Masked::Marker => format!("{}{REDACTED}{}", &s[..from], &s[at..]),
                Masked::Removed => format!("{}{}", &s[..from], &s[at + 1..]),
            })
        }
        None => Cow::Borrowed(s),
    }
}

/// Whether a SOURCE the user typed (`index check`, `install`) is a URL rather than a file: `scheme://...`, or one of the
/// schemes a lenient URL parser reads an authority after (`http`, `https`, `ws`, `wss`, `ftp`)
/// and a colon followed by anything, after any leading spaces and control characters (which
/// such a parser drops). Those are refused by the URL rules (` https:user:pw@host/`), where
/// read as a file name their error would repeat them, password and all. `./https:x` is a file.
pub fn names_a_url(source: &str) -> bool {
    let text = source.trim_start_matches(|c: char| c <= ' ');
    let special = ["http", "https", "ws", "wss", "ftp"].iter().any(|scheme| {
        text.get(..=scheme.len())
            .is_some_and(|p| p[..scheme.len()].eq_ignore_ascii_case(scheme) && p.ends_with(':'))
    });
    source.contains("://") || special
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

/// Parse an absolute URL a person typed: the index URL (`index check`, `fetch`, `install`),
/// `--base`, `--allow-origin`, a proxy. [`check_typed`], then [`parse_absolute`].
pub fn parse_typed(s: &str) -> Result<Url, UrlError> {
    check_typed(s)?;
    parse_absolute(s)
}

/// [`parse_typed`] keeping the user information: only for a proxy URL (see
/// [`parse_absolute_keeping_userinfo`]).
pub(crate) fn parse_typed_keeping_userinfo(s: &str) -> Result<Url, UrlError> {
    check_typed(s)?;
    parse_absolute_keeping_userinfo(s)
}

/// Refuse typed text that reads as `USER:PASSWORD@HOST` whose password holds an unescaped `/`,
/// `?` or `#`: `https://u:123/pw@h/x` parses (host `u`, port 123, path `/pw@h/x`), so it
/// would be shown as written, password and all, and fetched from `u` with the password in the
/// path. The rule: after `scheme://`, the authority (up to the first `/`, `?` or `#`) holds no
/// `@`, does not start with `[`, and holds a `:`; and an `@` follows anywhere after it.
///
/// Why so: the `:` is what a password needs (`https://unpkg.com/@scope/pkg` has none and is
/// a path, as is a user name holding `/` without a password: the two cannot be told apart);
/// the `@` may be in any later segment or the query, since a password may hold several `/`
/// (`u:12/ab/cd@h`) or a `?`, and each of them would be sent. `https://host:8443/path` (no
/// `@`) and `https://user:pw@host/x` (the `@` in the authority: credentials as written) pass
/// this check. The cost, an `@` in the path or query of a URL with a port written as `%40`
/// (the same for servers), is the price of never sending a password to another host. An IPv6
/// literal (`[::1]:8443`) is no user name.
///
/// URLs read from an index (an entry's `url`) and redirect `Location`s are not typed and not
/// checked here: their text is what the publisher wrote, no typing slip to guess at; `@` in
/// their paths is legitimate, and wherever they point is decided by the origin allow-list and
/// the destination rules, which every hop passes.
pub fn check_typed(s: &str) -> Result<(), UrlError> {
    let Some((scheme, rest)) = s.split_once("://") else {
        return Ok(());
    };
    // Not a scheme: the text is refused as no absolute URL anyway.
    if !(scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
    {
        return Ok(());
    }
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, after) = rest.split_at(end);
    if !authority.contains('@')
        && !authority.starts_with('[')
        && authority.contains(':')
        && after.contains('@')
    {
        return Err(UrlError::SplitCredentials);
    }
    Ok(())
}

/// What typed text refused by [`check_typed`] holds as user information, read as it was meant
/// (a password holding an unescaped `/`, `?` or `#`): from after `scheme://` to the LAST `@`,
/// as [`redact_refused`] masks it (`u:123/pw` of `https://u:123/pw@h/i.json`). None for text
/// the rule lets through. For finding such text written by an older version (the records'
/// scrub), never for reading a URL.
pub fn split_credentials(s: &str) -> Option<&str> {
    check_typed(s).err()?;
    let (_, rest) = s.split_once("://")?;
    rest.rfind('@').map(|at| &rest[..at])
}

/// As [`parse_absolute`], but the user information is kept: only for a proxy URL, whose
/// credentials are sent to the proxy, and never for anything that is shown or stored.
pub(crate) fn parse_absolute_keeping_userinfo(s: &str) -> Result<Url, UrlError> {
    precheck(s)?;
    if UrlForm::of(s) != UrlForm::Absolute {
        return Err(UrlError::Invalid(format!(
            "{:?} is not an absolute URL (scheme://host/...)",
            redact_refused(s)
        )));
    }
    check_slashes(s, UrlForm::Absolute)?;
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
    /// The target's origin differs from the base's (or the typed URL's, [`resolve_from`]): it
    /// earns no trust from the index.
    pub cross_origin: bool,
}

/// Resolve `reference` against `base` per RFC 3986 section 5. An absolute reference needs no
/// base; every other form does.
pub fn resolve(reference: &str, base: Option<&Url>) -> Result<Resolved, UrlError> {
    resolve_from(reference, base, base)
}

/// [`resolve`] against `base`, the URL the document was retrieved from (after redirects, the
/// last one: RFC 3986 5.1.3), with the target's origin compared to `origin`'s: the URL typed,
/// which the operator chose to trust, and which a redirect does not move.
pub fn resolve_from(
    reference: &str,
    base: Option<&Url>,
    origin: Option<&Url>,
) -> Result<Resolved, UrlError> {
    precheck(reference)?;
    let form = UrlForm::of(reference);
    check_slashes(reference, form)?;
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
    let cross_origin = origin.is_some_and(|b| b.origin() != url.origin());
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
        // The forms a lenient parser reads user information from (slashes skipped or
        // supplied, backslashes, stripped whitespace): refused as index URL, entry or redirect
        // Location, and masked in the text that is shown.
        let unparsable = format!("https:///alice:{marker}@example.com:99999/i.json");
        for reference in lenient_userinfo_forms(marker)
            .into_iter()
            .chain([unparsable])
        {
            let shown = redact_str(&reference);
            assert!(!shown.contains(marker), "{reference:?} -> {shown:?}");
            let err = resolve(&reference, Some(&base())).err();
            assert!(
                err.as_ref()
                    .is_some_and(|e| !e.to_string().contains(marker)),
                "{reference:?}: {err:?}"
            );
            let err = parse_absolute(&reference).err();
            assert!(
                err.as_ref()
                    .is_some_and(|e| !e.to_string().contains(marker)),
                "{reference:?}: {err:?}"
            );
        }
    }

    /// Texts from which the url crate reads user information holding `marker`, although
    /// RFC 3986 sees no authority there (or another one).
    fn lenient_userinfo_forms(marker: &str) -> Vec<String> {
        [
            "https:///bob:{M}@cdn.example/x.zip",
            "https:bob:{M}@cdn.example/x.zip",
            "https:/bob:{M}@cdn.example/x.zip",
            "HTTPS:bob:{M}@cdn.example/x.zip",
            "https:////bob:{M}@cdn.example/x.zip",
            "https:\\\\bob:{M}@cdn.example/x.zip",
            "https:/\\bob:{M}@cdn.example/x.zip",
            "https:\\bob:{M}@cdn.example/x.zip",
            "https:///alice:{M}@example.com:8443/i.json",
            "ws:bob:{M}@cdn.example/x",
            "ftp:///bob:{M}@cdn.example/x",
            "///bob:{M}@cdn.example/x.zip",
            "////bob:{M}@cdn.example/x.zip",
            "\\\\bob:{M}@cdn.example/x.zip",
            "/\\bob:{M}@cdn.example/x.zip",
            "\\/bob:{M}@cdn.example/x.zip",
            " https://bob:{M}@cdn.example/x.zip",
            "\u{1}https://bob:{M}@cdn.example/x.zip",
            "\thttps:bob:{M}@cdn.example/x.zip",
            "ht\ttps://bob:{M}@cdn.example/x.zip",
            "https:/\n/bob:{M}@cdn.example/x.zip",
            "/\t/bob:{M}@cdn.example/x.zip",
            "https://bob:{M}@cdn.example\\x.zip",
            "foo://a\\b:{M}@cdn.example/x",
        ]
        .iter()
        .map(|f| f.replace("{M}", marker))
        .collect()
    }

    /// What the url crate reads as user information in `text`: parsed alone, and joined to a
    /// special and a non-special base.
    fn userinfo_read_from(text: &str) -> Vec<String> {
        let bases = [
            Url::parse("https://example.com/a/").ok(),
            Url::parse("foo://example.com/a/").ok(),
        ];
        std::iter::once(Url::parse(text).ok())
            .chain(bases.iter().flatten().map(|b| b.join(text).ok()))
            .flatten()
            .filter(|u| !u.username().is_empty() || u.password().is_some())
            .map(|u| format!("{}:{}", u.username(), u.password().unwrap_or("")))
            .collect()
    }

    #[test]
    fn redacted_text_never_parses_with_user_information() {
        let marker = "pw-MARKER-2";
        for text in lenient_userinfo_forms(marker) {
            let read = userinfo_read_from(&text);
            // Each form is a real one: the crate does read the secret from it. Except `///`:
            // the WHATWG standard skips those slashes against a special base and reads the
            // authority after them, this version of the crate answers "empty host"; the text is
            // masked (and refused) all the same, should a later version follow the standard.
            if !text.starts_with("///") {
                assert!(
                    read.iter().any(|u| u.contains(marker)),
                    "{text:?}: {read:?}"
                );
            }
            let shown = redact_str(&text);
            assert!(!shown.contains(marker), "{text:?} -> {shown:?}");
            for u in userinfo_read_from(&shown) {
                assert_eq!(u, format!("{REDACTED}:"), "{text:?} -> {shown:?}");
            }
        }
        // Text the crate reads no user information from is returned as it is.
        for text in [
            "a/b@c",
            "/p?q=//x@y",
            "https://h/p@q",
            "https://h?x=a@b",
            "/x@y/z",
            "demo/SKILL.md",
            "https://h/#a@b",
        ] {
            assert!(userinfo_read_from(text).is_empty(), "{text}");
            assert_eq!(redact_str(text), text);
        }
    }

    #[test]
    fn a_password_that_ends_the_parsed_authority_early_is_masked() {
        // A `/`, `?` or `#` in the password ends the authority where the parser reads it, so
        // no `@` is seen there: the text fails to parse, or parses (`u:123` as host and port)
        // and is refused later. Shown, refused or repeated in a parse error, it is masked to
        // its last `@`.
        let marker = "pw-MARKER-3";
        for text in [
            "https://u:{M}/en@h/i.json",
            "https://u:{M}?en@h/i.json",
            "https://u:{M}#en@h/i.json",
            "https://u:tok/{M}@h",
            "https://u:123/{M}@h",
            "https:/u:{M}/x@h",
            "//u:{M}/en@h/x.zip",
            "1u:{M}/x@h/i.json",
            " https://u:{M}/en@h",
        ]
        .map(|t| t.replace("{M}", marker))
        {
            let refused = redact_refused(&text);
            assert!(
                !refused.contains(marker) && refused.contains("***@h"),
                "{text:?} -> {refused:?}"
            );
            let err = parse_absolute(&text).err().map(|e| e.to_string());
            assert!(
                err.as_ref().is_none_or(|e| !e.contains(marker)),
                "{text:?}: {err:?}"
            );
            // Text that does not parse cleanly is shown masked the same way.
            if !text.contains("u:123/") && !text.starts_with("1u:") {
                assert_eq!(redact_str(&text), refused, "{text:?}");
            }
        }
        // Text that parses is shown with its authority where it is read: an `@` after it is
        // path or query, left alone; refused, the same text is masked to the last `@`.
        assert_eq!(redact_str("https://h/p@q"), "https://h/p@q");
        assert_eq!(redact_refused("https://h/p@q"), "https://***@q");
        assert_eq!(redact_refused("no-at-sign/x"), "no-at-sign/x");
    }

    #[test]
    fn typed_credentials_cut_short_by_a_slash_are_refused() {
        let marker = "pw-MARKER-4";
        // `:` in the authority and an `@` after it: read as host and port, the rest of the
        // password as path or query. Refused, and the message never holds the password.
        for text in [
            "https://u:123/{M}@h/.well-known/agent-skills/index.json",
            "https://u:/{M}@h/i.json",
            "https://u:12/ab/{M}@h/i.json",
            "https://u:123?{M}@h/i.json",
            "https://u:123#{M}@h/i.json",
            "https://u:tok/{M}@h/i.json",
            "http://alice:123/{M}@proxy:3128",
            "HTTPS://u:123/{M}@h",
        ]
        .map(|t| t.replace("{M}", marker))
        {
            assert_eq!(
                check_typed(&text),
                Err(UrlError::SplitCredentials),
                "{text}"
            );
            let e = parse_typed(&text).err().map(|e| e.to_string());
            assert!(
                e.as_ref()
                    .is_some_and(|e| !e.contains(marker) && e.contains("%2F") && e.contains("%40")),
                "{text}: {e:?}"
            );
            assert!(parse_typed_keeping_userinfo(&text).is_err(), "{text}");
            assert!(!redact_refused(&text).contains(marker), "{text}");
        }
        // Legitimate forms pass: an `@` in a path without a port, a port without an `@`,
        // credentials as written (refused or used later, as before), an IPv6 literal, no
        // authority at all.
        for text in [
            "https://unpkg.com/@scope/pkg",
            "https://host:8443/path",
            "https://user:pw@host/x",
            "https://user:pw@host:8443/a@b",
            "https://[::1]:8443/@scope/pkg",
            "https://host:8443/%40scope/pkg",
            "https://u:123%2Fpw@h/i.json",
            "mailto:a@b",
            "./https:x@y",
        ] {
            assert_eq!(check_typed(text), Ok(()), "{text}");
        }
        assert!(parse_typed("https://unpkg.com/@scope/pkg").is_ok());
        assert!(parse_typed("https://host:8443/path").is_ok());
        let u = parse_typed("https://user:pw@host/x").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(u.as_str(), "https://***@host/x");
        // The written-out form the message asks for: the password reaches the user
        // information, the host is `h`.
        let u = parse_typed_keeping_userinfo("https://u:123%2Fpw@h/i.json")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (u.host_str(), u.password(), u.path()),
            (Some("h"), Some("123%2Fpw"), "/i.json")
        );
    }

    #[test]
    fn messages_and_values_are_masked_by_the_same_rule() {
        let m = "pw-MARKER-5";
        let cases = [
            // To the end of the word: a password holding `/`, in a message.
            (
                "https://u:tok/{M}@h/i.json: not a valid URL",
                "https://***@h/i.json: not a valid URL",
                "https://h/i.json: not a valid URL",
            ),
            (
                "see https://u:{M}@h.example/x and ftp://a@b",
                "see https://***@h.example/x and ftp://***@b",
                "see https://h.example/x and ftp://b",
            ),
            // Lenient forms a WHATWG parser reads user information from, and `://` alone.
            (
                "cannot use https:u:{M}@h/x, (https:///u:{M}@h) or ://u:{M}@h",
                "cannot use https:***@h/x, (https:///***@h) or ://***@h",
                "cannot use https:h/x, (https:///h) or ://h",
            ),
            (
                "records at postgres://admin@127.0.0.1:5432/fleet, not x",
                "records at postgres://***@127.0.0.1:5432/fleet, not x",
                "records at postgres://127.0.0.1:5432/fleet, not x",
            ),
            ("x=https://u:{M}@h", "x=https://***@h", "x=https://h"),
            // No URL: unchanged, `@` and colons included.
            (
                "/tmp/a@b: no such file (mailto:a@b)",
                "/tmp/a@b: no such file (mailto:a@b)",
                "/tmp/a@b: no such file (mailto:a@b)",
            ),
        ];
        for (text, marked, removed) in cases {
            let text = text.replace("{M}", m);
            assert_eq!(redact_message(&text, Masked::Marker), marked, "{text}");
            assert_eq!(redact_message(&text, Masked::Removed), removed, "{text}");
            assert_eq!(redact_text(&text, Masked::Removed), removed, "{text}");
        }
        // A message is never parsed as a URL: nothing comes back percent-encoded.
        let text = "https://h/i.json: not a valid URL";
        assert_eq!(redact_message(text, Masked::Removed), text);
        assert_eq!(redact_text(text, Masked::Removed), text);
        // A value that is one URL is masked where the parser reads user information: an `@`
        // in its path stays.
        for (value, marked, removed) in [
            (
                "https://u:{M}@h.example/x?y",
                "https://***@h.example/x?y",
                "https://h.example/x?y",
            ),
            (
                "https://h/@scope/pkg.tgz",
                "https://h/@scope/pkg.tgz",
                "https://h/@scope/pkg.tgz",
            ),
            (
                "https://***@h/a@b/i.json",
                "https://***@h/a@b/i.json",
                "https://h/a@b/i.json",
            ),
            ("sha256:00ff", "sha256:00ff", "sha256:00ff"),
        ] {
            let value = value.replace("{M}", m);
            assert_eq!(redact_text(&value, Masked::Marker), marked, "{value}");
            assert_eq!(redact_text(&value, Masked::Removed), removed, "{value}");
        }
        // Whatever the form, nothing returned holds the password or parses with user
        // information other than the marker.
        for text in lenient_userinfo_forms(m) {
            for how in [Masked::Marker, Masked::Removed] {
                for shown in [redact_text(&text, how), redact_message(&text, how)] {
                    assert!(!shown.contains(m), "{text:?} -> {shown:?}");
                    for u in userinfo_read_from(&shown) {
                        assert_eq!(u, format!("{REDACTED}:"), "{text:?} -> {shown:?}");
                    }
                }
            }
        }
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
        // Slashes a lenient parser would skip or supply after a special scheme, and a
        // reference starting `///`: refused with their own reason, not repaired.
        for bad in [
            "https:cdn.example/x",
            "https:/cdn.example/x",
            "https:///cdn.example/x",
            "HTTP:cdn.example/x",
            "wss:cdn.example/x",
        ] {
            assert!(
                matches!(
                    resolve(bad, Some(&base())),
                    Err(UrlError::SchemeSlashes { .. })
                ),
                "{bad:?}"
            );
            assert!(
                matches!(parse_absolute(bad), Err(UrlError::SchemeSlashes { .. })),
                "{bad:?}"
            );
        }
        assert_eq!(
            resolve("///cdn.example/x", Some(&base())).err(),
            Some(UrlError::TripleSlash)
        );
        // Exactly `//` stays the one way to write an authority; other schemes are not touched.
        assert!(resolve("https://cdn.example/x", Some(&base())).is_ok());
        assert!(resolve("//cdn.example/x", Some(&base())).is_ok());
        assert!(resolve("/x//y", Some(&base())).is_ok());
        assert!(!matches!(
            resolve("mailto:a@b", Some(&base())),
            Err(UrlError::SchemeSlashes { .. })
        ));
        assert!(matches!(
            resolve("a/b", None),
            Err(UrlError::NoBase {
                form: UrlForm::Relative
            })
        ));
        assert!(resolve(&"a".repeat(MAX_URL_BYTES + 1), Some(&base())).is_err());
    }
}
