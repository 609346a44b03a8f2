//! `skillbox fetch INDEX_URL SKILL_NAME`: flags (over the policy file and `SKILLBOX_*`
//! variables, see [`skillbox::fetch::config`]) to a fetch policy, the pipeline (index, entry,
//! artifact, the confined extraction), the printed answer and the exit code. The fetch-policy
//! flags and the failure reporting are shared with `index check` ([`super::index`]) and the
//! cache directory with `cache` ([`super::cache`]).
//!
//! Exit codes (see [`Exit`]): 0 accepted, 3 rejected, 1 operational error, 2 usage error,
//! 4 refused by the fetch policy (the rule is named), 5 unrecognised index `$schema`.

use std::fs::File;
use std::io::Write;
use std::net::SocketAddr;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use serde_json::{Value, json};

use skillbox::extract::Request;
use skillbox::extract::inventory::{ArtifactFacts, Totals};
use skillbox::extract::policy::parse_size;
use skillbox::fetch::FetchError;
use skillbox::fetch::acquire::{self, AcquireError, Provenance};
use skillbox::fetch::cache::Cache;
use skillbox::fetch::client::{Client, Download};
use skillbox::fetch::config::{self, FetchSettings, Overrides};
use skillbox::fetch::tls::Trust;
use skillbox::index::{IndexError, IndexLimits};
use skillbox::intake::Outcome;
use skillbox::reason::{Reason, ReasonCode, Verdict};
use skillbox::sandbox::{Confined, SandboxError, SandboxReport};
use skillbox::urls;

use super::exit::{Exit, error_object, print_json};
use super::limits::{self, LimitFlags};
use super::output::{self as answer, Staged};
use super::sandbox::SandboxArgs;
use super::staging::Staging;

/// The extraction step, supplied by the CLI: the same (confined) path `skillbox extract` uses,
/// answering with the outcome and how it was confined.
pub type Engine<'a> = &'a dyn Fn(&File, BorrowedFd<'_>, &Request) -> Result<Confined, SandboxError>;

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
    /// Name resolution plus TCP connect bound, e.g. `10`, `2.5`, `500ms`; at most a day
    /// [default: 10s].
    #[arg(long, env = "SKILLBOX_CONNECT_TIMEOUT", value_parser = config::parse_duration, value_name = "SECONDS")]
    connect_timeout: Option<Duration>,
    /// Bound on one whole download, redirects included; at most a day [default: 60s].
    #[arg(long, env = "SKILLBOX_TOTAL_TIMEOUT", value_parser = config::parse_duration, value_name = "SECONDS")]
    total_timeout: Option<Duration>,
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
    /// [default: the policy file's, else HTTPS_PROXY / https_proxy]. Credentials are never shown;
    /// a `/`, `?` or `#` in the password is written %2F, %3F, %23.
    #[arg(long, env = "SKILLBOX_PROXY", value_name = "URL")]
    proxy: Option<String>,
    /// Hosts reached without the proxy, comma-separated (subdomains included, `*` for all)
    /// [default: the policy file's, else NO_PROXY / no_proxy].
    #[arg(long, env = "SKILLBOX_NO_PROXY", value_name = "LIST")]
    no_proxy: Option<String>,
}

/// The fetch-policy bound on an artifact download: only for the commands that download one
/// (`fetch`, `install`, `update`), not `index check`.
#[derive(Args, Debug, Clone, Default)]
pub struct ArtifactPolicyArgs {
    /// Largest download (K, M, G suffixes): the artifact's HTTP body is counted as it arrives
    /// and the connection cut past it (refused, rule max_bytes, exit 4). It bounds only what is
    /// downloaded now, not an artifact already in the cache; --max-artifact-bytes bounds the
    /// file extracted, downloaded or cached, and cuts a download itself when it is the lower
    /// [default: 256M].
    #[arg(long, env = "SKILLBOX_MAX_BYTES", value_parser = parse_size, value_name = "BYTES")]
    max_bytes: Option<u64>,
}

