//! `skillbox replay`: a correct manifest passes; a deliberately wrong one fails with a readable
//! diff, a JSON report and valid JUnit; unexpected files, missing files and malformed manifests
//! are reported, never skipped; stray writes outside the staging directory are caught.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use serde_json::{Value, json};

const SKILL: &[u8] = b"---\nname: demo\ndescription: A demo skill\n---\nUse it.\n";

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_skillbox")
}

fn replay(args: &[&str]) -> Output {
    Command::new(bin())
        .arg("replay")
        .args(args)
        .output()
        .expect("spawn skillbox")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn tar_bytes(entries: &[(&[u8], &[u8])]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (name, data) in entries {
        let mut h = tar::Header::new_ustar();
        h.set_entry_type(tar::EntryType::Regular);
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_mtime(0);
        if let Some(u) = h.as_ustar_mut() {
            u.name[..name.len()].copy_from_slice(name);
        }
        h.set_cksum();
        b.append(&h, *data).expect("append");
    }
    b.into_inner().expect("into_inner")
}

fn write(dir: &Path, rel: &str, bytes: &[u8]) {
    let p = dir.join(rel);
    if let Some(parent) = p.parent() {
        std::fs::create_dir_all(parent).expect("create_dir_all");
    }
    std::fs::write(p, bytes).expect("write");
}

fn case(name: &str, file: &str, kind: &str, limits: Value, verdict: &str, reason: Value) -> Value {
    json!({"name": name, "file": file, "type": kind, "media_type": null, "limits": limits, "digest": null,
           "expect": {"verdict": verdict, "reason": reason}, "description": format!("test case {name}")})
}

/// A small corpus: an accepted tar, a traversal, a SKILL.md, and a limit case.
fn corpus(dir: &Path) -> Vec<Value> {
    write(
        dir,
        "benign/ok.tar",
        &tar_bytes(&[(b"SKILL.md", SKILL), (b"docs/a.md", b"a")]),
    );
    write(
        dir,
        "hostile/slip.tar",
        &tar_bytes(&[(b"SKILL.md", SKILL), (b"../../escape", b"x")]),
    );
    write(dir, "benign/SKILL.md", SKILL);
    write(
        dir,
        "hostile/many.tar",
        &tar_bytes(&[(b"SKILL.md", SKILL), (b"a", b"a"), (b"b", b"b")]),
    );
    write(dir, "README.md", b"not a case\n");
    write(dir, "CHECKSUMS", b"not a case either\n");
    vec![
        case(
            "ok",
            "benign/ok.tar",
            "archive",
            Value::Null,
            "accepted",
            Value::Null,
        ),
        case(
            "slip",
            "hostile/slip.tar",
            "archive",
            Value::Null,
            "rejected",
            json!("path_traversal"),
        ),
        case(
            "skill_md",
            "benign/SKILL.md",
            "skill-md",
            Value::Null,
            "accepted",
            Value::Null,
        ),
        case(
            "many",
            "hostile/many.tar",
            "archive",
            json!({"max_entries": 2}),
            "rejected",
            json!("entry_count"),
        ),
    ]
}

/// [`corpus`] with a manifest that names every case rightly, in `c` of a new temporary
/// directory (returned too: it lives as long as the caller holds it).
fn passing_corpus() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("c");
    manifest(&dir, &corpus(&dir));
    (tmp, dir)
}

fn manifest(dir: &Path, cases: &[Value]) {
    let m = json!({"version": 1, "cases": cases});
    write(dir, "manifest.json", m.to_string().as_bytes());
}

#[test]
fn a_correct_manifest_passes_with_json_and_junit() {
    let (tmp, dir) = passing_corpus();
    let junit = tmp.path().join("junit.xml");
    let o = replay(&[
        dir.to_str().unwrap_or(""),
        "--json",
        "--jobs",
        "3",
        "--junit",
        junit.to_str().unwrap_or(""),
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "stdout: {}\nstderr: {}",
        text(&o.stdout),
        text(&o.stderr)
    );
    let v: Value =
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&o.stdout)));
    assert_eq!(v["ok"], true);
    assert_eq!(v["summary"]["total"], 4);
    assert_eq!(v["summary"]["passed"], 4);
    let slip = v["cases"]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["name"] == "slip"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(slip["status"], "pass");
    assert_eq!(slip["got"]["reason"], "path_traversal");
    let xml = std::fs::read_to_string(&junit).unwrap_or_default();
    let root = xml::parse(&xml).unwrap_or_else(|e| panic!("invalid JUnit ({e}):\n{xml}"));
    let suite = &root.children[0];
    assert_eq!(
        (root.name.as_str(), suite.name.as_str()),
        ("testsuites", "testsuite")
    );
    assert_eq!(suite.attrs["tests"], "4");
    assert_eq!(suite.attrs["failures"], "0");
    assert_eq!(suite.children.len(), 4);
    python_parses(&junit);
    // Human output by default: one summary line, no case blocks.
    let o = replay(&[dir.to_str().unwrap_or("")]);
    assert_eq!(o.status.code(), Some(0));
    assert!(
        text(&o.stdout).contains("4 cases: 4 passed, 0 failed, 0 unexpected, 0 errors"),
        "{}",
        text(&o.stdout)
    );
}

