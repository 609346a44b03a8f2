//! `skillbox index check FILE`: the `$schema` decision, per-entry rules, URL forms and bounds,
//! over the named fixtures in `tests/fixtures/index/`.

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

fn fixture(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/index")
        .join(name)
        .display()
        .to_string()
}

fn check(args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_skillbox"));
    // The host's proxy and fetch settings must not change what a test sees.
    for v in [
        "HTTPS_PROXY",
        "https_proxy",
        "NO_PROXY",
        "no_proxy",
        "SKILLBOX_FETCH_POLICY",
        "SKILLBOX_PROXY",
        "SKILLBOX_MAX_INDEX_BYTES",
        "SKILLBOX_MAX_INDEX_ENTRIES",
    ] {
        cmd.env_remove(v);
    }
    cmd.arg("index")
        .arg("check")
        .args(args)
        .output()
        .expect("spawn skillbox")
}

fn json_of(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}):\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    })
}

const BASE: &str = "https://example.com/.well-known/agent-skills/index.json";

#[test]
fn v020_url_forms_resolve_against_the_base() {
    let o = check(&[&fixture("v020.json"), "--base", BASE, "--json"]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v = json_of(&o);
    assert_eq!(v["index"]["version"], "0.2.0");
    assert_eq!(v["index"]["installable"], true);
    let by_name = |n: &str| -> Value {
        v["index"]["entries"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|e| e["name"] == n)
            .cloned()
            .unwrap_or(Value::Null)
    };
    let expect = [
        (
            "relative",
            "relative",
            "https://example.com/.well-known/agent-skills/relative/SKILL.md",
            false,
        ),
        (
            "path-absolute",
            "path-absolute",
            "https://example.com/dl/pack.zip",
            false,
        ),
        (
            "dot-segments",
            "relative",
            "https://example.com/dl/pack.tar.gz",
            false,
        ),
        (
            "network-path",
            "network-path",
            "https://cdn.example.net/pack.zip",
            true,
        ),
        (
            "absolute",
            "absolute",
            "https://example.com/s/SKILL.md",
            false,
        ),
        (
            "other-port",
            "absolute",
            "https://example.com:8443/s/SKILL.md",
            true,
        ),
    ];
    for (name, form, resolved, cross) in expect {
        let e = by_name(name);
        assert_eq!(e["url"]["form"], form, "{name}");
        assert_eq!(e["url"]["resolved"], resolved, "{name}");
        assert_eq!(e["url"]["cross_origin"], cross, "{name}");
        assert_eq!(e["fetchable"], true, "{name}");
    }
    assert_eq!(v["index"]["skipped"].as_array().map(Vec::len), Some(0));
}

#[test]
fn without_a_base_relative_urls_stay_unresolved() {
    let o = check(&[&fixture("v020.json")]);
    assert_eq!(o.status.code(), Some(0));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("relative/SKILL.md (unresolved: no base)"),
        "{text}"
    );
    assert!(
        text.contains("CROSS-ORIGIN") || text.contains("https://example.com/s/SKILL.md"),
        "{text}"
    );
}

#[test]
fn unknown_schema_warns_and_refuses_with_exit_5() {
    let o = check(&[&fixture("unknown-schema.json"), "--json"]);
    assert_eq!(o.status.code(), Some(5));
    assert_eq!(json_of(&o)["error"]["kind"], "unrecognised_schema");
    assert!(String::from_utf8_lossy(&o.stderr).contains("warning: unrecognised $schema"));
}

#[test]
fn absent_schema_is_the_v010_path() {
    let o = check(&[&fixture("no-schema.json")]);
    assert_eq!(o.status.code(), Some(0));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("legacy") && out.contains("not installable"),
        "{out}"
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("no digests"));
    let v = json_of(&check(&[&fixture("no-schema.json"), "--json"]));
    assert_eq!(v["index"]["version"], "0.1.0");
    assert_eq!(v["index"]["installable"], false);
    assert_eq!(v["index"]["schema"], Value::Null);
    assert_eq!(v["index"]["entries"][0]["fetchable"], false);
}

