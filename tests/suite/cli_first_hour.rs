//! What a new user meets in the first hour: each command's `--help` lists only what it uses,
//! errors say what to do (and come as a JSON object under `--json`, with one exit-code meaning
//! everywhere), `serve` says where it listens and keeps its staging beside its socket, a
//! second Ctrl-C ends a drain, `replay` finds a corpus from a subdirectory, completions and a
//! man page come from the clap definitions. Real processes, real sockets, real archives.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_skillbox")
}

fn run(args: &[&str]) -> Output {
    Command::new(bin())
        .args(args)
        .env_remove("XDG_RUNTIME_DIR")
        .output()
        .expect("spawn skillbox")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

const SKILL: &[u8] = b"---\nname: demo\ndescription: A demo skill\n---\nUse it.\n";

fn tar_at(path: &Path, entries: &[(&str, &[u8])]) {
    let mut b = tar::Builder::new(std::fs::File::create(path).expect("create"));
    for (p, data) in entries {
        let mut h = tar::Header::new_ustar();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_entry_type(tar::EntryType::Regular);
        h.set_mtime(0);
        b.append_data(&mut h, p, *data).expect("append_data");
    }
    b.into_inner().expect("into_inner");
}

fn skill_tar(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    tar_at(&path, &[("SKILL.md", SKILL)]);
    path
}

/// The `--long` flags a help text lists.
fn flags_of(help: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in help.lines() {
        let t = line.trim_start();
        if !t.starts_with('-') {
            continue;
        }
        for word in t.split([' ', ',', '=', '[', '<']) {
            if let Some(name) = word.strip_prefix("--")
                && !name.is_empty()
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
            {
                out.push(format!("--{name}"));
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

fn help(cmd: &[&str]) -> Vec<String> {
    let mut args = cmd.to_vec();
    args.push("--help");
    let o = run(&args);
    assert_eq!(o.status.code(), Some(0), "{cmd:?}: {}", text(&o.stderr));
    flags_of(&text(&o.stdout))
}

/// Every limit the engine has, by the limits-file key, as a flag name.
fn limit_flags() -> Vec<String> {
    let limits = serde_json::to_value(skillbox::extract::policy::Limits::default()).expect("json");
    let keys: Vec<String> = limits
        .as_object()
        .expect("an object")
        .keys()
        .map(|k| format!("--{}", k.replace('_', "-")))
        .collect();
    assert!(keys.len() >= 14, "{keys:?}");
    keys
}

const SANDBOX_FLAGS: [&str; 5] = [
    "--allow-unconfined",
    "--sandbox-timeout",
    "--verify-staged",
    "--seccomp-profile",
    "--sandbox-user",
];

#[test]
fn help_lists_only_the_flags_a_command_uses() {
    for cmd in [
        &["diff"][..],
        &["index", "check"],
        &["cache", "list"],
        &["replay"],
        &["health"],
        &["list"],
        &["approve"],
        &["completions"],
    ] {
        let flags = help(cmd);
        for f in SANDBOX_FLAGS {
            assert!(!flags.contains(&f.to_owned()), "{cmd:?} --help lists {f}");
        }
    }
    assert!(!help(&["index", "check"]).contains(&"--max-bytes".to_owned()));
    assert!(
        !help(&[])
            .iter()
            .any(|f| SANDBOX_FLAGS.contains(&f.as_str()))
    );

    let serve = help(&["serve"]);
    assert!(
        !serve.contains(&"--sandbox-timeout".to_owned()),
        "{serve:?}"
    );
    for f in [
        "--verify-staged",
        "--seccomp-profile",
        "--sandbox-user",
        "--allow-unconfined",
    ] {
        assert!(serve.contains(&f.to_owned()), "serve --help lacks {f}");
    }
    // The commands that run a confined child list the confinement flags, and the four that
    // extract take every limit the engine has, through the same flags.
    for cmd in [&["extract"][..], &["fetch"], &["install"], &["update"]] {
        let flags = help(cmd);
        for f in SANDBOX_FLAGS {
            assert!(flags.contains(&f.to_owned()), "{cmd:?} --help lacks {f}");
        }
    }
    // The doctor always asks for full enforcement: `--allow-unconfined` changes nothing there,
    // so its help does not offer it (it is still accepted).
    let doctor = help(&["doctor"]);
    for f in SANDBOX_FLAGS {
        let offered = doctor.contains(&f.to_owned());
        assert_eq!(offered, f != "--allow-unconfined", "doctor --help and {f}");
    }
    for cmd in ["extract", "fetch", "install", "update"] {
        let flags = help(&[cmd]);
        for f in limit_flags() {
            assert!(flags.contains(&f), "{cmd} --help lacks {f}");
        }
    }
    assert!(help(&["fetch"]).contains(&"--max-bytes".to_owned()));
}

/// The form earlier versions documented, flags before the command, still works.
#[test]
fn confinement_flags_before_the_command_still_apply() {
    let dir = tempfile::tempdir().expect("tempdir");
    let art = skill_tar(dir.path(), "ok.tar");
    let o = run(&[
        "--verify-staged",
        "full",
        "extract",
        "--json",
        art.to_str().expect("utf-8"),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["sandbox"]["verify"], "full", "{v}");
}

/// `fetch` takes the per-limit flags `extract` takes, checked the same way before anything
/// is fetched.
#[test]
fn fetch_takes_the_limit_flags_of_extract() {
    let o = run(&[
        "fetch",
        "--json",
        "https://127.0.0.1:9/index.json",
        "demo",
        "--max-file-bytes",
        "17G",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("max_file_bytes"),
        "{}",
        text(&o.stderr)
    );
    let v: Value = serde_json::from_slice(&o.stdout).expect("a JSON error object");
    assert_eq!(v["error"]["exit"], 2, "{v}");
}

/// One JSON error object on stdout for every command with `--json`, its `exit` the process
/// status, the message once on stderr; a missing path and a directory get the same status.
#[test]
fn every_json_command_fails_with_a_json_error_object() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path().to_str().expect("utf-8");
    let missing = dir.path().join("missing.tar");
    let missing = missing.to_str().expect("utf-8");
    let not_a_dir = skill_tar(dir.path(), "file.tar");
    let not_a_dir = not_a_dir.to_str().expect("utf-8");
    let cases: Vec<(Vec<&str>, i32)> = vec![
        (vec!["extract", "--json", missing], 2),
        (vec!["extract", "--json", d], 2),
        (vec!["extract", "--json", "--bogus-flag", missing], 2),
        (
            vec!["extract", "--json", not_a_dir, "--digest", "sha256:xyz"],
            2,
        ),
        (vec!["diff", "--json", missing, missing], 2),
        (vec!["diff", "--json", d, d], 2),
        (vec!["replay", "--json", missing], 2),
        (vec!["index", "check", "--json", missing], 2),
        (vec!["index", "check", "--json", d], 2),
        (vec!["fetch", "--json", "not a url", "demo"], 2),
        (vec!["cache", "list", "--json", "--cache-dir", not_a_dir], 1),
        (vec!["list", "--json", "--store", not_a_dir], 2),
    ];
    for (args, code) in cases {
        let o = run(&args);
        let stderr = text(&o.stderr);
        assert_eq!(o.status.code(), Some(code), "{args:?}: {stderr}");
        let v: Value = serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("{args:?}: stdout is not JSON ({e}): {}", text(&o.stdout)));
        assert_eq!(v["error"]["exit"], code, "{args:?}: {v}");
        assert!(v["error"]["kind"].is_string(), "{args:?}: {v}");
        let message = v["error"]["message"].as_str().unwrap_or("");
        assert!(!message.is_empty(), "{args:?}: {v}");
        if !args.contains(&"--bogus-flag") {
            // Printed once: one `skillbox:` line on stderr, carrying the same message.
            let lines: Vec<&str> = stderr
                .lines()
                .filter(|l| l.starts_with("skillbox: ") && !l.contains("warning"))
                .collect();
            assert_eq!(lines.len(), 1, "{args:?}: {stderr}");
            assert!(
                stderr.contains(message.lines().next().unwrap_or("")),
                "{args:?}: {stderr}"
            );
        }
    }
    // The same statuses without --json, and nothing on stdout.
    for args in [vec!["extract", missing], vec!["extract", d]] {
        let o = run(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(o.stdout.is_empty(), "{args:?}");
    }
}

/// A running `skillbox serve` in `dir`, with what it printed, killed when dropped.
struct Serve {
    child: Option<Child>,
    log: PathBuf,
    socket: PathBuf,
}

impl Serve {
    fn start(dir: &Path, args: &[&str]) -> Self {
        Self::start_env(dir, args, &[])
    }

    /// [`Serve::start`] with `env` set for the broker.
    fn start_env(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Self {
        let socket = dir.join("skillbox.sock");
        let log = dir.join("serve.log");
        let child = Command::new(bin())
            .arg("serve")
            .arg("--socket")
            .arg(&socket)
            .args(args)
            .envs(env.iter().copied())
            .env_remove("XDG_RUNTIME_DIR")
            .env_remove("SKILLBOX_STAGING_ROOT")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log"))
            .spawn()
            .expect("spawn serve");
        let mut s = Self {
            child: Some(child),
            log,
            socket,
        };
        let until = Instant::now() + Duration::from_secs(20);
        while std::os::unix::net::UnixStream::connect(&s.socket).is_err() {
            if let Some(Ok(Some(status))) = s.child.as_mut().map(Child::try_wait) {
                panic!("serve exited with {status}:\n{}", s.log());
            }
            assert!(Instant::now() < until, "serve did not listen:\n{}", s.log());
            std::thread::sleep(Duration::from_millis(20));
        }
        s
    }

    fn uri(&self) -> String {
        format!("unix://{}", self.socket.display())
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn signal(&self, sig: nix::sys::signal::Signal) {
        let pid = self.child.as_ref().map_or(0, Child::id);
        let pid = nix::unistd::Pid::from_raw(i32::try_from(pid).expect("pid"));
        nix::sys::signal::kill(pid, sig).expect("kill");
    }

    fn wait_exit(&mut self, within: Duration) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("running");
        let until = Instant::now() + within;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return status;
            }
            if Instant::now() >= until {
                let _ = child.kill();
                let _ = child.wait();
                panic!("serve did not exit within {within:?}:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Two brokers on two sockets each stage beside their own socket, and say once, at start,
/// where they listen and the command that talks to them.
#[test]
fn serve_stages_beside_its_socket_and_says_where_it_listens() {
    let one = tempfile::tempdir().expect("tempdir");
    let two = tempfile::tempdir().expect("tempdir");
    let a = Serve::start(one.path(), &[]);
    let b = Serve::start(two.path(), &[]);
    assert!(one.path().join("staging").is_dir(), "{}", a.log());
    assert!(two.path().join("staging").is_dir(), "{}", b.log());
    let until = Instant::now() + Duration::from_secs(5);
    while !a.log().contains("talk to it with") && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    let log = a.log();
    let hint = format!("skillbox extract --server {} ARTIFACT", a.uri());
    assert_eq!(log.matches(&hint).count(), 1, "{log}");
    assert!(log.contains(&format!("serving on {}", a.uri())), "{log}");
    // Both answer, each through its own staging root.
    let art = skill_tar(one.path(), "ok.tar");
    for s in [&a, &b] {
        let o = run(&[
            "extract",
            "--server",
            &s.uri(),
            art.to_str().expect("utf-8"),
        ]);
        assert_eq!(o.status.code(), Some(0), "{}\n{}", text(&o.stderr), s.log());
    }
}

/// `--server unix:PATH` with nobody there names the path and the command to start a broker;
/// a limit looser than the broker's names the flag and the broker's value.
#[test]
fn extract_through_a_server_explains_what_went_wrong() {
    let dir = tempfile::tempdir().expect("tempdir");
    let art = skill_tar(dir.path(), "ok.tar");
    let art = art.to_str().expect("utf-8");
    let nobody = dir.path().join("nobody.sock");
    let o = run(&[
        "extract",
        "--server",
        &format!("unix://{}", nobody.display()),
        art,
    ]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains(&nobody.display().to_string()), "{err}");
    assert!(err.contains("skillbox serve"), "{err}");

    // `unix:` alone: the default socket, spelled out.
    let runtime = tempfile::tempdir().expect("tempdir");
    let o = Command::new(bin())
        .args(["extract", "--server", "unix:", art])
        .env("XDG_RUNTIME_DIR", runtime.path())
        .output()
        .expect("run");
    let err = text(&o.stderr);
    let default = runtime.path().join("skillbox").join("skillbox.sock");
    assert!(err.contains(&default.display().to_string()), "{err}");
    assert!(err.contains("skillbox serve"), "{err}");

    let limits = dir.path().join("limits.toml");
    std::fs::write(&limits, "max_file_bytes = \"1M\"\n").expect("write");
    let s = Serve::start(dir.path(), &["--limits", limits.to_str().expect("utf-8")]);
    let o = run(&[
        "extract",
        "--server",
        &s.uri(),
        "--max-file-bytes",
        "2M",
        art,
    ]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("--max-file-bytes"), "{err}");
    assert!(err.contains("1048576"), "{err}");
    assert!(!err.contains("INVALID_ARGUMENT"), "{err}");
}

/// A `--server` URI no client takes is a usage error (2), for `extract` and `health` alike; one
/// with a password in it too, and the password is never shown (it was echoed in every message
/// naming the server, with exit 1).
#[test]
fn a_bad_server_uri_is_a_usage_error_and_its_password_is_never_shown() {
    let dir = tempfile::tempdir().expect("tempdir");
    let art = skill_tar(dir.path(), "ok.tar");
    let art = art.to_str().expect("utf-8");
    let secret = "S3cretPw";
    for uri in [
        format!("http://alice:{secret}@127.0.0.1:9"),
        format!("https://alice:{secret}@127.0.0.1:9"),
        format!("https://alice:{secret}/x@127.0.0.1:9"),
        "ftp://127.0.0.1:9".to_owned(),
    ] {
        for args in [
            vec!["extract", "--server", &uri, art],
            vec!["extract", "--json", "--server", &uri, art],
            vec!["health", "--server", &uri],
        ] {
            let o = run(&args);
            let (out, err) = (text(&o.stdout), text(&o.stderr));
            assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
            assert!(
                !out.contains(secret) && !err.contains(secret),
                "{args:?}:
{out}
{err}"
            );
            assert!(err.contains("--server"), "{args:?}: {err}");
        }
    }
}

/// `extract --server URI --out DIR` whose DIR cannot be made (its parent missing, or a file)
/// fails before the upload, as a local `extract --out` says it: it failed only after the
/// broker had extracted the artifact for nothing. A missing parent is a usage error (2), as for
/// every directory the user names; a parent that is a file cannot be created into (1).
#[test]
fn extract_through_a_server_checks_out_before_the_upload() {
    let dir = tempfile::tempdir().expect("tempdir");
    let art = skill_tar(dir.path(), "ok.tar");
    let art = art.to_str().expect("utf-8");
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"x").expect("write");
    let s = Serve::start(dir.path(), &[]);
    let uri = s.uri();
    let missing = dir.path().join("no/such");
    for (out, code, says) in [
        (
            missing.join("out"),
            2,
            format!("{} does not exist", missing.display()),
        ),
        (
            file.join("out"),
            1,
            format!("cannot create {}", file.join("out").display()),
        ),
    ] {
        let out = out.to_str().expect("utf-8");
        let local = run(&["extract", "--out", out, art]);
        let o = run(&["extract", "--server", &uri, "--out", out, art]);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(code), "{out}: {err}");
        assert_eq!(o.status.code(), local.status.code(), "{out}: {err}");
        assert_eq!(err, text(&local.stderr), "{out}");
        assert!(err.contains(&says), "{err}");
        assert!(
            !s.log().contains("answered"),
            "the broker extracted:\n{}",
            s.log()
        );
    }
    // The same destination made possible is served (the check refuses no good one).
    let out = dir.path().join("out");
    let o = run(&[
        "extract",
        "--server",
        &uri,
        "--out",
        out.to_str().expect("utf-8"),
        art,
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(out.join("SKILL.md").is_file());
    // And the broker's log says so: the marker the refusals above were checked with.
    assert!(s.log().contains("answered"), "{}", s.log());
}

/// Half a client certificate pair (`SKILLBOX_TLS_CERT` without `SKILLBOX_TLS_KEY`, or the
/// reverse) is a usage error naming both variables, said before anything is sent: the client
/// went on without a certificate, and the user learned of it, if at all, from a failed
/// handshake (exit 1).
#[test]
fn half_a_client_certificate_pair_is_a_usage_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let art = skill_tar(dir.path(), "ok.tar");
    let art = art.to_str().expect("utf-8");
    let pem = dir.path().join("half.pem");
    std::fs::write(&pem, b"not read").expect("write");
    for (set, missing) in [
        ("SKILLBOX_TLS_CERT", "SKILLBOX_TLS_KEY"),
        ("SKILLBOX_TLS_KEY", "SKILLBOX_TLS_CERT"),
    ] {
        for args in [
            vec!["extract", "--server", "https://127.0.0.1:9", art],
            vec!["health", "--server", "https://127.0.0.1:9"],
        ] {
            let o = Command::new(bin())
                .args(&args)
                .env_remove("XDG_RUNTIME_DIR")
                .env_remove(missing)
                .env(set, &pem)
                .output()
                .expect("spawn skillbox");
            let err = text(&o.stderr);
            assert_eq!(o.status.code(), Some(2), "{set} {args:?}: {err}");
            assert!(
                err.contains(set) && err.contains(missing),
                "{set} {args:?}: {err}"
            );
        }
    }
}

/// `health` says what `extract --server` says when no broker is there: the path tried and how
/// to start one (it said `cannot connect to URI: transport error`); and a `--timeout 0` that
/// it quietly read as one second is refused.
#[test]
fn health_explains_what_went_wrong() {
    let dir = tempfile::tempdir().expect("tempdir");
    let nobody = dir.path().join("nobody.sock");
    let o = run(&["health", "--socket", nobody.to_str().expect("utf-8")]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("skillbox serve --socket {}", nobody.display())),
        "{err}"
    );
    let s = Serve::start(dir.path(), &[]);
    let socket = s.socket.to_str().expect("utf-8");
    let o = run(&["health", "--socket", socket]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let o = run(&["health", "--socket", socket, "--timeout", "0"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stdout));
}

/// A second `serve` on a socket a running broker holds fails (exit 1, the socket in use), and
/// never first says it serves there: it announced `serving on ...` as soon as the other broker
/// answered on the socket, then failed. Nor does it make its `--staging-root` first.
#[test]
fn a_server_that_cannot_have_the_socket_never_says_it_serves() {
    let dir = tempfile::tempdir().expect("tempdir");
    let first = Serve::start(dir.path(), &[]);
    let other = dir.path().join("other-staging");
    let o = Command::new(bin())
        .arg("serve")
        .arg("--socket")
        .arg(&first.socket)
        .arg("--staging-root")
        .arg(&other)
        .env_remove("XDG_RUNTIME_DIR")
        .env_remove("SKILLBOX_STAGING_ROOT")
        .stdin(Stdio::null())
        .output()
        .expect("run serve");
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("in use by a running server"), "{err}");
    assert!(!err.contains("serving on"), "{err}");
    // Refused before anything was made: it made its staging root, then found the socket taken.
    assert!(!other.exists(), "a refused serve made {}", other.display());
    // The first one still serves.
    let o = run(&["health", "--socket", first.socket.to_str().expect("utf-8")]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
}

/// Run a `serve` that must refuse to start. One that starts instead (the bug) is stopped
/// after a while so that the test fails instead of waiting for ever: it then has no exit code.
fn serve_refusing(args: &[&str]) -> Output {
    let mut child = Command::new(bin())
        .arg("serve")
        .args(args)
        .env_remove("XDG_RUNTIME_DIR")
        .env_remove("SKILLBOX_STAGING_ROOT")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn serve");
    let until = Instant::now() + Duration::from_secs(20);
    while child.try_wait().expect("try_wait").is_none() {
        if Instant::now() > until {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("wait serve")
}

/// A `--socket` or `--staging-root` whose directory does not exist is a usage error naming
/// that directory, and nothing is made: `serve --socket /typo/dir/s.sock` made the whole chain
/// (as root, `/typo`). The default locations are still made (docs/broker.md).
#[test]
fn serve_makes_no_directory_the_user_did_not_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let typo = dir.path().join("typo");
    let run_dir = dir.path().join("run");
    std::fs::create_dir(&run_dir).expect("mkdir");
    let socket_in_typo = typo.join("dir/s.sock");
    let good_socket = run_dir.join("s.sock");
    let staging_in_typo = typo.join("staging");
    for (args, missing) in [
        (
            vec!["--socket", socket_in_typo.to_str().expect("utf-8")],
            typo.join("dir"),
        ),
        (
            vec![
                "--socket",
                good_socket.to_str().expect("utf-8"),
                "--staging-root",
                staging_in_typo.to_str().expect("utf-8"),
            ],
            typo.clone(),
        ),
        (
            vec![
                "--tcp",
                "127.0.0.1:0",
                "--staging-root",
                staging_in_typo.to_str().expect("utf-8"),
            ],
            typo.clone(),
        ),
    ] {
        let o = serve_refusing(&args);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains(&format!("{} does not exist", missing.display())),
            "{args:?}: {err}"
        );
        assert!(!typo.exists(), "{args:?} made {}", typo.display());
        assert!(!good_socket.exists(), "{args:?} made the socket");
    }
    assert!(
        std::fs::read_dir(&run_dir)
            .expect("read_dir")
            .next()
            .is_none(),
        "a refused serve made something in {}",
        run_dir.display()
    );
}

/// A directory the user named is used, never invented: `fetch --cache-dir /typo/x` made the
/// whole chain (`/typo` too, at the root as root), and so did `approve --store /typo/x` and
/// every command that writes the store. Each is a usage error (2, a JSON error object under
/// `--json`) that names the missing directory and makes nothing; `cache list|verify|prune`
/// say it too (they said "no cache", exit 0). So is `extract --out /typo/x` and `fetch --out
/// /typo/x` (both exit 1, `fetch` only after the download, and `extract` after extracting for
/// nothing through a broker): said before anything is read, fetched or cached. The default
/// locations are still made whole.
#[test]
fn a_directory_the_user_named_is_never_invented() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let typo = tmp.path().join("typo");
    let named = typo.join("x");
    let named = named.to_str().expect("utf-8");
    let index = "https://skills.example.invalid/.well-known/agent-skills/index.json";
    let digest = format!("sha256:{}", "0".repeat(64));
    let version = format!("demo@{digest}");
    let art = skill_tar(tmp.path(), "ok.tar");
    let art = art.to_str().expect("utf-8");
    let skills = tmp.path().join("skills");
    std::fs::create_dir_all(skills.join("demo")).expect("mkdir");
    std::fs::write(skills.join("demo/SKILL.md"), SKILL).expect("write");
    let skills_s = skills.to_str().expect("utf-8");
    // Where a default cache would be made: nothing is, for a refused --out.
    let xdg_cache = tmp.path().join("xdg-cache");
    let commands: Vec<Vec<&str>> = vec![
        vec!["fetch", index, "demo", "--offline", "--cache-dir", named],
        vec!["cache", "list", "--cache-dir", named],
        vec!["cache", "verify", "--cache-dir", named],
        vec!["cache", "prune", "--older-than", "1d", "--cache-dir", named],
        vec!["approve", &version, "--store", named],
        vec!["extract", art, "--out", named],
        vec!["fetch", index, "demo", "--offline", "--out", named],
        vec!["fetch", index, "demo", "--no-cache", "--out", named],
        vec!["publish", skills_s, "--out", named],
    ];
    // `args`, with `--json` when asked, where the default cache would be `xdg_cache`.
    let run = |args: &[&str], json: bool| {
        let mut args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        if json {
            args.push("--json".to_owned());
        }
        let o = Command::new(bin())
            .args(&args)
            .env_remove("XDG_RUNTIME_DIR")
            .env("XDG_CACHE_HOME", &xdg_cache)
            .output()
            .expect("spawn skillbox");
        (args, o)
    };
    for args in commands {
        for json in [false, true] {
            let (args, o) = run(&args, json);
            assert!(!xdg_cache.exists(), "{args:?} made the default cache");
            let err = text(&o.stderr);
            assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
            assert!(
                err.contains(&format!("{} does not exist", typo.display())),
                "{args:?}: {err}"
            );
            if json {
                let v: Value = serde_json::from_slice(&o.stdout).expect("one JSON answer");
                assert_eq!(v["error"]["exit"], 2, "{args:?}: {v}");
            }
            assert!(!typo.exists(), "{args:?} made {}", typo.display());
        }
    }
    // An index URL the policy refuses by its text (here plain http) is refused before the
    // default cache is made, with the answer the download's refusal gives (before: said after
    // `XDG_CACHE_HOME/skillbox` was created).
    let http = "http://skills.example.invalid/.well-known/agent-skills/index.json";
    for json in [false, true] {
        let (args, o) = run(&["fetch", http, "demo"], json);
        let err = text(&o.stderr);
        assert_ne!(o.status.code(), Some(0), "{args:?}: {err}");
        assert!(err.contains("https_only"), "{args:?}: {err}");
        assert!(
            !xdg_cache.exists(),
            "{args:?} made the default cache: {err}"
        );
        if json {
            let v: Value = serde_json::from_slice(&o.stdout).expect("one JSON answer");
            assert_eq!(
                v["error"]["exit"].as_i64(),
                o.status.code().map(i64::from),
                "{v}"
            );
            assert_eq!(v["provenance"]["index_url"], http, "{v}");
        }
    }
    // The default cache is made, its whole chain: `XDG_CACHE_HOME/skillbox`.
    let xdg = tmp.path().join("xdg/cache");
    let o = Command::new(bin())
        .args(["fetch", index, "demo", "--offline"])
        .env("XDG_CACHE_HOME", &xdg)
        .output()
        .expect("run fetch");
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    assert!(xdg.join("skillbox").is_dir(), "{}", text(&o.stderr));
}

/// A zip written as `<dir>/`, `<dir>/...` holding `entries` (paths inside `dir`).
fn wrapped_zip(path: &Path, dir: &str, entries: &[(&str, &[u8])]) {
    let f = std::fs::File::create(path).expect("create");
    let mut z = zip::ZipWriter::new(f);
    let opts = zip::write::SimpleFileOptions::default();
    z.add_directory(format!("{dir}/"), opts)
        .expect("add_directory");
    for (name, data) in entries {
        z.start_file(format!("{dir}/{name}"), opts)
            .expect("start_file");
        std::io::Write::write_all(&mut z, data).expect("write_all");
    }
    z.finish().expect("finish");
}

/// A zip whose files all sit in one directory holding SKILL.md (the `.skill` packager's
/// layout) is refused `missing_skill_md`, and the person reading the text answer is told what
/// takes it: `--accept-wrapper` locally; through a broker, its limits file (the flag is not
/// sent). The machine-readable answer keeps its reason code and carries no hint; another
/// missing SKILL.md gets none. A `*.skill` file asks for its wrapper to be taken, as the flag
/// does: a broker whose limits refuse the layout makes that the flag's usage error (2, naming
/// the setting that decides; it was a rejection, 3, the file's request dropped unsaid), and a
/// broker whose limits take it takes it.
#[test]
fn a_wrapped_zip_is_refused_with_a_hint_at_what_takes_it() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let zip = tmp.path().join("demo.zip");
    wrapped_zip(
        &zip,
        "demo",
        &[("SKILL.md", SKILL), ("notes.md", b"# Notes\n")],
    );
    let zip_s = zip.to_str().expect("utf-8");
    let o = run(&["extract", zip_s]);
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(3), "{out}{}", text(&o.stderr));
    assert!(out.contains("reason: missing_skill_md"), "{out}");
    assert!(out.contains("entry:  demo/SKILL.md"), "{out}");
    assert!(
        out.contains("hint:   --accept-wrapper takes this layout"),
        "{out}"
    );
    let o = run(&["extract", zip_s, "--json"]);
    assert_eq!(o.status.code(), Some(3));
    let v: Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["reason"]["code"], "missing_skill_md", "{v}");
    assert!(!text(&o.stdout).contains("hint"), "{v}");
    // The hint is true.
    let o = run(&["extract", zip_s, "--accept-wrapper"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stdout));

    // SKILL.md one directory down beside another top-level entry: no wrapper, no hint.
    let other = tmp.path().join("other.tar");
    tar_at(&other, &[("demo/SKILL.md", SKILL), ("README", b"x")]);
    let o = run(&["extract", other.to_str().expect("utf-8")]);
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(3), "{out}");
    assert!(out.contains("missing_skill_md"), "{out}");
    assert!(!out.contains("hint"), "{out}");

    // Through a broker: its own limits decide.
    let strict = tmp.path().join("strict");
    std::fs::create_dir(&strict).expect("mkdir");
    let s = Serve::start(&strict, &[]);
    // The flag is not sent: said before anything is (it was dropped without a word).
    let o = run(&["extract", "--server", &s.uri(), zip_s, "--accept-wrapper"]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}{}", text(&o.stdout));
    assert!(err.contains("is not sent to a broker"), "{err}");
    let o = run(&["extract", "--server", &s.uri(), zip_s]);
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(3), "{out}{}", text(&o.stderr));
    assert!(out.contains("accept_wrapper = true"), "{out}");
    assert!(!out.contains("--accept-wrapper"), "{out}");
    // The same bytes as a `.skill` file: taken locally (its wrapper is accepted by default),
    // and through this broker the usage error the flag gets, with or without --json.
    let skill_file = tmp.path().join("demo.skill");
    std::fs::copy(&zip, &skill_file).expect("copy");
    let skill_s = skill_file.to_str().expect("utf-8");
    let o = run(&["extract", skill_s]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stdout));
    let uri = s.uri();
    for json in [false, true] {
        let mut args = vec!["extract", "--server", &uri, skill_s];
        if json {
            args.push("--json");
        }
        let o = run(&args);
        let err = text(&o.stderr);
        assert_eq!(
            o.status.code(),
            Some(2),
            "{args:?}: {err}{}",
            text(&o.stdout)
        );
        assert!(err.contains("accept_wrapper = true"), "{err}");
        assert!(err.contains("demo/SKILL.md"), "{err}");
        assert!(err.contains("Drop --server"), "{err}");
        if json {
            let v: Value = serde_json::from_slice(&o.stdout).expect("one JSON answer");
            assert_eq!(v["error"]["exit"], 2, "{v}");
            assert_eq!(v["error"]["kind"], "usage", "{v}");
        } else {
            assert!(o.stdout.is_empty(), "{}", text(&o.stdout));
        }
    }
    // A `.skill` file the broker refuses for another reason keeps the broker's verdict.
    let flat = tmp.path().join("flat.skill");
    tar_at(&flat, &[("README", b"no skill here")]);
    let o = run(&[
        "extract",
        "--server",
        &s.uri(),
        flat.to_str().expect("utf-8"),
    ]);
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(3), "{out}{}", text(&o.stderr));
    assert!(out.contains("missing_skill_md"), "{out}");
    drop(s);
    let lenient = tmp.path().join("lenient");
    std::fs::create_dir(&lenient).expect("mkdir");
    let limits = lenient.join("limits.toml");
    std::fs::write(&limits, "accept_wrapper = true\n").expect("write");
    let s = Serve::start(&lenient, &["--limits", limits.to_str().expect("utf-8")]);
    let o = run(&["extract", "--server", &s.uri(), zip_s]);
    assert_eq!(o.status.code(), Some(0), "{}{}", text(&o.stdout), s.log());
    let o = run(&["extract", "--server", &s.uri(), skill_s]);
    assert_eq!(o.status.code(), Some(0), "{}{}", text(&o.stdout), s.log());
}

/// Every command keeps its own exit status when its stderr's reader is gone: `eprintln!`
/// panicked on the broken pipe, and a one-shot command with something to say ended with 101
/// (`skillbox extract x 2>&1 | true`). A stdout whose reader is gone ends a command as it
/// ends a Unix tool (SIGPIPE) or with its own status, never with a panic.
#[test]
fn commands_outlive_a_closed_stderr_or_stdout() {
    use std::os::unix::process::ExitStatusExt as _;
    let dir = tempfile::tempdir().expect("tempdir");
    let art = skill_tar(dir.path(), "ok.tar");
    let art = art.to_str().expect("utf-8");
    let store = dir.path().join("store");
    let nobody = dir.path().join("nobody.sock");
    let commands: Vec<Vec<&str>> = vec![
        vec!["extract", "no-such-artifact"],
        vec!["extract", "--json", "no-such-artifact"],
        vec!["extract", art],
        vec!["extract", "--bogus-flag"],
        vec!["index", "check", "no-such-index.json"],
        vec!["fetch", "https://127.0.0.1:9/index.json", "demo"],
        vec!["health", "--socket", nobody.to_str().expect("utf-8")],
        vec!["extract", "--server", "ftp://127.0.0.1:9", art],
        vec!["review", "demo"],
    ];
    // A pipe whose read end is closed: every write fails with EPIPE.
    let dead_pipe = || {
        let (r, w) = std::io::pipe().expect("pipe");
        drop(r);
        w
    };
    for args in &commands {
        let base = || {
            let mut c = Command::new(bin());
            c.args(args)
                .env_remove("XDG_RUNTIME_DIR")
                .env("SKILLBOX_STORE", &store)
                .stdin(Stdio::null());
            c
        };
        let normal = base().output().expect("spawn skillbox");
        let code = normal.status.code();
        assert_ne!(code, Some(101), "{args:?}: {}", text(&normal.stderr));
        let closed_err = base()
            .stdout(Stdio::null())
            .stderr(dead_pipe())
            .status()
            .expect("spawn skillbox");
        assert_eq!(closed_err.code(), code, "{args:?} with a closed stderr");
        let closed_out = base()
            .stdout(dead_pipe())
            .stderr(Stdio::piped())
            .output()
            .expect("spawn skillbox");
        let err = text(&closed_out.stderr);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        let sigpipe = closed_out.status.signal() == Some(libc::SIGPIPE);
        assert!(
            sigpipe || closed_out.status.code() == code,
            "{args:?} with a closed stdout: {:?}: {err}",
            closed_out.status
        );
    }
}

/// The URI of a spawned `serve`'s "serving on" line (its stderr piped), with what it said
/// before; kills it if no such line comes.
fn serving_on(child: &mut Child) -> (String, String) {
    use std::io::BufRead as _;
    let stderr = child.stderr.take().expect("stderr piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut seen = String::new();
    loop {
        match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(line) => {
                seen.push_str(&line);
                seen.push('\n');
                if let Some(rest) = line.split("serving on ").nth(1) {
                    return (rest.split(';').next().expect("uri").to_owned(), seen);
                }
            }
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("no serving-on line:\n{seen}");
            }
        }
    }
}

