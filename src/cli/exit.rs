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
//! | 4 | `fetch`, `index check`: refused by the fetch policy (the rule is named); `diff`: content_only |
//! | 5 | `fetch`, `index check`: unrecognised index `$schema`; `diff`: needs_review |
//! | 6 | reserved, install lifecycle: needs_approval (pending a person's decision) |
//! | 7 | reserved, install lifecycle: denied, by policy or by a person |
//! | 8 | reserved, install lifecycle: not found (unknown skill, agent or digest; not in the store) |
//! | 9 | reserved, install lifecycle: the version was withdrawn |

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
            Self::Refused | Self::ContentOnly => 4,
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

/// A command's result as the process ends with it: a failure is printed on stderr.
pub fn finish(result: Result<Exit, Failure>) -> ExitCode {
    match result {
        Ok(exit) => exit.into(),
        Err(f) => {
            eprintln!("skillbox: {}", f.message);
            f.exit.into()
        }
    }
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
