//! The reporters: the human summary, the JSON object and JUnit XML of one [`Report`].

use super::*;

pub(super) fn describe_expect(e: &Expect) -> String {
    match (e.verdict, e.reason) {
        (Verdict::Accepted, _) => "accepted".into(),
        (Verdict::Rejected, Some(r)) => format!("rejected ({r})"),
        (Verdict::Rejected, None) => "rejected (any reason)".into(),
    }
}

pub(super) fn describe_got(g: &Got) -> String {
    match (g.verdict, g.reason) {
        (Verdict::Accepted, _) => "accepted".into(),
        (Verdict::Rejected, Some(r)) => format!("rejected ({r})"),
        (Verdict::Rejected, None) => "rejected (no reason)".into(),
    }
}

/// The lines explaining a case that did not pass (shared by the text and JUnit reports).
pub(super) fn explain(c: &CaseResult) -> Vec<(&'static str, String)> {
    let mut lines = Vec::new();
    match &c.expected {
        Some(e) => lines.push(("expected", describe_expect(e))),
        None => lines.push(("expected", "(no manifest entry)".into())),
    }
    match &c.got {
        Some(g) => {
            lines.push(("got", describe_got(g)));
            if let Some(d) = &g.detail {
                let entry = g
                    .entry
                    .as_deref()
                    .map(|e| format!(" [entry: {e}]"))
                    .unwrap_or_default();
                lines.push(("detail", format!("{d}{entry}")));
            }
        }
        None => lines.push(("got", "(no answer)".into())),
    }
    for p in &c.problems {
        lines.push(("problem", p.clone()));
    }
    lines
}

/// The human summary: one block per case that did not pass, then the totals.
pub fn human(report: &Report) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "replay {}: {} cases, {} jobs",
        report.dir.display(),
        report.cases.len(),
        report.jobs
    );
    for c in report.cases.iter().filter(|c| c.status != Status::Pass) {
        // Names come from file names and manifests: never print them raw to a terminal.
        let _ = writeln!(
            s,
            "{:<10}  {}  [{}]",
            c.status.label(),
            display_name(c.name.as_bytes()),
            display_name(c.file.as_bytes())
        );
        for (label, text) in explain(c) {
            let _ = writeln!(s, "    {label:<9} {}", display_name(text.as_bytes()));
        }
    }
    let _ = writeln!(
        s,
        "{} cases: {} passed, {} failed, {} unexpected, {} errors ({:.2}s)",
        report.cases.len(),
        report.count(Status::Pass),
        report.count(Status::Fail),
        report.count(Status::Unexpected),
        report.count(Status::Error),
        report.duration.as_secs_f64()
    );
    s
}

/// The `--json` object.
pub fn to_json(report: &Report) -> Value {
    json!({
        "dir": report.dir.to_string_lossy(),
        "ok": report.all_passed(),
        "isolate": report.isolate,
        "summary": {
            "total": report.cases.len(),
            "passed": report.count(Status::Pass),
            "failed": report.count(Status::Fail),
            "unexpected": report.count(Status::Unexpected),
            "errors": report.count(Status::Error),
            "seconds": (report.duration.as_secs_f64() * 1000.0).round() / 1000.0,
        },
        "cases": report.cases,
    })
}

/// Escape text for XML 1.0 content and attribute values. Characters XML cannot carry at all
/// (most C0 controls, U+FFFE/U+FFFF) are written as `\u{..}` so the report stays well formed.
pub fn xml_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for ch in text.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\n' => out.push_str("&#10;"),
            '\r' => out.push_str("&#13;"),
            '\t' => out.push_str("&#9;"),
            c if (c as u32) < 0x20 || c == '\u{fffe}' || c == '\u{ffff}' => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

/// JUnit XML: one `testsuite`, one `testcase` per case; mismatches and unexpected files are
/// `failure`s, cases that could not run are `error`s.
pub fn junit(report: &Report) -> String {
    let mut s = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let failures = report.count(Status::Fail) + report.count(Status::Unexpected);
    let errors = report.count(Status::Error);
    let secs = |d: Duration| format!("{:.3}", d.as_secs_f64());
    let suite = xml_escape(&format!("skillbox replay {}", report.dir.display()));
    let _ = writeln!(
        s,
        "<testsuites name=\"{suite}\" tests=\"{}\" failures=\"{failures}\" errors=\"{errors}\" time=\"{}\">",
        report.cases.len(),
        secs(report.duration)
    );
    let _ = writeln!(
        s,
        "  <testsuite name=\"{suite}\" tests=\"{}\" failures=\"{failures}\" errors=\"{errors}\" skipped=\"0\" time=\"{}\">",
        report.cases.len(),
        secs(report.duration)
    );
    for c in &report.cases {
        let classname = match Path::new(&c.file)
            .parent()
            .map(|p| p.to_string_lossy().replace('/', "."))
        {
            Some(p) if !p.is_empty() => format!("replay.{p}"),
            _ => "replay".into(),
        };
        let _ = write!(
            s,
            "    <testcase classname=\"{}\" name=\"{}\" file=\"{}\" time=\"{}\"",
            xml_escape(&classname),
            xml_escape(&c.name),
            xml_escape(&c.file),
            secs(c.duration)
        );
        let (tag, kind) = match c.status {
            Status::Pass => {
                s.push_str("/>\n");
                continue;
            }
            Status::Fail => ("failure", "mismatch"),
            Status::Unexpected => ("failure", "unexpected"),
            Status::Error => ("error", "error"),
        };
        let lines = explain(c);
        let message = match (&c.expected, &c.got) {
            (None, _) => "no manifest entry for this file".to_owned(),
            (Some(e), Some(g)) if !super::runner::matches(e, g) => {
                format!("expected {}, got {}", describe_expect(e), describe_got(g))
            }
            _ => c
                .problems
                .first()
                .cloned()
                .unwrap_or_else(|| "no answer".into()),
        };
        let body: String = lines.iter().map(|(l, t)| format!("{l}: {t}\n")).collect();
        let _ = writeln!(
            s,
            ">\n      <{tag} type=\"{kind}\" message=\"{}\">{}</{tag}>\n    </testcase>",
            xml_escape(&message),
            xml_escape(&body)
        );
    }
    s.push_str("  </testsuite>\n</testsuites>\n");
    s
}
