//! `skillbox diff OLD NEW`: compare two saved `extract --json` answers of a skill and print
//! what changed, grown capabilities first. Reads the two files only; never opens a package.
//!
//! Exit codes (see [`Exit`]): 0 unchanged (same digest), 4 content_only, 5 needs_review,
//! 1 operational error (a file cannot be read), 2 usage error (a path that names no file, or
//! not an accepted answer with a review).

use std::io::Read as _;
use std::path::{Path, PathBuf};

use clap::Args;

use skillbox::intake::Outcome;
use skillbox::skill::diff::{self, Change};

use super::exit::{Exit, Failure};

/// Arguments of `skillbox diff`.
#[derive(Args, Debug)]
pub struct DiffArgs {
    /// The older version's saved answer (`skillbox extract --json` output, or `fetch --json`'s).
    old: PathBuf,
    /// The newer version's saved answer.
    new: PathBuf,
    /// Print one JSON object (change, digests, grown, dropped, files, frontmatter_changed); a
    /// failure prints `{"error": {"kind", "exit", "message"}}`.
    #[arg(long)]
    pub json: bool,
}

/// A saved answer is at most a few MiB (10,000 entries plus a bounded review).
const MAX_ANSWER_BYTES: u64 = 64 * 1024 * 1024;

fn load(p: &Path) -> Result<Outcome, Failure> {
    // A path that names no regular file is a usage error (2), as for every command.
    let file = super::extract::open_artifact(p)?;
    let mut text = Vec::new();
    file.take(MAX_ANSWER_BYTES + 1)
        .read_to_end(&mut text)
        .map_err(|e| Failure::operational(format!("cannot read {}: {e}", p.display())))?;
    if text.len() as u64 > MAX_ANSWER_BYTES {
        return Err(Failure::usage(format!(
            "{} is larger than {MAX_ANSWER_BYTES} bytes",
            p.display()
        )));
    }
    let not_an_answer = |why: String| {
        Failure::usage(format!(
            "{} is not a saved `skillbox extract --json` or `fetch --json` answer: {why}",
            p.display()
        ))
    };
    let mut value: serde_json::Value =
        serde_json::from_slice(&text).map_err(|e| not_an_answer(e.to_string()))?;
    // `fetch --json` wraps the extraction's answer with its provenance: the same answer.
    if value.get("verdict").is_none()
        && let Some(inner) = value.get_mut("extraction").map(serde_json::Value::take)
    {
        value = inner;
    }
    if let Some(message) = value.pointer("/error/message").and_then(|m| m.as_str()) {
        return Err(not_an_answer(format!("it holds the error {message:?}")));
    }
    serde_json::from_value(value).map_err(|e| not_an_answer(e.to_string()))
}

/// Run `skillbox diff`.
pub fn run(args: &DiffArgs) -> Result<Exit, Failure> {
    let (old, new) = (load(&args.old)?, load(&args.new)?);
    let d =
        diff::diff(&old.version(), &new.version()).map_err(|e| Failure::usage(e.to_string()))?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&d).map_err(|e| Failure::operational(e.to_string()))?
        );
    } else {
        print!("{}", diff::render(&d));
    }
    Ok(match d.change {
        Change::Unchanged => Exit::Ok,
        Change::ContentOnly => Exit::ContentOnly,
        Change::NeedsReview => Exit::NeedsReview,
    })
}