fn sigterm(child: &Child) {
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("pid")),
        nix::sys::signal::Signal::SIGTERM,
    );
}

/// `skillbox serve --tcp 127.0.0.1:0` with `extra` flags, staging in `dir/staging`, no socket
/// from the environment, stdin closed.
fn port_zero(dir: &Path, extra: &[&std::ffi::OsStr]) -> Command {
    let mut cmd = Command::new(bin());
    cmd.args(["serve", "--tcp", "127.0.0.1:0"])
        .args(extra)
        .arg("--staging-root")
        .arg(dir.join("staging"))
        .env_remove("XDG_RUNTIME_DIR")
        .env_remove("SKILLBOX_SOCKET")
        .stdin(Stdio::null());
    cmd
}

/// `cmd` started with its stderr piped (for [`serving_on`]) and its stdout dropped.
fn spawn_serve(cmd: &mut Command) -> Child {
    cmd.stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn serve")
}

/// `serve --tcp 127.0.0.1:0` says the port it serves on, and serves there: it never said it
/// served (the line waited for an answer on port 0).
#[test]
fn serve_on_tcp_port_zero_names_its_port() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut child = spawn_serve(&mut port_zero(dir.path(), &[]));
    let (uri, seen) = serving_on(&mut child);
    let health = run(&["health", "--server", &uri]);
    sigterm(&child);
    let status = child.wait().expect("wait");
    assert!(uri.starts_with("http://127.0.0.1:"), "{uri}");
    assert!(!uri.ends_with(":0"), "{uri}");
    assert_eq!(
        health.status.code(),
        Some(0),
        "{uri}: {}",
        text(&health.stderr)
    );
    assert_eq!(status.code(), Some(0), "{seen}");
}

