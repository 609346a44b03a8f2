//! The installer's network side: fetch a discovery index and one artifact it lists, under a
//! strict [`policy::FetchPolicy`], verify the digest on the exact bytes received, and keep
//! verified artifacts in a digest-keyed [`cache::Cache`].
//!
//! Layers, bottom up: [`crate::urls`] (RFC 3986 resolution), [`policy`] (every rule and the refusal
//! naming it), [`resolve`] (DNS, the destination check, connecting to the checked address),
//! [`proxy`] (HTTP CONNECT to a checked address), [`tls`] (trust anchors), [`http`] (HTTP/1.1
//! framing under limits), [`client`] (one GET with redirects re-checked per hop), [`cache`],
//! [`acquire`] (index + entry + artifact, with provenance), [`config`] (defaults, policy file,
//! environment and flags into one policy) and [`cli`] (the `index check` and `fetch` commands).
//!
//! This module never parses or extracts an artifact: extraction is handed to the engine the
//! CLI uses (the confined path), with the verified file.

pub mod acquire;
pub mod cache;
pub mod client;
pub mod config;
pub mod http;
pub mod policy;
pub mod proxy;
pub mod resolve;
pub mod tls;

use std::net::SocketAddr;

/// Why a download did not complete.
#[derive(Debug, thiserror::Error)]
// Not `non_exhaustive`: the CLI maps every variant to an exit status, and a new one must
// not compile until it has one.
pub enum FetchError {
    /// A policy rule fired.
    #[error(transparent)]
    Refused(#[from] policy::Refusal),
    #[error("cannot resolve {host}: {detail}")]
    Dns { host: String, detail: String },
    #[error("cannot connect to {addr}: {detail}")]
    Connect { addr: SocketAddr, detail: String },
    /// The proxy could not be reached, or refused the tunnel (the message says which; the
    /// proxy is shown with its credentials redacted).
    #[error("proxy {proxy}: {detail}")]
    Proxy { proxy: String, detail: String },
    #[error("TLS: {0}")]
    Tls(String),
    #[error("HTTP: {0}")]
    Http(String),
    #[error("{url} answered HTTP {status}")]
    Status { url: String, status: u16 },
    /// The index body passed `--max-index-bytes` (the connection was cut). Reported as the
    /// index error it is, with the exit status of an index over a bound read from a file.
    #[error("the index at {url} is over its limit of {max} bytes")]
    IndexTooLarge {
        url: String,
        /// The declared Content-Length, when the server declared one.
        size: Option<u64>,
        max: u64,
    },
    /// The artifact body passed the extraction limit (`--max-artifact-bytes`, set with
    /// [`policy::FetchPolicy::bound_by_extraction_limit`] and below `--max-bytes`): it can never
    /// be extracted, so the connection was cut there and nothing kept. Reported as the engine's
    /// `artifact_size` rejection (exit 3), which is what the whole download would have met.
    #[error(
        "artifact_size: the artifact at {url} is larger than the extraction limit --max-artifact-bytes ({max} bytes): {}; the download was cut there and nothing was kept",
        match .size {
            Some(n) => format!("{n} bytes declared by Content-Length"),
            None => format!("{received} bytes arrived before reading stopped"),
        }
    )]
    ArtifactTooLarge {
        url: String,
        /// The declared Content-Length, when the server declared one.
        size: Option<u64>,
        /// Body bytes read before the cut (more than `max` when no length was declared).
        received: u64,
        max: u64,
    },
    #[error("cannot store the download: {0}")]
    Sink(#[source] std::io::Error),
}

/// Now as an RFC 3339 UTC timestamp, second precision (no clock crate needed for this).
pub fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    rfc3339(secs)
}

/// A time as an RFC 3339 UTC timestamp, second precision (before 1970 reads as 1970).
pub fn rfc3339_of(t: std::time::SystemTime) -> String {
    rfc3339(
        t.duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
    )
}

fn rfc3339(secs: u64) -> String {
    let (year, month, day) = civil_from_days(secs / 86_400);
    let rem = secs % 86_400;
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to a (year, month, day) of the proleptic Gregorian calendar
/// (Howard Hinnant's `civil_from_days`).
pub fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    #[test]
    fn rfc3339_dates() {
        assert_eq!(super::rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(super::rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(super::rfc3339(1_767_225_599), "2025-12-31T23:59:59Z");
    }
}
