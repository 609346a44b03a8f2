//! The `skillbox index check` and `skillbox fetch` commands: flags to a [`FetchPolicy`], the
//! pipeline, the printed answer and the exit code. `main.rs` only dispatches here.
//!
//! Exit codes extend `extract`'s: 0 accepted (or index processed), 3 rejected, 1 operational
//! error, 2 usage error, plus [`EXIT_REFUSED`] (a fetch-policy rule fired) and
//! [`EXIT_SCHEMA`] (unrecognised `$schema`).

use std::fs::File;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, Subcommand};
use serde_json::{Value, json};
use url::Url;

use super::acquire::{self, AcquireError, Provenance};
use super::cache::Cache;
use super::client::{Client, Download};
use super::policy::{AllowedOrigin, FetchPolicy};
use super::tls::Trust;
use super::{FetchError, urls};
use crate::answer::{self, Staged};
use crate::extract::inventory::{ArtifactFacts, Outcome, Totals};
use crate::extract::policy::{Limits, parse_size};
use crate::extract::{ArtifactType, Request};
use crate::index::{self, EntryType, Index, IndexError, IndexLimits};
use crate::out_dir::Staging;
use crate::reason::{Reason, ReasonCode, Verdict};
use crate::sandbox::{Confined, SandboxReport};

pub const EXIT_ACCEPTED: u8 = 0;
pub const EXIT_OPERATIONAL: u8 = 1;
pub const EXIT_USAGE: u8 = 2;
pub const EXIT_REJECTED: u8 = 3;
/// A fetch-policy rule refused the request; the message names the rule.
pub const EXIT_REFUSED: u8 = 4;
/// The index's `$schema` is not one this version processes.
pub const EXIT_SCHEMA: u8 = 5;

