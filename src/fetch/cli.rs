//! The `skillbox index check`, `skillbox fetch` and `skillbox cache` commands: flags (over the
//! policy file and `SKILLBOX_*` variables, see [`super::config`]) to a
//! [`FetchPolicy`](super::policy::FetchPolicy), the pipeline, the printed answer and the exit
//! code. `main.rs` only dispatches here.
//!
//! Exit codes extend `extract`'s: 0 accepted (or index processed), 3 rejected, 1 operational
//! error, 2 usage error, plus [`EXIT_REFUSED`] (a fetch-policy rule fired) and
//! [`EXIT_SCHEMA`] (unrecognised `$schema`).

use std::fs::File;
use std::io::Write;
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
use super::config::{self, FetchSettings, Overrides};
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

/// Fetch policy flags, shared by `index check URL` and `fetch`. Each sits on top of
/// `--fetch-policy FILE` (flags and their `SKILLBOX_*` variables win; lists add up).
#[derive(Args, Debug, Clone)]
pub struct PolicyArgs {
    /// A TOML fetch policy file (keys as the flags, with underscores: allow_origins,
    /// allow_destinations, max_redirects, connect_timeout, total_timeout, max_bytes,
    /// max_index_bytes, max_index_entries, ca_file, proxy, no_proxy). Unknown keys are refused.
    #[arg(long, env = "SKILLBOX_FETCH_POLICY", value_name = "FILE")]
    fetch_policy: Option<PathBuf>,
    /// Allow fetching from this origin (repeatable; the variable takes a comma-separated list).
    /// The origin of the INDEX_URL given on the command line is allowed without it; every other
    /// origin (cross-origin artifacts, redirects elsewhere) must be listed.
    #[arg(
        long = "allow-origin",
        env = "SKILLBOX_ALLOW_ORIGIN",
        value_delimiter = ',',
        value_name = "https://HOST[:PORT]"
    )]
    allow_origin: Vec<String>,
    /// FOR TESTS AND LOCAL DEVELOPMENT ONLY: exempt exactly this address and port from the
    /// destination rules (loopback, private, link-local, ...). Repeatable.
    #[arg(long = "allow-destination", value_name = "IP:PORT")]
    allow_destination: Vec<SocketAddr>,
    /// Most redirects followed [default: 5].
    #[arg(long, env = "SKILLBOX_MAX_REDIRECTS", value_name = "N")]
    max_redirects: Option<u32>,
    /// Name resolution plus TCP connect bound, e.g. `10`, `2.5`, `500ms` [default: 10s].
    #[arg(long, env = "SKILLBOX_CONNECT_TIMEOUT", value_parser = super::config::parse_duration, value_name = "SECONDS")]
    connect_timeout: Option<Duration>,
    /// Bound on one whole download, redirects included [default: 60s].
    #[arg(long, env = "SKILLBOX_TOTAL_TIMEOUT", value_parser = super::config::parse_duration, value_name = "SECONDS")]
    total_timeout: Option<Duration>,
    /// Largest artifact body (K, M, G suffixes) [default: 256M].
    #[arg(long, env = "SKILLBOX_MAX_BYTES", value_parser = parse_size, value_name = "BYTES")]
    max_bytes: Option<u64>,
    /// Largest index body; an index over it is rejected (exit 3) [default: 1M].
    #[arg(long, env = "SKILLBOX_MAX_INDEX_BYTES", value_parser = parse_size, value_name = "BYTES")]
    max_index_bytes: Option<u64>,
    /// Most entries in an index [default: 1000].
    #[arg(long, env = "SKILLBOX_MAX_INDEX_ENTRIES", value_name = "N")]
    max_index_entries: Option<usize>,
    /// Trust exactly the CA certificates in this PEM file instead of the built-in roots.
    #[arg(long, env = "SKILLBOX_CA_FILE", value_name = "PEM")]
    ca_file: Option<PathBuf>,
    /// HTTP CONNECT proxy, `http://[USER:PASSWORD@]HOST[:PORT]`, or `direct` for none
    /// [default: the policy file's, else HTTPS_PROXY / https_proxy]. Credentials are never shown.
    #[arg(long, env = "SKILLBOX_PROXY", value_name = "URL")]
    proxy: Option<String>,
    /// Hosts reached without the proxy, comma-separated (subdomains included, `*` for all)
    /// [default: the policy file's, else NO_PROXY / no_proxy].
    #[arg(long, env = "SKILLBOX_NO_PROXY", value_name = "LIST")]
    no_proxy: Option<String>,
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
    #[arg(required_unless_present = "print_policy")]
    index_url: Option<String>,
    /// The skill to fetch, as the index names it.
    #[arg(required_unless_present = "print_policy")]
    skill_name: Option<String>,
    /// Print the effective fetch policy (defaults, --fetch-policy FILE, SKILLBOX_* variables
    /// and flags combined; proxy credentials redacted) in the policy file's format, and exit.
    #[arg(long)]
    print_policy: bool,
    /// Directory to stage into; must not exist yet. Without it a temporary directory is used
    /// and removed afterwards.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Print one JSON object (`extraction` as `extract --json` prints it, plus `provenance`).
    #[arg(long)]
    json: bool,
    /// Use only the cache: the last index fetched from INDEX_URL and the artifact by digest.
    #[arg(long, conflicts_with = "no_cache")]
    offline: bool,
    /// Neither read nor write the cache: download the index and the artifact now, into a
    /// temporary directory removed afterwards.
    #[arg(long)]
    no_cache: bool,
    /// Cache directory [default: $XDG_CACHE_HOME/skillbox or ~/.cache/skillbox].
    #[arg(long, value_name = "DIR")]
    cache_dir: Option<PathBuf>,
    /// Extraction limits file (as for `extract --limits`).
    #[arg(long, value_name = "FILE")]
    limits: Option<PathBuf>,
    #[command(flatten)]
    policy: PolicyArgs,
}

