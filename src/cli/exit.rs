//! The exit status of every command, defined once.
//!
//! The codes are a contract scripts rely on. 0 to 3 mean the same for every command; 4 and 5
//! have a meaning per command (named variants below, never a bare number at a call site); 6 to
//! 9 are reserved for the install lifecycle (store, policy, approvals), so that a code never
//! changes meaning once published.
//!
//! | code | meaning |
//! |------|---------|
//! | 0 | ok: accepted, processed, unchanged (`diff`), or a graceful shutdown (`serve`) |
//! | 1 | operational error: a file, the network, the sandbox or the server failed |
//! | 2 | usage error: bad flags or input that is not what the command takes |
//! | 3 | rejected: the artifact (or index) was refused, with the reason printed |
//! | 4 | `fetch`, `index check`: refused by the fetch policy (the rule is named); `diff`: content_only; `publish --check`: the published tree differs |
//! | 5 | `fetch`, `index check`: unrecognised index `$schema`; `diff`: needs_review |
//! | 6 | reserved, install lifecycle: needs_approval (pending a person's decision) |
//! | 7 | reserved, install lifecycle: denied, by policy or by a person |
//! | 8 | reserved, install lifecycle: not found (unknown skill, agent or digest; not in the store) |
//! | 9 | reserved, install lifecycle: the version was withdrawn (`status`: one is still on an agent, not contained) |

use std::process::ExitCode;

/// How a command ended. See the module documentation for the table of codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// 0: accepted, processed, unchanged, or shut down gracefully.
    Ok,
    /// 1: an operational error.
    Operational,
    /// 2: a usage error.
    Usage,
    /// 3: rejected.
    Rejected,
    /// 4 (`fetch`, `index check`): a fetch-policy rule refused the request.
    Refused,
    /// 5 (`fetch`, `index check`): the index's `$schema` is not one this version processes.
    UnknownSchema,
    /// 4 (`diff`): only content changed; no capability grew.
    ContentOnly,
    /// 5 (`diff`): a capability grew; a reviewer must look again.
    NeedsReview,
    /// 4 (`publish --check`): the published tree is not what the sources build.
    Differs,
    /// 6 (install lifecycle): the version waits for a person's approval.
    #[allow(dead_code, reason = "reserved for the install lifecycle commands")]
    NeedsApproval,
    /// 7 (install lifecycle): denied by policy or by a person.
    #[allow(dead_code, reason = "reserved for the install lifecycle commands")]
    Denied,
    /// 8 (install lifecycle): unknown skill, agent or digest, or not in the store.
    #[allow(dead_code, reason = "reserved for the install lifecycle commands")]
    NotFound,
    /// 9 (install lifecycle): the version was withdrawn and cannot be activated.
    #[allow(dead_code, reason = "reserved for the install lifecycle commands")]
    Withdrawn,
}

impl Exit {
    /// The process exit status.
    pub const fn code(self) -> u8 {
        match self {
            Self::Ok => 0,
            Self::Operational => 1,
            Self::Usage => 2,
            Self::Rejected => 3,
            Self::Refused | Self::ContentOnly | Self::Differs => 4,
            Self::UnknownSchema | Self::NeedsReview => 5,
            Self::NeedsApproval => 6,
            Self::Denied => 7,
            Self::NotFound => 8,
            Self::Withdrawn => 9,
        }
    }
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> Self {
        ExitCode::from(e.code())
    }
}

/// An error that ends a command: the message for stderr and the status it maps to.
#[derive(Debug)]
pub struct Failure {
    pub exit: Exit,
    pub message: String,
}

impl Failure {
    pub fn usage(message: impl Into<String>) -> Self {
        Self {
            exit: Exit::Usage,
            message: message.into(),
        }
    }

    pub fn operational(message: impl Into<String>) -> Self {
        Self {
            exit: Exit::Operational,
            message: message.into(),
        }
    }
}

impl Exit {
    /// The `kind` a JSON error object carries for this status.
    pub const fn kind(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Operational => "operational",
            Self::Usage => "usage",
            Self::Rejected => "rejected",
            Self::Refused => "refused",
            Self::UnknownSchema => "unrecognised_schema",
            Self::ContentOnly => "content_only",
            Self::NeedsReview => "needs_review",
            Self::Differs => "differs",
            Self::NeedsApproval => "needs_approval",
            Self::Denied => "denied",
            Self::NotFound => "not_found",
            Self::Withdrawn => "withdrawn",
        }
    }
}

/// The JSON error object every command with `--json` prints on stdout when it fails:
/// `{"error": {"kind", "exit", "message"}}`, where `exit` is the process status and `kind` its
/// name (a command may add fields, as `fetch` adds the refusing rule). The message also goes to
/// stderr, once, as for a command without `--json`.
pub fn error_object(kind: &str, exit: u8, message: &str) -> serde_json::Value {
    serde_json::json!({ "error": { "kind": kind, "exit": exit, "message": message } })
}

/// Print a JSON value on stdout, pretty, as every `--json` answer is.
pub fn print_json(v: &serde_json::Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string())
    );
}

/// A command's result as the process ends with it: a failure is printed on stderr, and with
/// `--json` also as the JSON error object on stdout.
pub fn finish(result: Result<Exit, Failure>, json: bool) -> ExitCode {
    match result {
        Ok(exit) => exit.into(),
        Err(f) => {
            if json {
                print_json(&error_object(f.exit.kind(), f.exit.code(), &f.message));
            }
            eprintln!("skillbox: {}", f.message);
            f.exit.into()
        }
    }
}

/// A command line clap refused: its message on stderr (exit 2), and with `--json` anywhere
/// before `--` the JSON error object on stdout too, so a script reading stdout gets one.
/// `--help` and `--version` print as clap prints them.
pub fn usage_error(e: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    let informational = matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion);
    let json = std::env::args_os()
        .skip(1)
        .take_while(|a| a != "--")
        .any(|a| a == "--json");
    if json && !informational {
        let rendered = e.render().to_string();
        let first = rendered
            .lines()
            .next()
            .unwrap_or("")
            .trim_start_matches("error: ");
        print_json(&error_object(Exit::Usage.kind(), Exit::Usage.code(), first));
    }
    let _ = e.print();
    // clap's own status: 0 for --help and --version, 2 for every usage error.
    ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(Exit::Usage.code()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documented_codes() {
        let table = [
            (Exit::Ok, 0),
            (Exit::Operational, 1),
            (Exit::Usage, 2),
            (Exit::Rejected, 3),
            (Exit::Refused, 4),
            (Exit::ContentOnly, 4),
            (Exit::Differs, 4),
            (Exit::UnknownSchema, 5),
            (Exit::NeedsReview, 5),
            (Exit::NeedsApproval, 6),
            (Exit::Denied, 7),
            (Exit::NotFound, 8),
            (Exit::Withdrawn, 9),
        ];
        for (exit, code) in table {
            assert_eq!(exit.code(), code, "{exit:?}");
        }
    }
}