#[test]
fn a_wrong_manifest_fails_with_a_readable_diff_and_valid_junit() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("c");
    let mut cases = corpus(&dir);
    // Wrong on purpose: the traversal "accepted", the limit case with the wrong reason, and
    // a case whose file does not exist. A file with a hostile name has no entry at all.
    cases[1] = case(
        "slip",
        "hostile/slip.tar",
        "archive",
        Value::Null,
        "accepted",
        Value::Null,
    );
    cases[3] = case(
        "many <&\"'>",
        "hostile/many.tar",
        "archive",
        json!({"max_entries": 2}),
        "rejected",
        json!("ratio"),
    );
    cases.push(case(
        "gone",
        "hostile/gone.zip",
        "archive",
        Value::Null,
        "rejected",
        json!("corrupt"),
    ));
    manifest(&dir, &cases);
    write(
        &dir,
        "extra/new\u{1b}[31m.tar",
        &tar_bytes(&[(b"/etc/evil", b"x")]),
    );
    let junit = tmp.path().join("junit.xml");
    let o = replay(&[
        dir.to_str().unwrap_or(""),
        "--junit",
        junit.to_str().unwrap_or(""),
    ]);
    let out = text(&o.stdout);
    assert_eq!(
        o.status.code(),
        Some(1),
        "stdout: {out}\nstderr: {}",
        text(&o.stderr)
    );
    // The diff names the case, what was expected, what came back, and why.
    let block = |name: &str| -> String {
        let start = out
            .find(&format!("  {name}  "))
            .unwrap_or_else(|| panic!("no block for {name}:\n{out}"));
        out[start..].lines().take(5).collect::<Vec<_>>().join("\n")
    };
    let slip = block("slip");
    assert!(
        out.contains("FAIL        slip  [hostile/slip.tar]"),
        "{out}"
    );
    assert!(slip.contains("expected  accepted"), "{slip}");
    assert!(
        slip.contains("got       rejected (path_traversal)"),
        "{slip}"
    );
    assert!(
        slip.contains("detail    name contains a `..` component [entry: ../../escape]"),
        "{slip}"
    );
    let many = block("many <&\"'>");
    assert!(
        many.contains("expected  rejected (ratio)")
            && many.contains("got       rejected (entry_count)"),
        "{many}"
    );
    assert!(
        out.contains("ERROR       gone  [hostile/gone.zip]"),
        "{out}"
    );
    assert!(
        out.contains("UNEXPECTED  extra/new\\u{1b}[31m.tar"),
        "control characters must be escaped: {out}"
    );
    assert!(out.contains("got       rejected (absolute_path)"), "{out}");
    assert!(
        out.contains("6 cases: 2 passed, 2 failed, 1 unexpected, 1 errors"),
        "{out}"
    );

    let xml = std::fs::read_to_string(&junit).unwrap_or_default();
    let root = xml::parse(&xml).unwrap_or_else(|e| panic!("invalid JUnit ({e}):\n{xml}"));
    let suite = &root.children[0];
    assert_eq!(suite.attrs["tests"], "6");
    assert_eq!(suite.attrs["failures"], "3");
    assert_eq!(suite.attrs["errors"], "1");
    let by_name: BTreeMap<&str, &xml::Element> = suite
        .children
        .iter()
        .map(|c| (c.attrs["name"].as_str(), c))
        .collect();
    let failure = &by_name["slip"].children[0];
    assert_eq!(failure.name, "failure");
    assert_eq!(
        failure.attrs["message"],
        "expected accepted, got rejected (path_traversal)"
    );
    assert!(
        failure.text.contains("entry: ../../escape"),
        "{}",
        failure.text
    );
    assert!(
        by_name.contains_key("many <&\"'>"),
        "escaped name must round-trip: {:?}",
        by_name.keys()
    );
    assert_eq!(by_name["gone"].children[0].name, "error");
    python_parses(&junit);

    // --json carries the same verdicts.
    let o = replay(&[dir.to_str().unwrap_or(""), "--json"]);
    assert_eq!(o.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&o.stdout).expect("from_slice");
    assert_eq!(v["ok"], false);
    assert_eq!(
        v["summary"],
        json!({"total": 6, "passed": 2, "failed": 2, "unexpected": 1, "errors": 1, "seconds": v["summary"]["seconds"]})
    );
}