/// The extraction step, supplied by the CLI: the same (confined) path `skillbox extract` uses,
/// answering with the outcome and how it was confined.
pub type Engine<'a> = &'a dyn Fn(&File, BorrowedFd<'_>, &Request) -> Result<Confined, String>;

/// Fetch policy flags, shared by `index check URL` and `fetch`.
#[derive(Args, Debug, Clone)]
pub struct PolicyArgs {
    /// Allow fetching from this origin (repeatable). The allow-list starts empty: the index's
    /// origin and every artifact origin (each redirect hop too) must be listed.
    #[arg(long = "allow-origin", value_name = "https://HOST[:PORT]")]
    allow_origin: Vec<String>,
    /// FOR TESTS AND LOCAL DEVELOPMENT ONLY: exempt exactly this address and port from the
    /// destination rules (loopback, private, link-local, ...). Repeatable.
    #[arg(long = "allow-destination", value_name = "IP:PORT")]
    allow_destination: Vec<SocketAddr>,
    /// Most redirects followed [default: 5].
    #[arg(long, value_name = "N")]
    max_redirects: Option<u32>,
    /// Name resolution plus TCP connect bound, e.g. `10`, `2.5`, `500ms` [default: 10s].
    #[arg(long, value_parser = parse_duration, value_name = "SECONDS")]
    connect_timeout: Option<Duration>,
    /// Bound on one whole download, redirects included [default: 60s].
    #[arg(long, value_parser = parse_duration, value_name = "SECONDS")]
    total_timeout: Option<Duration>,
    /// Largest artifact body (K, M, G suffixes) [default: 256M].
    #[arg(long, value_parser = parse_size, value_name = "BYTES")]
    max_bytes: Option<u64>,
    /// Largest index body [default: 1M].
    #[arg(long, value_parser = parse_size, value_name = "BYTES")]
    max_index_bytes: Option<u64>,
    /// Most entries in an index [default: 1000].
    #[arg(long, value_name = "N")]
    max_index_entries: Option<usize>,
    /// Trust exactly the CA certificates in this PEM file instead of the built-in roots.
    #[arg(long, value_name = "PEM")]
    ca_file: Option<PathBuf>,
}

/// `skillbox index ...`
#[derive(Args, Debug)]
pub struct IndexArgs {
    #[command(subcommand)]
    command: IndexCommand,
}

#[derive(Subcommand, Debug)]
enum IndexCommand {
    /// Parse and validate a discovery index from a file or an https URL.
    ///
    /// Exit status: 0 processed (skipped entries are reported), 5 unrecognised $schema,
    /// 3 not an index (not JSON, over a limit), 4 refused by fetch policy, 1 operational, 2 usage.
    Check(CheckArgs),
}

#[derive(Args, Debug)]
struct CheckArgs {
    /// A local index.json, or an https:// URL to fetch it from.
    source: String,
    /// For a file: the URL it was published at, to resolve relative entry URLs against.
    #[arg(long, value_name = "URL")]
    base: Option<String>,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    policy: PolicyArgs,
}

/// `skillbox fetch INDEX_URL SKILL_NAME`
#[derive(Args, Debug)]
pub struct FetchArgs {
    /// The discovery index URL (https://HOST/.well-known/agent-skills/index.json).
    index_url: String,
    /// The skill to fetch, as the index names it.
    skill_name: String,
    /// Directory to stage into; must not exist yet. Without it a temporary directory is used
    /// and removed afterwards.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Print one JSON object (`extraction` as `extract --json` prints it, plus `provenance`).
    #[arg(long)]
    json: bool,
    /// Use only the cache: the last index fetched from INDEX_URL and the artifact by digest.
    #[arg(long)]
    offline: bool,
    /// Cache directory [default: $XDG_CACHE_HOME/skillbox or ~/.cache/skillbox].
    #[arg(long, value_name = "DIR")]
    cache_dir: Option<PathBuf>,
    /// Extraction limits file (as for `extract --limits`).
    #[arg(long, value_name = "FILE")]
    limits: Option<PathBuf>,
    #[command(flatten)]
    policy: PolicyArgs,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
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
    if !secs.is_finite() || secs <= 0.0 || secs > 86_400.0 {
        return Err(format!("{s:?}: give a duration above 0 and at most a day"));
    }
    Ok(Duration::from_secs_f64(secs))
}

fn print_error(message: &str) {
    eprintln!("skillbox: {message}");
}

/// A fetch client and index limits built from [`PolicyArgs`].
pub struct Setup {
    pub client: Client,
    pub index_limits: IndexLimits,
}

/// Build the fetch client the flags describe; `Err((exit code, message))` on a bad flag.
pub fn setup(p: &PolicyArgs) -> Result<Setup, (u8, String)> {
    let mut policy = FetchPolicy::default();
    let mut index_limits = IndexLimits::default();
    for o in &p.allow_origin {
        policy.allowed_origins.push(
            AllowedOrigin::parse(o).map_err(|e| (EXIT_USAGE, format!("--allow-origin {e}")))?,
        );
    }
    policy.allowed_destinations.clone_from(&p.allow_destination);
    if let Some(n) = p.max_redirects {
        policy.max_redirects = n;
    }
    if let Some(d) = p.connect_timeout {
        policy.connect_timeout = d;
    }
    if let Some(d) = p.total_timeout {
        policy.total_timeout = d;
    }
    if let Some(n) = p.max_bytes {
        policy.max_artifact_bytes = n;
    }
    if let Some(n) = p.max_index_bytes {
        policy.max_index_bytes = n;
        index_limits.max_bytes = n;
    }
    if let Some(n) = p.max_index_entries {
        index_limits.max_entries = n;
    }
    let trust = match &p.ca_file {
        Some(path) => Trust::from_ca_file(path).map_err(|e| (EXIT_USAGE, e.to_string()))?,
        None => Trust::WebPki,
    };
    let tls = trust
        .client_config()
        .map_err(|e| (EXIT_USAGE, e.to_string()))?;
    Ok(Setup {
        client: Client::new(policy, tls),
        index_limits,
    })
}

fn fetch_exit(e: &FetchError) -> u8 {
    match e {
        FetchError::Refused(_) => EXIT_REFUSED,
        FetchError::Dns { .. }
        | FetchError::Connect { .. }
        | FetchError::Tls(_)
        | FetchError::Http(_)
        | FetchError::Status { .. }
        | FetchError::Sink(_) => EXIT_OPERATIONAL,
    }
}

fn index_exit(e: &IndexError) -> u8 {
    match e {
        IndexError::UnrecognisedSchema { .. } => EXIT_SCHEMA,
        IndexError::TooLarge { .. }
        | IndexError::TooManyEntries { .. }
        | IndexError::NotJson(_)
        | IndexError::NotAnIndex => EXIT_REJECTED,
    }
}

fn acquire_exit(e: &AcquireError) -> u8 {
    match e {
        AcquireError::Fetch(f) => fetch_exit(f),
        AcquireError::Index(i) => index_exit(i),
        AcquireError::NotListed { .. } => EXIT_USAGE,
        AcquireError::EntrySkipped(_)
        | AcquireError::NotInstallable { .. }
        | AcquireError::Unresolved { .. }
        | AcquireError::DigestMismatch { .. } => EXIT_REJECTED,
        AcquireError::Offline(_) | AcquireError::Cache(_) => EXIT_OPERATIONAL,
    }
}

/// The JSON object describing a failure: a policy refusal names its rule and the way out.
fn error_json(e: &AcquireError) -> Value {
    match e {
        AcquireError::Fetch(FetchError::Refused(r)) => json!({
            "kind": "refused",
            "rule": r.rule.as_str(),
            "detail": r.detail,
            "url": r.url,
            "hint": r.rule.hint(),
        }),
        AcquireError::Index(IndexError::UnrecognisedSchema { found }) => {
            json!({ "kind": "unrecognised_schema", "schema": found, "detail": e.to_string() })
        }
        other => json!({ "kind": kind(other), "detail": other.to_string() }),
    }
}

fn kind(e: &AcquireError) -> &'static str {
    match e {
        AcquireError::Fetch(_) => "fetch",
        AcquireError::Index(_) => "index",
        AcquireError::NotListed { .. } => "not_listed",
        AcquireError::EntrySkipped(_) => "entry_skipped",
        AcquireError::NotInstallable { .. } => "not_installable",
        AcquireError::Unresolved { .. } => "unresolved_url",
        AcquireError::DigestMismatch { .. } => "digest_mismatch",
        AcquireError::Offline(_) => "offline",
        AcquireError::Cache(_) => "cache",
    }
}

