//! Where the effective fetch policy comes from: built-in defaults, then a TOML policy file
//! (`--fetch-policy FILE`), then `SKILLBOX_*` variables and flags (the command line reads both,
//! a flag winning over its variable); the standard proxy variables (`HTTPS_PROXY`,
//! `https_proxy`, `NO_PROXY`, `no_proxy`) come below all of those. Lists (allowed origins and
//! destinations) add up across the layers; single values are replaced by the later layer.
//!
//! The file is parsed strictly: an unknown key is refused with its line, as a typo in a
//! security policy must not be silently ignored. [`render`] prints the effective policy in the
//! file's own format (credentials redacted), so it can be checked and saved. This module never
//! fetches and never reads a CA file's contents (the TLS setup does).

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::policy::{AllowedOrigin, FetchPolicy};
use super::proxy::{NoProxy, Proxy, ProxyConfig};
use crate::extract::policy::parse_size;
use crate::index::IndexLimits;

/// Largest policy file read.
const MAX_POLICY_FILE: u64 = 64 * 1024;

/// A policy value that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    #[error("--fetch-policy {path}: {detail}")]
    File { path: String, detail: String },
    #[error("{what}: {detail}")]
    Value { what: String, detail: String },
}

/// The policy file. Every key is optional; unknown keys are an error.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyFile {
    #[serde(default)]
    pub allow_origins: Vec<String>,
    #[serde(default)]
    pub allow_destinations: Vec<String>,
    pub max_redirects: Option<u32>,
    pub connect_timeout: Option<Scalar>,
    pub total_timeout: Option<Scalar>,
    pub max_bytes: Option<Scalar>,
    pub max_index_bytes: Option<Scalar>,
    pub max_index_entries: Option<usize>,
    /// Relative paths are read against the policy file's directory.
    pub ca_file: Option<PathBuf>,
    /// `http://[USER:PASSWORD@]HOST[:PORT]`, or `direct` for none.
    pub proxy: Option<String>,
    pub no_proxy: Option<Vec<String>>,
}

/// A size or duration written as a number or as text (`"256M"`, `"500ms"`).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Scalar {
    Int(u64),
    Float(f64),
    Text(String),
}

impl Scalar {
    fn text(&self) -> String {
        match self {
            Self::Int(n) => n.to_string(),
            Self::Float(f) => f.to_string(),
            Self::Text(s) => s.clone(),
        }
    }
}

/// What the command line (flags and their `SKILLBOX_*` variables) sets; `None` keeps the
/// lower layer's value.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub allow_origins: Vec<String>,
    pub allow_destinations: Vec<SocketAddr>,
    pub max_redirects: Option<u32>,
    pub connect_timeout: Option<Duration>,
    pub total_timeout: Option<Duration>,
    pub max_bytes: Option<u64>,
    pub max_index_bytes: Option<u64>,
    pub max_index_entries: Option<usize>,
    pub ca_file: Option<PathBuf>,
    pub proxy: Option<String>,
    pub no_proxy: Option<String>,
}

/// The effective settings.
#[derive(Debug, Clone)]
pub struct FetchSettings {
    pub policy: FetchPolicy,
    pub index_limits: IndexLimits,
    /// `None`: the built-in roots.
    pub ca_file: Option<PathBuf>,
    /// Where the proxy setting came from, for `--print-policy`.
    pub proxy_source: &'static str,
}

/// The longest duration a setting takes (`connect_timeout`, `total_timeout`): a day
/// ([`super::policy::MAX_DURATION`]).
pub use super::policy::MAX_DURATION;