/// The local ports process `pid` listens on over TCP (IPv4): its sockets (`/proc/PID/fd`)
/// found in the kernel's table (`/proc/PID/net/tcp`) in the LISTEN state.
fn listening_ports(pid: u32) -> Vec<u16> {
    let inodes: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("read its fds")
        .flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .filter_map(|l| {
            let l = l.to_string_lossy().into_owned();
            Some(l.strip_prefix("socket:[")?.strip_suffix(']')?.to_owned())
        })
        .collect();
    let table = std::fs::read_to_string(format!("/proc/{pid}/net/tcp")).expect("tcp table");
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            // sl local_address rem_address st ... uid timeout inode; 0A is LISTEN.
            let (local, state, inode) = (f.get(1)?, f.get(3)?, f.get(9)?);
            (*state == "0A" && inodes.iter().any(|i| i == inode))
                .then(|| u16::from_str_radix(local.rsplit(':').next()?, 16).ok())?
        })
        .collect()
}

/// `serve --tcp 127.0.0.1:0` binds once, and holds its port from the moment it knows it: it
/// bound a probe to learn a free port, dropped it, and the broker bound that port again after
/// opening its staging root and starting its sandbox. Any process could take the port in
/// between, and serve then failed to start (exit 1, address in use). Here, stopped once its
/// listener is bound (`broker:tcp-bound`), it holds that port, nobody else can bind it, and
/// the "serving on" line then names it and it answers there.
#[test]
fn serve_on_tcp_port_zero_holds_its_port_from_the_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut child = super::stopped_at(&mut port_zero(dir.path(), &[]), "broker:tcp-bound");
    let ports = listening_ports(child.id());
    let port = match ports.as_slice() {
        [port] => *port,
        other => {
            let _ = child.kill();
            let _ = child.wait();
            panic!("serve, its port learned, listens on {other:?}: one port, held, was wanted");
        }
    };
    // Another process trying for that port now gets nothing.
    let taken = std::net::TcpListener::bind(("127.0.0.1", port));
    assert!(taken.is_err(), "another process could bind port {port}");
    super::resume(child.id());
    let (uri, seen) = serving_on(&mut child);
    let health = run(&["health", "--server", &uri]);
    sigterm(&child);
    let status = child.wait().expect("wait");
    assert_eq!(uri, format!("http://127.0.0.1:{port}"), "{seen}");
    assert_eq!(
        health.status.code(),
        Some(0),
        "{uri}: {}",
        text(&health.stderr)
    );
    assert_eq!(status.code(), Some(0), "{seen}");
}

