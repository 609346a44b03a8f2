//! The `extract` command's contract: exit codes, JSON shape, `--out` rules, usage errors.
//! Archives are built here by real writers (tar, zip crates).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_skillbox")
}

fn run(args: &[&str]) -> Output {
    Command::new(bin())
        .args(args)
        .output()
        .expect("spawn skillbox")
}

fn json_of(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

const SKILL: &[u8] = b"---\r\nname: demo\r\ndescription: A demo skill\r\n---\r\nUse it.\r\n";

fn tar_with(dir: &Path, name: &str, entries: &[(&str, &[u8], u32)]) -> PathBuf {
    let path = dir.join(name);
    let file = std::fs::File::create(&path).expect("create");
    let mut b = tar::Builder::new(file);
    for (p, data, mode) in entries {
        let mut h = tar::Header::new_ustar();
        h.set_size(data.len() as u64);
        h.set_mode(*mode);
        h.set_entry_type(tar::EntryType::Regular);
        h.set_mtime(0);
        b.append_data(&mut h, p, *data).expect("append_data");
    }
    b.into_inner().expect("into_inner");
    path
}

fn sha(bytes: &[u8]) -> String {
    skillbox::digest::Sha256Digest::of_bytes(bytes).to_string()
}

/// `extract ART --digest SHA256 --out OUT --json`, the digest being the artifact's own.
fn extract_digested(art: &Path, out: &Path) -> Vec<String> {
    let digest = sha(&std::fs::read(art).unwrap_or_default());
    let (art, out) = (art.to_string_lossy(), out.to_string_lossy());
    [
        "extract", &art, "--digest", &digest, "--out", &out, "--json",
    ]
    .map(str::to_owned)
    .to_vec()
}

/// The permission bits of `path` on disk (0 when it cannot be read).
fn mode_on_disk(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .map(|m| m.permissions().mode() & 0o7777)
        .unwrap_or(0)
}

#[test]
fn accepted_archive_json_and_files_on_disk() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let art = tar_with(
        tmp.path(),
        "pkg.tar",
        &[
            ("SKILL.md", SKILL, 0o644),
            ("scripts/run.sh", b"#!/bin/sh\necho hi\n", 0o4777),
        ],
    );
    let out = tmp.path().join("out");
    let bytes = std::fs::read(&art).unwrap_or_default();
    let args = extract_digested(&art, &out);
    let o = run(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(
        o.status.code(),
        Some(0),
        "stderr: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v = json_of(&o);
    assert_eq!(v["verdict"], "accepted");
    assert_eq!(v["reason"], Value::Null);
    assert_eq!(v["artifact"]["format"], "tar");
    assert_eq!(v["artifact"]["digest"], sha(&bytes));
    assert_eq!(v["artifact"]["size"], bytes.len() as u64);
    let paths: Vec<&str> = v["entries"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["path"].as_str())
        .collect();
    assert_eq!(paths, ["SKILL.md", "scripts", "scripts/run.sh"]);
    let script = &v["entries"][2];
    assert_eq!(script["mode"], "0755");
    assert_eq!(script["kind"], "file");
    assert_eq!(script["sha256"], sha(b"#!/bin/sh\necho hi\n"));
    let flags: Vec<&str> = script["flags"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f.as_str())
        .collect();
    assert_eq!(flags, ["executable", "script", "mode_sanitised"]);
    assert_eq!(v["totals"]["files"], 2);
    assert_eq!(v["totals"]["dirs"], 1);
    // CRLF kept byte for byte; setuid bit gone on disk.
    assert_eq!(
        std::fs::read(out.join("SKILL.md")).unwrap_or_default(),
        SKILL
    );
    assert_eq!(mode_on_disk(&out.join("scripts/run.sh")), 0o755);
}

/// Modes on disk are the inventory's whatever umask the caller has: the child clears it and
/// creates each file with its final mode (no `fchmod` after). Under umask 077 a file created
/// with its final mode but an inherited umask would be 0600, and a directory 0700 (which the
/// parent's re-check refuses).
#[test]
fn modes_on_disk_whatever_the_umask() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let art = tar_with(
        tmp.path(),
        "pkg.tar",
        &[
            ("SKILL.md", SKILL, 0o600),
            ("scripts/sub/run.sh", b"#!/bin/sh\necho hi\n", 0o700),
            ("data/big.txt", &[b'x'; 40_000], 0o640),
        ],
    );
    let out = tmp.path().join("out");
    let o = Command::new("sh")
        .arg("-c")
        .arg("umask 077 && exec \"$0\" \"$@\"")
        .arg(bin())
        .args(extract_digested(&art, &out))
        .output()
        .expect("spawn sh");
    assert_eq!(
        o.status.code(),
        Some(0),
        "stdout: {} stderr: {}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(json_of(&o)["verdict"], "accepted");
    for (path, want) in [
        ("SKILL.md", 0o644),
        ("scripts", 0o755),
        ("scripts/sub", 0o755),
        ("scripts/sub/run.sh", 0o755),
        ("data", 0o755),
        ("data/big.txt", 0o644),
    ] {
        let mode = mode_on_disk(&out.join(path));
        assert_eq!(mode, want, "{path}: {mode:o}");
    }
}

#[test]
fn skill_md_artifact_is_staged_byte_for_byte() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let art = tmp.path().join("SKILL.md");
    std::fs::write(&art, SKILL).expect("write");
    let out = tmp.path().join("out");
    let o = run(&[
        "extract",
        art.to_str().unwrap_or(""),
        "--out",
        out.to_str().unwrap_or(""),
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(json_of(&o)["artifact"]["format"], "skill-md");
    assert_eq!(
        std::fs::read(out.join("SKILL.md")).unwrap_or_default(),
        SKILL
    );
}

#[test]
fn rejection_exits_3_and_leaves_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    // The zip writer happily stores an absolute name; the engine must refuse it.
    let art = tmp.path().join("abs.zip");
    {
        let f = std::fs::File::create(&art).expect("create");
        let mut z = zip::ZipWriter::new(f);
        let opts = zip::write::SimpleFileOptions::default();
        z.start_file("SKILL.md", opts).expect("start_file");
        std::io::Write::write_all(&mut z, SKILL).expect("write_all");
        z.start_file("/tmp/skillbox-cli-test-escape", opts)
            .expect("start_file");
        std::io::Write::write_all(&mut z, b"x").expect("write_all");
        z.finish().expect("finish");
    }
    let parent = tmp.path().join("parent");
    std::fs::create_dir(&parent).expect("create_dir");
    let out = parent.join("out");
    let o = run(&[
        "extract",
        art.to_str().unwrap_or(""),
        "--out",
        out.to_str().unwrap_or(""),
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(3));
    let v = json_of(&o);
    assert_eq!(v["verdict"], "rejected");
    assert_eq!(v["reason"]["code"], "absolute_path");
    assert_eq!(v["entries"].as_array().map(Vec::len), Some(0));
    assert!(!out.exists(), "rejected staging directory survived");
    assert_eq!(
        std::fs::read_dir(&parent).map(|d| d.count()).unwrap_or(99),
        0
    );
    assert!(!Path::new("/tmp/skillbox-cli-test-escape").exists());

    // Human output names the reason too.
    let o = run(&["extract", art.to_str().unwrap_or("")]);
    assert_eq!(o.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&o.stdout).contains("absolute_path"));
}

/// A rejected tree is removed by the `extract` process once its child has answered and ended,
/// not by the child inside its deadline: stopped at that moment (the debug build's pause), the
/// staging directory still holds what the child wrote before it met the duplicate, and once
/// the command has finished nothing is left, with `--out` and in the temporary directory (under
/// TMPDIR) alike.
#[test]
fn a_rejected_tree_is_removed_by_the_parent_after_the_child_answered() {
    use super::{resume, stopped_before_discard, tree_names};
    let tmp = tempfile::tempdir().expect("tempdir");
    let art = tar_with(
        tmp.path(),
        "dup.tar",
        &[
            ("SKILL.md", SKILL, 0o644),
            ("a.txt", b"a", 0o644),
            ("a.txt", b"b", 0o644),
        ],
    );
    for with_out in [true, false] {
        let tmpdir = tmp.path().join(format!("tmpdir-{with_out}"));
        let parent = tmp.path().join(format!("parent-{with_out}"));
        std::fs::create_dir(&tmpdir).expect("create_dir");
        std::fs::create_dir(&parent).expect("create_dir");
        let out = parent.join("out");
        let mut cmd = Command::new(bin());
        cmd.arg("extract").arg(&art).arg("--json");
        if with_out {
            cmd.arg("--out").arg(&out);
        }
        let (child, staging) =
            stopped_before_discard(&mut cmd, &tmpdir, with_out.then_some(out.as_path()));
        assert_eq!(
            tree_names(&staging),
            ["SKILL.md", "a.txt"],
            "--out {with_out}: the tree as the child left it"
        );
        resume(child.id());
        let o = child.wait_with_output().expect("wait");
        assert_eq!(
            o.status.code(),
            Some(3),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert_eq!(json_of(&o)["reason"]["code"], "duplicate_path");
        assert!(!out.exists(), "rejected staging directory survived");
        for dir in [&parent, &tmpdir] {
            assert_eq!(
                std::fs::read_dir(dir).map(Iterator::count).unwrap_or(99),
                0,
                "--out {with_out}: {} is not empty",
                dir.display()
            );
        }
    }
}

#[test]
fn digest_mismatch_is_a_verdict_and_bad_digest_syntax_a_usage_error() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let art = tar_with(tmp.path(), "pkg.tar", &[("SKILL.md", SKILL, 0o644)]);
    let a = art.to_str().unwrap_or("");
    let wrong = sha(b"something else");
    let o = run(&["extract", a, "--digest", &wrong, "--json"]);
    assert_eq!(o.status.code(), Some(3));
    assert_eq!(json_of(&o)["reason"]["code"], "digest_mismatch");

    let upper = wrong.to_uppercase().replace("SHA256:", "sha256:");
    for bad in [
        upper.as_str(),
        wrong.trim_start_matches("sha256:"),
        &wrong[..wrong.len() - 1],
    ] {
        let o = run(&["extract", a, "--digest", bad]);
        assert_eq!(
            o.status.code(),
            Some(2),
            "digest {bad:?} should be a usage error"
        );
        assert!(String::from_utf8_lossy(&o.stderr).contains("digest"));
    }
}

#[test]
fn out_must_not_exist_and_limits_file_is_checked() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let art = tar_with(
        tmp.path(),
        "pkg.tar",
        &[("SKILL.md", SKILL, 0o644), ("a.txt", b"0123456789", 0o644)],
    );
    let a = art.to_str().unwrap_or("");
    let existing = tmp.path().join("exists");
    std::fs::create_dir(&existing).expect("create_dir");
    std::fs::write(existing.join("keep"), b"precious").expect("write");
    let o = run(&["extract", a, "--out", existing.to_str().unwrap_or("")]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        std::fs::read(existing.join("keep")).unwrap_or_default(),
        b"precious"
    );

    let bad = tmp.path().join("limits.toml");
    std::fs::write(&bad, "max_entires = 3\n").expect("write");
    let o = run(&["extract", a, "--limits", bad.to_str().unwrap_or("")]);
    assert_eq!(o.status.code(), Some(2));

    // A limit from a file applies, at the boundary and one past it.
    let lim = tmp.path().join("limits.json");
    std::fs::write(&lim, r#"{"max_file_bytes": 10, "require_skill_md": true}"#).expect("write");
    let o = run(&[
        "extract",
        a,
        "--limits",
        lim.to_str().unwrap_or(""),
        "--max-file-bytes",
        "60",
        "--json",
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    let o = run(&[
        "extract",
        a,
        "--limits",
        lim.to_str().unwrap_or(""),
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(3));
    let v = json_of(&o);
    assert_eq!(v["reason"]["code"], "file_size");
    assert_eq!(v["reason"]["limit"], 10);

    let o = run(&[
        "extract",
        tmp.path().join("missing.zip").to_str().unwrap_or(""),
    ]);
    // A path that names no file is the caller's mistake, as a directory there is: usage (2).
    assert_eq!(o.status.code(), Some(2));
}

/// `extract`, `fetch` and `serve` read sizes with the one parser: the same suffixes, the same
/// refusal (a usage error, exit 2, before anything runs).
#[test]
fn size_flags_share_one_syntax_across_commands() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let art = tar_with(
        tmp.path(),
        "pkg.tar",
        &[("SKILL.md", SKILL, 0o644), ("a.txt", &[b'x'; 2048], 0o644)],
    );
    let a = art.to_str().unwrap_or("");
    // 2K = 2048 bytes: the file is exactly at the limit, and one byte less refuses it.
    let o = run(&["extract", a, "--max-file-bytes", "2K", "--json"]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = run(&["extract", a, "--max-file-bytes", "2047", "--json"]);
    assert_eq!(o.status.code(), Some(3));
    assert_eq!(json_of(&o)["reason"]["limit"], 2047);

    let socket = tmp.path().join("s.sock");
    let s = socket.to_str().unwrap_or("");
    for args in [
        vec!["extract", a, "--max-file-bytes", "1T"],
        vec![
            "fetch",
            "https://example.com/.well-known/agent-skills/index.json",
            "demo",
            "--max-bytes",
            "1T",
        ],
        vec!["serve", "--socket", s, "--max-chunk-bytes", "1T"],
    ] {
        let o = run(&args);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(r#"unknown size suffix "t" (use K, M or G)"#),
            "{args:?}: {stderr}"
        );
    }
    assert!(
        !socket.exists(),
        "serve must refuse the flag before it listens"
    );
}

/// `skillbox extract --json BIG | head -c 100`: the reader goes away mid-answer. The command
/// must end quietly (SIGPIPE, as Unix tools do), never panic on EPIPE (exit 101).
#[test]
fn a_closed_pipe_ends_the_command_quietly() {
    use std::io::Read;
    use std::os::unix::process::ExitStatusExt;
    use std::process::Stdio;

    let dir = tempfile::tempdir().expect("tempdir");
    let names: Vec<String> = (0..3000)
        .map(|i| format!("references/doc-{i:05}.md"))
        .collect();
    let mut entries: Vec<(&str, &[u8], u32)> = vec![("SKILL.md", SKILL, 0o644)];
    entries.extend(names.iter().map(|n| (n.as_str(), &b"text\n"[..], 0o644)));
    let art = tar_with(dir.path(), "big.tar", &entries);
    let mut child = Command::new(bin())
        .args(["extract", "--json", art.to_str().expect("utf-8")])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn skillbox");
    let mut first = [0u8; 100];
    child
        .stdout
        .take()
        .expect("stdout")
        .read_exact(&mut first)
        .expect("read the first bytes of the answer");
    // The pipe's read end is dropped here, as `head` exits.
    let out = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_ne!(out.status.code(), Some(101), "{stderr}");
    assert!(
        out.status.success() || out.status.signal() == Some(libc::SIGPIPE),
        "{:?}: {stderr}",
        out.status
    );
}

/// A limit is a bound: a value past its ceiling is a usage error naming the limit, from a flag
/// and from a limits file, and a limits file takes the flags' K/M/G sizes.
#[test]
fn limits_past_their_ceiling_are_usage_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let art = tar_with(dir.path(), "pkg.tar", &[("SKILL.md", SKILL, 0o644)]);
    let art = art.to_str().expect("utf-8");
    for (flag, value, limit) in [
        ("--max-file-bytes", "18446744073709551615", "max_file_bytes"),
        ("--max-artifact-bytes", "999999999G", "max_artifact_bytes"),
        ("--max-entries", "1000001", "max_entries"),
    ] {
        let o = run(&["extract", art, flag, value]);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{flag} {value}: {stderr}");
        assert!(stderr.contains(limit), "{flag} {value}: {stderr}");
    }
    let at_ceiling = run(&["extract", art, "--max-file-bytes", "16G"]);
    assert_eq!(
        at_ceiling.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&at_ceiling.stderr)
    );

    let file = dir.path().join("limits.toml");
    std::fs::write(&file, "max_file_bytes = \"17G\"\n").expect("write");
    let o = run(&["extract", art, "--limits", file.to_str().expect("utf-8")]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("max_file_bytes"), "{stderr}");
    std::fs::write(&file, "max_file_bytes = \"1K\"\n").expect("write");
    let o = run(&[
        "extract",
        "--json",
        art,
        "--limits",
        file.to_str().expect("utf-8"),
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}
