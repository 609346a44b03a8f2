//! The printed answer of one extraction, as `extract` (local or `--server`) and `fetch` show it:
//! the `--json` object and the text form. One place, so the commands cannot drift apart.
//!
//! The JSON object is the [`Outcome`]'s fields plus `sandbox` (how the child was confined)
//! whenever a child ran. This module only formats: it never decides a verdict and never touches
//! the staged tree; only [`print_answer`] writes, to stdout.

use serde::Serialize;
use serde_json::Value;

use skillbox::intake::Outcome;
use skillbox::reason::Verdict;

use super::exit::Failure;

/// Where an accepted tree is, for the text answer's last line.
#[derive(Debug, Clone, Copy)]
pub enum Staged<'a> {
    /// Kept at the caller's `--out`.
    At(&'a std::path::Path),
    /// Staged in a temporary directory that has since been removed.
    Removed,
    /// Staged by the broker (`--server`) and released after the answer.
    Released,
}

/// The `--json` object: the outcome, plus `sandbox` when a child ran (a local
/// [`skillbox::sandbox::SandboxReport`], or the broker's report as it arrived).
pub fn json<S: Serialize + ?Sized>(
    outcome: &Outcome,
    sandbox: Option<&S>,
) -> Result<Value, serde_json::Error> {
    let mut answer = serde_json::to_value(outcome)?;
    if let (Some(fields), Some(sandbox)) = (answer.as_object_mut(), sandbox) {
        fields.insert("sandbox".into(), serde_json::to_value(sandbox)?);
    }
    Ok(answer)
}

/// The text form, one line per fact; `sandbox` is the one-line confinement summary
/// ([`skillbox::sandbox::SandboxReport::summary`]) when a child ran.
pub fn text(outcome: &Outcome, staged: Staged<'_>, sandbox: Option<&str>) -> String {
    let mut s = String::new();
    let mut line = |l: String| {
        s.push_str(&l);
        s.push('\n');
    };
    let a = &outcome.artifact;
    let digest = a
        .digest
        .map(|d| d.to_string())
        .unwrap_or_else(|| "-".into());
    let format = a.format.as_deref().unwrap_or("-");
    match (&outcome.verdict, &outcome.reason) {
        (Verdict::Accepted, _) => {
            let t = &outcome.totals;
            line(format!("accepted  {format}  {digest}"));
            line(format!(
                "  {} entries ({} files, {} dirs, {} symlinks), {} bytes in, {} bytes out, ratio {:.2}",
                t.entries, t.files, t.dirs, t.symlinks, t.bytes_in, t.bytes_out, t.ratio
            ));
            let flagged: Vec<String> = outcome
                .entries
                .iter()
                .filter(|e| !e.flags.is_empty())
                .map(|e| {
                    let flags: Vec<String> = e
                        .flags
                        .iter()
                        .map(|f| {
                            serde_json::to_value(f)
                                .ok()
                                .and_then(|v| v.as_str().map(str::to_owned))
                                .unwrap_or_default()
                        })
                        .collect();
                    format!("    {}  [{}]", e.path, flags.join(", "))
                })
                .collect();
            if !flagged.is_empty() {
                line("  flagged:".into());
                for l in flagged {
                    line(l);
                }
            }
            line(match staged {
                Staged::At(p) => format!("  staged at {}", p.display()),
                Staged::Removed => {
                    "  (staged in a temporary directory, now removed; use --out DIR to keep it)"
                        .into()
                }
                Staged::Released => "  (staged by the broker, now released)".into(),
            });
        }
        (Verdict::Rejected, reason) => {
            line(format!("rejected  {format}  {digest}"));
            if let Some(r) = reason {
                line(format!("  reason: {}: {}", r.code, r.detail));
                if let Some(entry) = &r.entry {
                    line(format!("  entry:  {entry}"));
                }
                if let (Some(limit), Some(observed)) = (r.limit, r.observed) {
                    line(format!("  limit:  {limit} (observed {observed})"));
                }
            }
        }
    }
    if let Some(summary) = sandbox {
        line(format!("  sandbox: {summary}"));
    }
    s
}

/// Print an answer on stdout: the outcome, plus how it was confined (`"sandbox"`) when a child
/// ran.
pub fn print_answer<S: Serialize>(
    outcome: &Outcome,
    sandbox: Option<&S>,
    summary: Option<&str>,
    staged: Staged<'_>,
    as_json: bool,
) -> Result<(), Failure> {
    if as_json {
        let answer = json(outcome, sandbox).map_err(|e| Failure::operational(e.to_string()))?;
        println!(
            "{}",
            serde_json::to_string_pretty(&answer)
                .map_err(|e| Failure::operational(e.to_string()))?
        );
    } else {
        print!("{}", text(outcome, staged, summary));
    }
    Ok(())
}

/// The broker's `sandbox` object (`--server`) as one line for humans, as the local CLI prints
/// its own: `confined (landlock fully_enforced,
/// ABI 7; seccomp on; uid 65534)`.
pub fn remote_summary(sandbox: Option<&Value>) -> Option<String> {
    let s = sandbox?;
    let how = match s.get("child").filter(|c| !c.is_null()) {
        Some(c) => format!(
            "landlock {}, ABI {}; seccomp {}; uid {}",
            c["landlock"].as_str().unwrap_or("?"),
            c["landlock_abi"],
            if c["seccomp"].as_bool() == Some(true) {
                "on"
            } else {
                "OFF"
            },
            c["uid"]
        ),
        None => "the child did not report".to_owned(),
    };
    let confined = s["confined"].as_bool() == Some(true);
    Some(format!(
        "{} ({how})",
        if confined { "confined" } else { "NOT CONFINED" }
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use skillbox::extract::inventory::{ArtifactFacts, Totals};
    use skillbox::reason::{Reason, ReasonCode};

    fn rejected() -> Outcome {
        let facts = ArtifactFacts {
            digest: None,
            format: Some("tar".into()),
            size: 10,
        };
        let reason = Reason::new(ReasonCode::FileSize, "too big").limit(5, 6);
        Outcome::rejected(facts, Totals::default(), reason)
    }

    #[test]
    fn sandbox_is_added_only_when_a_child_ran() {
        let o = rejected();
        let without = json::<Value>(&o, None).unwrap_or_default();
        assert!(without.get("sandbox").is_none());
        assert_eq!(without, serde_json::to_value(&o).unwrap_or_default());
        let with = json(&o, Some(&serde_json::json!({"confined": true}))).unwrap_or_default();
        assert_eq!(with["sandbox"]["confined"], true);
        assert_eq!(with["reason"]["code"], "file_size");
    }

    #[test]
    fn text_names_the_reason_the_limit_and_the_sandbox() {
        let t = text(&rejected(), Staged::Removed, Some("confined (x)"));
        assert_eq!(
            t,
            "rejected  tar  -\n  reason: file_size: too big\n  limit:  5 (observed 6)\n  sandbox: confined (x)\n"
        );
    }
}