#[test]
fn missing_or_malformed_manifests_are_clear_usage_errors() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("c");
    corpus(&dir);
    let o = replay(&[dir.to_str().unwrap_or("")]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("no manifest"),
        "{}",
        text(&o.stderr)
    );
    let bad: [(&str, &str); 6] = [
        ("{not json", "malformed manifest"),
        (r#"{"version": 2, "cases": []}"#, "version 2"),
        (
            r#"{"version": 1, "cases": [{"name": "a", "file": "a", "type": "archive", "expect": {"verdict": "rejected", "reason": "nope"}}]}"#,
            "unknown variant `nope`",
        ),
        (
            r#"{"version": 1, "cases": [{"name": "a", "file": "../a", "type": "archive", "expect": {"verdict": "rejected", "reason": null}}]}"#,
            "without `..`",
        ),
        (
            r#"{"version": 1, "cases": [{"name": "a", "file": "a", "type": "archive", "expect": {"verdict": "accepted", "reason": "corrupt"}}]}"#,
            "cannot name a reason",
        ),
        (
            r#"{"version": 1, "cases": [{"name": "a", "file": "a", "type": "archive", "limits": {"max_entrys": 1}, "expect": {"verdict": "accepted", "reason": null}}]}"#,
            "max_entrys",
        ),
    ];
    for (manifest, needle) in bad {
        write(&dir, "manifest.json", manifest.as_bytes());
        let o = replay(&[dir.to_str().unwrap_or("")]);
        assert_eq!(o.status.code(), Some(2), "{manifest}: {}", text(&o.stderr));
        let err = text(&o.stderr);
        assert!(
            err.contains("manifest.json") && err.contains(needle),
            "{manifest}: {err}"
        );
    }
}

#[test]
fn nested_suites_are_replayed_under_their_directory() {
    let (_tmp, dir) = passing_corpus();
    let sub = dir.join("fuzz");
    write(&sub, "crash-1.tar", &tar_bytes(&[(b"a\x00b", b"x")]));
    manifest(
        &sub,
        &[case(
            "crash-1",
            "crash-1.tar",
            "archive",
            Value::Null,
            "rejected",
            json!("missing_skill_md"),
        )],
    );
    let o = replay(&[dir.to_str().unwrap_or(""), "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).expect("from_slice");
    let nested = v["cases"]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["name"] == "fuzz/crash-1"))
        .cloned();
    assert!(nested.is_some(), "{v}");
    assert_eq!(v["summary"]["total"], 5, "{v}");
}

/// The processes whose parent is `pid` (every thread's children).
fn children_of(pid: u32) -> Vec<u32> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|tasks| {
            tasks
                .flatten()
                .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
                .flat_map(|l| {
                    l.split_whitespace()
                        .filter_map(|p| p.parse().ok())
                        .collect::<Vec<u32>>()
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A process stopped by a signal (state `T`).
fn is_stopped(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('T'))
    })
}

