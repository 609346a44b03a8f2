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
