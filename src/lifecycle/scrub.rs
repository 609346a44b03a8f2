//! The records' migration 5: URL user information an older version recorded is removed.
//!
//! Before the typed-URL rule (`urls::check_typed`), an index URL typed as
//! `https://u:123/pw@h/i.json` (a password cut short by `/`, `?` or `#`) parsed as host `u`,
//! port 123 and path `/pw@h/i.json`: the records' masker, which removes user information
//! where the parser reads it, found none and recorded it whole, in `host_versions.index_url`
//! and in the version's provenance (its `index_url`, and every URL resolved against it: the
//! index's download, the artifact's URL, its hops, the cache's origin). Reasons given to
//! `deny` and `withdraw` were recorded as typed. Input is refused or masked now; this turns
//! what was recorded before into what is recorded today:
//!
//! - a URL (the index URLs, every string of the provenance): user information removed with its
//!   `@` ([`super::redact_url`], `https://h/i.json`). A typed URL the rule refuses is read as it
//!   was meant, its user information running to the last `@` (`https://u:123/pw@h/i.json`
//!   becomes `https://h/i.json`), and that same user information is removed wherever it
//!   follows a `://` in the provenance (`https://u:123/pw@h/a.tgz`, resolved against it,
//!   becomes `https://h/a.tgz`);
//! - a reason (`versions.withdrawn_reason`, the detail of `denied` and `withdrawn` events):
//!   masked as a reason is masked on input ([`crate::urls::redact_message`]: `***` where the
//!   user information was).
//!
//! An index entry's URL (not typed: the publisher's text) with a port and an `@` in its path
//! is not touched unless it carries a typed URL's user information: it is recorded today as
//! it was fetched.

use serde_json::Value;

use super::redact_url;
use crate::urls::{Masked, REDACTED};

/// The user information of the typed URLs an older version recorded that the typed-URL rule
/// refuses, longest first (so one holding another is removed whole).
#[derive(Debug, Default)]
pub struct Secrets(Vec<String>);

impl Secrets {
    /// Learn from one recorded typed URL (an index URL).
    pub fn learn(&mut self, typed: &str) {
        if let Some(s) = crate::urls::split_credentials(typed)
            && !s.is_empty()
            && !self.0.iter().any(|k| k == s)
        {
            self.0.push(s.to_owned());
            self.0.sort_by_key(|k| std::cmp::Reverse(k.len()));
        }
    }

    /// Learn from every `index_url` in a provenance value.
    pub fn learn_json(&mut self, v: &Value) {
        match v {
            Value::Object(o) => {
                for (k, x) in o {
                    match x {
                        Value::String(s) if k == "index_url" => self.learn(s),
                        _ => self.learn_json(x),
                    }
                }
            }
            Value::Array(a) => a.iter().for_each(|x| self.learn_json(x)),
            _ => {}
        }
    }

    /// `text` with every `://USERINFO@` of a known secret written `://` + `with`.
    fn remove(&self, text: &str, with: &str) -> String {
        let mut out = text.to_owned();
        for s in &self.0 {
            let needle = format!("://{s}@");
            if out.contains(&needle) {
                out = out.replace(&needle, &format!("://{with}"));
            }
        }
        out
    }
}

/// A recorded URL as it is recorded today; None when it already is.
pub fn url(text: &str, secrets: &Secrets) -> Option<String> {
    let out = redact_url(&secrets.remove(text, ""));
    (out != text).then_some(out)
}

/// A recorded reason as `deny` and `withdraw` record one today; None when it already is.
pub fn reason(text: &str, secrets: &Secrets) -> Option<String> {
    let marked = secrets.remove(text, &format!("{REDACTED}@"));
    let out = crate::urls::redact_message(&marked, Masked::Marker).into_owned();
    (out != text).then_some(out)
}

/// [`url`] over every string of a JSON value; whether anything changed.
pub fn json(v: &mut Value, secrets: &Secrets) -> bool {
    match v {
        Value::String(s) => match url(s, secrets) {
            Some(r) => {
                *s = r;
                true
            }
            None => false,
        },
        Value::Array(a) => a.iter_mut().fold(false, |c, x| json(x, secrets) | c),
        Value::Object(o) => o.values_mut().fold(false, |c, x| json(x, secrets) | c),
        Value::Null | Value::Bool(_) | Value::Number(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_split_index_url_and_what_was_resolved_against_it_lose_the_password() {
        let mut s = Secrets::default();
        let typed = "https://u:123/MARKER@h.example/i.json";
        s.learn(typed);
        s.learn("https://h.example/i.json");
        assert_eq!(url(typed, &s).as_deref(), Some("https://h.example/i.json"));
        assert_eq!(
            url("https://u:123/MARKER@h.example/pkgs/a.tgz", &s).as_deref(),
            Some("https://h.example/pkgs/a.tgz")
        );
        // User information as the parser reads it: today's rule.
        assert_eq!(
            url("https://user:MARKER@h.example/x", &s).as_deref(),
            Some("https://h.example/x")
        );
        // Already clean, or a publisher's URL with a port and an `@` in its path: untouched.
        for clean in [
            "https://h.example/i.json",
            "https://registry.example:8443/@scope/x.tgz",
            "sha256:00",
        ] {
            assert_eq!(url(clean, &s), None, "{clean}");
        }
        let mut v = serde_json::json!({
            "index_url": typed,
            "resolved_url": "https://u:123/MARKER@h.example/a.tgz",
            "hops": [{"url": "https://other.example/a.tgz"}],
            "entry": {"url": "a.tgz", "description": "mirror https://u:MARKER@m/x"},
            "size": 3,
        });
        let mut fresh = Secrets::default();
        fresh.learn_json(&v);
        assert!(json(&mut v, &fresh));
        assert!(!v.to_string().contains("MARKER"), "{v}");
        assert_eq!(v["resolved_url"], "https://h.example/a.tgz");
        assert_eq!(v["hops"][0]["url"], "https://other.example/a.tgz");
        assert_eq!(v["size"], 3);
        // Once scrubbed, nothing more changes.
        assert!(!json(&mut v, &fresh));
    }

    #[test]
    fn a_reason_is_masked_as_a_reason_is_masked_today() {
        let s = Secrets::default();
        assert_eq!(
            reason("leaks, see https://u:tok/MARKER@t.example/1", &s).as_deref(),
            Some("leaks, see https://***@t.example/1")
        );
        assert_eq!(reason("see https://***@t.example/1", &s), None);
        assert_eq!(reason("exfiltrates", &s), None);
    }

    /// A secret holding `@` (the last `@` ends it) is removed whole, not cut at a shorter
    /// secret it starts with.
    #[test]
    fn the_longest_secret_is_removed_first() {
        let mut s = Secrets::default();
        s.learn("https://u:1/p@h/i.json");
        s.learn("https://u:1/p@q@h/i.json");
        assert_eq!(
            url("https://u:1/p@q@h/a.tgz", &s).as_deref(),
            Some("https://h/a.tgz")
        );
    }
}
