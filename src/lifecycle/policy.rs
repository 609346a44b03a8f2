//! The install policy: rules over a review's capabilities that give each package one
//! decision, `approved` (by which rule), `needs_approval` (which findings) or `denied` (which
//! rule).
//!
//! A policy is a TOML file; an unknown key is refused with its line. Without one the built-in
//! default applies: nothing a package asks for (a tool, a host, a script, an executable, a
//! download, a credential, a risky command, a cross-origin artifact, an incomplete review) is
//! granted without a person, and a content-only update of an approved version is approved.
//!
//! The index description and SKILL.md's description never grant anything: this module does not
//! read them. It reads only the review's structured capability lists and the provenance facts.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{Error, Kind};
use crate::skill::diff::{Change, Diff};
use crate::skill::review::Review;

/// What a rule does with a capability it matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    Allow,
    Ask,
    Deny,
}

/// Names with an allow-list, a deny-list and what happens to any other (`other`).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Lists {
    pub allow: Vec<String>,
    pub deny: Vec<String>,
    pub other: Action,
}

impl Default for Lists {
    fn default() -> Self {
        Self {
            allow: Vec::new(),
            deny: Vec::new(),
            other: Action::Ask,
        }
    }
}

/// One flat rule per capability class that has no names to list.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Capabilities {
    pub scripts: Action,
    pub executables: Action,
    pub downloads: Action,
    pub credentials: Action,
    pub risky_commands: Action,
    pub incomplete_review: Action,
    pub cross_origin: Action,
    /// SKILL.md's `name` differs from the index entry's.
    pub name_mismatch: Action,
}

