//! The install lifecycle: what happens to a verified, reviewed package after intake.
//!
//! [`store`] keeps each accepted version once, content-addressed by its artifact digest, as an
//! immutable tree promoted by a rename from staging inside the store; [`records`] is the one
//! interface to the records (the store's SQLite file, or a PostgreSQL database a fleet of hosts
//! shares: [`fleet`] says where and which host this is); [`policy`] turns a review into one
//! decision; [`agents`] switches `<skills dir>/<name>` links atomically and refuses to touch
//! anything it did not create; [`journal`] orders every change of state with its filesystem
//! steps so a killed command leaves the old state or the new one, and the next command finishes
//! it; [`quarantine`] contains a version on this host when the records cannot be reached
//! (`withdraw --local`) and keeps that withdrawal until they can; [`ops`] holds the commands (install, approve, deny, update, rollback, withdraw, list,
//! provenance, gc, verify, sync, forget-host).
//!
//! This module never runs package content, never hands a package's text to an agent to decide
//! its installation (descriptions grant nothing), never writes over an existing version or an
//! entry it did not create, and never records a URL's userinfo.

pub mod agents;
pub mod fleet;
pub mod journal;
pub mod ops;
pub mod policy;
pub mod quarantine;
pub mod records;
pub mod scrub;
pub mod store;

use serde_json::Value;

use crate::urls::Masked;

/// What kind of failure, so the CLI can map it to its documented exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Corrupt store, read-only filesystem, I/O, a foreign entry in a skills directory.
    Operational,
    /// A bad argument or a bad policy file; a store or an agent directory the command refuses
    /// to use as given (records it is not bound to, another agent's directory, a link another
    /// user could change).
    Usage,
    /// The engine rejected the artifact (digest mismatch, hostile archive).
    Rejected,
    /// The fetch policy refused a URL.
    Refused,
    /// The index has an unrecognised `$schema`.
    Schema,
    /// The version waits for a person's decision.
    NeedsApproval,
    /// Denied by policy or by a person.
    Denied,
    /// Unknown skill, agent or digest, or a version not in the store.
    NotFound,
    /// The version was withdrawn.
    Withdrawn,
}

/// A lifecycle failure: its kind and a message for the operator (never holding a secret).
#[derive(Debug, thiserror::Error)]
#[error("{message}{}", .hint.unwrap_or(""))]
pub struct Error {
    pub kind: Kind,
    pub message: String,
    /// Details for `--json` output (e.g. the fetch refusal's rule and hint).
    pub detail: Option<Value>,
    /// The program's own text ending the message, shown as written: a placeholder such as
    /// `postgres://USER@HOST:PORT/DB`, which the masker of messages would show as
    /// `postgres://***@HOST:PORT/DB`. A constant (`&'static`), so it cannot hold anything a
    /// user gave; the message before it is masked as every message is.
    pub hint: Option<&'static str>,
}

impl Error {
    pub fn new(kind: Kind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            detail: None,
            hint: None,
        }
    }

    /// This error, its message ending with `hint` (see [`Error::hint`]).
    pub fn with_hint(mut self, hint: &'static str) -> Self {
        self.hint = Some(hint);
        self
    }

    pub fn io(what: impl std::fmt::Display, e: &std::io::Error) -> Self {
        let hint = if e.raw_os_error() == Some(libc::EROFS) {
            // The path in `what` says which: the store, or an agent's skills directory.
            " (a read-only filesystem: the store and every agent's skills directory must take writes)"
        } else {
            ""
        };
        Self::new(Kind::Operational, format!("{what}: {e}{hint}"))
    }
}

/// Now, RFC 3339 UTC.
pub fn now() -> String {
    crate::fetch::now_rfc3339()
}

/// Test-only crash injection: with `SKILLBOX_TEST_CRASH_AT=<op>:<step>` a debug build kills
/// itself with SIGKILL at that step, so tests can prove every step is recoverable. Release
/// builds compile this to nothing.
pub fn crash_point(op: &str, step: &str) {
    #[cfg(debug_assertions)]
    {
        if let Some(want) = std::env::var_os("SKILLBOX_TEST_CRASH_AT")
            && want.to_str() == Some(&format!("{op}:{step}"))
        {
            let _ = nix::sys::signal::kill(nix::unistd::getpid(), nix::sys::signal::SIGKILL);
        }
    }
    #[cfg(not(debug_assertions))]
    {
        let _ = (op, step);
    }
}