/// A rejected case's tree is removed by the replay (or, with `--isolate process`, by the case's
/// `extract` process) once the child has answered and ended, not by the child inside its
/// deadline: stopped at that moment (the debug build's pause), the case's staging directory
/// holds what the child wrote before it met the duplicate; the case then passes (replay's own
/// check finds nothing left after the rejection) and the scratch directory is gone.
#[test]
fn a_rejected_case_tree_is_removed_by_the_parent_after_the_child_answered() {
    use super::{STOP_AT_DISCARD, resume, tree_names, wait_stopped};
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("c");
    write(
        &dir,
        "dup.tar",
        &tar_bytes(&[(b"SKILL.md", SKILL), (b"a.txt", b"a"), (b"a.txt", b"b")]),
    );
    manifest(
        &dir,
        &[case(
            "dup",
            "dup.tar",
            "archive",
            Value::Null,
            "rejected",
            json!("duplicate_path"),
        )],
    );
    for isolate in ["spare", "process"] {
        let scratch = tmp.path().join(format!("tmp-{isolate}"));
        std::fs::create_dir(&scratch).expect("create_dir");
        let child = Command::new(bin())
            .arg("replay")
            .arg(&dir)
            .args(["--json", "--isolate", isolate])
            .env("TMPDIR", &scratch)
            .env(STOP_AT_DISCARD.0, STOP_AT_DISCARD.1)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn skillbox");
        // A spare is supervised by replay itself; a process case by its `extract` process.
        let stopped = if isolate == "spare" {
            wait_stopped(child.id());
            child.id()
        } else {
            let until = std::time::Instant::now() + Duration::from_secs(60);
            loop {
                if let Some(p) = children_of(child.id()).into_iter().find(|&p| is_stopped(p)) {
                    break p;
                }
                assert!(
                    std::time::Instant::now() < until,
                    "no `extract` process stopped before removing the rejected tree"
                );
                std::thread::sleep(Duration::from_millis(10));
            }
        };
        let staged: Vec<PathBuf> = std::fs::read_dir(&scratch)
            .expect("read_dir")
            .flatten()
            .map(|e| e.path().join("cases/0/staging"))
            .filter(|p| p.is_dir())
            .collect();
        assert_eq!(staged.len(), 1, "{isolate}: {staged:?}");
        assert_eq!(
            tree_names(&staged[0]),
            ["SKILL.md", "a.txt"],
            "{isolate}: the tree as the child left it"
        );
        resume(stopped);
        let o = child.wait_with_output().expect("wait");
        assert_eq!(o.status.code(), Some(0), "{isolate}: {}", text(&o.stderr));
        let v: Value = serde_json::from_slice(&o.stdout).expect("json");
        assert_eq!(v["summary"]["passed"], 1, "{isolate}: {v}");
        assert_eq!(
            std::fs::read_dir(&scratch)
                .map(Iterator::count)
                .unwrap_or(99),
            0,
            "{isolate}: the scratch directory is left"
        );
    }
}

#[test]
fn writes_outside_the_staging_directory_are_caught() {
    // A stand-in for `skillbox extract` that answers "accepted" but drops a file in its
    // working directory: replay must report it even though the verdict matches.
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("c");
    write(&dir, "a.tar", &tar_bytes(&[(b"SKILL.md", SKILL)]));
    write(&dir, "b.tar", &tar_bytes(&[(b"SKILL.md", SKILL)]));
    manifest(
        &dir,
        &[
            case(
                "a",
                "a.tar",
                "archive",
                Value::Null,
                "accepted",
                Value::Null,
            ),
            case(
                "b",
                "b.tar",
                "archive",
                Value::Null,
                "rejected",
                Value::Null,
            ),
        ],
    );
    let fake = tmp.path().join("fake-skillbox");
    let answer = r#"{"verdict":"accepted","reason":null,"artifact":{"digest":null,"format":"tar","size":1},"entries":[],"totals":{"entries":0,"files":0,"dirs":0,"symlinks":0,"bytes_in":1,"bytes_out":0,"ratio":0.0}}"#;
    let script = format!(
        "#!/bin/sh\n# args: extract FILE --json --out DIR ...\nout=\"$5\"\nmkdir \"$out\" && echo x > \"$out/unlisted\"\necho stray > ./stray\necho '{answer}'\nexit 0\n"
    );
    std::fs::write(&fake, script).expect("write");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755))
        .expect("set_permissions");
    let opts = skillbox::replay::Options {
        jobs: 2,
        timeout: Duration::from_secs(30),
        isolate: skillbox::replay::Isolate::Process {
            exe: fake,
            extract_args: Vec::new(),
        },
    };
    let report = skillbox::replay::run(&dir, &opts).expect("run");
    let a = &report.cases[0];
    assert_eq!(a.status, skillbox::replay::Status::Fail, "{a:?}");
    assert!(
        a.problems
            .iter()
            .any(|p| p.contains("outside the staging directory: stray")),
        "{:?}",
        a.problems
    );
    assert!(
        a.problems
            .iter()
            .any(|p| p.contains("\"unlisted\" is on disk but not listed")),
        "{:?}",
        a.problems
    );
    assert_eq!(report.cases[1].status, skillbox::replay::Status::Fail);
    assert!(!report.all_passed());
}

#[test]
fn the_project_fuzz_regressions_replay_green() {
    let dir: PathBuf = [env!("CARGO_MANIFEST_DIR"), "corpus", "fuzz"]
        .iter()
        .collect();
    if !dir.join("manifest.json").exists() {
        return;
    }
    let o = replay(&[dir.to_str().unwrap_or("")]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stdout));
}