/// PEM files in a directory: a CA, a server certificate it signed and its key, and a client
/// certificate it signed and its key.
struct Pki {
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
    client_cert: PathBuf,
    client_key: PathBuf,
}

/// [`Pki`] in `dir`, the server's certificate for `names`.
fn tls_files(dir: &Path, names: &[&str]) -> Pki {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().expect("generate");
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("new");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "skillbox test CA");
    let ca_cert = ca.self_signed(&ca_key).expect("self_signed");
    let issuer = Issuer::new(ca, ca_key);
    let leaf = |names: Vec<String>, cert: &str, key: &str| {
        let pair = KeyPair::generate().expect("generate");
        let signed = CertificateParams::new(names)
            .expect("new")
            .signed_by(&pair, &issuer)
            .expect("signed_by");
        std::fs::write(dir.join(cert), signed.pem()).expect("write");
        std::fs::write(dir.join(key), pair.serialize_pem()).expect("write");
    };
    leaf(
        names.iter().map(|n| (*n).to_owned()).collect(),
        "cert.pem",
        "key.pem",
    );
    leaf(vec!["client".to_owned()], "client.pem", "client.key");
    std::fs::write(dir.join("ca.pem"), ca_cert.pem()).expect("write");
    Pki {
        ca: dir.join("ca.pem"),
        cert: dir.join("cert.pem"),
        key: dir.join("key.pem"),
        client_cert: dir.join("client.pem"),
        client_key: dir.join("client.key"),
    }
}

