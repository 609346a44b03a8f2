//! `skillbox diff OLD.json NEW.json`: the `corpus/diff/` artifacts are extracted through the CLI,
//! their answers saved, and every pair compared. Expected verdicts and grown capabilities are
//! here (the corpus manifest holds only the artifacts' own expectations).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

const UNCHANGED: i32 = 0;
const CONTENT_ONLY: i32 = 4;
const NEEDS_REVIEW: i32 = 5;

fn skillbox(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_skillbox"))
        .args(args)
        .output()
        .expect("spawn")
}

/// Extract every diff artifact once and save its answer as `<name>.json` in `dir`.
fn answers(dir: &Path) -> impl Fn(&str) -> String + '_ {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus/diff");
    for name in [
        "base",
        "doc_update",
        "script_added",
        "url_in_script",
        "tools_widened",
        "file_renamed",
        "script_renamed",
        "prose_mention",
        "code_block_host",
        "upload_added",
    ] {
        let art: PathBuf = corpus.join(format!("{name}.tar"));
        let o = skillbox(&["extract", art.to_str().unwrap_or(""), "--json"]);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{name}: {}",
            String::from_utf8_lossy(&o.stdout)
        );
        std::fs::write(dir.join(format!("{name}.json")), &o.stdout).expect("write");
    }
    move |name: &str| {
        dir.join(format!("{name}.json"))
            .to_string_lossy()
            .into_owned()
    }
}

fn diff_json(old: &str, new: &str) -> (Option<i32>, Value) {
    let o = skillbox(&["diff", old, new, "--json"]);
    let v = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&o.stderr)));
    (o.status.code(), v)
}

/// The `grown` list of a diff answer as "KIND SUBJECT" lines.
pub(super) fn grown(v: &Value) -> Vec<String> {
    v["grown"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|g| {
                    format!(
                        "{} {}",
                        g["kind"].as_str().unwrap_or(""),
                        g["subject"].as_str().unwrap_or("")
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn diff_cases() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let a = answers(tmp.path());
    let cases: [(&str, &str, i32, &str, &[&str]); 11] = [
        ("base", "base", UNCHANGED, "unchanged", &[]),
        ("base", "doc_update", CONTENT_ONLY, "content_only", &[]),
        (
            "base",
            "script_added",
            NEEDS_REVIEW,
            "needs_review",
            &["new_script scripts/ocr.py"],
        ),
        (
            "base",
            "url_in_script",
            NEEDS_REVIEW,
            "needs_review",
            &[
                "changed_script scripts/extract.sh",
                "new_host telemetry.pdfhost.net",
                "new_download curl",
            ],
        ),
        (
            "base",
            "tools_widened",
            NEEDS_REVIEW,
            "needs_review",
            &["new_tool Bash(curl:*)"],
        ),
        ("base", "file_renamed", CONTENT_ONLY, "content_only", &[]),
        ("base", "script_renamed", CONTENT_ONLY, "content_only", &[]),
        ("script_added", "base", CONTENT_ONLY, "content_only", &[]),
        // Prose mentions never grow capabilities on their own; the same host in code does.
        ("base", "prose_mention", CONTENT_ONLY, "content_only", &[]),
        (
            "base",
            "code_block_host",
            NEEDS_REVIEW,
            "needs_review",
            &["new_host mirror.pdfhost.net", "new_download curl"],
        ),
        (
            "base",
            "upload_added",
            NEEDS_REVIEW,
            "needs_review",
            &[
                "changed_script scripts/extract.sh",
                "new_host drop.pdfhost.net",
                "new_upload curl -T",
            ],
        ),
    ];
    for (old, new, code, change, want) in cases {
        let (got_code, v) = diff_json(&a(old), &a(new));
        assert_eq!(got_code, Some(code), "{old} -> {new}: {v:#}");
        assert_eq!(v["change"], change, "{old} -> {new}");
        assert_eq!(grown(&v), want, "{old} -> {new}: {v:#}");
    }

    // The prose case is not vacuous: the review saw every mention, as prose.
    let prose: Value = serde_json::from_slice(
        &std::fs::read(a("prose_mention")).unwrap_or_else(|e| panic!("{e}")),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let m = &prose["review"]["mentions"];
    assert_eq!(
        m["hosts"],
        serde_json::json!(["blog.pdfhost.net", "paste.pdfhost.net"]),
        "{m:#}"
    );
    assert_eq!(m["uploads"], serde_json::json!(["curl -F @file"]), "{m:#}");
    assert!(
        prose["review"]["findings"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|f| f["file"] == "SKILL.md" && f["kind"] != "requested_tool")
            .all(|f| f["context"] == "prose"),
        "{prose:#}"
    );

    let (_, v) = diff_json(&a("base"), &a("doc_update"));
    assert_eq!(
        v["files"]["modified"],
        serde_json::json!(["references/guide.md"])
    );
    let (_, v) = diff_json(&a("base"), &a("file_renamed"));
    assert_eq!(
        v["files"]["renamed"],
        serde_json::json!([{"from": "references/guide.md", "to": "references/tables.md"}])
    );
    assert_eq!(v["files"]["modified"], serde_json::json!(["SKILL.md"]));
    let (_, v) = diff_json(&a("base"), &a("url_in_script"));
    let host = v["grown"]
        .as_array()
        .and_then(|g| g.iter().find(|g| g["kind"] == "new_host"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(host["at"], "scripts/extract.sh:3");
    let (_, v) = diff_json(&a("script_added"), &a("base"));
    assert_eq!(
        grown(&serde_json::json!({"grown": v["dropped"]})),
        ["new_script scripts/ocr.py"]
    );
}

#[test]
fn human_output_lists_grown_capabilities_first() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let a = answers(tmp.path());
    let o = skillbox(&["diff", &a("base"), &a("url_in_script")]);
    assert_eq!(o.status.code(), Some(NEEDS_REVIEW));
    let text = String::from_utf8_lossy(&o.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("needs_review  sha256:"), "{text}");
    assert!(lines[1].contains("grown capabilities (3)"), "{text}");
    let files_at = lines.iter().position(|l| l.contains("files:")).unwrap_or(0);
    let host_at = lines
        .iter()
        .position(|l| l.contains("new_host") && l.contains("telemetry.pdfhost.net"))
        .unwrap_or(usize::MAX);
    assert!(host_at < files_at, "{text}");
}

#[test]
fn rejected_or_malformed_inputs_are_usage_errors() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let a = answers(tmp.path());
    let bad = tmp.path().join("bad.json");
    std::fs::write(&bad, b"{\"verdict\": ").expect("write");
    let o = skillbox(&["diff", &a("base"), bad.to_str().unwrap_or("")]);
    assert_eq!(o.status.code(), Some(2));
    let rejected = tmp.path().join("rejected.json");
    let md = tmp.path().join("SKILL.md");
    std::fs::write(&md, b"no frontmatter\n").expect("write");
    let out = skillbox(&["extract", md.to_str().unwrap_or(""), "--json"]);
    assert_eq!(out.status.code(), Some(3));
    std::fs::write(&rejected, &out.stdout).expect("write");
    let o = skillbox(&["diff", &a("base"), rejected.to_str().unwrap_or("")]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = skillbox(&[
        "diff",
        &a("base"),
        tmp.path().join("missing.json").to_str().unwrap_or(""),
    ]);
    // A path that names no file is a usage error, for every command.
    assert_eq!(o.status.code(), Some(2));
}