impl ArtifactPolicyArgs {
    pub(super) fn max_bytes(&self) -> Option<u64> {
        self.max_bytes
    }
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
    /// Directory to stage into; must not exist yet, in a directory that does. Without it a
    /// temporary directory is used and removed afterwards. A Ctrl-C removes either (exit 130).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Print one JSON object (`extraction` as `extract --json` prints it, plus `provenance`);
    /// a failure prints `{"error": {"kind", "exit", "message", ...}, "provenance"}`.
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
    /// Extraction limits file (as for `extract --limits`); the limit flags below override it.
    #[arg(long, value_name = "FILE")]
    limits: Option<PathBuf>,
    #[command(flatten)]
    policy: PolicyArgs,
    #[command(flatten)]
    artifact_policy: ArtifactPolicyArgs,
    #[command(flatten)]
    overrides: LimitFlags,
    #[command(flatten)]
    pub sandbox: SandboxArgs,
}

pub(super) fn print_error(message: &str) {
    eprintln!("skillbox: {message}");
}

pub(super) struct Setup {
    pub(super) client: Client,
    pub(super) index_limits: IndexLimits,
}

pub(super) fn settings(
    p: &PolicyArgs,
    max_bytes: Option<u64>,
) -> Result<FetchSettings, (Exit, String)> {
    let file = p
        .fetch_policy
        .as_deref()
        .map(config::read_file)
        .transpose()
        .map_err(|e| (Exit::Usage, e.to_string()))?;
    let over = Overrides {
        allow_origins: p.allow_origin.clone(),
        allow_destinations: p.allow_destination.clone(),
        max_redirects: p.max_redirects,
        connect_timeout: p.connect_timeout,
        total_timeout: p.total_timeout,
        max_bytes,
        max_index_bytes: p.max_index_bytes,
        max_index_entries: p.max_index_entries,
        ca_file: p.ca_file.clone(),
        proxy: p.proxy.clone(),
        no_proxy: p.no_proxy.clone(),
    };
    config::build(file, over, &|k| std::env::var(k).ok()).map_err(|e| (Exit::Usage, e.to_string()))
}

pub(super) fn setup(p: &PolicyArgs, max_bytes: Option<u64>) -> Result<Setup, (Exit, String)> {
    let s = settings(p, max_bytes)?;
    let trust = match &s.ca_file {
        Some(path) => Trust::from_ca_file(path).map_err(|e| (Exit::Usage, e.to_string()))?,
        None => Trust::WebPki,
    };
    let tls = trust
        .client_config()
        .map_err(|e| (Exit::Usage, e.to_string()))?;
    Ok(Setup {
        client: Client::new(s.policy, tls),
        index_limits: s.index_limits,
    })
}

fn fetch_exit(e: &FetchError) -> Exit {
    match e {
        FetchError::Refused(_) => Exit::Refused,
        FetchError::Dns { .. }
        | FetchError::Connect { .. }
        | FetchError::Proxy { .. }
        | FetchError::Tls(_)
        | FetchError::Http(_)
        | FetchError::Status { .. }
        | FetchError::Sink(_) => Exit::Operational,
        // The same status as an index file over the bound: the index is rejected.
        FetchError::IndexTooLarge { .. } => Exit::Rejected,
        // The engine's `artifact_size` rejection, met before the bytes were all received.
        FetchError::ArtifactTooLarge { .. } => Exit::Rejected,
    }
}

fn index_exit(e: &IndexError) -> Exit {
    match e {
        IndexError::UnrecognisedSchema { .. } => Exit::UnknownSchema,
        IndexError::TooLarge { .. }
        | IndexError::TooManyEntries { .. }
        | IndexError::NotJson(_)
        | IndexError::NotAnIndex => Exit::Rejected,
    }
}

pub(super) fn acquire_exit(e: &AcquireError) -> Exit {
    match e {
        AcquireError::Fetch(f) => fetch_exit(f),
        AcquireError::Index(i) => index_exit(i),
        AcquireError::NotListed { .. } => Exit::Usage,
        AcquireError::EntrySkipped(_)
        | AcquireError::NotInstallable { .. }
        | AcquireError::Unresolved { .. }
        | AcquireError::DigestMismatch { .. } => Exit::Rejected,
        AcquireError::Offline(_) | AcquireError::Cache(_) => Exit::Operational,
    }
}