/// The JSON report without what differs from run to run (seconds) or names the path taken.
fn comparable_json(stdout: &[u8]) -> Value {
    let mut v: Value =
        serde_json::from_slice(stdout).unwrap_or_else(|e| panic!("{e}: {}", text(stdout)));
    if let Some(o) = v.as_object_mut() {
        o.remove("isolate");
    }
    if let Some(s) = v["summary"].as_object_mut() {
        s.remove("seconds");
    }
    for c in v["cases"]
        .as_array_mut()
        .map(Vec::as_mut_slice)
        .unwrap_or_default()
    {
        if let Some(c) = c.as_object_mut() {
            c.remove("duration");
        }
    }
    v
}

/// JUnit XML with every `time="..."` attribute blanked.
fn comparable_junit(path: &Path) -> String {
    let xml = std::fs::read_to_string(path).unwrap_or_default();
    let mut out = String::new();
    let mut rest = xml.as_str();
    while let Some(i) = rest.find(" time=\"") {
        out.push_str(&rest[..i]);
        rest = &rest[i + 7..];
        let end = rest.find('"').unwrap_or(rest.len());
        out.push_str(" time=\"\"");
        rest = rest.get(end + 1..).unwrap_or("");
    }
    out.push_str(rest);
    out
}

/// Replay `dir` both ways with `extra` arguments: the JSON reports (seconds aside) and the
/// JUnit files (times aside) must be the same case by case. Returns the spare run's JSON.
fn both_paths_agree(dir: &Path, extra: &[&str], spare_expected: bool) -> Value {
    // Both runs stage their cases there too (TMPDIR).
    let tmp = super::corpus_scratch();
    let mut reports = Vec::new();
    for isolate in ["process", "spare"] {
        let junit = tmp.path().join(format!("{isolate}.xml"));
        let mut args = vec![
            dir.to_str().unwrap_or(""),
            "--json",
            "--jobs",
            "2",
            "--isolate",
            isolate,
            "--junit",
            junit.to_str().unwrap_or(""),
        ];
        args.extend_from_slice(extra);
        let o = Command::new(bin())
            .arg("replay")
            .args(&args)
            .env("TMPDIR", tmp.path())
            .output()
            .expect("spawn skillbox");
        assert!(
            matches!(o.status.code(), Some(0 | 1)),
            "{isolate}: {}\n{}",
            text(&o.stdout),
            text(&o.stderr)
        );
        let v: Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
        let expect = if isolate == "spare" && spare_expected {
            "spare"
        } else {
            "process"
        };
        assert_eq!(v["isolate"], expect, "{isolate}");
        reports.push((
            o.status.code(),
            comparable_json(&o.stdout),
            comparable_junit(&junit),
            v,
        ));
    }
    let (spare, process) = (
        reports.pop().unwrap_or_default(),
        reports.pop().unwrap_or_default(),
    );
    assert_eq!(process.0, spare.0, "exit status");
    let (p, s) = (&process.1["cases"], &spare.1["cases"]);
    assert_eq!(
        p.as_array().map(Vec::len),
        s.as_array().map(Vec::len),
        "case count"
    );
    for (a, b) in p
        .as_array()
        .into_iter()
        .flatten()
        .zip(s.as_array().into_iter().flatten())
    {
        assert_eq!(a, b, "the case differs between --isolate process and spare");
    }
    assert_eq!(process.1, spare.1, "JSON report");
    assert_eq!(process.2, spare.2, "JUnit report");
    spare.3
}

/// Copy `from` to `to` (directories and regular files only, as the corpus holds).
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create_dir_all");
    for e in std::fs::read_dir(from).expect("read_dir").flatten() {
        let (src, dst) = (e.path(), to.join(e.file_name()));
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            copy_tree(&src, &dst);
        } else {
            std::fs::copy(&src, &dst).expect("copy");
        }
    }
}