/// `serve --tcp 127.0.0.1:0` with TLS, and `extra` flags; its "serving on" URI.
fn serve_tls(dir: &Path, pki: &Pki, extra: &[&std::ffi::OsStr]) -> (Child, String, String) {
    let tls = [
        "--tls-cert".as_ref(),
        pki.cert.as_os_str(),
        "--tls-key".as_ref(),
        pki.key.as_os_str(),
    ];
    let mut child = spawn_serve(&mut port_zero(dir, &[&tls[..], extra].concat()));
    let (uri, seen) = serving_on(&mut child);
    (child, uri, seen)
}

/// A broker over TLS whose certificate names `localhost` only, reached by its address with
/// the right CA: the client was told to set SKILLBOX_TLS_CA, which was set and right. It is
/// told that the certificate does not name that host, and to dial a name it holds (which
/// then answers).
#[test]
fn a_certificate_for_another_name_is_said_as_such() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pki = tls_files(dir.path(), &["localhost"]);
    let ca = pki.ca.clone();
    let (mut child, uri, seen) = serve_tls(dir.path(), &pki, &[]);
    let health = |uri: &str| {
        Command::new(bin())
            .args(["health", "--server", uri])
            .env("SKILLBOX_TLS_CA", &ca)
            .output()
            .expect("run health")
    };
    let by_address = health(&uri);
    let by_name = health(&uri.replace("127.0.0.1", "localhost"));
    sigterm(&child);
    let status = child.wait().expect("wait");
    let err = text(&by_address.stderr);
    assert_eq!(by_address.status.code(), Some(1), "{err}");
    assert!(
        err.contains("its certificate does not name the host in that URI"),
        "{err}"
    );
    assert!(!err.contains("set SKILLBOX_TLS_CA"), "{err}");
    assert_eq!(by_name.status.code(), Some(0), "{}", text(&by_name.stderr));
    assert_eq!(status.code(), Some(0), "{seen}");
}

/// A broker that asks for a client certificate (`--tls-client-ca`), reached without one:
/// the client's TLS 1.3 handshake is done before the broker refuses, so the refusal comes as
/// a closed connection, which was said as a broker at its --max-connections or restarting,
/// "try again later". It says that a client certificate may be wanted and which variables
/// give one (which then works).
#[test]
fn a_broker_that_wants_a_client_certificate_says_so_through_the_client() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pki = tls_files(dir.path(), &["localhost", "127.0.0.1"]);
    let (mut child, uri, seen) = serve_tls(
        dir.path(),
        &pki,
        &["--tls-client-ca".as_ref(), pki.ca.as_os_str()],
    );
    let tar = skill_tar(dir.path(), "demo.tar");
    let with = |args: &[&str], identity: bool| {
        let mut c = Command::new(bin());
        c.args(args)
            .env("SKILLBOX_TLS_CA", &pki.ca)
            .env_remove("SKILLBOX_TLS_CERT")
            .env_remove("SKILLBOX_TLS_KEY");
        if identity {
            c.env("SKILLBOX_TLS_CERT", &pki.client_cert)
                .env("SKILLBOX_TLS_KEY", &pki.client_key);
        }
        c.output().expect("run skillbox")
    };
    let tar_s = tar.to_str().expect("utf-8");
    // A key that is not the certificate's: said with its cause and the variables, not as
    // "TLS settings: transport error".
    let mismatched = Command::new(bin())
        .args(["health", "--server", &uri])
        .env("SKILLBOX_TLS_CA", &pki.ca)
        .env("SKILLBOX_TLS_CERT", &pki.client_cert)
        .env("SKILLBOX_TLS_KEY", &pki.key)
        .output()
        .expect("run health");
    let extract = with(&["extract", "--server", &uri, tar_s], false);
    let health = with(&["health", "--server", &uri], false);
    let extract_ok = with(&["extract", "--server", &uri, tar_s], true);
    let health_ok = with(&["health", "--server", &uri], true);
    sigterm(&child);
    let status = child.wait().expect("wait");
    let err = text(&mismatched.stderr);
    assert_eq!(mismatched.status.code(), Some(1), "{err}");
    assert!(
        !err.trim_end().ends_with("transport error") && err.contains("SKILLBOX_TLS_KEY"),
        "{err}"
    );
    for o in [&extract, &health] {
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{err}");
        // (A handshake that fails outright names them too.)
        assert!(
            err.contains("SKILLBOX_TLS_CERT") && err.contains("SKILLBOX_TLS_KEY"),
            "{err}"
        );
    }
    assert_eq!(
        extract_ok.status.code(),
        Some(0),
        "{}",
        text(&extract_ok.stderr)
    );
    assert_eq!(
        health_ok.status.code(),
        Some(0),
        "{}",
        text(&health_ok.stderr)
    );
    assert_eq!(status.code(), Some(0), "{seen}");
}

/// A `--socket-mode` without owner read and write (0000, 0060, ...) made a socket nobody but
/// root could connect to; it is a usage error, and no socket is made.
#[test]
fn serve_refuses_a_socket_mode_nobody_can_use() {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("s.sock");
    for mode in ["0000", "0060", "0400"] {
        let o = serve_refusing(&[
            "--socket",
            socket.to_str().expect("utf-8"),
            "--socket-mode",
            mode,
        ]);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{mode}: {err}");
        assert!(err.contains("read and write"), "{mode}: {err}");
        assert!(!socket.exists(), "{mode}: a socket was made");
    }
}

