//! What the lifecycle, fleet and publish tests read of a command's run: its exit code, its
//! `--json` answer, and everything it printed for an assertion's message.

use std::process::Output;

use serde_json::Value;

pub(super) fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

pub(super) fn explain(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

pub(super) fn json_of(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}", explain(o)))
}

pub(super) fn expect_code(o: &Output, want: i32) {
    assert_eq!(code(o), want, "{}", explain(o));
}

/// `o`, a command run over records restored from before alice's `withdraw --local` (they call
/// the version approved again), said so on stderr and that it records the withdrawal again; `at`
/// names the step in a failure.
pub(super) fn says_recorded_again(o: &Output, at: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("the records call it approved")
            && err.contains("restored from before it; recording it again")
            && err.contains("alice"),
        "{at}: {}",
        explain(o)
    );
}