/// A duration: seconds (`10`, `2.5`, `10s`) or milliseconds (`500ms`), above 0, at most a day
/// ([`MAX_DURATION`]).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let (num, scale) = if let Some(ms) = t.strip_suffix("ms") {
        (ms, 0.001)
    } else {
        (t.strip_suffix('s').unwrap_or(t), 1.0)
    };
    let v: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a duration (seconds, or e.g. 500ms)"))?;
    let secs = v * scale;
    if !secs.is_finite() || secs <= 0.0 || secs > MAX_DURATION.as_secs_f64() {
        return Err(format!("{s:?}: give a duration above 0 and at most a day"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Read and parse a policy file (bounded; unknown keys refused with their line).
pub fn read_file(path: &Path) -> Result<PolicyFile, ConfigError> {
    let err = |detail: String| ConfigError::File {
        path: path.display().to_string(),
        detail,
    };
    let meta = std::fs::metadata(path).map_err(|e| err(e.to_string()))?;
    if meta.len() > MAX_POLICY_FILE {
        return Err(err(format!("larger than {MAX_POLICY_FILE} bytes")));
    }
    let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
    let mut file: PolicyFile = toml::from_str(&text).map_err(|e| {
        // The toml error carries a byte span; the line is what a person looks for.
        let line = e
            .span()
            .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
        let msg = e.message().trim().to_owned();
        err(match line {
            Some(l) => format!("line {l}: {msg}"),
            None => msg,
        })
    })?;
    if let Some(ca) = &file.ca_file
        && ca.is_relative()
    {
        file.ca_file = Some(path.parent().unwrap_or(Path::new(".")).join(ca));
    }
    Ok(file)
}

/// Build the effective settings. `env` reads the standard proxy variables (the process
/// environment in the CLI; a closure in tests).
pub fn build(
    file: Option<PolicyFile>,
    over: Overrides,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<FetchSettings, ConfigError> {
    let file = file.unwrap_or_default();
    let value = |what: &str, detail: String| ConfigError::Value {
        what: what.to_owned(),
        detail,
    };
    let mut policy = FetchPolicy::default();
    let mut index_limits = IndexLimits::default();
    for o in file.allow_origins.iter().chain(&over.allow_origins) {
        let origin = AllowedOrigin::parse(o).map_err(|e| value("allow-origin", e))?;
        if !policy.allowed_origins.contains(&origin) {
            policy.allowed_origins.push(origin);
        }
    }
    for d in &file.allow_destinations {
        let addr: SocketAddr = d
            .parse()
            .map_err(|e| value("allow_destinations", format!("{d:?}: {e} (give IP:PORT)")))?;
        policy.allowed_destinations.push(addr);
    }
    for d in over.allow_destinations {
        if !policy.allowed_destinations.contains(&d) {
            policy.allowed_destinations.push(d);
        }
    }
    let duration = |what: &str, s: &Scalar| parse_duration(&s.text()).map_err(|e| value(what, e));
    let size =
        |what: &str, s: &Scalar| parse_size(&s.text()).map_err(|e| value(what, e.to_string()));
    if let Some(n) = over.max_redirects.or(file.max_redirects) {
        policy.max_redirects = n;
    }
    if let Some(d) = over.connect_timeout {
        policy.connect_timeout = d;
    } else if let Some(s) = &file.connect_timeout {
        policy.connect_timeout = duration("connect_timeout", s)?;
    }
    if let Some(d) = over.total_timeout {
        policy.total_timeout = d;
    } else if let Some(s) = &file.total_timeout {
        policy.total_timeout = duration("total_timeout", s)?;
    }
    if let Some(n) = over.max_bytes {
        policy.max_artifact_bytes = n;
    } else if let Some(s) = &file.max_bytes {
        policy.max_artifact_bytes = size("max_bytes", s)?;
    }
    let index_bytes = match (over.max_index_bytes, &file.max_index_bytes) {
        (Some(n), _) => Some(n),
        (None, Some(s)) => Some(size("max_index_bytes", s)?),
        (None, None) => None,
    };
    if let Some(n) = index_bytes {
        policy.max_index_bytes = n;
        index_limits.max_bytes = n;
    }
    if let Some(n) = over.max_index_entries.or(file.max_index_entries) {
        index_limits.max_entries = n;
    }
    let ca_file = over.ca_file.or(file.ca_file);

    let (proxy_text, proxy_source) = if let Some(p) = over.proxy {
        (Some(p), "--proxy / SKILLBOX_PROXY")
    } else if let Some(p) = file.proxy {
        (Some(p), "the policy file")
    } else if let Some(p) = env("HTTPS_PROXY").filter(|p| !p.trim().is_empty()) {
        (Some(p), "HTTPS_PROXY")
    } else if let Some(p) = env("https_proxy").filter(|p| !p.trim().is_empty()) {
        (Some(p), "https_proxy")
    } else {
        (None, "none")
    };
    let proxy = match proxy_text.as_deref().map(str::trim) {
        None | Some("direct") => None,
        Some(p) => Some(Proxy::parse(p).map_err(|e| value("proxy", e))?),
    };
    let no_proxy = if let Some(n) = over.no_proxy {
        NoProxy::parse(&n)
    } else if let Some(list) = &file.no_proxy {
        NoProxy::from_entries(list.iter().map(String::as_str))
    } else if let Some(n) = env("NO_PROXY").or_else(|| env("no_proxy")) {
        NoProxy::parse(&n)
    } else {
        NoProxy::default()
    };
    policy.proxy = ProxyConfig { proxy, no_proxy };
    // The bound holds for the caller's own durations too (`Overrides` takes any `Duration`),
    // not only for text `parse_duration` read.
    policy
        .check_timeouts()
        .map_err(|(rule, detail)| value(rule.as_str(), detail))?;
    Ok(FetchSettings {
        policy,
        index_limits,
        ca_file,
        proxy_source,
    })
}

fn quoted(s: &str) -> String {
    // A JSON string is a valid TOML basic string for everything we print.
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

fn list<T: ToString>(items: &[T]) -> String {
    let parts: Vec<String> = items.iter().map(|i| quoted(&i.to_string())).collect();
    format!("[{}]", parts.join(", "))
}

/// The effective policy as a policy file (proxy credentials redacted).
pub fn render(s: &FetchSettings) -> String {
    let p = &s.policy;
    let mut out = String::from(
        "# effective fetch policy: defaults < --fetch-policy FILE < SKILLBOX_* and flags\n",
    );
    if let Some(o) = &p.index_origin {
        let _ = writeln!(out, "# index origin (from INDEX_URL, allowed): {o}");
    }
    let _ = writeln!(out, "allow_origins = {}", list(&p.allowed_origins));
    let _ = writeln!(
        out,
        "allow_destinations = {}",
        list(&p.allowed_destinations)
    );
    let _ = writeln!(out, "max_redirects = {}", p.max_redirects);
    let _ = writeln!(
        out,
        "connect_timeout = {}",
        quoted(&secs(p.connect_timeout))
    );
    let _ = writeln!(out, "total_timeout = {}", quoted(&secs(p.total_timeout)));
    let _ = writeln!(out, "max_bytes = {}", p.max_artifact_bytes);
    let _ = writeln!(out, "max_index_bytes = {}", s.index_limits.max_bytes);
    let _ = writeln!(out, "max_index_entries = {}", s.index_limits.max_entries);
    match &s.ca_file {
        Some(c) => {
            let _ = writeln!(out, "ca_file = {}", quoted(&c.display().to_string()));
        }
        None => out.push_str("# ca_file: none, the built-in webpki roots\n"),
    }
    match &p.proxy.proxy {
        Some(px) => {
            let _ = writeln!(
                out,
                "proxy = {}  # from {}",
                quoted(px.shown().as_str()),
                s.proxy_source
            );
        }
        None => out.push_str("proxy = \"direct\"\n"),
    }
    let _ = writeln!(out, "no_proxy = {}", list(p.proxy.no_proxy.entries()));
    out
}

fn secs(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &str) -> Result<PolicyFile, ConfigError> {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let p = dir.path().join("p.toml");
        std::fs::write(&p, text).unwrap_or_else(|e| panic!("{e}"));
        read_file(&p)
    }

    #[test]
    fn durations() {
        assert_eq!(
            parse_duration("500ms").ok(),
            Some(Duration::from_millis(500))
        );
        assert_eq!(parse_duration("2").ok(), Some(Duration::from_secs(2)));
        assert!(parse_duration("0").is_err());
        assert!(parse_duration("-1").is_err());
    }

    #[test]
    fn timeouts_over_a_day_are_refused_whoever_sets_them() {
        let env = |_: &str| None;
        for (connect, total, what) in [
            (
                None,
                Some(MAX_DURATION + Duration::from_secs(1)),
                "total_timeout",
            ),
            (None, Some(Duration::from_secs(7 * 86_400)), "total_timeout"),
            (None, Some(Duration::ZERO), "total_timeout"),
            (Some(Duration::MAX), None, "connect_timeout"),
        ] {
            let over = Overrides {
                connect_timeout: connect,
                total_timeout: total,
                ..Overrides::default()
            };
            match build(None, over, &env) {
                Err(ConfigError::Value { what: w, detail }) => {
                    assert_eq!(w, what);
                    assert!(detail.contains("at most a day"), "{detail}");
                }
                other => panic!("{what} {connect:?} {total:?}: {other:?}"),
            }
        }
        // A day itself is allowed.
        let over = Overrides {
            total_timeout: Some(MAX_DURATION),
            connect_timeout: Some(MAX_DURATION),
            ..Overrides::default()
        };
        let s = build(None, over, &env).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.policy.total_timeout, MAX_DURATION);
        // The policy file's values go through the same check (its text is parsed first).
        let f = file("total_timeout = 86401\n").unwrap_or_else(|e| panic!("{e}"));
        assert!(build(Some(f), Overrides::default(), &env).is_err());
    }

    #[test]
    fn unknown_keys_are_refused_with_their_line() {
        let e = file("max_redirects = 2\n\nmax_redirect = 3\n").err();
        let msg = e.map(|e| e.to_string()).unwrap_or_default();
        assert!(msg.contains("line 3"), "{msg}");
        assert!(msg.contains("max_redirect"), "{msg}");
    }

    #[test]
    fn layers_apply_in_order() {
        let f = file(
            "allow_origins = [\"https://a.example\"]\nmax_redirects = 2\nmax_bytes = \"1K\"\nconnect_timeout = 3\nproxy = \"http://u:pw-MARK@p.example:3128\"\nno_proxy = [\"in.example\"]\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let over = Overrides {
            allow_origins: vec!["https://b.example".into()],
            max_redirects: Some(7),
            ..Overrides::default()
        };
        let env = |k: &str| (k == "HTTPS_PROXY").then(|| "http://envproxy:1".to_owned());
        let s = build(Some(f), over, &env).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.policy.allowed_origins.len(), 2);
        assert_eq!(s.policy.max_redirects, 7);
        assert_eq!(s.policy.max_artifact_bytes, 1024);
        assert_eq!(s.policy.connect_timeout, Duration::from_secs(3));
        assert_eq!(s.proxy_source, "the policy file");
        let shown = render(&s);
        assert!(!shown.contains("pw-MARK"), "{shown}");
        assert!(shown.contains("http://***@p.example:3128/"), "{shown}");
        // The rendered policy is itself a valid policy file.
        let again: PolicyFile = toml::from_str(&shown).unwrap_or_else(|e| panic!("{e}\n{shown}"));
        assert_eq!(again.max_redirects, Some(7));
        let s = build(None, Overrides::default(), &env).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.proxy_source, "HTTPS_PROXY");
        let over = Overrides {
            proxy: Some("direct".into()),
            ..Overrides::default()
        };
        let s = build(None, over, &env).unwrap_or_else(|e| panic!("{e}"));
        assert!(s.policy.proxy.proxy.is_none());
    }
}