/// `fetch --print-policy URL` says what `fetch` would do with a URL it refuses (user
/// information, http), and `index check FILE --base URL` with an http base: refused, exit 4,
/// the rule named and the password never shown. `--print-policy` showed the origin as allowed, and `index check`
/// resolved the entries to http:// URLs without a word.
#[test]
fn print_policy_and_index_check_refuse_what_fetch_refuses() {
    let dir = tempfile::tempdir().expect("tempdir");
    let index = dir.path().join("index.json");
    std::fs::write(
        &index,
        br#"{"$schema":"https://schemas.agentskills.io/discovery/0.2.0/schema.json","skills":[{"name":"demo","type":"archive","description":"d","url":"demo.tar.gz","digest":"sha256:0000000000000000000000000000000000000000000000000000000000000000"}]}"#,
    )
    .expect("write");
    let index = index.to_str().expect("utf-8");
    let secret = "S3cretPw";
    let with_password =
        format!("https://alice:{secret}@example.com/.well-known/agent-skills/index.json");
    let plain_http = "http://example.com/.well-known/agent-skills/index.json";
    for (url, rule) in [
        (with_password.as_str(), "no_userinfo"),
        (plain_http, "https_only"),
    ] {
        let mut all = vec![
            vec!["fetch", "--print-policy", url],
            vec!["fetch", "--json", "--print-policy", url],
        ];
        // A --base with user information stays taken, its resolved URLs masked (as
        // tests/suite/fetch.rs pins); an http one is refused.
        if rule == "https_only" {
            all.push(vec!["index", "check", index, "--base", url]);
            all.push(vec!["index", "check", "--json", index, "--base", url]);
        }
        for args in all {
            let o = run(&args);
            let (out, err) = (text(&o.stdout), text(&o.stderr));
            assert_eq!(o.status.code(), Some(4), "{args:?}: {out}{err}");
            assert!(err.contains(&format!("rule {rule}")), "{args:?}: {err}");
            assert!(
                !out.contains(secret) && !err.contains(secret),
                "{args:?}: {out}{err}"
            );
            assert!(!out.contains("allowed"), "{args:?}: {out}");
            assert!(
                !out.contains("http://example.com/.well-known/agent-skills/demo"),
                "{out}"
            );
            if args.contains(&"--json") {
                let v: Value = serde_json::from_str(&out).expect("one JSON object");
                assert_eq!(v["error"]["rule"], rule, "{out}");
            }
        }
    }
    // What fetch takes is taken as before.
    let good = "https://example.com/.well-known/agent-skills/index.json";
    let o = run(&["fetch", "--print-policy", good]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(
        text(&o.stdout).contains("allowed): https://example.com"),
        "{}",
        text(&o.stdout)
    );
    let o = run(&["index", "check", index, "--base", good]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(
        text(&o.stdout).contains("https://example.com/.well-known/agent-skills/demo.tar.gz"),
        "{}",
        text(&o.stdout)
    );
}

/// The first SIGINT drains (the grace period is long here), a second one stops at once.
#[test]
fn a_second_ctrl_c_ends_the_drain_at_once() {
    use nix::sys::signal::Signal;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut s = Serve::start(dir.path(), &["--grace", "120"]);
    // A request in flight: the header and a few bytes, then nothing more for a long time.
    let uri = s.uri();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let (_writer, reader) = tokio::io::duplex(64);
    let inflight = rt.spawn(async move {
        let mut c = skillbox::client::Client::connect(&uri)
            .await
            .expect("connect");
        let header = skillbox::client::header_for(&skillbox::extract::Request::new(
            skillbox::extract::ArtifactType::Archive,
            skillbox::extract::policy::Limits::default(),
        ));
        c.extract(header, reader, Some(Duration::from_secs(300)))
            .await
    });
    std::thread::sleep(Duration::from_millis(500));
    assert!(!inflight.is_finished(), "the request is in flight");
    s.signal(Signal::SIGINT);
    std::thread::sleep(Duration::from_millis(700));
    assert!(
        s.child
            .as_mut()
            .expect("child")
            .try_wait()
            .expect("wait")
            .is_none(),
        "the first SIGINT drains, it does not stop:\n{}",
        s.log()
    );
    let second = Instant::now();
    s.signal(Signal::SIGINT);
    let status = s.wait_exit(Duration::from_secs(30));
    assert!(second.elapsed() < Duration::from_secs(30));
    assert!(status.success(), "{status}: {}", s.log());
    assert!(s.log().contains("again: stopping now"), "{}", s.log());
    drop(rt);
}

/// A corpus subdirectory replays its own cases through the nearest manifest; a directory
/// with none says so and names the corpora below it; a missing one says it does not exist.
#[test]
fn replay_finds_the_corpus_of_a_subdirectory() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path().join("work").join("corpus");
    std::fs::create_dir_all(root.join("sub")).expect("mkdir");
    skill_tar(&root, "top.tar");
    skill_tar(&root.join("sub"), "inner.tar");
    let manifest = serde_json::json!({"version": 1, "cases": [
        {"name": "top", "file": "top.tar", "type": "archive", "expect": {"verdict": "accepted"}},
        {"name": "inner", "file": "sub/inner.tar", "type": "archive", "expect": {"verdict": "accepted"}},
    ]});
    std::fs::write(root.join("manifest.json"), manifest.to_string()).expect("write");
    let o = run(&[
        "replay",
        "--json",
        root.join("sub").to_str().expect("utf-8"),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).expect("json");
    let names: Vec<&str> = v["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(names, ["inner"], "{v}");

    let above = tmp.path().join("work");
    let o = run(&["replay", above.to_str().expect("utf-8")]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("has no manifest.json"), "{err}");
    assert!(
        err.contains(&format!("did you mean {}", root.display())),
        "{err}"
    );

    let o = run(&["replay", "/nonexistent/corpus"]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("/nonexistent/corpus: the directory does not exist"),
        "{err}"
    );
}

/// What `replay` is given is checked before any case runs: an `--extract-arg` that `extract`
/// refuses (an unknown flag, a bad value; each case failed with it, exit 1), a `--junit` file
/// that cannot be made (said after the whole run), a `--timeout 0` (read as 1 s) are usage
/// errors (2); and a relative file in an `--extract-arg` names the file where replay runs, not
/// in each case's scratch directory (every case failed, `cannot read limits file`).
#[test]
fn replay_checks_its_arguments_before_running() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path().join("corpus");
    std::fs::create_dir(&root).expect("mkdir");
    skill_tar(&root, "ok.tar");
    let manifest = serde_json::json!({"version": 1, "cases": [
        {"name": "ok", "file": "ok.tar", "type": "archive", "expect": {"verdict": "accepted"}},
    ]});
    std::fs::write(root.join("manifest.json"), manifest.to_string()).expect("write");
    let dir = root.to_str().expect("utf-8");
    let missing = tmp.path().join("no-such-dir").join("r.xml");
    for (args, names) in [
        (vec!["--extract-arg", "--no-such-flag"], "--no-such-flag"),
        (vec!["--extract-arg", "--max-entries=many"], "many"),
        (
            vec![
                "--extract-arg",
                "--skill-name=x",
                "--extract-arg",
                "--bogus",
            ],
            "--bogus",
        ),
        (
            vec!["--junit", missing.to_str().expect("utf-8")],
            "no such directory",
        ),
        (
            vec!["--junit", tmp.path().to_str().expect("utf-8")],
            "is a directory",
        ),
        (vec!["--timeout", "0"], "--timeout"),
    ] {
        let o = run(&[&["replay", dir, "--json"][..], &args].concat());
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(names), "{args:?}: {err}");
        assert!(!err.contains("cases:"), "{args:?} ran the cases: {err}");
    }
    std::fs::write(tmp.path().join("mine.toml"), "max_entries = 5000\n").expect("write");
    let junit = tmp.path().join("r.xml");
    let o = Command::new(bin())
        .args(["replay", dir, "--json", "--extract-arg=--limits=mine.toml"])
        .arg("--junit")
        .arg(&junit)
        .current_dir(tmp.path())
        .output()
        .expect("replay");
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}{}",
        text(&o.stdout),
        text(&o.stderr)
    );
    let v: Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["isolate"], "process", "{v}");
    assert!(junit.is_file());
}

/// `cache list|verify|prune` of a cache that is not there say so and make nothing (a mistyped
/// `--cache-dir` was created, as a new empty cache, and listed as "0 artifacts").
#[test]
fn cache_commands_make_no_cache() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let typo = tmp.path().join("cahce");
    let dir = typo.to_str().expect("utf-8");
    for cmd in [
        &["list"][..],
        &["verify"][..],
        &["prune", "--older-than", "1d"][..],
    ] {
        for json in [false, true] {
            let mut args = vec!["cache"];
            args.extend_from_slice(cmd);
            args.extend(["--cache-dir", dir]);
            if json {
                args.push("--json");
                let o = run(&args);
                serde_json::from_slice::<Value>(&o.stdout).expect("one JSON answer");
            }
            let o = run(&args);
            let err = text(&o.stderr);
            assert_eq!(o.status.code(), Some(0), "{args:?}: {err}");
            assert!(
                err.contains(&format!("no cache at {dir}")),
                "{args:?}: {err}"
            );
            assert!(!typo.exists(), "{args:?} made {dir}");
        }
    }
}

/// A `--seccomp-profile` that names no file is a usage error (2) for every command that takes
/// it: `extract` said exit 1, and `serve` said confinement did not work on this host and
/// offered `--allow-unconfined` for what was a typo. So are `serve`'s TLS files (exit 1,
/// `TLS: PATH: ...`, naming no flag).
#[test]
fn a_missing_seccomp_profile_or_tls_file_is_a_usage_error() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let art = skill_tar(tmp.path(), "ok.tar");
    let art = art.to_str().expect("utf-8");
    let missing = tmp.path().join("no-such-profile.json");
    let missing = missing.to_str().expect("utf-8");
    let socket = tmp.path().join("s.sock");
    let socket = socket.to_str().expect("utf-8");
    let dir = tmp.path().to_str().expect("utf-8");
    for args in [
        vec!["extract", "--seccomp-profile", missing, art],
        vec!["--seccomp-profile", missing, "extract", art],
        vec!["extract", "--seccomp-profile", dir, art],
        vec!["doctor", "--seccomp-profile", missing],
        vec!["serve", "--socket", socket, "--seccomp-profile", missing],
    ] {
        let o = run(&args);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("--seccomp-profile"), "{args:?}: {err}");
        assert!(!err.contains("--allow-unconfined"), "{args:?}: {err}");
    }
    let pem = tmp.path().join("real.pem");
    std::fs::write(&pem, "not used").expect("write");
    let pem = pem.to_str().expect("utf-8");
    for (flag, args) in [
        ("--tls-cert", vec!["--tls-cert", missing, "--tls-key", pem]),
        ("--tls-key", vec!["--tls-cert", pem, "--tls-key", missing]),
        (
            "--tls-client-ca",
            vec!["--tls-cert", pem, "--tls-key", pem, "--tls-client-ca", dir],
        ),
    ] {
        let staging = tmp.path().join("staging");
        let staging = staging.to_str().expect("utf-8");
        let serve = ["serve", "--tcp", "127.0.0.1:0", "--staging-root", staging];
        let o = run(&[&serve[..], &args].concat());
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(flag), "{args:?}: {err}");
    }
}