fn describe_error(e: &AcquireError) -> String {
    match e {
        AcquireError::Fetch(FetchError::Refused(r)) => {
            let mut s = r.to_string();
            if let Some(u) = &r.url {
                s.push_str(&format!("\n  url:  {u}"));
            }
            if let Some(h) = r.rule.hint() {
                s.push_str(&format!("\n  hint: {h}"));
            }
            s
        }
        other => other.to_string(),
    }
}

/// Print a failure on stderr; an unrecognised `$schema` is a warning plus a refusal.
fn report(e: &AcquireError) {
    if matches!(
        e,
        AcquireError::Index(IndexError::UnrecognisedSchema { .. })
    ) {
        eprintln!("skillbox: warning: {e}");
    } else {
        print_error(&describe_error(e));
    }
}

// ---------------------------------------------------------------- index check

/// Run `skillbox index ...`; returns the exit code.
pub fn run_index(args: IndexArgs) -> u8 {
    match args.command {
        IndexCommand::Check(a) => index_check(a),
    }
}

fn index_check(a: CheckArgs) -> u8 {
    let setup = match setup(&a.policy) {
        Ok(s) => s,
        Err((code, m)) => {
            print_error(&m);
            return code;
        }
    };
    let mut prov = Provenance::default();
    let result = if a.source.contains("://") {
        let url = match urls::parse_absolute(&a.source) {
            Ok(u) => u,
            Err(e) => {
                print_error(&format!("{}: {e}", a.source));
                return EXIT_USAGE;
            }
        };
        prov.index_url = url.to_string();
        acquire::load_index(
            &setup.client,
            None,
            &url,
            &setup.index_limits,
            false,
            &mut prov,
        )
    } else {
        let base = match a.base.as_deref().map(urls::parse_absolute).transpose() {
            Ok(b) => b,
            Err(e) => {
                print_error(&format!("--base: {e}"));
                return EXIT_USAGE;
            }
        };
        prov.index_url = a.source.clone();
        match read_file_bounded(Path::new(&a.source), setup.index_limits.max_bytes) {
            Ok(bytes) => {
                index::parse(&bytes, base.as_ref(), &setup.index_limits).map_err(AcquireError::from)
            }
            Err(m) => {
                print_error(&m);
                return EXIT_OPERATIONAL;
            }
        }
    };
    match result {
        Ok(index) => {
            if a.json {
                let v = json!({ "index": index_json(&index), "source": prov.index_url, "download": prov.index_download });
                println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
            } else {
                print_index(&index, &prov.index_url);
            }
            for w in &index.warnings {
                eprintln!("skillbox: warning: {w}");
            }
            EXIT_ACCEPTED
        }
        Err(e) => {
            if a.json {
                let v = json!({ "error": error_json(&e), "source": prov.index_url, "download": prov.index_download });
                println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
            }
            report(&e);
            acquire_exit(&e)
        }
    }
}

