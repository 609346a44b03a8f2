//! Ctrl-C (SIGINT), SIGTERM and SIGHUP while `extract` or `fetch` stages a tree, or `replay`
//! stages its cases' trees.
//!
//! Killed by the signal's default action, such a command left its staging directory behind
//! half-written: the caller's `--out DIR` holding part of a package that was never checked
//! whole, or a `skillbox-XXXX` directory under TMPDIR nobody removes. From the moment a staging
//! directory is made ([`super::staging::Staging`]) until it is gone, the first of these signals
//! is held instead: the confined child writing the tree is in the same process group, so a
//! Ctrl-C ends it too (a SIGTERM sent to skillbox alone lets it finish, within
//! `--sandbox-timeout`), and when it has ended the command removes the tree and ends with
//! 128 + the signal ([`take`], [`end`]). The tree is not removed while the child may still
//! write into it: what it wrote after would stay. A second signal removes the tree and ends at
//! once. Outside that time a signal ends the command at once, as before: nothing of it is on
//! disk then (a partial download in the cache's `tmp/` is what `cache prune` removes).

use std::path::PathBuf;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};

use super::exit::{error_object, print_json};

/// The staging directory while one exists.
static STAGING: Mutex<Option<PathBuf>> = Mutex::new(None);

/// The first signal that arrived while a tree was staged (0: none; [`HANDLED`]: its command
/// has taken it and is ending).
static ARRIVED: AtomicI32 = AtomicI32::new(0);
const HANDLED: i32 = -1;

/// The watcher thread, once started: a message when its handlers are installed.
static WATCHING: OnceLock<Mutex<Option<std::sync::mpsc::Receiver<()>>>> = OnceLock::new();

/// Start watching the signals, once per process, without waiting: called as a command starts,
/// so the thread and its handlers are ready by the time a tree is staged (one-shot start-up is
/// measured; nothing waits for this unless it is not done by then, [`staging`]).
pub fn start() {
    WATCHING.get_or_init(|| {
        let (ready, installed) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("skillbox-signals".into())
            .spawn(move || {
                let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                else {
                    let _ = ready.send(());
                    return;
                };
                rt.block_on(async move {
                    use tokio::signal::unix::{Signal, SignalKind, signal};
                    let mut int = signal(SignalKind::interrupt()).ok();
                    let mut term = signal(SignalKind::terminate()).ok();
                    let mut hup = signal(SignalKind::hangup()).ok();
                    let _ = ready.send(());
                    // A handler that could not be installed keeps its default action.
                    async fn next(s: &mut Option<Signal>) {
                        match s {
                            Some(s) => {
                                s.recv().await;
                            }
                            None => std::future::pending().await,
                        }
                    }
                    loop {
                        let sig = tokio::select! {
                            () = next(&mut int) => libc::SIGINT,
                            () = next(&mut term) => libc::SIGTERM,
                            () = next(&mut hup) => libc::SIGHUP,
                        };
                        arrived(sig);
                    }
                });
            });
        Mutex::new(spawned.is_ok().then_some(installed))
    });
}

/// Wait until the handlers are installed (so none of the signals can take its default action
/// on a directory made after this).
fn watch() {
    start();
    if let Some(watching) = WATCHING.get() {
        let mut installed = watching.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(rx) = installed.take() {
            let _ = rx.recv();
        }
    }
}

/// What a signal does: held once while a tree is staged, else the end of the command.
fn arrived(sig: i32) {
    let staging = STAGING.lock().unwrap_or_else(PoisonError::into_inner);
    let first = ARRIVED.compare_exchange(0, sig, Ordering::SeqCst, Ordering::SeqCst);
    match staging.as_deref() {
        Some(_) if first.is_ok() => {
            eprintln!(
                "skillbox: interrupted ({}): stopping; the tree is removed once its child has \
                 ended (again to end at once)",
                name(sig)
            );
        }
        Some(dir) => {
            // The child may still be writing: removed as far as it can be now.
            super::staging::discard_path(dir);
            eprintln!("skillbox: interrupted ({}): ended at once", name(sig));
            std::process::exit(128 + sig);
        }
        None => {
            eprintln!("skillbox: interrupted ({})", name(sig));
            std::process::exit(128 + sig);
        }
    }
}

fn name(sig: i32) -> &'static str {
    match sig {
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        libc::SIGHUP => "SIGHUP",
        _ => "a signal",
    }
}

/// Make the staging directory (`make` returns it and its path) with the signals watched, and
/// note it as the one a signal must not leave behind. A signal that arrives meanwhile waits for
/// it to be noted.
pub fn staging<T>(make: impl FnOnce() -> std::io::Result<(T, PathBuf)>) -> std::io::Result<T> {
    watch();
    let mut staging = STAGING.lock().unwrap_or_else(PoisonError::into_inner);
    let (made, path) = make()?;
    *staging = Some(path);
    Ok(made)
}

/// The staging directory is gone (removed, or an accepted `--out` tree kept whole with its
/// answer printed). A signal held and not yet taken ends the command now.
pub fn staging_done() {
    let mut staging = STAGING.lock().unwrap_or_else(PoisonError::into_inner);
    *staging = None;
    let sig = ARRIVED.load(Ordering::SeqCst);
    if sig > 0 {
        eprintln!("skillbox: interrupted ({})", name(sig));
        std::process::exit(128 + sig);
    }
}

/// The signal held while the child ran, if one was: the command removes its tree and calls
/// [`end`]. Taken once.
pub fn take() -> Option<i32> {
    let _staging = STAGING.lock().unwrap_or_else(PoisonError::into_inner);
    let sig = ARRIVED.load(Ordering::SeqCst);
    if sig > 0 {
        ARRIVED.store(HANDLED, Ordering::SeqCst);
        Some(sig)
    } else {
        None
    }
}

/// Whether a signal arrived and is held (not yet taken): a command running many steps stops
/// starting new ones.
pub fn pending() -> bool {
    ARRIVED.load(Ordering::SeqCst) > 0
}

/// End the command after `sig`, its tree removed: said on stderr (and as the JSON error object
/// on stdout with `--json`, so a script reading it gets one answer), status 128 + the signal,
/// as a shell reports a command a signal ended.
pub fn end(sig: i32, json: bool) -> ! {
    end_with(
        sig,
        json,
        "the extraction was stopped and its tree removed; nothing was kept",
    )
}

/// [`end`], saying what was stopped and removed.
pub fn end_with(sig: i32, json: bool, what: &str) -> ! {
    let code = 128 + sig;
    let message = format!("interrupted ({}): {what}", name(sig));
    if json {
        print_json(&error_object(
            "interrupted",
            u8::try_from(code).unwrap_or(u8::MAX),
            &message,
        ));
    }
    eprintln!("skillbox: {message}");
    std::process::exit(code);
}
