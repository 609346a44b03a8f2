//! Why a request failed without a verdict, and the one place such a failure becomes a gRPC
//! [`Status`].
//!
//! A hostile artifact is never an error here: it is an OK answer with a rejection. These are
//! malformed requests, overload, deadlines, hang-ups and faults of the server itself. Messages
//! never quote artifact bytes; field names and bounds only.

use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt as _};

/// A request that ended without a verdict.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RequestError {
    /// The request is malformed; `field` names what was wrong (`header`, `header.limits.max_entries`).
    #[error("{field}: {description}")]
    InvalidArgument { field: String, description: String },
    /// An admission bound was reached; nothing was queued.
    #[error("server at capacity: {what}")]
    Overloaded { what: &'static str },
    /// The caller's deadline passed; the child (if any) was killed.
    #[error("deadline exceeded {during}")]
    DeadlineExceeded { during: &'static str },
    /// The server's own deadline for the header or the upload passed (`setting` names it);
    /// the child (if any) was killed.
    #[error(
        "the {what} did not arrive within {} ms of admission (the server's --{setting})",
        after.as_millis()
    )]
    UploadDeadline {
        what: &'static str,
        setting: &'static str,
        after: std::time::Duration,
    },
    /// The encoded answer (`bytes`) is larger than the caller said it can receive (`max`,
    /// `header.max_answer_bytes`); it was not sent and nothing was kept. FAILED_PRECONDITION,
    /// not RESOURCE_EXHAUSTED: the broker's RESOURCE_EXHAUSTED means "retry later", and a retry
    /// gets the same answer; the client must first raise its receive limit (the precondition).
    #[error(
        "the answer is {bytes} bytes encoded, more than the {max} this request can receive \
         (header.max_answer_bytes; unset, it is {default}, what stock gRPC clients receive); \
         it was not sent and nothing was kept. A client able to receive more sets \
         header.max_answer_bytes to its receive limit (at most {ceiling})",
        default = crate::convert::DEFAULT_MAX_ANSWER_BYTES,
        ceiling = crate::convert::MAX_RESPONSE_BYTES
    )]
    AnswerTooLarge { bytes: usize, max: usize },
    /// The caller went away (hang-up or cancellation) before the answer.
    #[error("cancelled by the client: {0}")]
    Cancelled(String),
    /// `GetTree` or `Release` of a well-formed id the server does not hold, in the same words;
    /// also how a tree stream ends whose tree was released or expired while it was read. Only
    /// an id checked well formed, or one the server made, reaches here, so it is shown as it
    /// is: 32 hex digits.
    #[error("no staging directory {0} (never accepted, already released or expired)")]
    NotFound(String),
    /// The server is draining after SIGTERM.
    #[error("server is shutting down")]
    ShuttingDown,
    /// A fault of the server or of the sandbox machinery.
    #[error("internal error: {0}")]
    Internal(String),
}

/// `ErrorInfo.reason` and `PreconditionFailure` type of [`RequestError::AnswerTooLarge`].
pub const ANSWER_TOO_LARGE: &str = "ANSWER_TOO_LARGE";

impl RequestError {
    pub fn invalid(field: impl Into<String>, description: impl Into<String>) -> Self {
        Self::InvalidArgument {
            field: field.into(),
            description: description.into(),
        }
    }

    /// A request message that tonic's decoder refused (`INTERNAL` from tonic, whose message is
    /// `reason`: bytes that are no such message, a bad message prefix, a stream that ends
    /// inside a message): the client's malformed request, not a fault of the server, named by
    /// `field` (`header` or `chunk` of an upload, the request message of a unary call), in
    /// the same words for every call. `send` says what to send instead. The reason is tonic's
    /// or prost's own text, never the client's bytes; escaped and bounded all the same.
    pub fn undecodable(field: impl Into<String>, reason: &str, send: &str) -> Self {
        Self::invalid(
            field,
            format!(
                "the request could not be decoded ({}); {send}",
                crate::reason::display_name(reason.as_bytes())
            ),
        )
    }