#[test]
fn rule_breaking_entries_are_skipped_with_reasons() {
    let o = check(&[&fixture("bad-entries.json"), "--base", BASE, "--json"]);
    assert_eq!(o.status.code(), Some(0));
    let v = json_of(&o);
    let names: Vec<&str> = v["index"]["entries"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["name"].as_str())
        .collect();
    assert_eq!(names, ["good"]);
    let skipped: Vec<(u64, String)> = v["index"]["skipped"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            (
                s["position"].as_u64().unwrap_or(99),
                s["code"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    let expect = [
        (1, "invalid_name"),
        (2, "invalid_name"),
        (3, "invalid_name"),
        (4, "unknown_type"),
        (5, "missing_field"),
        (6, "invalid_digest"),
        (7, "invalid_digest"),
        (8, "invalid_digest"),
        (9, "invalid_url"),
        (10, "invalid_url"),
        (11, "missing_field"),
        (12, "duplicate_name"),
        (13, "duplicate_name"),
        (14, "not_an_object"),
    ];
    let expect: Vec<(u64, String)> = expect.iter().map(|(p, c)| (*p, (*c).to_owned())).collect();
    assert_eq!(skipped, expect);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains("entry 4 skipped: unknown type \"mcp-resource-template\""),
        "{stderr}"
    );
}

#[test]
fn bounds_refuse_the_whole_index() {
    let o = check(&[&fixture("v020.json"), "--max-index-entries", "5"]);
    assert_eq!(o.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&o.stderr).contains("limit is 5"));
    let o = check(&[&fixture("v020.json"), "--max-index-bytes", "100"]);
    assert_eq!(o.status.code(), Some(3));
    // The real size of the file, not the read cap.
    let real = std::fs::metadata(fixture("v020.json"))
        .map(|m| m.len())
        .unwrap_or(0);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains(&format!("index is {real} bytes, the limit is 100 bytes")),
        "{stderr}"
    );
    // Exactly at the bound is accepted.
    let o = check(&[
        &fixture("v020.json"),
        "--max-index-bytes",
        &real.to_string(),
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // From a pipe the size is unknown: "more than N".
    let bytes = std::fs::read(fixture("v020.json")).unwrap_or_default();
    let mut child = Command::new(env!("CARGO_BIN_EXE_skillbox"))
        .args([
            "index",
            "check",
            "/dev/stdin",
            "--max-index-bytes",
            "100",
            "--json",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{e}"));
    if let Some(mut stdin) = child.stdin.take() {
        use std::io::Write;
        // The child stops reading at the bound; a broken pipe after that is expected.
        let _ = stdin.write_all(&bytes);
    }
    let o = child.wait_with_output().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(o.status.code(), Some(3));
    assert_eq!(json_of(&o)["error"]["kind"], "index");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("index is more than 100 bytes"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let tmp = tempfile::tempdir().expect("tempdir");
    let p = tmp.path().join("i.json");
    std::fs::write(&p, b"{\"skills\": [").expect("write");
    let o = check(&[p.to_str().unwrap_or("")]);
    assert_eq!(o.status.code(), Some(3));
}

/// A SOURCE that is not read as a URL is a file name; one with an `@` may be a URL typed
/// without its scheme (`alice:pw@host/i.json`), so its name is masked to the last `@` in the
/// error and in `source`, and the file is still read. A name like `https:x.json` behind a
/// directory stays a file.
#[test]
fn a_file_source_that_may_carry_a_password_is_shown_masked() {
    const MARK: &str = "pw-MARK-idx";
    let tmp = tempfile::tempdir().expect("tempdir");
    let missing = format!("alice:{MARK}@host.example/i.json");
    for json in [true, false] {
        let mut args = vec![missing.as_str()];
        if json {
            args.push("--json");
        }
        let o = check(&args);
        assert_eq!(o.status.code(), Some(2), "{missing}");
        for out in [&o.stdout, &o.stderr] {
            let out = String::from_utf8_lossy(out);
            assert!(!out.contains(MARK), "{out}");
        }
        assert!(
            String::from_utf8_lossy(if json { &o.stdout } else { &o.stderr })
                .contains("alice:***@host.example/i.json: no such file"),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let dir = tmp.path().join(format!("alice:{MARK}@host"));
    std::fs::create_dir(&dir).expect("mkdir");
    let file = dir.join("index.json");
    std::fs::copy(fixture("v020.json"), &file).expect("copy");
    let o = check(&[&file.display().to_string(), "--json"]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v = json_of(&o);
    let source = v["source"].as_str().unwrap_or_default();
    assert!(
        !source.contains(MARK) && source.ends_with("***@host/index.json"),
        "{source}"
    );
    let https_named = tmp.path().join("https:x.json");
    std::fs::copy(fixture("v020.json"), &https_named).expect("copy");
    let o = check(&[&https_named.display().to_string(), "--json"]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(
        json_of(&o)["source"].as_str(),
        Some(https_named.display().to_string().as_str())
    );
}
