//! The printed answer of one extraction, as `extract` (local or `--server`) and `fetch` show it:
//! the `--json` object and the text form. One place, so the commands cannot drift apart.
//!
//! The JSON object is the [`Outcome`]'s fields plus `sandbox` (how the child was confined)
//! whenever a child ran. This module only formats: it never decides a verdict and never touches
//! the staged tree; only [`print_answer`] writes, to stdout.

use serde::Serialize;
use serde::ser::{SerializeMap, SerializeSeq, Serializer};
use serde_json::{Map, Value};

use skillbox::extract::inventory::Entry;
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

/// [`json`]'s object as printed (pretty, keys in order at every level), without a `Value` of
/// every entry: for 10,000 entries building that value was most of the answer's printing time.
/// The same text either way (tested).
pub fn json_text<S: Serialize + ?Sized>(
    outcome: &Outcome,
    sandbox: Option<&S>,
) -> Result<String, serde_json::Error> {
    // Every field but the entries, through the value (a field added to `Outcome` must be
    // named here, or this does not compile).
    let rest = Outcome {
        verdict: outcome.verdict,
        reason: outcome.reason.clone(),
        artifact: outcome.artifact.clone(),
        entries: Vec::new(),
        totals: outcome.totals.clone(),
        wrapper: outcome.wrapper.clone(),
        review: outcome.review.clone(),
    };
    let Value::Object(mut top) = json(&rest, sandbox)? else {
        return Err(serde::ser::Error::custom("the answer is not an object"));
    };
    top.remove("entries");
    serde_json::to_string_pretty(&Answer {
        top: &top,
        entries: &outcome.entries,
    })
}

/// The answer's object with its entries put back where a sorted map keeps them.
struct Answer<'a> {
    top: &'a Map<String, Value>,
    entries: &'a [Entry],
}

impl Serialize for Answer<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.top.len() + 1))?;
        let mut pending = true;
        for (k, v) in self.top {
            if pending && k.as_str() > "entries" {
                m.serialize_entry("entries", &Entries(self.entries))?;
                pending = false;
            }
            m.serialize_entry(k, v)?;
        }
        if pending {
            m.serialize_entry("entries", &Entries(self.entries))?;
        }
        m.end()
    }
}

struct Entries<'a>(&'a [Entry]);

impl Serialize for Entries<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.0.len()))?;
        for e in self.0 {
            seq.serialize_element(&SortedEntry(e))?;
        }
        seq.end()
    }
}

/// One entry with its keys in the order a `Value` prints them.
struct SortedEntry<'a>(&'a Entry);

impl Serialize for SortedEntry<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let e = self.0;
        let mut m = s.serialize_map(Some(7))?;
        m.serialize_entry("flags", &e.flags)?;
        m.serialize_entry("kind", &e.kind)?;
        m.serialize_entry("link_target", &e.link_target)?;
        m.serialize_entry("mode", &e.mode)?;
        m.serialize_entry("path", &e.path)?;
        m.serialize_entry("sha256", &e.sha256)?;
        m.serialize_entry("size", &e.size)?;
        m.end()
    }
}

/// The text form, one line per fact; `sandbox` is the one-line confinement summary
/// ([`skillbox::sandbox::SandboxReport::summary`]) when a child ran; `hint`, what a person
/// could do about a rejection (the text form only: JSON carries the reason as it is).
pub fn text(
    outcome: &Outcome,
    staged: Staged<'_>,
    sandbox: Option<&str>,
    hint: Option<&str>,
) -> String {
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
            if let Some(hint) = hint {
                line(format!("  hint:   {hint}"));
            }
        }
    }
    if let Some(summary) = sandbox {
        line(format!("  sandbox: {summary}"));
    }
    s
}

/// Print an answer on stdout: the outcome, plus how it was confined (`"sandbox"`) when a child
/// ran; `hint` in the text form only ([`text`]).
pub fn print_answer<S: Serialize>(
    outcome: &Outcome,
    sandbox: Option<&S>,
    summary: Option<&str>,
    staged: Staged<'_>,
    hint: Option<&str>,
    as_json: bool,
) -> Result<(), Failure> {
    if as_json {
        let answer =
            json_text(outcome, sandbox).map_err(|e| Failure::operational(e.to_string()))?;
        println!("{answer}");
    } else {
        print!("{}", text(outcome, staged, summary, hint));
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
    fn the_printed_answer_is_the_pretty_value_byte_for_byte() {
        use skillbox::extract::inventory::{Flag, Kind};
        let mut accepted = rejected();
        accepted.verdict = Verdict::Accepted;
        accepted.reason = None;
        accepted.wrapper = Some("pkg".into());
        let entry = |path: &str, kind: Kind, flags: Vec<Flag>| Entry {
            path: path.into(),
            kind,
            size: 3,
            mode: "0755".into(),
            sha256: (kind == Kind::File).then(|| skillbox::digest::Sha256Digest::of_bytes(b"x\"")),
            link_target: (kind == Kind::Symlink).then(|| "../a \"b\"".into()),
            flags,
        };
        accepted.entries = vec![
            entry("SKILL.md", Kind::File, vec![Flag::SkillMd]),
            entry("scripts", Kind::Dir, Vec::new()),
            entry(
                "scripts/run \u{e9}.sh",
                Kind::File,
                vec![Flag::Executable, Flag::Script],
            ),
            entry("scripts/link", Kind::Symlink, Vec::new()),
        ];
        accepted.totals.entries = 4;
        let sandbox = serde_json::json!({"confined": true, "verify": "structure"});
        for o in [&rejected(), &accepted] {
            for sb in [None, Some(&sandbox)] {
                let value = serde_json::to_string_pretty(&json(o, sb).unwrap_or_default())
                    .unwrap_or_default();
                let text = json_text(o, sb).unwrap_or_default();
                assert!(!text.is_empty());
                assert_eq!(text, value);
            }
        }
    }

    #[test]
    fn text_names_the_reason_the_limit_and_the_sandbox() {
        let t = text(&rejected(), Staged::Removed, Some("confined (x)"), None);
        assert_eq!(
            t,
            "rejected  tar  -\n  reason: file_size: too big\n  limit:  5 (observed 6)\n  sandbox: confined (x)\n"
        );
    }
}