#[test]
fn spares_and_processes_give_the_same_report_over_the_project_corpus() {
    // The project's corpus, every suite, without its few cases that stage 10,000 entries or
    // expand 300 MiB (seconds each in a debug build; `scripts/bench-replay.sh` compares the
    // reports of the whole corpus in release builds).
    let heavy = |name: &str| name.contains("entries_1000") || name.contains("expanded_300mib");
    let root: PathBuf = [env!("CARGO_MANIFEST_DIR"), "corpus"].iter().collect();
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("corpus");
    let mut m: Value =
        serde_json::from_slice(&std::fs::read(root.join("manifest.json")).expect("read"))
            .expect("parse the manifest");
    let mut kept = Vec::new();
    for c in m["cases"].as_array().cloned().unwrap_or_default() {
        if heavy(c["name"].as_str().unwrap_or("")) {
            continue;
        }
        let file = c["file"].as_str().unwrap_or("");
        write(
            &dir,
            file,
            &std::fs::read(root.join(file)).expect("read a case"),
        );
        kept.push(c);
    }
    let dropped = m["cases"].as_array().map_or(0, Vec::len) - kept.len();
    assert!(dropped <= 10, "{dropped} cases left out");
    m["cases"] = Value::Array(kept);
    write(&dir, "manifest.json", m.to_string().as_bytes());
    for e in std::fs::read_dir(&root).expect("read_dir").flatten() {
        if e.path().join("manifest.json").is_file() {
            copy_tree(&e.path(), &dir.join(e.file_name()));
        }
    }
    let v = both_paths_agree(&dir, &[], true);
    assert_eq!(v["ok"], true, "{}", v["summary"]);
    assert!(
        v["summary"]["total"].as_u64().unwrap_or(0) > 300,
        "{}",
        v["summary"]
    );
}

#[test]
fn a_child_killed_by_seccomp_is_that_cases_alone_on_both_paths() {
    // A replacement profile without `mkdirat` (it may only tighten): a package with a
    // directory kills its child with SIGSYS; a flat one is still accepted beside it.
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("c");
    write(
        &dir,
        "flat.tar",
        &tar_bytes(&[(b"SKILL.md", SKILL), (b"a.md", b"a")]),
    );
    write(
        &dir,
        "nested.tar",
        &tar_bytes(&[(b"SKILL.md", SKILL), (b"docs/a.md", b"a")]),
    );
    write(&dir, "SKILL.md", SKILL);
    manifest(
        &dir,
        &[
            case(
                "flat",
                "flat.tar",
                "archive",
                Value::Null,
                "accepted",
                Value::Null,
            ),
            case(
                "nested",
                "nested.tar",
                "archive",
                Value::Null,
                "accepted",
                Value::Null,
            ),
            case(
                "md",
                "SKILL.md",
                "skill-md",
                Value::Null,
                "accepted",
                Value::Null,
            ),
        ],
    );
    let arch = if cfg!(target_arch = "aarch64") {
        "aarch64"
    } else {
        "x86_64"
    };
    let embedded: Value = serde_json::from_slice(
        &std::fs::read(
            [
                env!("CARGO_MANIFEST_DIR"),
                "sandbox-profiles",
                &format!("{arch}.json"),
            ]
            .iter()
            .collect::<PathBuf>(),
        )
        .expect("read the embedded profile"),
    )
    .expect("parse the embedded profile");
    let mut tighter = embedded.clone();
    if let Some(f) = tighter["skillbox_child"]["filter"].as_array_mut() {
        f.retain(|rule| rule["syscall"] != "mkdirat");
    }
    assert_ne!(tighter, embedded, "the profile allows mkdirat");
    let profile = tmp.path().join("no-mkdirat.json");
    std::fs::write(&profile, tighter.to_string()).expect("write");
    let arg = format!("--seccomp-profile={}", profile.display());
    let v = both_paths_agree(&dir, &["--extract-arg", &arg], true);
    let by_name: BTreeMap<&str, &Value> = v["cases"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| (c["name"].as_str().unwrap_or(""), c))
        .collect();
    assert_eq!(by_name["flat"]["status"], "pass", "{v}");
    assert_eq!(by_name["md"]["status"], "pass", "{v}");
    let nested = by_name["nested"];
    assert_eq!(nested["status"], "fail", "{v}");
    assert_eq!(nested["got"]["reason"], "sandbox_violation", "{v}");
    assert!(
        nested["got"]["detail"]
            .as_str()
            .is_some_and(|d| d.contains("SIGSYS")),
        "{v}"
    );
}

