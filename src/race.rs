//! Test support: run an action while another thread keeps swapping a path component, as an
//! attacker racing a check and an act would (the directory-relative race tests of
//! `lifecycle::agents` and `publish::tree`).

use std::sync::atomic::{AtomicBool, Ordering};

/// `act()`, with `swap` called in a loop on a second thread from before `act` starts until it
/// returns. `swap` panics on failure (it is the test's own `renameat2` exchange).
pub fn while_swapping<R>(swap: impl Fn() + Sync, act: impl FnOnce() -> R) -> R {
    let (stop, started) = (AtomicBool::new(false), AtomicBool::new(false));
    std::thread::scope(|s| {
        s.spawn(|| {
            started.store(true, Ordering::Release);
            while !stop.load(Ordering::Acquire) {
                swap();
            }
        });
        while !started.load(Ordering::Acquire) {
            std::hint::spin_loop();
        }
        let r = act();
        stop.store(true, Ordering::Release);
        r
    })
}