fn print_error(message: &str) {
    eprintln!("skillbox: {message}");
}

struct Setup {
    client: Client,
    index_limits: IndexLimits,
}

fn settings(p: &PolicyArgs) -> Result<FetchSettings, (u8, String)> {
    let file = p
        .fetch_policy
        .as_deref()
        .map(config::read_file)
        .transpose()
        .map_err(|e| (EXIT_USAGE, e.to_string()))?;
    let over = Overrides {
        allow_origins: p.allow_origin.clone(),
        allow_destinations: p.allow_destination.clone(),
        max_redirects: p.max_redirects,
        connect_timeout: p.connect_timeout,
        total_timeout: p.total_timeout,
        max_bytes: p.max_bytes,
        max_index_bytes: p.max_index_bytes,
        max_index_entries: p.max_index_entries,
        ca_file: p.ca_file.clone(),
        proxy: p.proxy.clone(),
        no_proxy: p.no_proxy.clone(),
    };
    config::build(file, over, &|k| std::env::var(k).ok()).map_err(|e| (EXIT_USAGE, e.to_string()))
}

fn setup(p: &PolicyArgs) -> Result<Setup, (u8, String)> {
    let s = settings(p)?;
    let trust = match &s.ca_file {
        Some(path) => Trust::from_ca_file(path).map_err(|e| (EXIT_USAGE, e.to_string()))?,
        None => Trust::WebPki,
    };
    let tls = trust
        .client_config()
        .map_err(|e| (EXIT_USAGE, e.to_string()))?;
    Ok(Setup {
        client: Client::new(s.policy, tls),
        index_limits: s.index_limits,
    })
}

