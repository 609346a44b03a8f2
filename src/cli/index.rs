//! `skillbox index check FILE|URL`: parse and validate a discovery index, print its entries
//! and what was skipped. The fetch-policy flags are `fetch`'s ([`super::fetch::PolicyArgs`]).
//!
//! Exit codes (see [`Exit`]): 0 processed (skipped entries are reported), 5 unrecognised
//! `$schema`, 3 not an index (not JSON, over a limit), 4 refused by the fetch policy,
//! 1 operational error, 2 usage error.

use std::path::Path;

use clap::{Args, Subcommand};
use serde_json::{Value, json};
use url::Url;

use skillbox::fetch::acquire::{self, AcquireError, Provenance};
use skillbox::index::{self, EntryType, Index};
use skillbox::urls;

use super::exit::Exit;
use super::fetch::{PolicyArgs, acquire_exit, error_json, fail, report, setup};

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
    /// Print one JSON object; a failure prints `{"error": {"kind", "exit", "message", ...}}`.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    policy: PolicyArgs,
}

/// Run `skillbox index ...`; returns the exit code.
pub fn run(args: IndexArgs) -> Exit {
    match args.command {
        IndexCommand::Check(a) => index_check(a),
    }
}

/// How a file SOURCE is shown (messages, `source`): a name with an `@` may be a mistyped URL
/// with user information (`user:pw@host/i.json`), so it is masked to its last `@` as refused
/// URL text is; any other name is shown as it is.
fn shown_file(source: &str) -> String {
    urls::redact_refused(source).into_owned()
}

fn index_check(a: CheckArgs) -> Exit {
    let setup = match setup(&a.policy, None) {
        Ok(s) => s,
        Err((code, m)) => return fail(code, &m, a.json),
    };
    let mut prov = Provenance::default();
    let result = if urls::names_a_url(&a.source) {
        let url = match urls::parse_typed(&a.source) {
            Ok(u) => u,
            Err(e) => {
                let m = format!("{}: {e}", urls::redact_refused(&a.source));
                return fail(Exit::Usage, &m, a.json);
            }
        };
        prov.index_url = url.to_string();
        // The origin of the URL a person typed is theirs to choose.
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
        let base = match a.base.as_deref().map(urls::parse_typed).transpose() {
            Ok(b) => b,
            Err(e) => return fail(Exit::Usage, &format!("--base: {e}"), a.json),
        };
        // The base stands for the URL the index is fetched from: one over a scheme `fetch`
        // refuses (http) is refused as `fetch` refuses it, not used to resolve the entries to
        // URLs that would never be fetched. (User information in it is shown masked in the
        // resolved URLs, as before.)
        if let Some(base) = base.as_ref().filter(|b| b.scheme() != "https") {
            let mut policy = setup.client.policy().clone();
            policy.allow_index_origin(base);
            if let Err(r) = policy.check_url(base) {
                let e = AcquireError::Fetch(skillbox::fetch::FetchError::Refused(r));
                if a.json {
                    let v = json!({ "error": error_json(&e), "source": shown_file(&a.source) });
                    println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
                }
                report(&e);
                return acquire_exit(&e);
            }
        }
        let shown = shown_file(&a.source);
        // The messages below name the path as given; the masked form replaces it.
        let masked = |m: &str| m.replace(a.source.as_str(), &shown);
        prov.index_url = shown.clone();
        // A path that names nothing, or a directory, is a usage error, as for every command
        // (a pipe such as /dev/stdin is read).
        if let Err(f) = super::extract::names_a_file(Path::new(&a.source)) {
            return fail(f.exit, &masked(&f.message), a.json);
        }
        match index::read_file(Path::new(&a.source), setup.index_limits.max_bytes) {
            Ok(bytes) => {
                index::parse(&bytes, base.as_ref(), &setup.index_limits).map_err(AcquireError::from)
            }
            Err(index::ReadError::Index(e)) => Err(AcquireError::from(e)),
            Err(index::ReadError::Io(m)) => return fail(Exit::Operational, &masked(&m), a.json),
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
            Exit::Ok
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