/// The JSON object describing a failure: a policy refusal names its rule and the way out.
pub(super) fn error_json(e: &AcquireError) -> Value {
    let mut v = error_detail(e);
    if let Some(o) = v.as_object_mut() {
        o.insert("exit".into(), json!(acquire_exit(e).code()));
        o.insert("message".into(), json!(describe_error(e)));
    }
    v
}

/// A failure before anything was fetched, as text on stderr and, with `--json`, as the JSON
/// error object on stdout; returns `exit`.
pub(super) fn fail(exit: Exit, message: &str, json_out: bool) -> Exit {
    if json_out {
        print_json(&error_object(exit.kind(), exit.code(), message));
    }
    print_error(message);
    exit
}

fn error_detail(e: &AcquireError) -> Value {
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
pub(super) fn report(e: &AcquireError) {
    if matches!(
        e,
        AcquireError::Index(IndexError::UnrecognisedSchema { .. })
    ) {
        eprintln!("skillbox: warning: {e}");
    } else {
        print_error(&describe_error(e));
    }
}

/// Run `skillbox fetch`; returns the exit code. `engine` is the extraction path `extract` uses.
/// The answer of a fetch that stopped before an artifact was in hand: the error (with the
/// provenance gathered so far under `--json`, and on a terminal where anything was fetched from).
fn stopped(e: &AcquireError, prov: &Provenance, json: bool) -> Exit {
    if json {
        let v = json!({ "error": error_json(e), "provenance": prov });
        print_json(&v);
    } else if prov.index_source.is_some() {
        // Something was fetched: show where from, even though it stopped here.
        print_provenance(prov);
    }
    report(e);
    acquire_exit(e)
}

pub fn run(a: FetchArgs, engine: Engine<'_>) -> Exit {
    if a.print_policy {
        return match settings(&a.policy, a.artifact_policy.max_bytes) {
            Ok(mut s) => {
                if let Some(text) = a.index_url.as_deref() {
                    // Refused as `fetch` refuses it: shown, its origin could repeat part of a
                    // password (`https://u:123/pw@h` has the origin `https://u:123`).
                    match urls::parse_typed(text) {
                        // Its origin is allowed only if `fetch` would fetch the URL at all: one
                        // with user information, or over http, is refused, said here as
                        // `fetch` says it (it was shown as an allowed origin).
                        Ok(u) => {
                            let mut policy = s.policy.clone();
                            policy.allow_index_origin(&u);
                            if let Err(r) = policy.check_url(&u) {
                                let e = AcquireError::Fetch(FetchError::Refused(r));
                                if a.json {
                                    print_json(&json!({ "error": error_json(&e) }));
                                }
                                report(&e);
                                return acquire_exit(&e);
                            }
                            s.policy = policy;
                        }
                        Err(e) => {
                            let m = format!("{}: {e}", urls::redact_refused(text));
                            return fail(Exit::Usage, &m, a.json);
                        }
                    }
                }
                print!("{}", config::render(&s));
                Exit::Ok
            }
            Err((code, m)) => fail(code, &m, a.json),
        };
    }
    let (Some(index_text), Some(skill_name)) = (a.index_url.as_deref(), a.skill_name.as_deref())
    else {
        return fail(Exit::Usage, "INDEX_URL and SKILL_NAME are required", a.json);
    };
    let setup = match setup(&a.policy, a.artifact_policy.max_bytes) {
        Ok(s) => s,
        Err((code, m)) => {
            return fail(code, &m, a.json);
        }
    };
    let index_url = match urls::parse_typed(index_text) {
        Ok(u) => u,
        Err(e) => {
            let mut m = format!("{}: {e}", urls::redact_refused(index_text));
            // A file where the URL goes: say what reads one.
            if !urls::names_a_url(index_text) && Path::new(index_text).is_file() {
                m.push_str(
                    "; fetch takes the index's https:// URL (a local index file is read by \
                     `skillbox index check FILE`, and an artifact on disk by `skillbox extract \
                     FILE`)",
                );
            }
            return fail(Exit::Usage, &m, a.json);
        }
    };
    let mut setup = setup;
    setup.client.policy_mut().allow_index_origin(&index_url);
    let mut prov = Provenance {
        index_url: index_url.to_string(),
        time: skillbox::fetch::now_rfc3339(),
        ..Provenance::default()
    };
    // A URL the policy refuses by its text (http://, another origin than allowed) is refused
    // before anything is made, with the answer the download's refusal gives: that came after
    // the default cache had been created. (A loopback destination needs the name resolved: it
    // is refused with the download.)
    if let Err(r) = setup.client.policy().check_url(&index_url) {
        return stopped(&AcquireError::Fetch(FetchError::Refused(r)), &prov, a.json);
    }
    let limits = match limits::build(a.limits.as_deref(), &a.overrides) {
        Ok(l) => l,
        Err(f) => return fail(f.exit, &f.message, a.json),
    };
    // A download past the extraction limit could never be accepted: cut it there, before
    // it is received (up to --max-bytes) and cached.
    setup
        .client
        .policy_mut()
        .bound_by_extraction_limit(limits.max_artifact_bytes);
    // Before anything is downloaded: a tree that cannot be kept is not fetched for nothing.
    if let Some(out) = &a.out
        && let Err(m) = super::staging::check_out(out)
    {
        return fail(Exit::Usage, &m, a.json);
    }
    // The default cache is made whole (`~/.cache/skillbox`); a --cache-dir only in a
    // directory that exists ([`super::parent_exists`]).
    if !a.no_cache
        && let Some(dir) = &a.cache_dir
        && let Err(m) = super::parent_exists("--cache-dir", dir)
    {
        return fail(Exit::Usage, &m, a.json);
    }
    // --no-cache: a throwaway cache, so the download path (temporary file, digest check,
    // rename) is the same one; it is removed when this function returns.
    let throwaway = match a.no_cache.then(tempfile::TempDir::new).transpose() {
        Ok(t) => t,
        Err(e) => {
            return fail(
                Exit::Operational,
                &format!("cannot create a temporary directory: {e}"),
                a.json,
            );
        }
    };
    let Some(cache_root) = throwaway
        .as_ref()
        .map(|t| t.path().to_owned())
        .or_else(|| a.cache_dir.clone())
        .or_else(Cache::default_root)
    else {
        return fail(
            Exit::Usage,
            "no cache directory: set --cache-dir, XDG_CACHE_HOME or HOME",
            a.json,
        );
    };
    let cache = match Cache::open(&cache_root) {
        Ok(c) => c,
        Err(e) => {
            return fail(
                Exit::Operational,
                &format!("cannot open the cache {}: {e}", cache_root.display()),
                a.json,
            );
        }
    };
    // Bytes of the artifact download, counted by the fetcher; on a terminal only (never with
    // --json).
    let received = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    setup
        .client
        .count_artifact_bytes(std::sync::Arc::clone(&received));
    let progress = DownloadProgress::start(received, !a.json);
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
    progress.finish();
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
            return print_fetch(&outcome, None, &prov, None, a.json).unwrap_or(Exit::Rejected);
        }
        Err(AcquireError::Fetch(FetchError::ArtifactTooLarge {
            size,
            received,
            max,
            ..
        })) => {
            // The answer the engine gives an artifact over --max-artifact-bytes (what the whole
            // download would have met), with nothing downloaded past the limit or kept.
            let how = match size {
                Some(n) => format!("{n} bytes declared by Content-Length"),
                None => format!("more than {max}: {received} bytes arrived before reading stopped"),
            };
            let reason = Reason::new(
                ReasonCode::ArtifactSize,
                format!(
                    "artifact is larger than the limit (--max-artifact-bytes {max}; {how}); the download was cut there and nothing was kept"
                ),
            )
            .limit(max, size.unwrap_or(received));
            let facts = ArtifactFacts {
                digest: None,
                format: None,
                size: size.unwrap_or(received),
            };
            let outcome = Outcome::rejected(facts, Totals::default(), reason);
            return print_fetch(&outcome, None, &prov, None, a.json).unwrap_or(Exit::Rejected);
        }
        Err(e) => return stopped(&e, &prov, a.json),
    };

    let staging = match &a.out {
        Some(out) => match Staging::kept(out) {
            Ok(s) => s,
            Err(e) => {
                let code = if e.kind() == std::io::ErrorKind::AlreadyExists {
                    Exit::Usage
                } else {
                    Exit::Operational
                };
                return fail(
                    code,
                    &format!("cannot create {}: {e}", out.display()),
                    a.json,
                );
            }
        },
        None => match Staging::temporary() {
            Ok(s) => s,
            Err(e) => {
                return fail(
                    Exit::Operational,
                    &format!("cannot create a temporary directory: {e}"),
                    a.json,
                );
            }
        },
    };
    let req = acquire::engine_request(&acquired, &prov, limits);

    let confined = File::open(staging.path())
        .map_err(|e| format!("cannot open {}: {e}", staging.path().display()))
        .and_then(|dir| engine(&acquired.hit.file, dir.as_fd(), &req).map_err(|e| e.to_string()));
    // A Ctrl-C while the child ran ended it too: whatever it answered, nothing is kept.
    if let Some(sig) = super::interrupt::take() {
        staging.discard();
        super::interrupt::end(sig, a.json);
    }
    let Confined { outcome, sandbox } = match confined {
        Ok(c) => c,
        Err(m) => {
            staging.discard();
            return fail(Exit::Operational, &m, a.json);
        }
    };
    if outcome.verdict == Verdict::Rejected {
        staging.discard();
    }
    let kept = staging
        .kept_path()
        .filter(|_| outcome.verdict == Verdict::Accepted);
    print_fetch(&outcome, Some(&sandbox), &prov, kept, a.json).unwrap_or(Exit::Operational)
}

