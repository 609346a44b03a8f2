//! The staging filesystem check, on real ext4 filesystems with and without a journal
//! (loop-mounted images made by `mkfs.ext4`), through the library, `doctor` and `serve`.

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use skillbox::staging_fs::{self, Filesystem};

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// An ext4 image mounted on a loop device, unmounted (and the device freed) when dropped.
struct Mounted {
    mnt: PathBuf,
    _dir: tempfile::TempDir,
}

impl Mounted {
    /// Made with or without a journal, mounted with or without online discard.
    fn ext4(journal: bool, discard: bool) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let img = dir.path().join("fs.img");
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).expect("mkdir mnt");
        let mut mkfs = Command::new("mkfs.ext4");
        mkfs.args(["-q", "-F"]);
        if !journal {
            mkfs.args(["-O", "^has_journal"]);
        }
        run(mkfs.arg(&img).arg("32M"));
        run(Command::new("mount")
            .args(["-o", if discard { "loop,discard" } else { "loop" }])
            .arg(&img)
            .arg(&mnt));
        // World-traversable, as /tmp is: the confined child (uid 65534) stages beneath it.
        run(Command::new("chmod").arg("1777").arg(&mnt));
        Self { mnt, _dir: dir }
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        // `mount -o loop` set the device to free itself on the last unmount.
        let _ = Command::new("umount").arg(&self.mnt).status();
    }
}

fn doctor_json(tmpdir: &Path) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_skillbox"))
        .args(["doctor", "--json"])
        .env("TMPDIR", tmpdir)
        .output()
        .expect("run doctor");
    // The warning is advice: confinement still works, and the doctor says so.
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("doctor --json")
}

/// What `serve` logs before it says it is serving.
fn serve_log(staging_root: &Path, socket: &Path) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_skillbox"))
        .arg("serve")
        .arg("--socket")
        .arg(socket)
        .arg("--staging-root")
        .arg(staging_root)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start serve");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let last = line.contains("serving on");
            if tx.send(line).is_err() || last {
                return;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut log = String::new();
    while let Ok(line) = rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        log.push_str(&line);
        log.push('\n');
        if line.contains("serving on") {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(log.contains("serving on"), "serve did not start:\n{log}");
    log
}

/// ... and mounted `discard`, the warning says what that costs (removing a tree); the loop
/// device takes discards, so the option shows in `/proc/self/mountinfo` as on a real disk.
#[test]
fn staging_on_ext4_without_a_journal_is_warned_about_and_with_one_is_not() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("not root: cannot mount ext4 images to check the staging filesystem");
        return;
    }
    for (journal, discard) in [(false, false), (false, true), (true, false)] {
        let fs = Mounted::ext4(journal, discard);
        let found = staging_fs::filesystem(&fs.mnt).expect("statfs");
        let Filesystem::Ext4 {
            device: Some(device),
            journal: seen,
            discard: seen_discard,
        } = &found
        else {
            panic!("journal {journal}: {found:?}");
        };
        assert!(device.starts_with("loop"), "{device}");
        assert_eq!(*seen, Some(journal), "{device}");
        assert_eq!(*seen_discard, Some(discard), "{device}");

        let report = doctor_json(&fs.mnt);
        let staging = &report["staging"];
        assert_eq!(staging["path"], fs.mnt.display().to_string());
        assert_eq!(staging["filesystem"]["journal"], journal, "{staging}");
        assert_eq!(staging["filesystem"]["discard"], discard, "{staging}");
        let warning = staging["warning"].as_str();
        assert_eq!(warning.is_some(), !journal, "{staging}");
        if let Some(w) = warning {
            assert!(
                w.contains("without a journal") && w.contains("tmpfs"),
                "{w}"
            );
            assert_eq!(w.contains("mounted `discard`"), discard, "{w}");
        }

        // The socket in a private directory of its own (serve refuses a world-writable one).
        let sock = tempfile::tempdir().expect("socket dir");
        let log = serve_log(&fs.mnt.join("staging"), &sock.path().join("skillbox.sock"));
        assert_eq!(
            log.contains("without a journal"),
            !journal,
            "journal {journal}:\n{log}"
        );
        assert_eq!(
            log.contains("mounted `discard`"),
            discard,
            "discard {discard}:\n{log}"
        );
    }
}
