mod cli;
mod cli_first_hour;
mod corpus;
mod diff;
mod docs;
mod fetch;
mod fleet;
mod fuzz_seeds;
mod grpc;
mod index;
mod lifecycle;
mod output;
mod owned_dir;
mod publish;
mod replay;
mod review;
mod sandbox;
mod staging_fs;
mod twins;

/// Scratch space for the tests that replay the whole corpus (`corpus`, `grpc`, `replay`), or
/// stage and remove a tree of thousands of files within a bound (`cli_first_hour`): a tmpfs
/// (`/dev/shm`) when there is one. These tests check verdicts, not a disk. On ext4 without
/// a journal, mounted `discard` (this project's CI machines' `/tmp`), the corpus's case of 9,990
/// long-target links (`targz_inventory_past_answer_bound`) took 8 to 46 s to stage and remove
/// under a loaded suite, past the child's 30 s deadline, against 1.3 to 1.7 s on tmpfs: the
/// filesystem's time, not the engine's (bench-results/throughput.md, fifteenth session). The
/// removal is the parent's now, outside that deadline (sixteenth session); creating them is not.
/// `serve`, `replay` and `doctor` warn about such a disk; `.ci/run`'s release replay of the
/// corpus still stages under `TMPDIR`.
pub(crate) fn corpus_scratch() -> tempfile::TempDir {
    let shm = std::path::Path::new("/dev/shm");
    match skillbox::staging_fs::filesystem(shm) {
        Ok(skillbox::staging_fs::Filesystem::Tmpfs) => {
            tempfile::tempdir_in(shm).expect("a directory in /dev/shm")
        }
        other => {
            eprintln!(
                "WARNING: /dev/shm is not a tmpfs here ({other:?}); the corpus is staged under \
                 TMPDIR, where its slowest case may pass the child's deadline on a slow disk"
            );
            tempfile::tempdir().expect("tempdir")
        }
    }
}

/// The debug build's pause (`SKILLBOX_TEST_STOP_AT`) once a confined child ended with anything
/// but an acceptance, before the parent removes the staged tree (`src/sandbox/mod.rs`).
pub(crate) const STOP_AT_DISCARD: (&str, &str) = ("SKILLBOX_TEST_STOP_AT", "sandbox:discard");

/// Wait until our child `pid` stops itself (`SIGSTOP`, the debug build's
/// `SKILLBOX_TEST_STOP_AT`); panics, killing it, if it ends instead, or has not stopped within
/// two minutes (a point it never reaches fails the test rather than hanging it).
pub(crate) fn wait_stopped(pid: u32) {
    use nix::sys::signal::{Signal, kill};
    use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
    let pid = nix::unistd::Pid::from_raw(i32::try_from(pid).expect("pid"));
    let until = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let status =
            waitpid(pid, Some(WaitPidFlag::WUNTRACED | WaitPidFlag::WNOHANG)).expect("waitpid");
        match status {
            WaitStatus::Stopped(_, Signal::SIGSTOP) => return,
            WaitStatus::StillAlive if std::time::Instant::now() < until => {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            _ => {
                let _ = kill(pid, Signal::SIGKILL);
                panic!("never stopped at its SKILLBOX_TEST_STOP_AT point: {status:?}");
            }
        }
    }
}

/// Start `cmd` (a skillbox command) with the debug build's pause at `at`
/// (`SKILLBOX_TEST_STOP_AT`), its output piped, and return it once it stopped there.
pub(crate) fn stopped_at(cmd: &mut std::process::Command, at: &str) -> std::process::Child {
    let child = cmd
        .env("SKILLBOX_TEST_STOP_AT", at)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn skillbox");
    wait_stopped(child.id());
    child
}

/// Let a process stopped by [`wait_stopped`] go on.
pub(crate) fn resume(pid: u32) {
    let pid = nix::unistd::Pid::from_raw(i32::try_from(pid).expect("pid"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT).expect("SIGCONT");
}

/// The names beneath `dir`, recursively, sorted ("a", "a/b", ...).
pub(crate) fn tree_names(dir: &std::path::Path) -> Vec<String> {
    fn walk(root: &std::path::Path, dir: &std::path::Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).expect("read_dir").flatten() {
            let p = e.path();
            let rel = p.strip_prefix(root).expect("beneath").display().to_string();
            out.push(rel);
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                walk(root, &p, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// Start `cmd` (a one-shot `extract` or `fetch` of a package the engine rejects) with the pause
/// of [`STOP_AT_DISCARD`], wait for it, and return it with the staged tree the child left: `out`
/// when given (`--out`), else the one directory the command made under `tmpdir` (its `TMPDIR`).
pub(crate) fn stopped_before_discard(
    cmd: &mut std::process::Command,
    tmpdir: &std::path::Path,
    out: Option<&std::path::Path>,
) -> (std::process::Child, std::path::PathBuf) {
    let child = cmd
        .env("TMPDIR", tmpdir)
        .env(STOP_AT_DISCARD.0, STOP_AT_DISCARD.1)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn skillbox");
    wait_stopped(child.id());
    let staging = out.map_or_else(
        || {
            let names: Vec<std::path::PathBuf> = std::fs::read_dir(tmpdir)
                .expect("read_dir")
                .flatten()
                .map(|e| e.path())
                .collect();
            assert_eq!(names.len(), 1, "{names:?}");
            names[0].clone()
        },
        std::path::Path::to_path_buf,
    );
    (child, staging)
}

/// `withdraw SKILL_REF --reason exfiltrates --by alice --local`: the local withdrawal of the
/// lifecycle and fleet tests of records out of reach or restored.
pub(crate) fn alice_withdraws_locally(skill_ref: &str) -> [&str; 7] {
    [
        "withdraw",
        skill_ref,
        "--reason",
        "exfiltrates",
        "--by",
        "alice",
        "--local",
    ]
}
