//! `skillbox cache list | verify | prune`: the fetch cache, as an operator manages it. Every
//! URL it shows has had its credentials removed before it was recorded.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};

use skillbox::fetch::cache::Cache;

use super::exit::Exit;
use super::fetch::fail;

/// `skillbox cache ...`
#[derive(Args, Debug)]
pub struct CacheArgs {
    #[command(subcommand)]
    command: CacheCommand,
    /// Cache directory [default: $XDG_CACHE_HOME/skillbox or ~/.cache/skillbox].
    #[arg(long, global = true, value_name = "DIR")]
    cache_dir: Option<PathBuf>,
    /// Print JSON; a failure prints `{"error": {"kind", "exit", "message"}}`.
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
    /// Remove artifacts not used for longer than the given age (and index copies as old), the
    /// lock files of what is no longer cached, and the partial downloads killed fetches left
    /// in tmp/ (never a running fetch's files or locks).
    Prune {
        /// An age: 30d, 12h, 90m, 3600s, 2w.
        #[arg(long, value_parser = skillbox::fetch::cache::parse_age, value_name = "AGE")]
        older_than: Duration,
    },
}

/// Run `skillbox cache ...`; returns the exit code.
pub fn run(a: CacheArgs) -> Exit {
    let Some(root) = a.cache_dir.clone().or_else(Cache::default_root) else {
        return fail(
            Exit::Usage,
            "no cache directory: set --cache-dir, XDG_CACHE_HOME or HOME",
            a.json,
        );
    };
    // A --cache-dir in a directory that does not exist is a mistyped path, said as `fetch`
    // says it ([`super::parent_exists`]), not a cache that is empty.
    if let Some(dir) = &a.cache_dir
        && let Err(m) = super::parent_exists("--cache-dir", dir)
    {
        return fail(Exit::Usage, &m, a.json);
    }
    // A cache that is not there holds nothing: listed, verified and pruned as empty, and not
    // made (a mistyped --cache-dir made a new empty cache and listed it, "0 artifacts").
    let missing =
        std::fs::symlink_metadata(&root).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound);
    let cache = if missing {
        eprintln!(
            "skillbox: no cache at {} (nothing was fetched into it)",
            root.display()
        );
        None
    } else {
        match Cache::open(&root) {
            Ok(c) => Some(c),
            Err(e) => {
                let m = format!("cannot open the cache {}: {e}", root.display());
                return fail(Exit::Operational, &m, a.json);
            }
        }
    };
    let dash = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
    let result = match a.command {
        CacheCommand::List => cache.as_ref().map_or(Ok(Vec::new()), Cache::list).map(|items| {
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
            Exit::Ok
        }),
        CacheCommand::Verify => cache.as_ref().map_or_else(
            || Ok(skillbox::fetch::cache::VerifyReport::default()),
            Cache::verify,
        ).map(|r| {
            if a.json {
                println!("{}", serde_json::to_string_pretty(&r).unwrap_or_default());
            } else {
                for (d, why) in &r.removed {
                    println!("removed  {d}: {why}");
                }
                for n in &r.unknown {
                    println!(
                        "unknown  sha256/{}: not a digest, left alone",
                        skillbox::reason::display_name(n.as_bytes())
                    );
                }
                println!("{} matched, {} removed", r.ok.len(), r.removed.len());
            }
            if r.removed.is_empty() {
                Exit::Ok
            } else {
                Exit::Rejected
            }
        }),
        CacheCommand::Prune { older_than } => cache
            .as_ref()
            .map_or_else(
                || Ok(Default::default()),
                |cache| {
                    cache
                        .remove_abandoned()
                        .and_then(|abandoned| Ok((abandoned, cache.prune(older_than)?)))
                },
            )
            .map(|(abandoned, pruned)| {
            let removed = &pruned.artifacts;
            if a.json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&removed).unwrap_or_default()
                );
            } else {
                for i in removed {
                    println!("removed  {} (last used {})", i.digest, dash(&i.last_used));
                }
                println!("{} removed", removed.len());
                if pruned.locks > 0 {
                    println!(
                        "{} lock file(s) of artifacts or index copies no longer cached removed",
                        pruned.locks
                    );
                }
                let (count, bytes) = (abandoned.downloads, abandoned.download_bytes);
                if count > 0 {
                    println!(
                        "{count} download(s) a killed fetch left in tmp/ removed ({bytes} bytes)"
                    );
                }
                let (count, bytes) = (abandoned.writes, abandoned.write_bytes);
                if count > 0 {
                    println!(
                        "{count} unfinished index or record write(s) a killed fetch left in tmp/ removed ({bytes} bytes)"
                    );
                }
            }
            Exit::Ok
        }),
    };
    result.unwrap_or_else(|e| {
        let m = format!("cache {}: {e}", root.display());
        fail(Exit::Operational, &m, a.json)
    })
}