#[test]
fn extract_args_the_spares_cannot_take_run_cases_as_processes() {
    let (_tmp, dir) = passing_corpus();
    // A limit flag is the spares' to apply, over each case's own limits as `extract` applies
    // flags over a limits file: the two-entry `ok` is now refused, on both paths alike.
    let v = both_paths_agree(&dir, &["--extract-arg", "--max-entries=1"], true);
    let ok = v["cases"]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["name"] == "ok"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(ok["got"]["verdict"], "rejected", "{v}");
    assert_eq!(ok["got"]["reason"], "entry_count", "{v}");
    // `--skill-name` is not: every case runs as an `extract` process, which takes it.
    let v = both_paths_agree(&dir, &["--extract-arg", "--skill-name=demo"], false);
    assert_eq!(v["ok"], true, "{v}");
    // An invalid limit flag is refused once, before anything runs.
    let o = replay(&[
        dir.to_str().unwrap_or(""),
        "--extract-arg",
        "--max-entries=0",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("max_entries"),
        "{}",
        text(&o.stderr)
    );
}

/// Parse with python3's xml.etree when python3 is installed (a second, independent parser).
fn python_parses(path: &Path) {
    let Ok(o) = Command::new("python3")
        .args(["-c", "import sys, xml.etree.ElementTree as E; r = E.parse(sys.argv[1]).getroot(); print(r.tag)"])
        .arg(path)
        .output()
    else {
        return;
    };
    assert!(
        o.status.success(),
        "python3 cannot parse the JUnit: {}",
        text(&o.stderr)
    );
    assert_eq!(text(&o.stdout).trim(), "testsuites");
}

/// A strict little XML 1.0 well-formedness parser (elements, attributes, text, entities), so
/// the JUnit check does not depend on anything being installed.
mod xml {
    use std::collections::BTreeMap;

    #[derive(Debug, Default)]
    pub struct Element {
        pub name: String,
        pub attrs: BTreeMap<String, String>,
        pub children: Vec<Element>,
        pub text: String,
    }

    fn valid_char(c: char) -> bool {
        matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{d7ff}' | '\u{e000}'..='\u{fffd}' | '\u{10000}'..='\u{10ffff}')
    }

    fn unescape(s: &str) -> Result<String, String> {
        let mut out = String::new();
        let mut rest = s;
        while let Some(i) = rest.find('&') {
            out.push_str(&rest[..i]);
            let end = rest[i..].find(';').ok_or("unterminated entity")? + i;
            let ent = &rest[i + 1..end];
            let c = match ent {
                "amp" => '&',
                "lt" => '<',
                "gt" => '>',
                "quot" => '"',
                "apos" => '\'',
                _ if ent.starts_with("#x") => u32::from_str_radix(&ent[2..], 16)
                    .ok()
                    .and_then(char::from_u32)
                    .ok_or("bad char ref")?,
                _ if ent.starts_with('#') => ent[1..]
                    .parse::<u32>()
                    .ok()
                    .and_then(char::from_u32)
                    .ok_or("bad char ref")?,
                _ => return Err(format!("unknown entity &{ent};")),
            };
            if !valid_char(c) {
                return Err(format!("reference to a forbidden character {:?}", c as u32));
            }
            out.push(c);
            rest = &rest[end + 1..];
        }
        out.push_str(rest);
        Ok(out)
    }

    fn is_name(s: &str) -> bool {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '.' | ':'))
    }

    pub fn parse(doc: &str) -> Result<Element, String> {
        if let Some(c) = doc.chars().find(|c| !valid_char(*c)) {
            return Err(format!("forbidden character U+{:04X}", c as u32));
        }
        let mut s = doc.trim_start();
        if s.starts_with("<?xml") {
            s = &s[s.find("?>").ok_or("unterminated declaration")? + 2..];
        }
        let mut stack: Vec<Element> = Vec::new();
        let mut root: Option<Element> = None;
        loop {
            let lt = match s.find('<') {
                Some(i) => i,
                None => {
                    if !s.trim().is_empty() {
                        return Err("text after the root".into());
                    }
                    break;
                }
            };
            let txt = &s[..lt];
            match stack.last_mut() {
                Some(top) => top.text.push_str(&unescape(txt)?),
                None if !txt.trim().is_empty() => return Err("text outside the root".into()),
                None => {}
            }
            s = &s[lt..];
            let gt = s.find('>').ok_or("unterminated tag")?;
            let tag = &s[1..gt];
            s = &s[gt + 1..];
            if let Some(name) = tag.strip_prefix('/') {
                let el = stack.pop().ok_or("close without open")?;
                if el.name != name.trim() {
                    return Err(format!("</{name}> closes <{}>", el.name));
                }
                match stack.last_mut() {
                    Some(parent) => parent.children.push(el),
                    None if root.is_none() => root = Some(el),
                    None => return Err("two roots".into()),
                }
                continue;
            }
            let (body, empty) = match tag.strip_suffix('/') {
                Some(b) => (b, true),
                None => (tag, false),
            };
            let name_end = body.find(char::is_whitespace).unwrap_or(body.len());
            let mut el = Element {
                name: body[..name_end].to_owned(),
                ..Element::default()
            };
            if !is_name(&el.name) {
                return Err(format!("bad element name {:?}", el.name));
            }
            let mut a = body[name_end..].trim_start();
            while !a.is_empty() {
                let eq = a.find('=').ok_or("attribute without value")?;
                let key = a[..eq].trim();
                if !is_name(key) {
                    return Err(format!("bad attribute name {key:?}"));
                }
                let v = a[eq + 1..].trim_start();
                let quote = v
                    .chars()
                    .next()
                    .filter(|q| *q == '"' || *q == '\'')
                    .ok_or("unquoted attribute")?;
                let close = v[1..].find(quote).ok_or("unterminated attribute")? + 1;
                let raw = &v[1..close];
                if raw.contains('<') {
                    return Err("`<` in an attribute".into());
                }
                if el.attrs.insert(key.to_owned(), unescape(raw)?).is_some() {
                    return Err(format!("duplicate attribute {key}"));
                }
                a = v[close + 1..].trim_start();
            }
            if root.is_some() {
                return Err("element after the root".into());
            }
            if empty {
                match stack.last_mut() {
                    Some(parent) => parent.children.push(el),
                    None => root = Some(el),
                }
            } else {
                stack.push(el);
            }
        }
        if !stack.is_empty() {
            return Err("unclosed element".into());
        }
        root.ok_or_else(|| "no root element".into())
    }
}

