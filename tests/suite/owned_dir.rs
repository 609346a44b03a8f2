//! Directories skillbox keeps state in are trusted only when they are really ours: `serve` must
//! refuse a squatted runtime directory (another user's, or writable by others), a symlink in its
//! place and a squatted staging root, and put nothing in them.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_skillbox")
}

/// Run `skillbox serve ARGS`; it must exit by itself (a refusal at start), within 30 s.
fn serve_refused(args: &[&str], env: &[(&str, &Path)], as_uid: Option<u32>) -> Output {
    let mut cmd = Command::new(bin());
    cmd.arg("serve")
        .args(args)
        .env_remove("XDG_RUNTIME_DIR")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    if let Some(uid) = as_uid {
        cmd.uid(uid).gid(uid);
    }
    let mut child = cmd.spawn().expect("spawn skillbox serve");
    let start = Instant::now();
    while child.try_wait().expect("try_wait").is_none() {
        if start.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            panic!("serve did not refuse the directory: still running after 30 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("wait")
}

fn mkdir_mode(p: &Path, mode: u32) {
    std::fs::create_dir(p).expect("mkdir");
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

fn assert_refused(out: &Output, wants: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "serve started: {stderr}");
    assert_ne!(out.status.code(), None, "serve died of a signal: {stderr}");
    assert!(stderr.contains(wants), "stderr lacks {wants:?}: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

fn is_empty(dir: &Path) -> bool {
    std::fs::read_dir(dir).expect("read_dir").next().is_none()
}

#[test]
fn serve_refuses_a_world_writable_socket_directory() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let squat = tmp.path().join("squat");
    mkdir_mode(&squat, 0o777);
    let socket = squat.join("skillbox.sock");
    let out = serve_refused(&["--socket", socket.to_str().expect("utf-8")], &[], None);
    assert_refused(&out, "writable by group or others");
    assert!(
        is_empty(&squat),
        "serve put something in the squatted directory"
    );
}

#[test]
fn serve_refuses_a_symlink_in_place_of_the_socket_directory() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let theirs = tmp.path().join("theirs");
    mkdir_mode(&theirs, 0o700);
    let link = tmp.path().join("run");
    std::os::unix::fs::symlink(&theirs, &link).expect("symlink");
    let socket = link.join("skillbox.sock");
    let out = serve_refused(&["--socket", socket.to_str().expect("utf-8")], &[], None);
    assert_refused(&out, "is a symbolic link");
    assert!(is_empty(&theirs), "serve wrote through the symlink");
}

#[test]
fn serve_refuses_a_squatted_staging_root() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let run = tmp.path().join("run");
    mkdir_mode(&run, 0o700);
    let squat = tmp.path().join("staging");
    mkdir_mode(&squat, 0o777);
    let socket = run.join("skillbox.sock");
    let out = serve_refused(
        &[
            "--socket",
            socket.to_str().expect("utf-8"),
            "--staging-root",
            squat.to_str().expect("utf-8"),
        ],
        &[],
        None,
    );
    assert_refused(&out, "writable by group or others");
    assert!(
        is_empty(&squat),
        "serve put something in the squatted staging root"
    );
}

/// The case as it was found: unprivileged, no XDG_RUNTIME_DIR, and `$TMPDIR/skillbox-UID`
/// created beforehand by another user with mode 0777.
#[test]
fn serve_refuses_a_default_runtime_directory_squatted_by_another_user() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!(
            "NOTE: not root, so no second uid to squat with; the world-writable and symlink \
             cases above still ran"
        );
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    // The test's TMPDIR: traversable by uid 65534, sticky and writable by all, as /tmp is.
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o1777)).expect("chmod");
    let squat = tmp.path().join("skillbox-65534");
    mkdir_mode(&squat, 0o777); // owned by root, the "other user" here
    let out = serve_refused(&[], &[("TMPDIR", tmp.path())], Some(65534));
    // Refused as the socket's directory (owned by uid 0) or as the staging root's parent
    // (writable by others without the sticky bit), whichever serve opens first; either way the
    // squatted directory is named.
    assert_refused(&out, squat.to_str().expect("utf-8"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("owned by uid 0, not by this user (uid 65534)")
            || stderr.contains("writable by others without the sticky bit"),
        "{stderr}"
    );
    assert!(
        is_empty(&squat),
        "serve put something in the squatted directory"
    );
}