/// `serve --log FILTER` (or `SKILLBOX_LOG`) that does not parse is a usage error; it was
/// replaced by `info` without a word, and the broker started (here it is then killed).
#[test]
fn serve_refuses_a_log_filter_that_does_not_parse() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let socket = tmp.path().join("s.sock");
    let socket = socket.to_str().expect("utf-8");
    let log = tmp.path().join("err");
    for (args, env) in [
        (vec!["--log", "skillbox=[[x"], None),
        (vec![], Some("skillbox=[[x")),
    ] {
        let mut cmd = Command::new(bin());
        cmd.args(["serve", "--socket", socket])
            .args(&args)
            .env_remove("SKILLBOX_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log"));
        if let Some(v) = env {
            cmd.env("SKILLBOX_LOG", v);
        }
        let mut child = cmd.spawn().expect("spawn serve");
        let until = Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Ok(Some(status)) = child.try_wait() {
                break Some(status);
            }
            if Instant::now() >= until {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(25));
        };
        let err = std::fs::read_to_string(&log).unwrap_or_default();
        let status = status.unwrap_or_else(|| panic!("{args:?} {env:?}: serve started:\n{err}"));
        assert_eq!(status.code(), Some(2), "{args:?} {env:?}: {err}");
        assert!(err.contains("--log"), "{err}");
    }
}

/// A broker whose stderr reader goes away (`skillbox serve 2>&1 | head -1`, a log pipe that
/// closes) keeps serving and still stops cleanly on SIGTERM: its first log line on the closed
/// pipe panicked (exit 101, the socket left behind), or mid-drain left it hung.
#[test]
fn serve_outlives_a_closed_stderr() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let socket = tmp.path().join("s.sock");
    let mut child = Command::new(bin())
        .arg("serve")
        .arg("--socket")
        .arg(&socket)
        .env_remove("XDG_RUNTIME_DIR")
        .env_remove("SKILLBOX_STAGING_ROOT")
        .env_remove("SKILLBOX_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn serve");
    drop(child.stderr.take());
    let until = Instant::now() + Duration::from_secs(20);
    let served = loop {
        if let Ok(Some(status)) = child.try_wait() {
            break Err(status);
        }
        let o = run(&["health", "--socket", socket.to_str().expect("utf-8")]);
        if o.status.code() == Some(0) {
            break Ok(());
        }
        assert!(Instant::now() < until, "serve did not answer");
        std::thread::sleep(Duration::from_millis(50));
    };
    if let Err(status) = served {
        panic!("serve ended with {status} once its stderr was closed");
    }
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("pid"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("kill");
    let until = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Ok(Some(status)) = child.try_wait() {
            break status;
        }
        if Instant::now() >= until {
            let _ = child.kill();
            let _ = child.wait();
            panic!("serve did not stop on SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(25));
    };
    assert!(status.success(), "{status}");
    assert!(!socket.exists(), "the socket was left behind");
}

/// On a terminal `replay` shows its progress; with stderr a pipe, or with --json, nothing.
#[test]
fn replay_progress_only_on_a_terminal() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path().join("c");
    std::fs::create_dir(&root).expect("mkdir");
    skill_tar(&root, "a.tar");
    let manifest = serde_json::json!({"version": 1, "cases": [
        {"name": "a", "file": "a.tar", "type": "archive", "expect": {"verdict": "accepted"}},
    ]});
    std::fs::write(root.join("manifest.json"), manifest.to_string()).expect("write");
    let dir = root.to_str().expect("utf-8");
    // Its scratch directory on tmpfs: on a disk that warrants replay's one warning line
    // (tests/suite/replay.rs) stderr would hold that, which is not progress.
    let piped = Command::new(bin())
        .args(["replay", dir])
        .env("TMPDIR", "/dev/shm")
        .output()
        .expect("spawn skillbox");
    assert_eq!(piped.status.code(), Some(0), "{}", text(&piped.stderr));
    assert!(piped.stderr.is_empty(), "{:?}", text(&piped.stderr));
    // A pseudo-terminal from util-linux `script`: stdout and stderr are both the terminal.
    let typescript = tmp.path().join("typescript");
    let shown = Command::new("script")
        .args(["-q", "-e", "-c"])
        .arg(format!("{} replay {dir}", bin()))
        .arg(&typescript)
        .stdin(Stdio::null())
        .output()
        .expect("run script(1) from util-linux");
    let seen = std::fs::read_to_string(&typescript).unwrap_or_default();
    assert_eq!(shown.status.code(), Some(0), "{seen}");
    assert!(seen.contains("cases, 0 failed"), "{seen:?}");
    let json = Command::new("script")
        .args(["-q", "-e", "-c"])
        .arg(format!("{} replay --json {dir}", bin()))
        .arg(&typescript)
        .stdin(Stdio::null())
        .output()
        .expect("run script(1)");
    let seen = std::fs::read_to_string(&typescript).unwrap_or_default();
    assert_eq!(json.status.code(), Some(0), "{seen}");
    assert!(!seen.contains("cases, 0 failed"), "{seen:?}");
}

/// Completion scripts and man pages are generated from the command definitions.
#[test]
fn completions_and_man_pages_come_from_the_definitions() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let o = run(&["completions", shell]);
        assert_eq!(o.status.code(), Some(0), "{shell}: {}", text(&o.stderr));
        let script = text(&o.stdout);
        for word in ["extract", "replay", "max-file-bytes", "verify-staged"] {
            assert!(script.contains(word), "{shell} completion lacks {word}");
        }
    }
    let o = run(&["man"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let page = text(&o.stdout);
    assert!(
        page.starts_with(".ie") || page.contains(".TH skillbox"),
        "{page}"
    );
    assert!(page.contains("extract"), "{page}");
    let o = run(&["man", "extract"]);
    let page = text(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(page.contains(".TH skillbox-extract"), "{page}");
    assert!(page.contains("max\\-file\\-bytes"), "{page}");
    let o = run(&["man", "no-such-command"]);
    assert_eq!(o.status.code(), Some(2));
}

/// A large download shows its bytes and rate on a terminal; with --json, nothing.
#[test]
fn fetch_progress_only_on_a_terminal() {
    use super::fetch::{Reply, Server, pki, sha};
    let tmp = tempfile::tempdir().expect("tempdir");
    let pki = pki();
    let ca = tmp.path().join("ca.pem");
    std::fs::write(&ca, &pki.ca_pem).expect("write");
    let server = Server::start(pki.server.clone());
    // About 2 MiB of SKILL.md, sent in 16 pieces 150 ms apart: a download of over 2 s.
    let mut md = SKILL.to_vec();
    md.extend(
        std::iter::repeat_n(b"Plain text for the progress line.\n"[..].to_vec(), 60_000).flatten(),
    );
    server.route(
        "/SKILL.md",
        Reply::Trickle {
            body: md.clone(),
            delay: Duration::from_millis(150),
        },
    );
    let index = serde_json::json!({
        "$schema": "https://schemas.agentskills.io/discovery/0.2.0/schema.json",
        "skills": [{"name": "demo", "type": "skill-md", "description": "A demo skill",
                    "url": "/SKILL.md", "digest": sha(&md)}],
    });
    server.route(
        "/index.json",
        Reply::Ok {
            body: index.to_string().into_bytes(),
            content_type: Some("application/json"),
            extra: Vec::new(),
        },
    );
    let typescript = tmp.path().join("typescript");
    let fetch = |json: &str| {
        let cmd = format!(
            "{} fetch {json} --no-cache --ca-file {} --allow-destination {} {} demo",
            bin(),
            ca.display(),
            server.addr,
            server.url("/index.json"),
        );
        let o = Command::new("script")
            .args(["-q", "-e", "-c", &cmd])
            .arg(&typescript)
            .env_remove("HTTPS_PROXY")
            .env_remove("https_proxy")
            .stdin(Stdio::null())
            .output()
            .expect("run script(1) from util-linux");
        let seen = std::fs::read_to_string(&typescript).unwrap_or_default();
        (o.status.code(), seen)
    };
    let (code, seen) = fetch("");
    assert_eq!(code, Some(0), "{seen}");
    assert!(seen.contains("downloaded, "), "{seen:?}");
    assert!(seen.contains("MiB") || seen.contains("KiB"), "{seen:?}");
    let (code, seen) = fetch("--json");
    assert_eq!(code, Some(0), "{seen}");
    assert!(!seen.contains("downloaded, "), "{seen:?}");
    // stderr a pipe: nothing drawn either.
    let piped = Command::new(bin())
        .args([
            "fetch",
            "--no-cache",
            "--ca-file",
            ca.to_str().expect("utf-8"),
        ])
        .args(["--allow-destination", &server.addr.to_string()])
        .args([&server.url("/index.json"), "demo"])
        .env_remove("HTTPS_PROXY")
        .env_remove("https_proxy")
        .output()
        .expect("run");
    assert_eq!(piped.status.code(), Some(0), "{}", text(&piped.stderr));
    assert!(
        !text(&piped.stderr).contains("downloaded, "),
        "{}",
        text(&piped.stderr)
    );
}

/// A URL typed where a file goes (`extract https://...`, `diff`) is a usage error (2) that says
/// it is a URL and, for `extract`, what downloads one; the password a URL may carry is never
/// shown (the message was "URL: no such file", the URL echoed whole).
#[test]
fn a_url_instead_of_a_file_says_so_and_hides_its_password() {
    let dir = tempfile::tempdir().expect("tempdir");
    let secret = "S3cretPw";
    let url = format!("https://alice:{secret}@skills.example.invalid/demo.zip");
    let answer = dir.path().join("answer.json");
    std::fs::write(&answer, b"{}").expect("write");
    let answer = answer.to_str().expect("utf-8");
    for args in [
        vec!["extract", url.as_str()],
        vec!["extract", "--json", url.as_str()],
        vec!["diff", url.as_str(), answer],
        vec!["diff", "--json", url.as_str(), answer],
    ] {
        let o = run(&args);
        let (out, err) = (text(&o.stdout), text(&o.stderr));
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            !out.contains(secret) && !err.contains(secret),
            "{args:?}:\n{out}\n{err}"
        );
        assert!(err.contains("not a URL"), "{args:?}: {err}");
        if args[0] == "extract" {
            assert!(err.contains("skillbox fetch"), "{args:?}: {err}");
        }
        if args.contains(&"--json") {
            let v: Value = serde_json::from_str(&out).expect("one JSON answer");
            assert_eq!(v["error"]["exit"], 2, "{v}");
        } else {
            assert!(out.is_empty(), "{args:?}: {out}");
        }
    }
    // The reverse: a file where `fetch` takes the index's URL says what reads a file.
    let o = run(&["fetch", answer, "demo"]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("skillbox index check FILE"), "{err}");
}

/// Ctrl-C while `extract` writes the tree (into `--out DIR` or its temporary directory): the
/// confined child ends with it (one process group, as a terminal signals it), and the command
/// removes what was written and ends 130 (128 + SIGINT), with one JSON error object under
/// `--json`. Killed by the signal's default action, it left DIR half-written (a package never
/// checked whole) and a `skillbox-XXXX` directory in TMPDIR.
#[test]
fn ctrl_c_during_an_extraction_leaves_nothing_behind() {
    use std::os::unix::process::CommandExt as _;
    let dir = tempfile::tempdir().expect("tempdir");
    // Incompressible files, enough that writing them takes a while: the signal comes mid-way.
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let files: Vec<(String, Vec<u8>)> = (0..4000)
        .map(|i| {
            let mut data = vec![0u8; 32 * 1024];
            for chunk in data.chunks_mut(8) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                chunk.copy_from_slice(&x.to_le_bytes());
            }
            (format!("data/f{i:05}.bin"), data)
        })
        .collect();
    let mut entries: Vec<(&str, &[u8])> = vec![("SKILL.md", SKILL)];
    entries.extend(files.iter().map(|(p, d)| (p.as_str(), d.as_slice())));
    let art = dir.path().join("big.tar");
    tar_at(&art, &entries);
    drop(files);
    for (json, with_out) in [(false, true), (true, true), (false, false)] {
        let tmp = dir.path().join(format!("tmp-{json}-{with_out}"));
        std::fs::create_dir(&tmp).expect("mkdir");
        let out = dir.path().join(format!("out-{json}-{with_out}"));
        let mut cmd = Command::new(bin());
        cmd.arg("extract").arg(&art);
        if with_out {
            cmd.arg("--out").arg(&out);
        }
        if json {
            cmd.arg("--json");
        }
        let child = cmd
            .env("TMPDIR", &tmp)
            .env_remove("XDG_RUNTIME_DIR")
            .process_group(0)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn extract");
        // Wait for the first data file on disk, wherever the tree is staged.
        let writing = || {
            let root = if with_out {
                Some(out.clone())
            } else {
                std::fs::read_dir(&tmp)
                    .ok()
                    .and_then(|mut d| d.next())
                    .and_then(Result::ok)
                    .map(|e| e.path())
            };
            root.and_then(|r| std::fs::read_dir(r.join("data")).ok())
                .is_some_and(|mut d| d.next().is_some())
        };
        let until = Instant::now() + Duration::from_secs(60);
        while !writing() {
            assert!(Instant::now() < until, "the tree was never written");
            std::thread::sleep(Duration::from_millis(1));
        }
        let group = nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("pid"));
        nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGINT).expect("killpg");
        let o = child.wait_with_output().expect("wait");
        let (stdout, err) = (text(&o.stdout), text(&o.stderr));
        assert_eq!(
            o.status.code(),
            Some(130),
            "{json} {with_out}: {err}{stdout}"
        );
        assert!(err.contains("interrupted (SIGINT)"), "{err}");
        assert!(!out.exists(), "{} was left behind", out.display());
        let left: Vec<_> = std::fs::read_dir(&tmp).expect("read_dir").collect();
        assert!(left.is_empty(), "TMPDIR holds {left:?}");
        if json {
            let v: Value = serde_json::from_str(&stdout).expect("one JSON answer");
            assert_eq!(v["error"]["exit"], 130, "{v}");
            assert_eq!(v["error"]["kind"], "interrupted", "{v}");
        } else {
            assert!(stdout.is_empty(), "{stdout}");
        }
    }
}