/// Replay warns, once and before its cases, exactly when the filesystem of its scratch
/// directory (under TMPDIR) slows down as trees are deleted (`staging_fs::warning`: ext4
/// without a journal, the disk under /var/tmp on the machines CI runs on): never on tmpfs.
#[test]
fn replay_warns_when_its_scratch_directory_slows_down_as_trees_are_deleted() {
    let (_tmp, dir) = passing_corpus();
    for scratch in ["/dev/shm", "/var/tmp"] {
        let fs = skillbox::staging_fs::filesystem(Path::new(scratch))
            .unwrap_or_else(|e| panic!("statfs {scratch}: {e}"));
        let expected = skillbox::staging_fs::warning(&fs).is_some();
        eprintln!("{scratch}: {fs:?}, a warning expected: {expected}");
        let o = Command::new(bin())
            .arg("replay")
            .arg(&dir)
            .env("TMPDIR", scratch)
            .output()
            .expect("spawn skillbox");
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(0), "{err}");
        let said = format!("skillbox: WARNING: the cases are staged under {scratch} (TMPDIR), on ");
        assert_eq!(
            err.matches(&said).count(),
            usize::from(expected),
            "{scratch} ({fs:?}): {err}"
        );
    }
    assert_eq!(
        skillbox::staging_fs::filesystem(Path::new("/dev/shm")).ok(),
        Some(skillbox::staging_fs::Filesystem::Tmpfs),
        "the test needs /dev/shm on tmpfs, where no warning is due"
    );
}

/// Ctrl-C during a replay: no case starts after it, the running ones end, every case's staged
/// tree and the run's scratch directory are removed, and the command ends with 130 and the
/// JSON error object. (Before: the scratch directory, `skillbox-replay-*` with the trees of the
/// cases running, stayed in TMPDIR.)
#[test]
fn an_interrupted_replay_leaves_nothing_in_tmpdir() {
    use std::time::Instant;
    let tmp = tempfile::tempdir().expect("tempdir");
    let corpus: PathBuf = [env!("CARGO_MANIFEST_DIR"), "corpus"].iter().collect();
    let mut child = Command::new(bin())
        .args(["replay", "--jobs", "1", "--json"])
        .arg(&corpus)
        .env("TMPDIR", tmp.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn skillbox");
    // Wait until a case is being staged in the run's scratch directory.
    let until = Instant::now() + Duration::from_secs(60);
    let staging = || {
        std::fs::read_dir(tmp.path())
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with("skillbox-replay-")
                    && std::fs::read_dir(e.path().join("cases"))
                        .is_ok_and(|mut d| d.next().is_some())
            })
    };
    while !staging() {
        assert!(
            child.try_wait().expect("try_wait").is_none(),
            "replay ended before a case was staged"
        );
        assert!(Instant::now() < until, "no case was staged");
        std::thread::sleep(Duration::from_millis(5));
    }
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("pid"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).expect("kill");
    let out = child.wait_with_output().expect("wait");
    assert_eq!(out.status.code(), Some(130), "{}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("one JSON answer");
    assert_eq!(v["error"]["kind"], "interrupted", "{v}");
    let left: Vec<_> = std::fs::read_dir(tmp.path())
        .expect("read_dir")
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "left in TMPDIR: {left:?}");
}
