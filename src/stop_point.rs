//! Test-only pauses: with `SKILLBOX_TEST_STOP_AT=<point>` a debug build stops itself
//! (`SIGSTOP`) when it reaches that point, the first time only, so a test can look at what is
//! on disk, kill the process there, or make another process act in between, and then let it go
//! on (`SIGCONT`; the test suite's `stopped_at` and `wait_stopped`). Release builds compile
//! this to nothing. A confined child never sees the variable (its environment is empty).
//!
//! The points:
//! - `sandbox:discard`: a child ended with anything but an acceptance, before the parent
//!   removes the staged tree (`sandbox`);
//! - `publish:staged`: the build is staged (every artifact built and checked, the index
//!   written in the staging directory), before anything is written to OUT_DIR;
//! - `publish:verify`: a check extraction is done and its tree is still in its directory
//!   (`skillbox-publish-verify-run-*`), before it is removed;
//! - `publish:made:<prefix>`: publish made a directory named `<prefix>` and six characters (its
//!   staging directory, `.skillbox-publish-run-`, or a check extraction's,
//!   `skillbox-publish-verify-run-`) and has not opened and locked it yet (`publish::stage`);
//! - `publish:reopen:<path>`: publish looked at the file `path` (OUT_DIR or the staging
//!   directory joined with the file's place) and has not opened it yet (`publish::tree`);
//! - `cache:index-copy`, `cache:record`: the index copy (the artifact's record) is written to
//!   its temporary file in the cache's `tmp/`, before it is renamed into place;
//! - `cache:lock:<stem>`: the cache's lock file `locks/<stem>.lock` (`<stem>` a digest's hex,
//!   or `index-` and the hex of an index URL) is open and not yet locked;
//! - `withdraw:decided`: `withdraw` read the version as not withdrawn and has not written the
//!   withdrawal yet;
//! - `withdraw:withdrawn`: `withdraw` committed the withdrawal and has not moved this host's
//!   agents off the version yet;
//! - `install:extracted`, `update:extracted`: the confined extraction is done (its tree and
//!   answer in the command's own staging directory, held by its `flock`), without the store
//!   lock, and the command has not taken that lock again to decide;
//! - `install:decided`, `update:decided`: the intake read the records and decided (the policy,
//!   the fleet's record of the digest, a withdrawal of the skill before it) and has not written
//!   that decision yet;
//! - `quarantine:aside`: `contain` moved a second copy of a quarantined version out of
//!   `versions/` to `quarantine/.<hex>.<pid>` (held by its `flock`) and has not removed it yet
//!   (`lifecycle::quarantine`);
//! - `staging:opened:<name>`: recovery (under the store lock) opened the staging directory
//!   `STORE/staging/<name>` and has not taken its `flock` yet
//!   (`lifecycle::store::remove_abandoned_staging`);
//! - `client:tree-begun`: a client writing a broker's accepted tree (`extract --server --out`)
//!   has written its first entry and not the second (`client::write_tree`);
//! - `broker:tcp-bound`: the broker's TCP listener is bound and listening (`broker::bind_tcp`;
//!   `serve` binds it before it makes anything), and nothing serves on it yet;
//! - `broker:releasing`: the broker took a `Release` and has not removed the copy yet
//!   (`broker::service`).

/// Stop here when `SKILLBOX_TEST_STOP_AT` names `at` (debug builds, the first time only).
pub(crate) fn stop_point(at: &str) {
    #[cfg(debug_assertions)]
    {
        static STOPPED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        if std::env::var_os("SKILLBOX_TEST_STOP_AT").is_some_and(|want| want == at)
            && !STOPPED.swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGSTOP);
        }
    }
    #[cfg(not(debug_assertions))]
    {
        let _ = at;
    }
}