/// The broker's staging directories under `staging` (its `.lock` aside).
fn server_copies(staging: &Path) -> Vec<std::ffi::OsString> {
    std::fs::read_dir(staging)
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.file_name())
                .filter(|n| n != ".lock")
                .collect::<Vec<_>>()
        })
        .unwrap_or_default()
}

/// `extract --server --json --out DIR/out` of a package of 2,000 files through `serve` (its
/// staging root `staging`), held by a test stop point once its first entry is written, sent
/// SIGINT there and let go: the running command, and its `--out`.
fn interrupted_while_writing(dir: &Path, serve: &Serve, staging: &Path) -> (Child, PathBuf) {
    // Enough files that writing the rest outlasts the command's 20 ms look at the signal: the
    // exchange is stopped mid-tree, not finished first.
    let names: Vec<String> = (0..2000)
        .map(|i| format!("references/r{i:04}.md"))
        .collect();
    let mut files: Vec<(&str, &[u8])> = vec![("SKILL.md", SKILL)];
    files.extend(names.iter().map(|n| (n.as_str(), &b"# R\n"[..])));
    let art = dir.join("pkg.tar");
    tar_at(&art, &files);
    let out = dir.join("out");
    let mut cmd = Command::new(bin());
    cmd.arg("extract")
        .arg(&art)
        .args(["--server", &serve.uri(), "--json", "--out"])
        .arg(&out);
    let held = super::stopped_at(&mut cmd, "client:tree-begun");
    assert!(out.is_dir(), "the tree was not begun:\n{}", serve.log());
    assert_eq!(
        server_copies(staging).len(),
        1,
        "the server keeps the accepted tree: {:?}\n{}",
        server_copies(staging),
        serve.log()
    );
    let pid = nix::unistd::Pid::from_raw(i32::try_from(held.id()).expect("pid"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).expect("kill");
    super::resume(held.id());
    (held, out)
}

/// Ctrl-C while `extract --server --out` writes the broker's tree (held at its first entry by a
/// test stop point, the signal sent, then let go): `--out` is removed, the broker's copy of the
/// tree is released, and the command ends with 130 and the JSON error object. (Before: the
/// signal's default action ended it with `--out` half-written; then, the broker kept its copy
/// until its expiry.)
#[test]
fn an_interrupted_extract_through_a_server_leaves_no_out() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Staged on tmpfs, as the broker's default root is: the release removes the 2,000 files
    // before it answers, and the command waits 2 s at most for that answer. On ext4 without a
    // journal, mounted `discard` (CI's `/tmp`), the removal alone took longer; the command
    // ended first, with the removal still under way.
    let scratch = super::corpus_scratch();
    let staging = scratch.path().join("staging");
    let serve = Serve::start(
        dir.path(),
        &["--staging-root", staging.to_str().expect("utf-8")],
    );
    let (held, out) = interrupted_while_writing(dir.path(), &serve, &staging);
    let o = held.wait_with_output().expect("wait");
    let (stdout, err) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(130), "{err}{stdout}");
    assert!(err.contains("interrupted (SIGINT)"), "{err}");
    assert!(!out.exists(), "{} was left behind", out.display());
    let v: Value = serde_json::from_str(&stdout).expect("one JSON answer");
    assert_eq!(v["error"]["kind"], "interrupted", "{v}");
    // The server's copy was released before the command ended, not left to its 600 s expiry.
    assert_eq!(
        server_copies(&staging),
        Vec::<std::ffi::OsString>::new(),
        "{}",
        serve.log()
    );
}

/// The same interruption, with a broker that takes the release and does not get to removing
/// its copy in the 2 s the command waits (held by a test stop point, as a slow disk would):
/// the command says so instead of saying the tree was removed, and ends with 130; the broker,
/// let go, removes its copy. (Before, the command's message said nothing of the broker's
/// copy, whether or not the broker had removed it.)
#[test]
fn an_interrupted_extract_says_when_the_broker_did_not_confirm_removing_its_copy() {
    let dir = tempfile::tempdir().expect("tempdir");
    let scratch = super::corpus_scratch();
    let staging = scratch.path().join("staging");
    let mut serve = Serve::start_env(
        dir.path(),
        &["--staging-root", staging.to_str().expect("utf-8")],
        &[("SKILLBOX_TEST_STOP_AT", "broker:releasing")],
    );
    let (held, out) = interrupted_while_writing(dir.path(), &serve, &staging);
    let o = held.wait_with_output().expect("wait");
    // The broker took the release and stopped before removing anything (looked at once the
    // command has ended, so a release that never came fails the test instead of hanging it).
    let broker = serve.child.as_ref().map_or(0, Child::id);
    super::wait_stopped(broker);
    let (stdout, err) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(130), "{err}{stdout}");
    assert!(
        err.contains("interrupted (SIGINT)")
            && err.contains("the broker did not say within 2 s that it removed its copy"),
        "{err}"
    );
    assert!(!out.exists(), "{} was left behind", out.display());
    let v: Value = serde_json::from_str(&stdout).expect("one JSON answer");
    assert_eq!(v["error"]["kind"], "interrupted", "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("did not say")),
        "{v}"
    );
    assert_eq!(
        server_copies(&staging).len(),
        1,
        "the copy went before the broker was let go"
    );
    super::resume(broker);
    let until = Instant::now() + Duration::from_secs(30);
    while !server_copies(&staging).is_empty() {
        assert!(
            Instant::now() < until,
            "the broker never removed its copy:\n{}",
            serve.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    serve.signal(nix::sys::signal::Signal::SIGTERM);
    let status = serve.wait_exit(Duration::from_secs(20));
    assert!(status.success(), "{status}:\n{}", serve.log());
}