fn read_file_bounded(path: &Path, max: u64) -> Result<Vec<u8>, String> {
    let file = File::open(path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    let mut bytes = Vec::new();
    file.take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    Ok(bytes)
}

fn index_json(index: &Index) -> Value {
    let mut v = serde_json::to_value(index).unwrap_or(Value::Null);
    if let Some(entries) = v.get_mut("entries").and_then(Value::as_array_mut) {
        for (e, raw) in entries.iter_mut().zip(&index.entries) {
            if let Some(obj) = e.as_object_mut() {
                obj.insert(
                    "fetchable".into(),
                    json!(
                        index.installable && raw.url.as_ref().is_some_and(|u| u.resolved.is_some())
                    ),
                );
            }
        }
    }
    v
}

fn print_index(index: &Index, source: &str) {
    let version = match index.version {
        index::Version::V0_2_0 => "0.2.0",
        index::Version::V0_1_0 => "0.1.0 (no $schema; compatibility path, not installable)",
    };
    println!("index  {source}");
    println!("format {version}");
    if index.entries.is_empty() {
        println!("(no valid entries)");
    } else {
        println!("{:<24} {:<9} {:<20} URL", "NAME", "TYPE", "DIGEST");
    }
    for e in &index.entries {
        let ty = e.artifact_type.map(EntryType::as_str).unwrap_or("-");
        let digest = e
            .digest
            .map(|d| format!("{}…", &d.to_string()[..19]))
            .unwrap_or_else(|| "-".into());
        let url = match &e.url {
            None => "-".to_owned(),
            Some(u) => {
                let target = u
                    .resolved
                    .as_ref()
                    .map(Url::to_string)
                    .unwrap_or_else(|| format!("{} (unresolved: no base)", u.as_listed));
                let cross = if u.cross_origin {
                    ", CROSS-ORIGIN: must be allowed on its own"
                } else {
                    ""
                };
                format!("{target}  [{}{cross}]", u.form)
            }
        };
        println!("{:<24} {:<9} {:<20} {url}", e.name, ty, digest);
        let desc: String = e
            .description
            .chars()
            .take(100)
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        let more = if e.description.chars().count() > 100 {
            "…"
        } else {
            ""
        };
        println!("    {desc}{more}");
    }
    for s in &index.skipped {
        println!(
            "skipped  entry {} {}: {} ({})",
            s.position,
            s.name.as_deref().unwrap_or("(no name)"),
            s.reason,
            serde_json::to_value(s.code)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default()
        );
    }
    println!(
        "{} entries, {} skipped",
        index.entries.len(),
        index.skipped.len()
    );
    if !index.installable {
        println!(
            "not installable: a v0.1.0 index lists no digests, so nothing from it can be fetched for installation"
        );
    }
}

// ---------------------------------------------------------------- fetch

/// Run `skillbox fetch`; returns the exit code. `engine` is the extraction path `extract` uses.
pub fn run_fetch(a: FetchArgs, engine: Engine<'_>) -> u8 {
    let setup = match setup(&a.policy) {
        Ok(s) => s,
        Err((code, m)) => {
            print_error(&m);
            return code;
        }
    };
    let index_url = match urls::parse_absolute(&a.index_url) {
        Ok(u) => u,
        Err(e) => {
            print_error(&format!("{}: {e}", a.index_url));
            return EXIT_USAGE;
        }
    };
    let limits = match &a.limits {
        Some(p) => match Limits::from_file(p) {
            Ok(l) => l,
            Err(e) => {
                print_error(&e.to_string());
                return EXIT_USAGE;
            }
        },
        None => Limits::default(),
    };
    if let Some(out) = &a.out {
        if out.symlink_metadata().is_ok() {
            print_error(&format!(
                "--out {} already exists; give a new path",
                out.display()
            ));
            return EXIT_USAGE;
        }
    }
    let Some(cache_root) = a.cache_dir.clone().or_else(Cache::default_root) else {
        print_error("no cache directory: set --cache-dir, XDG_CACHE_HOME or HOME");
        return EXIT_USAGE;
    };
    let cache = match Cache::open(&cache_root) {
        Ok(c) => c,
        Err(e) => {
            print_error(&format!(
                "cannot open the cache {}: {e}",
                cache_root.display()
            ));
            return EXIT_OPERATIONAL;
        }
    };
    let mut prov = Provenance {
        index_url: index_url.to_string(),
        time: super::now_rfc3339(),
        ..Provenance::default()
    };
    let acquired = acquire::load_index(
        &setup.client,
        Some(&cache),
        &index_url,
        &setup.index_limits,
        a.offline,
        &mut prov,
    )
    .inspect(|index| {
        for w in &index.warnings {
            eprintln!("skillbox: warning: {w}");
        }
    })
    .and_then(|index| acquire::select(&index, &a.skill_name))
    .and_then(|entry| acquire::artifact(&setup.client, &cache, entry, a.offline, &mut prov));
    let acquired = match acquired {
        Ok(x) => x,
        Err(AcquireError::DigestMismatch {
            expected,
            actual,
            size,
        }) => {
            // Same answer `extract --digest` gives for wrong bytes, and nothing was staged.
            let reason = Reason::new(
                ReasonCode::DigestMismatch,
                format!(
                    "the index lists {expected}, the {size} bytes received hash to {actual}; they were discarded"
                ),
            );
            let facts = ArtifactFacts {
                digest: Some(actual),
                format: None,
                size,
            };
            let outcome = Outcome::rejected(
                facts,
                Totals {
                    bytes_in: size,
                    ..Totals::default()
                },
                reason,
            );
            // No child ran, so the answer has no `sandbox`.
            return print_fetch(&outcome, None, &prov, None, a.json).unwrap_or(EXIT_REJECTED);
        }
        Err(e) => {
            if a.json {
                let v = json!({ "error": error_json(&e), "provenance": prov });
                println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
            } else if prov.index_source.is_some() {
                // Something was fetched: show where from, even though it stopped here.
                print_provenance(&prov);
            }
            report(&e);
            return acquire_exit(&e);
        }
    };

    let staging = match &a.out {
        Some(out) => match Staging::kept(out) {
            Ok(s) => s,
            Err(e) => {
                print_error(&format!("cannot create {}: {e}", out.display()));
                return if e.kind() == std::io::ErrorKind::AlreadyExists {
                    EXIT_USAGE
                } else {
                    EXIT_OPERATIONAL
                };
            }
        },
        None => match Staging::temporary() {
            Ok(s) => s,
            Err(e) => {
                print_error(&format!("cannot create a temporary directory: {e}"));
                return EXIT_OPERATIONAL;
            }
        },
    };
    let mut req = Request::new(
        match acquired.artifact_type {
            EntryType::SkillMd => ArtifactType::SkillMd,
            EntryType::Archive => ArtifactType::Archive,
        },
        limits,
    );
    req.media_type = prov.content_type.clone();
    req.file_name = prov
        .final_url
        .as_deref()
        .or(prov.resolved_url.as_deref())
        .and_then(|u| Url::parse(u).ok())
        .and_then(|u| {
            u.path_segments()
                .and_then(|mut s| s.next_back().map(str::to_owned))
        })
        .filter(|n| !n.is_empty());
    req.expected_digest = acquired.entry.digest;
    req.skill_name = Some(acquired.entry.name.clone());
    req.index_description = Some(acquired.entry.description.clone());

    let confined = File::open(staging.path())
        .map_err(|e| format!("cannot open {}: {e}", staging.path().display()))
        .and_then(|dir| engine(&acquired.hit.file, dir.as_fd(), &req));
    let Confined { outcome, sandbox } = match confined {
        Ok(c) => c,
        Err(m) => {
            staging.discard();
            print_error(&m);
            return EXIT_OPERATIONAL;
        }
    };
    if outcome.verdict == Verdict::Rejected {
        staging.discard();
    }
    let kept = staging
        .kept_path()
        .filter(|_| outcome.verdict == Verdict::Accepted);
    print_fetch(&outcome, Some(&sandbox), &prov, kept, a.json).unwrap_or(EXIT_OPERATIONAL)
}

/// The answer as `extract` prints it (`sandbox` included when a child ran), plus provenance.
fn print_fetch(
    outcome: &Outcome,
    sandbox: Option<&SandboxReport>,
    prov: &Provenance,
    staged: Option<&Path>,
    json_out: bool,
) -> Option<u8> {
    let code = match outcome.verdict {
        Verdict::Accepted => EXIT_ACCEPTED,
        Verdict::Rejected => EXIT_REJECTED,
    };
    if json_out {
        let extraction = answer::json(outcome, sandbox).ok()?;
        let v = json!({ "extraction": extraction, "provenance": prov, "staged_at": staged });
        println!("{}", serde_json::to_string_pretty(&v).ok()?);
        return Some(code);
    }
    let shown = staged.map_or(Staged::Removed, Staged::At);
    print!(
        "{}",
        answer::text(
            outcome,
            shown,
            sandbox.map(SandboxReport::summary).as_deref()
        )
    );
    print_provenance(prov);
    let _ = std::io::stdout().flush();
    Some(code)
}

fn print_provenance(p: &Provenance) {
    let opt = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
    let source = |s: Option<acquire::Source>| match s {
        Some(acquire::Source::Network) => "network",
        Some(acquire::Source::Cache) => "cache",
        None => "-",
    };
    println!("provenance:");
    println!(
        "  index:         {} ({})",
        p.index_url,
        source(p.index_source)
    );
    if let Some(Download {
        hops, final_url, ..
    }) = &p.index_download
    {
        for h in hops {
            println!(
                "    redirect:    {} -> {} ({})",
                h.url, h.location, h.status
            );
        }
        if !hops.is_empty() {
            println!("    final:       {final_url}");
        }
    }
    if let Some(e) = &p.entry {
        println!("  entry:         {e}");
    }
    let form = p.url_form.map(|f| f.as_str()).unwrap_or("-");
    let cross = if p.cross_origin == Some(true) {
        ", cross-origin"
    } else {
        ""
    };
    println!("  resolved url:  {} ({form}{cross})", opt(&p.resolved_url));
    for h in &p.hops {
        println!(
            "  redirect:      {} [{}] -> {} ({})",
            h.url, h.address, h.location, h.status
        );
    }
    println!("  final url:     {}", opt(&p.final_url));
    if let Some(addr) = &p.address {
        println!("  address:       {addr}");
    }
    println!("  content-type:  {}", opt(&p.content_type));
    println!(
        "  digest:        {}",
        p.digest
            .map(|d| d.to_string())
            .unwrap_or_else(|| "-".into())
    );
    println!("  source:        {}", source(p.artifact_source));
    if let Some(c) = &p.cached_from {
        println!("  downloaded at: {}", c.fetched_at);
    }
    println!("  time:          {}", p.time);
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