/// A value to be recorded (a URL, or a field that may hold URLs) without userinfo
/// (`user:password@`): a credential never reaches the records. The rule is the fetch module's
/// ([`crate::urls::redact_text`]): a value that is one URL loses the user information the
/// parser reads (an `@` in its path stays), anything else is masked as a message. In the
/// records the userinfo is removed, `@` included ([`Masked::Removed`]): a stored URL keeps
/// nothing of it, and what is recorded is a URL that was fetched, which had none.
pub fn redact_url(text: &str) -> String {
    crate::urls::redact_text(text, Masked::Removed).into_owned()
}

/// A message to the user (free text, `URL: why`) without userinfo, never parsed as a URL
/// (parsed whole, a message came back percent-encoded): every URL in it has everything from
/// its authority to the last `@` of its word replaced by `***` ([`Masked::Marker`]), as the
/// fetch commands show a refused URL ([`crate::urls::redact_message`]), since a password may
/// hold a `/` (`u:tok/en@h`). The marker, not removal: the reader sees that the URL had user
/// information, so can tell which URL was meant (and why it was refused).
pub fn redact_message(text: &str) -> String {
    crate::urls::redact_message(text, Masked::Marker).into_owned()
}

/// [`redact_url`] over every string in a JSON value.
pub fn redact_json(v: &mut Value) {
    match v {
        Value::String(s) => {
            if let std::borrow::Cow::Owned(r) = crate::urls::redact_text(s, Masked::Removed) {
                *s = r;
            }
        }
        Value::Array(a) => a.iter_mut().for_each(redact_json),
        Value::Object(o) => o.values_mut().for_each(redact_json),
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn userinfo_is_removed_everywhere() {
        assert_eq!(
            redact_url("https://u:MARKER@h.example/x?y"),
            "https://h.example/x?y"
        );
        assert_eq!(
            redact_url("see https://u:MARKER@h.example/x and ftp://a@b"),
            "see https://h.example/x and ftp://b"
        );
        // A password holding `/`, in a message: masked, and the message stays readable.
        assert_eq!(
            redact_url("https://u:tok/MARKER@h/i.json: not a valid URL"),
            "https://h/i.json: not a valid URL"
        );
        let mut v = serde_json::json!({"a": ["https://:MARKER@h/"], "b": {"c": "x"}});
        redact_json(&mut v);
        assert!(!v.to_string().contains("MARKER"), "{v}");
    }

    /// The rule is the fetch module's: a recorded URL keeps an `@` of its path (the old
    /// masker cut every URL to its last `@`, recording `https://registry.example/@scope/x.tgz`
    /// as `https://scope/x.tgz`), a message is masked to the end of each word, and the
    /// lenient forms a WHATWG parser reads userinfo from are masked in messages too (the old
    /// masker looked only for `://`).
    #[test]
    fn one_rule_with_the_fetch_module() {
        for url in [
            "https://registry.example/@scope/x.tgz",
            "https://h:8443/.well-known/agent-skills/index.json",
        ] {
            assert_eq!(redact_url(url), url);
        }
        assert_eq!(
            redact_url("https://***@h/a@b/i.json"),
            "https://h/a@b/i.json"
        );
        let mut v = serde_json::json!({
            "resolved_url": "https://registry.example/@scope/x.tgz",
            "entry": {"description": "mirror at https:u:MARKER@h/x, or //u:MARKER@h/y"},
        });
        redact_json(&mut v);
        assert_eq!(v["resolved_url"], "https://registry.example/@scope/x.tgz");
        assert_eq!(v["entry"]["description"], "mirror at https:h/x, or //h/y");
        // A message is masked to the end of the word even when it is one URL and nothing else.
        assert_eq!(
            redact_message("https://u:123/MARKER@h/x"),
            "https://***@h/x"
        );
        assert_eq!(
            redact_message("https:u:MARKER@h/i.json: no such file"),
            "https:***@h/i.json: no such file"
        );
    }

    /// Records lose the userinfo, messages show `***` where it was, as the fetch commands
    /// show it (the old lifecycle removed it from messages too: `https://h/x`, and a reader
    /// could not tell the refused URL from the one without credentials).
    #[test]
    fn records_remove_userinfo_and_messages_mark_it() {
        let text = "https://u:MARKER@h.example/i.json: refused";
        assert_eq!(redact_url(text), "https://h.example/i.json: refused");
        assert_eq!(
            redact_message(text),
            "https://***@h.example/i.json: refused"
        );
        let mut v = serde_json::json!({"index_url": "https://u:MARKER@h.example/i.json"});
        redact_json(&mut v);
        assert_eq!(v["index_url"], "https://h.example/i.json");
        // Masking a message twice changes nothing: a message already holding a masked URL
        // (a refusal from the fetch module) keeps its marker.
        let once = redact_message("see https://u:tok/MARKER@h/x and //a:MARKER@b/y");
        assert_eq!(once, "see https://***@h/x and //***@b/y");
        assert_eq!(redact_message(&once), once);
    }
}