/// The answer as `extract` prints it (`sandbox` included when a child ran), plus provenance.
fn print_fetch(
    outcome: &Outcome,
    sandbox: Option<&SandboxReport>,
    prov: &Provenance,
    staged: Option<&Path>,
    json_out: bool,
) -> Option<Exit> {
    let code = match outcome.verdict {
        Verdict::Accepted => Exit::Ok,
        Verdict::Rejected => Exit::Rejected,
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
        // No hint: an index artifact's root is the skill directory, and no flag takes the
        // `.skill` wrapper here (`acquire::engine_request`).
        answer::text(
            outcome,
            shown,
            sandbox.map(SandboxReport::summary).as_deref(),
            None,
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
        // Shown: never with credentials, even from an older version's record.
        println!(
            "  cached from:   {}",
            skillbox::urls::redact_str(&c.final_url)
        );
    }
    println!("  time:          {}", p.time);
}

/// The progress of a large download on a terminal: the bytes the fetcher counted so far, and
/// the rate; a download done within half a second shows nothing. Nothing at all with `--json`
/// or when stderr is not a terminal.
struct DownloadProgress {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl DownloadProgress {
    fn start(received: std::sync::Arc<std::sync::atomic::AtomicU64>, wanted: bool) -> Self {
        use std::io::IsTerminal as _;
        use std::sync::atomic::Ordering;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let thread = (wanted && std::io::stderr().is_terminal()).then(|| {
            let stop = std::sync::Arc::clone(&stop);
            std::thread::spawn(move || {
                let started = std::time::Instant::now();
                let bar = indicatif::ProgressBar::hidden();
                bar.set_style(
                    indicatif::ProgressStyle::with_template(
                        "{spinner} {bytes} downloaded, {binary_bytes_per_sec}",
                    )
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
                );
                let mut shown = false;
                while !stop.load(Ordering::Relaxed) {
                    let bytes = received.load(Ordering::Relaxed);
                    if !shown && bytes > 0 && started.elapsed() > Duration::from_millis(500) {
                        bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
                        shown = true;
                    }
                    bar.set_position(bytes);
                    std::thread::sleep(Duration::from_millis(100));
                }
                bar.finish_and_clear();
            })
        });
        Self { stop, thread }
    }

    fn finish(mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