    /// The gRPC code, also used as the metrics label.
    pub fn code(&self) -> Code {
        match self {
            Self::InvalidArgument { .. } => Code::InvalidArgument,
            Self::Overloaded { .. } => Code::ResourceExhausted,
            Self::DeadlineExceeded { .. } | Self::UploadDeadline { .. } => Code::DeadlineExceeded,
            Self::AnswerTooLarge { .. } => Code::FailedPrecondition,
            Self::Cancelled(_) => Code::Cancelled,
            Self::NotFound(_) => Code::NotFound,
            Self::ShuttingDown => Code::Unavailable,
            Self::Internal(_) => Code::Internal,
        }
    }
}

impl From<crate::convert::Unencodable> for RequestError {
    fn from(e: crate::convert::Unencodable) -> Self {
        Self::Internal(e.to_string())
    }
}

impl From<crate::convert::InvalidField> for RequestError {
    fn from(e: crate::convert::InvalidField) -> Self {
        Self::InvalidArgument {
            field: e.field,
            description: e.description,
        }
    }
}

impl From<RequestError> for Status {
    fn from(e: RequestError) -> Self {
        let code = e.code();
        let message = e.to_string();
        match e {
            RequestError::InvalidArgument { field, description } => {
                let details = ErrorDetails::with_bad_request_violation(field, description);
                Status::with_error_details(code, message, details)
            }
            RequestError::Overloaded { what } => {
                // A hint for well-behaved clients; the bound itself is in ServerInfo.
                let mut details =
                    ErrorDetails::with_retry_info(Some(std::time::Duration::from_millis(100)));
                details.add_quota_failure_violation("skillbox", what);
                Status::with_error_details(code, message, details)
            }
            RequestError::AnswerTooLarge { bytes, max } => {
                // No RetryInfo: the same request gets the same answer.
                let mut details = ErrorDetails::with_error_info(
                    ANSWER_TOO_LARGE,
                    "skillbox",
                    std::collections::HashMap::from([
                        ("answer_bytes".to_owned(), bytes.to_string()),
                        ("max_answer_bytes".to_owned(), max.to_string()),
                    ]),
                );
                details.add_precondition_failure_violation(
                    ANSWER_TOO_LARGE,
                    "header.max_answer_bytes",
                    format!("the answer is {bytes} bytes, the request can receive {max}"),
                );
                Status::with_error_details(code, message, details)
            }
            RequestError::DeadlineExceeded { .. }
            | RequestError::UploadDeadline { .. }
            | RequestError::Cancelled(_)
            | RequestError::NotFound(_)
            | RequestError::ShuttingDown
            | RequestError::Internal(_) => Status::new(code, message),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_argument_names_the_field() {
        let status = Status::from(RequestError::invalid(
            "header.expected_digest",
            "must start with `sha256:`",
        ));
        assert_eq!(status.code(), Code::InvalidArgument);
        let details = status.get_error_details();
        let bad = details
            .bad_request()
            .unwrap_or_else(|| panic!("no BadRequest detail"));
        assert_eq!(bad.field_violations[0].field, "header.expected_digest");
    }

    #[test]
    fn an_answer_too_large_names_both_sizes_and_the_field() {
        let status = Status::from(RequestError::AnswerTooLarge {
            bytes: 4_700_000,
            max: 4_194_304,
        });
        assert_eq!(status.code(), Code::FailedPrecondition);
        for want in ["4700000", "4194304", "header.max_answer_bytes"] {
            assert!(status.message().contains(want), "{want}: {status:?}");
        }
        let details = status.get_error_details();
        let info = details
            .error_info()
            .unwrap_or_else(|| panic!("no ErrorInfo detail"));
        assert_eq!(info.reason, ANSWER_TOO_LARGE);
        assert_eq!(info.metadata["answer_bytes"], "4700000");
        let pre = details
            .precondition_failure()
            .unwrap_or_else(|| panic!("no PreconditionFailure detail"));
        assert_eq!(pre.violations[0].subject, "header.max_answer_bytes");
        assert!(details.retry_info().is_none());
    }

    #[test]
    fn overload_is_resource_exhausted() {
        let status = Status::from(RequestError::Overloaded {
            what: "queued requests",
        });
        assert_eq!(status.code(), Code::ResourceExhausted);
    }
}