fn fetch_exit(e: &FetchError) -> u8 {
    match e {
        FetchError::Refused(_) => EXIT_REFUSED,
        FetchError::Dns { .. }
        | FetchError::Connect { .. }
        | FetchError::Proxy { .. }
        | FetchError::Tls(_)
        | FetchError::Http(_)
        | FetchError::Status { .. }
        | FetchError::Sink(_) => EXIT_OPERATIONAL,
        // The same status as an index file over the bound: the index is rejected.
        FetchError::IndexTooLarge { .. } => EXIT_REJECTED,
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
                print_error(&format!("{}: {e}", urls::redact_str(&a.source)));
                return EXIT_USAGE;
            }
        };
        prov.index_url = url.to_string();
        let mut setup = setup;
        setup.client.policy_mut().allow_index_origin(&url);
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
        match index::read_file(Path::new(&a.source), setup.index_limits.max_bytes) {
            Ok(bytes) => {
                index::parse(&bytes, base.as_ref(), &setup.index_limits).map_err(AcquireError::from)
            }
            Err(index::ReadError::Index(e)) => Err(AcquireError::from(e)),
            Err(index::ReadError::Io(m)) => {
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
    if a.print_policy {
        return match settings(&a.policy) {
            Ok(mut s) => {
                if let Some(u) = a
                    .index_url
                    .as_deref()
                    .and_then(|u| urls::parse_absolute(u).ok())
                {
                    s.policy.allow_index_origin(&u);
                }
                print!("{}", config::render(&s));
                EXIT_ACCEPTED
            }
            Err((code, m)) => {
                print_error(&m);
                code
            }
        };
    }
    let (Some(index_text), Some(skill_name)) = (a.index_url.as_deref(), a.skill_name.as_deref())
    else {
        print_error("INDEX_URL and SKILL_NAME are required");
        return EXIT_USAGE;
    };
    let setup = match setup(&a.policy) {
        Ok(s) => s,
        Err((code, m)) => {
            print_error(&m);
            return code;
        }
    };
    let index_url = match urls::parse_absolute(index_text) {
        Ok(u) => u,
        Err(e) => {
            print_error(&format!("{}: {e}", urls::redact_str(index_text)));
            return EXIT_USAGE;
        }
    };
    let mut setup = setup;
    setup.client.policy_mut().allow_index_origin(&index_url);
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
    // --no-cache: a throwaway cache, so the download path (temporary file, digest check,
    // rename) is the same one; it is removed when this function returns.
    let throwaway = match a.no_cache.then(tempfile::TempDir::new).transpose() {
        Ok(t) => t,
        Err(e) => {
            print_error(&format!("cannot create a temporary directory: {e}"));
            return EXIT_OPERATIONAL;
        }
    };
    let Some(cache_root) = throwaway
        .as_ref()
        .map(|t| t.path().to_owned())
        .or_else(|| a.cache_dir.clone())
        .or_else(Cache::default_root)
    else {
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
        (!a.no_cache).then_some(&cache),
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
    .and_then(|index| acquire::select(&index, skill_name))
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
    if let Some(proxy) = &p.via_proxy {
        println!("  via proxy:     {proxy}");
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

// ---------------------------------------------------------------- cache

/// `skillbox cache ...`
#[derive(Args, Debug)]
pub struct CacheArgs {
    #[command(subcommand)]
    command: CacheCommand,
    /// Cache directory [default: $XDG_CACHE_HOME/skillbox or ~/.cache/skillbox].
    #[arg(long, global = true, value_name = "DIR")]
    cache_dir: Option<PathBuf>,
    /// Print JSON.
    #[arg(long, global = true)]
    json: bool,
}

#[derive(Subcommand, Debug)]
enum CacheCommand {
    /// List cached artifacts: digest, size, first and last use, the URL first downloaded from.
    List,
    /// Re-hash every cached artifact and remove each one that does not match its digest.
    ///
    /// Exit status: 0 all matched, 3 some were removed, 1 the cache cannot be read.
    Verify,
    /// Remove artifacts not used for longer than the given age (and index copies as old).
    Prune {
        /// An age: 30d, 12h, 90m, 3600s, 2w.
        #[arg(long, value_parser = super::cache::parse_age, value_name = "AGE")]
        older_than: Duration,
    },
}

/// Run `skillbox cache ...`; returns the exit code.
pub fn run_cache(a: CacheArgs) -> u8 {
    let Some(root) = a.cache_dir.clone().or_else(Cache::default_root) else {
        print_error("no cache directory: set --cache-dir, XDG_CACHE_HOME or HOME");
        return EXIT_USAGE;
    };
    let cache = match Cache::open(&root) {
        Ok(c) => c,
        Err(e) => {
            print_error(&format!("cannot open the cache {}: {e}", root.display()));
            return EXIT_OPERATIONAL;
        }
    };
    let dash = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
    let result = match a.command {
        CacheCommand::List => cache.list().map(|items| {
            if a.json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&items).unwrap_or_default()
                );
            } else {
                println!(
                    "{:<71} {:>10} {:<20} {:<20} URL",
                    "DIGEST", "SIZE", "FIRST USE", "LAST USE"
                );
                for i in &items {
                    println!(
                        "{:<71} {:>10} {:<20} {:<20} {}",
                        i.digest.to_string(),
                        i.size,
                        dash(&i.first_used),
                        dash(&i.last_used),
                        dash(&i.url)
                    );
                }
                println!("{} artifacts", items.len());
            }
            EXIT_ACCEPTED
        }),
        CacheCommand::Verify => cache.verify().map(|r| {
            if a.json {
                println!("{}", serde_json::to_string_pretty(&r).unwrap_or_default());
            } else {
                for (d, why) in &r.removed {
                    println!("removed  {d}: {why}");
                }
                for n in &r.unknown {
                    println!(
                        "unknown  sha256/{}: not a digest, left alone",
                        crate::reason::display_name(n.as_bytes())
                    );
                }
                println!("{} matched, {} removed", r.ok.len(), r.removed.len());
            }
            if r.removed.is_empty() {
                EXIT_ACCEPTED
            } else {
                EXIT_REJECTED
            }
        }),
        CacheCommand::Prune { older_than } => cache.prune(older_than).map(|removed| {
            if a.json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&removed).unwrap_or_default()
                );
            } else {
                for i in &removed {
                    println!("removed  {} (last used {})", i.digest, dash(&i.last_used));
                }
                println!("{} removed", removed.len());
            }
            EXIT_ACCEPTED
        }),
    };
    result.unwrap_or_else(|e| {
        print_error(&format!("cache {}: {e}", root.display()));
        EXIT_OPERATIONAL
    })
}
