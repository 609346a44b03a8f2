//! The install policy: rules over a review's capabilities that give each package one
//! decision, `approved` (by which rule), `needs_approval` (which findings) or `denied` (which
//! rule).
//!
//! A policy is a TOML file; an unknown key is refused with its line. Without one the built-in
//! default applies: nothing a package asks for (a tool, a host, a script, an executable, a
//! download, an upload, a credential, a risky command, a cross-origin artifact, a name that
//! differs from the index, an incomplete review) is granted without a person, and a
//! content-only update of an approved version is approved.
//!
//! Every capability the review reports, and so every growth `diff` counts (tools, hosts,
//! scripts, executables, downloads, uploads, credentials, risky commands, an incomplete
//! review), has a rule here: a capability without one would be approved silently. What the
//! review reports but this module deliberately never decides on is listed in
//! docs/lifecycle.md (descriptions, prose and data mentions, frontmatter rule findings, links).
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
    /// Sending local data out (`curl -F file=@x`, object-storage uploads, `npm publish`, ...).
    pub uploads: Action,
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
            uploads: Action::Ask,
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
    /// `allowed-tools` entries. `deny` compares base names (`Bash` denies `Bash(curl:*)`; a
    /// scope in a deny entry does not narrow it) as patterns (`*`, an MCP server alone is all
    /// its tools: `deny_covers`); `allow` is exact.
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
        let mut p: Policy = toml::from_str(text).map_err(|e| {
            let line = e
                .span()
                .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
            match line {
                Some(l) => format!("line {l}: {}", e.message()),
                None => e.message().to_owned(),
            }
        })?;
        for o in &mut p.origins.allow {
            // An origin is a URL someone typed into this file: the program's rules for typed
            // URLs (`urls::parse_typed`: strict syntax, and `https://u:123/pw@h` refused, a
            // password cut short by a `/`), and no user information (an origin has none, and a
            // password here is a secret in a policy file). Every message shows the text masked
            // (`***` where user information may be), never the password.
            let shown = crate::urls::redact_refused(o);
            let url = crate::urls::parse_typed(o)
                .map_err(|e| format!("origins.allow: {shown:?}: {e}"))?;
            if !o.starts_with("https://") {
                return Err(format!(
                    "origins.allow: {shown:?} is not an https:// origin"
                ));
            }
            if !url.username().is_empty() || url.password().is_some() {
                return Err(format!(
                    "origins.allow: {shown:?} has user information (USER:PASSWORD@); an origin is https://HOST[:PORT]"
                ));
            }
            // A path, query or fragment would never match an origin: refused rather than kept
            // as an entry that silently allows nothing.
            if url.path() != "/" || url.query().is_some() || url.fragment().is_some() {
                return Err(format!(
                    "origins.allow: {shown:?} has a path, query or fragment; an origin is https://HOST[:PORT]"
                ));
            }
            // Kept as the parser serializes the origin (host lowercased, IDNA, the default port
            // dropped), the form the artifact's origin is compared in: `https://Skills.Example.com:443`
            // matches `https://skills.example.com`.
            *o = url.origin().ascii_serialization();
        }
        Ok(p)
    }

    /// Decide for a package with `review`, from `facts`, given `diff` against the approved
    /// version it updates (none for a first install).
    pub fn decide(&self, review: &Review, facts: &Facts, diff: Option<&Diff>) -> Decision {
        // Two kinds of asks: about what the package's bytes ask to do (its capabilities), and
        // about where it came from (origin, cross-origin, a name other than the index's). A
        // content-only update approved by `updates.content_only` settles the first (no
        // capability grew since a version already decided on), never the second: an update
        // from another origin, or naming itself otherwise, is a new fact no diff of its content
        // can clear.
        let mut ask: Vec<String> = Vec::new();
        let mut provenance_ask: Vec<String> = Vec::new();
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
            // A deny names a tool by its base name, so a scope the package writes
            // (`Bash(curl:*)`) cannot slip past `deny = ["Bash"]`; an allow is exact, so it
            // never grants more than the string it lists.
            if let Some(d) = self.tools.deny.iter().find(|d| deny_covers(d, t)) {
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
        let lists: [(&[String], Action, &str, &str); 4] = [
            (
                &caps.downloads,
                c.downloads,
                "capabilities.downloads",
                "download",
            ),
            (&caps.uploads, c.uploads, "capabilities.uploads", "upload"),
            (
                &caps.credentials,
                c.credentials,
                "capabilities.credentials",
                "credential",
            ),
            (
                &caps.risky_commands,
                c.risky_commands,
                "capabilities.risky_commands",
                "risky command",
            ),
        ];
        for (list, action, rule, what) in lists {
            for d in list {
                note(action, rule, format!("{what} {d}"), &mut ask);
            }
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
                &mut provenance_ask,
            );
        }
        if facts.cross_origin {
            note(
                c.cross_origin,
                "capabilities.cross_origin",
                "artifact from another origin than the index".into(),
                &mut provenance_ask,
            );
        }
        if let Some(o) = &facts.origin {
            if self.origins.allow.iter().any(|a| a == o) {
                allowed_by.push("origins.allow");
            } else {
                note(
                    self.origins.other,
                    "origins.other",
                    format!("origin {o}"),
                    &mut provenance_ask,
                );
            }
        }
        if let Some(rule) = deny {
            return Decision::Denied { rule };
        }
        let needs = |mut findings: Vec<String>| {
            findings.sort();
            findings.dedup();
            Decision::NeedsApproval { findings }
        };
        if let Some(d) = diff {
            if d.change == Change::ContentOnly && self.updates.content_only == Action::Deny {
                return Decision::Denied {
                    rule: "updates.content_only = \"deny\"".into(),
                };
            }
            if d.change == Change::ContentOnly && self.updates.content_only == Action::Allow {
                if !provenance_ask.is_empty() {
                    return needs(provenance_ask);
                }
                return Decision::Approved {
                    rule: "updates.content_only = \"allow\" (no capability grew since the approved version)".into(),
                };
            }
            // "ask" means a person decides every such update, even one whose package asks for
            // nothing the rules below would hold back.
            if d.change == Change::ContentOnly && self.updates.content_only == Action::Ask {
                ask.push("content-only update (updates.content_only = \"ask\")".into());
            }
        }
        ask.append(&mut provenance_ask);
        if !ask.is_empty() {
            return needs(ask);
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

/// The name a `tools.deny` entry and a requested tool are compared by: the part before any
/// scope `(...)`, trimmed and case-folded (`Bash(curl:*)` and `bash` both give `bash`).
fn tool_base(tool: &str) -> String {
    tool.split('(')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase()
}

/// Whether deny entry `deny` refuses requested tool `tool`: when their base names
/// ([`tool_base`]) name a tool in common. A name is a pattern as agents read it: `*` matches
/// any run of characters, and an MCP server alone (`mcp__github`) means every tool of that
/// server (`mcp__github__*`). So `deny = ["mcp__github__delete_repo"]` refuses a package that
/// asks for `mcp__github` or `mcp__*` (which grant that tool too), and `deny = ["mcp__github"]`
/// refuses `mcp__github__create_issue`.
fn deny_covers(deny: &str, tool: &str) -> bool {
    let (d, t) = (as_pattern(&tool_base(deny)), as_pattern(&tool_base(tool)));
    d == t || patterns_overlap(d.as_bytes(), t.as_bytes())
}

/// A base name as the pattern it stands for: `mcp__server` is `mcp__server__*`.
fn as_pattern(base: &str) -> String {
    match base.strip_prefix("mcp__") {
        Some(server) if !server.is_empty() && !server.contains("__") && !server.contains('*') => {
            format!("{base}__*")
        }
        _ => base.to_owned(),
    }
}

/// Whether some name matches both `*`-patterns `a` and `b`. Linear in the product of their
/// lengths (memoised walk); names are short.
fn patterns_overlap(a: &[u8], b: &[u8]) -> bool {
    let mut seen = std::collections::HashSet::new();
    let mut todo = vec![(0usize, 0usize)];
    while let Some((i, j)) = todo.pop() {
        if !seen.insert((i, j)) {
            continue;
        }
        match (a.get(i), b.get(j)) {
            (None, None) => return true,
            (Some(b'*'), _) => {
                todo.push((i + 1, j));
                if j < b.len() {
                    todo.push((i, j + 1));
                }
            }
            (_, Some(b'*')) => {
                todo.push((i, j + 1));
                if i < a.len() {
                    todo.push((i + 1, j));
                }
            }
            (Some(x), Some(y)) if x == y => todo.push((i + 1, j + 1)),
            _ => {}
        }
    }
    false
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

    /// An origin is a typed URL: with user information, or a password cut short by a `/`, `?`
    /// or `#` (`urls::check_typed`), it is refused, and the message never holds the password.
    /// (Before: the first two were accepted, an origin no artifact ever matches, holding a
    /// password; the last was refused quoting it whole.)
    #[test]
    fn an_origin_with_user_information_is_refused_masked() {
        for (origin, why) in [
            ("https://u:MARKER@skills.example.com", "user information"),
            (
                "https://u:123/MARKER@skills.example.com",
                "USER:PASSWORD@HOST",
            ),
            (
                "https://u:1?MARKER@skills.example.com",
                "USER:PASSWORD@HOST",
            ),
            ("https://MARKER@skills.example.com", "user information"),
            (
                "http://u:MARKER@skills.example.com",
                "not an https:// origin",
            ),
            ("https:u:MARKER@skills.example.com", "exactly"),
        ] {
            let e = Policy::parse(&format!("[origins]\nallow = [\"{origin}\"]\n"))
                .err()
                .unwrap_or_else(|| panic!("{origin} accepted"));
            assert!(!e.contains("MARKER"), "{origin}: {e}");
            assert!(
                e.contains(why) && e.contains("***@skills.example.com"),
                "{origin}: {e}"
            );
        }
        assert!(
            Policy::parse("[origins]\nallow = [\"https://skills.example.com:8443/\"]\n").is_ok()
        );
    }

    /// An origin matches however it is spelled in the policy: case, IDNA and the default port
    /// are the parser's (before: `https://Skills.example.com` and `...:443` never matched, and
    /// with `other = "deny"` every artifact from the allowed origin was denied); a path is
    /// refused (before: kept, an entry that matched nothing).
    #[test]
    fn an_origin_matches_however_it_is_spelled() {
        let facts = Facts {
            origin: Some("https://skills.example.com".into()),
            cross_origin: false,
        };
        for spelled in [
            "https://skills.example.com",
            "https://Skills.Example.COM/",
            "https://skills.example.com:443",
        ] {
            let p = policy(&format!(
                "[origins]\nallow = [\"{spelled}\"]\nother = \"deny\"\n"
            ));
            assert!(
                matches!(p.decide(&quiet(), &facts, None), Decision::Approved { .. }),
                "{spelled}"
            );
        }
        let other_port =
            policy("[origins]\nallow = [\"https://skills.example.com:8443\"]\nother = \"deny\"\n");
        assert!(matches!(
            other_port.decide(&quiet(), &facts, None),
            Decision::Denied { rule } if rule.starts_with("origins.other")
        ));
        for bad in [
            "https://skills.example.com/skills",
            "https://skills.example.com/?a",
        ] {
            let e = Policy::parse(&format!("[origins]\nallow = [\"{bad}\"]\n"))
                .err()
                .unwrap_or_else(|| panic!("{bad} accepted"));
            assert!(e.contains("path, query or fragment"), "{bad}: {e}");
        }
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

    /// A review that asks for nothing, read in full.
    fn quiet() -> Review {
        let mut r = Review::default();
        r.coverage.complete = true;
        r
    }

    fn content_only() -> Diff {
        Diff {
            change: Change::ContentOnly,
            old_digest: None,
            new_digest: None,
            grown: Vec::new(),
            dropped: Vec::new(),
            files: Default::default(),
            frontmatter_changed: Vec::new(),
        }
    }

    fn policy(text: &str) -> Policy {
        Policy::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    #[test]
    fn uploads_are_decided_like_every_other_capability() {
        let mut r = quiet();
        r.capabilities.uploads = vec!["object storage upload".into()];
        assert_eq!(
            Policy::default().decide(&r, &Facts::default(), None),
            Decision::NeedsApproval {
                findings: vec!["upload object storage upload".into()]
            }
        );
        assert_eq!(
            policy("[capabilities]\nuploads = \"deny\"\n").decide(&r, &Facts::default(), None),
            Decision::Denied {
                rule: "capabilities.uploads = \"deny\" (upload object storage upload)".into()
            }
        );
        assert!(matches!(
            policy("[capabilities]\nuploads = \"allow\"\n").decide(&r, &Facts::default(), None),
            Decision::Approved { .. }
        ));
    }

    #[test]
    fn a_content_only_update_asks_a_person_when_the_policy_says_ask() {
        let d = content_only();
        let ask = policy("[updates]\ncontent_only = \"ask\"\n");
        assert_eq!(
            ask.decide(&quiet(), &Facts::default(), Some(&d)),
            Decision::NeedsApproval {
                findings: vec!["content-only update (updates.content_only = \"ask\")".into()]
            }
        );
        // A first install is no update: nothing to ask about.
        assert!(matches!(
            ask.decide(&quiet(), &Facts::default(), None),
            Decision::Approved { .. }
        ));
        assert!(matches!(
            Policy::default().decide(&quiet(), &Facts::default(), Some(&d)),
            Decision::Approved { rule } if rule.starts_with("updates.content_only")
        ));
    }

    #[test]
    fn a_content_only_update_still_asks_about_where_it_came_from() {
        let d = content_only();
        let strict =
            policy("[origins]\nallow = [\"https://skills.example.com\"]\nother = \"ask\"\n");
        // A capability the approved version already had needs no new decision...
        let mut r = quiet();
        r.capabilities.hosts = vec!["api.example.net".into()];
        let home = Facts {
            origin: Some("https://skills.example.com".into()),
            cross_origin: false,
        };
        assert!(matches!(
            strict.decide(&r, &home, Some(&d)),
            Decision::Approved { rule } if rule.starts_with("updates.content_only")
        ));
        // ...but an origin the policy asks about does, and only it is listed.
        let moved = Facts {
            origin: Some("https://mirror.example.org".into()),
            cross_origin: true,
        };
        assert_eq!(
            strict.decide(&r, &moved, Some(&d)),
            Decision::NeedsApproval {
                findings: vec![
                    "artifact from another origin than the index".into(),
                    "origin https://mirror.example.org".into(),
                ]
            }
        );
        // A name other than the index's, under the default policy.
        let mut r = quiet();
        r.flags = vec![crate::skill::review::ReviewFlag::NameMismatch];
        assert_eq!(
            Policy::default().decide(&r, &Facts::default(), Some(&d)),
            Decision::NeedsApproval {
                findings: vec!["SKILL.md name differs from the index".into()]
            }
        );
        // A provenance deny still wins over the content-only rule.
        let closed =
            policy("[origins]\nallow = [\"https://skills.example.com\"]\nother = \"deny\"\n");
        assert!(matches!(
            closed.decide(&quiet(), &moved, Some(&d)),
            Decision::Denied { rule } if rule.starts_with("origins.other")
        ));
    }

    #[test]
    fn a_tool_deny_matches_every_scope_and_an_allow_only_its_own_string() {
        let mut r = quiet();
        r.tools = vec!["Read".into(), "Bash(curl:*)".into()];
        let p = policy("[tools]\ndeny = [\"Bash\"]\nother = \"allow\"\n");
        assert_eq!(
            p.decide(&r, &Facts::default(), None),
            Decision::Denied {
                rule: "tools.deny \"Bash\" = \"deny\" (tool Bash(curl:*))".into()
            }
        );
        // Case and a scope in the deny entry do not narrow it either.
        for deny in ["bash", "Bash(git status:*)", " BASH "] {
            let p = policy(&format!("[tools]\ndeny = [{deny:?}]\nother = \"allow\"\n"));
            for tool in ["Bash", "Bash(curl:*)", "bash(rm -rf:*)"] {
                let mut r = quiet();
                r.tools = vec![tool.into()];
                assert!(
                    matches!(
                        p.decide(&r, &Facts::default(), None),
                        Decision::Denied { .. }
                    ),
                    "deny {deny:?} lets {tool:?} through"
                );
            }
        }
        // An allow of the bare name grants the bare tool only.
        let p = policy("[tools]\nallow = [\"Read\", \"Bash\"]\nother = \"ask\"\n");
        assert_eq!(
            p.decide(&r, &Facts::default(), None),
            Decision::NeedsApproval {
                findings: vec!["tool Bash(curl:*)".into()]
            }
        );
        r.tools = vec!["Read".into(), "Bash".into()];
        assert_eq!(
            p.decide(&r, &Facts::default(), None),
            Decision::Approved {
                rule: "everything it asks for is allowed (tools.allow)".into()
            }
        );
    }
}