impl Default for Capabilities {
    fn default() -> Self {
        Self {
            scripts: Action::Ask,
            executables: Action::Ask,
            downloads: Action::Ask,
            credentials: Action::Ask,
            risky_commands: Action::Ask,
            incomplete_review: Action::Ask,
            cross_origin: Action::Ask,
            name_mismatch: Action::Ask,
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Updates {
    /// An update the diff calls `content_only` against an approved version.
    pub content_only: Action,
}

impl Default for Updates {
    fn default() -> Self {
        Self {
            content_only: Action::Allow,
        }
    }
}

/// The whole policy file.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Policy {
    /// `allowed-tools` entries.
    pub tools: Lists,
    /// Hosts the package refers to; `*.example.com` matches subdomains (not the apex).
    pub hosts: Lists,
    /// Origins (`https://host[:port]`) the artifact may come from. Default: any origin the fetch
    /// policy let through.
    pub origins: Origins,
    pub capabilities: Capabilities,
    pub updates: Updates,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Origins {
    pub allow: Vec<String>,
    pub other: Action,
}

impl Default for Origins {
    fn default() -> Self {
        Self {
            allow: Vec::new(),
            other: Action::Allow,
        }
    }
}

/// The one decision for a package.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum Decision {
    Approved { rule: String },
    NeedsApproval { findings: Vec<String> },
    Denied { rule: String },
}

/// Facts about where the package came from, for the origin rules.
#[derive(Debug, Clone, Default)]
pub struct Facts {
    /// `https://host[:port]` of the URL the bytes came from; none for a local file.
    pub origin: Option<String>,
    pub cross_origin: bool,
}

const MAX_POLICY_BYTES: u64 = 1024 * 1024;

impl Policy {
    /// Read a policy file; a syntax error or unknown key is a usage error naming the line.
    pub fn from_file(path: &Path) -> Result<Self, Error> {
        use std::io::Read as _;
        let mut text = String::new();
        std::fs::File::open(path)
            .and_then(|f| f.take(MAX_POLICY_BYTES).read_to_string(&mut text))
            .map_err(|e| Error::new(Kind::Usage, format!("--policy {}: {e}", path.display())))?;
        Self::parse(&text)
            .map_err(|m| Error::new(Kind::Usage, format!("--policy {}: {m}", path.display())))
    }

    pub fn parse(text: &str) -> Result<Self, String> {
        let p: Policy = toml::from_str(text).map_err(|e| {
            let line = e
                .span()
                .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
            match line {
                Some(l) => format!("line {l}: {}", e.message()),
                None => e.message().to_owned(),
            }
        })?;
        for o in &p.origins.allow {
            if !(o.starts_with("https://") && url::Url::parse(o).is_ok()) {
                return Err(format!("origins.allow: {o:?} is not an https:// origin"));
            }
        }
        Ok(p)
    }

    /// Decide for a package with `review`, from `facts`, given `diff` against the approved
    /// version it updates (none for a first install).
    pub fn decide(&self, review: &Review, facts: &Facts, diff: Option<&Diff>) -> Decision {
        let mut ask: Vec<String> = Vec::new();
        let mut allowed_by: Vec<&str> = Vec::new();
        let mut deny: Option<String> = None;
        let mut note =
            |action: Action, rule: &str, what: String, ask: &mut Vec<String>| match action {
                Action::Allow => {}
                Action::Ask => ask.push(what),
                Action::Deny => {
                    if deny.is_none() {
                        deny = Some(format!("{rule} = \"deny\" ({what})"));
                    }
                }
            };
        let caps = &review.capabilities;
        let c = &self.capabilities;

        for t in &review.tools {
            if let Some(d) = self.tools.deny.iter().find(|d| *d == t) {
                note(
                    Action::Deny,
                    &format!("tools.deny {d:?}"),
                    format!("tool {t}"),
                    &mut ask,
                );
            } else if self.tools.allow.iter().any(|a| a == t) {
                allowed_by.push("tools.allow");
            } else {
                note(
                    self.tools.other,
                    "tools.other",
                    format!("tool {t}"),
                    &mut ask,
                );
            }
        }
        for h in &caps.hosts {
            if let Some(d) = self.hosts.deny.iter().find(|d| host_matches(d, h)) {
                note(
                    Action::Deny,
                    &format!("hosts.deny {d:?}"),
                    format!("host {h}"),
                    &mut ask,
                );
            } else if self.hosts.allow.iter().any(|a| host_matches(a, h)) {
                allowed_by.push("hosts.allow");
            } else {
                note(
                    self.hosts.other,
                    "hosts.other",
                    format!("host {h}"),
                    &mut ask,
                );
            }
        }
        for s in &review.scripts {
            note(
                c.scripts,
                "capabilities.scripts",
                format!("script {}", s.path),
                &mut ask,
            );
        }
        let scripts: std::collections::BTreeSet<&str> =
            review.scripts.iter().map(|s| s.path.as_str()).collect();
        for e in caps
            .executables
            .iter()
            .filter(|e| !scripts.contains(e.as_str()))
        {
            note(
                c.executables,
                "capabilities.executables",
                format!("executable {e}"),
                &mut ask,
            );
        }
        for d in &caps.downloads {
            note(
                c.downloads,
                "capabilities.downloads",
                format!("download {d}"),
                &mut ask,
            );
        }
        for d in &caps.credentials {
            note(
                c.credentials,
                "capabilities.credentials",
                format!("credential {d}"),
                &mut ask,
            );
        }
        for d in &caps.risky_commands {
            note(
                c.risky_commands,
                "capabilities.risky_commands",
                format!("risky command {d}"),
                &mut ask,
            );
        }
        if !review.coverage.complete {
            note(
                c.incomplete_review,
                "capabilities.incomplete_review",
                "the review hit its bounds".into(),
                &mut ask,
            );
        }
        if review
            .flags
            .contains(&crate::skill::review::ReviewFlag::NameMismatch)
        {
            note(
                c.name_mismatch,
                "capabilities.name_mismatch",
                "SKILL.md name differs from the index".into(),
                &mut ask,
            );
        }
        if facts.cross_origin {
            note(
                c.cross_origin,
                "capabilities.cross_origin",
                "artifact from another origin than the index".into(),
                &mut ask,
            );
        }
        if let Some(o) = &facts.origin {
            if self
                .origins
                .allow
                .iter()
                .any(|a| a.trim_end_matches('/') == o)
            {
                allowed_by.push("origins.allow");
            } else {
                note(
                    self.origins.other,
                    "origins.other",
                    format!("origin {o}"),
                    &mut ask,
                );
            }
        }
        if let Some(rule) = deny {
            return Decision::Denied { rule };
        }
        if let Some(d) = diff {
            if d.change == Change::ContentOnly && self.updates.content_only == Action::Allow {
                return Decision::Approved {
                    rule: "updates.content_only = \"allow\" (no capability grew since the approved version)".into(),
                };
            }
            if d.change == Change::ContentOnly && self.updates.content_only == Action::Deny {
                return Decision::Denied {
                    rule: "updates.content_only = \"deny\"".into(),
                };
            }
        }
        if !ask.is_empty() {
            ask.sort();
            ask.dedup();
            return Decision::NeedsApproval { findings: ask };
        }
        allowed_by.sort_unstable();
        allowed_by.dedup();
        Decision::Approved {
            rule: if allowed_by.is_empty() {
                "nothing the package asks for needs a decision".into()
            } else {
                format!(
                    "everything it asks for is allowed ({})",
                    allowed_by.join(", ")
                )
            },
        }
    }
}

/// Exact host, or `*.suffix` for strict subdomains of `suffix`.
fn host_matches(pattern: &str, host: &str) -> bool {
    let (p, h) = (pattern.to_ascii_lowercase(), host.to_ascii_lowercase());
    match p.strip_prefix("*.") {
        Some(suffix) => h.len() > suffix.len() + 1 && h.ends_with(&format!(".{suffix}")),
        None => p == h,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_keys_are_refused_with_their_line() {
        let e = Policy::parse("[hosts]\nallow = []\nalow = [\"x\"]\n")
            .err()
            .unwrap_or_default();
        assert!(e.starts_with("line 3:"), "{e}");
        assert!(Policy::parse("[capabilities]\nscripts = \"maybe\"\n").is_err());
        assert!(Policy::parse("[origins]\nallow = [\"http://x\"]\n").is_err());
    }

    #[test]
    fn wildcards_match_subdomains_only() {
        assert!(host_matches("*.example.com", "a.example.com"));
        assert!(!host_matches("*.example.com", "example.com"));
        assert!(!host_matches("*.example.com", "badexample.com"));
        assert!(host_matches("Example.com", "example.COM"));
    }

    #[test]
    fn default_asks_and_deny_wins() {
        let mut r = Review::default();
        r.coverage.complete = true;
        let p = Policy::default();
        assert!(matches!(
            p.decide(&r, &Facts::default(), None),
            Decision::Approved { .. }
        ));
        r.capabilities.hosts = vec!["api.example.com".into()];
        assert_eq!(
            p.decide(&r, &Facts::default(), None),
            Decision::NeedsApproval {
                findings: vec!["host api.example.com".into()]
            }
        );
        let p = Policy::parse("[hosts]\ndeny = [\"*.example.com\"]\n").unwrap_or_default();
        assert!(matches!(
            p.decide(&r, &Facts::default(), None),
            Decision::Denied { .. }
        ));
        let p = Policy::parse("[hosts]\nallow = [\"*.example.com\"]\n").unwrap_or_default();
        assert!(matches!(
            p.decide(&r, &Facts::default(), None),
            Decision::Approved { .. }
        ));
    }
}
