//! Prometheus metrics: counters kept in memory, rendered in the text exposition format, and
//! served by a deliberately tiny HTTP/1.0 responder on an opt-in address.
//!
//! The responder reads at most one bounded request head with a timeout, answers `GET /metrics`
//! and nothing else, and closes. Labels are our own vocabulary (verdicts, reason codes, gRPC
//! codes), never caller-supplied text.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpListener;

/// Upper bounds (seconds) of the request-duration histogram.
const BUCKETS: [f64; 12] = [
    0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0,
];

/// Gauges read at scrape time.
pub struct Gauges {
    pub in_progress: usize,
    pub children_running: usize,
    pub inflight_bytes: u64,
    pub staged_kept: usize,
    pub connections_open: u32,
    pub connections_refused: u64,
    pub tree_streams_open: u32,
    pub partial_request_bytes: u64,
}

#[derive(Default)]
pub struct Metrics {
    /// (verdict, reason code or "none") -> count
    outcomes: Mutex<BTreeMap<(&'static str, &'static str), u64>>,
    /// gRPC code name -> count of requests that ended without a verdict
    errors: Mutex<BTreeMap<String, u64>>,
    /// (unary method, gRPC code name) -> count of its calls that ended with that error status
    unary_errors: Mutex<BTreeMap<(&'static str, String), u64>>,
    buckets: [AtomicU64; BUCKETS.len()],
    duration_count: AtomicU64,
    duration_sum_us: AtomicU64,
    children_killed: AtomicU64,
    peers_refused: AtomicU64,
    bytes_received: AtomicU64,
    staging_reaped: AtomicU64,
}

impl Metrics {
    pub fn outcome(&self, verdict: &'static str, reason: &'static str) {
        *self
            .outcomes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry((verdict, reason))
            .or_insert(0) += 1;
    }

    pub fn error(&self, code: tonic::Code) {
        let name = format!("{code:?}");
        *self
            .errors
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(name)
            .or_insert(0) += 1;
    }

    /// A unary Skillbox call (`method` is the broker's own name for it, never the request's
    /// path) ended with the error status `code`: its request did not decode, its handler refused
    /// it, or the stream it answered failed after it began (`CANCELLED`: its client went away
    /// before its request was whole, or before its stream's status was sent).
    pub fn unary_error(&self, method: &'static str, code: tonic::Code) {
        *self
            .unary_errors
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry((method, format!("{code:?}")))
            .or_insert(0) += 1;
    }

    pub fn duration(&self, d: Duration) {
        let secs = d.as_secs_f64();
        for (i, le) in BUCKETS.iter().enumerate() {
            if secs <= *le {
                self.buckets[i].fetch_add(1, Ordering::Relaxed);
            }
        }
        self.duration_count.fetch_add(1, Ordering::Relaxed);
        self.duration_sum_us.fetch_add(
            u64::try_from(d.as_micros()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }

    pub fn child_killed(&self) {
        self.children_killed.fetch_add(1, Ordering::Relaxed);
    }

    pub fn peer_refused(&self) {
        self.peers_refused.fetch_add(1, Ordering::Relaxed);
    }

    pub fn received(&self, n: u64) {
        self.bytes_received.fetch_add(n, Ordering::Relaxed);
    }

    pub fn reaped(&self, n: u64) {
        self.staging_reaped.fetch_add(n, Ordering::Relaxed);
    }

    /// The text exposition format, version 0.0.4.
    pub fn render(&self, g: &Gauges) -> String {
        let mut out = String::with_capacity(4096);
        family(
            &mut out,
            "skillbox_requests_total",
            "counter",
            "Extract requests answered with a verdict.",
        );
        for ((verdict, reason), n) in self
            .outcomes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
        {
            let _ = writeln!(
                out,
                "skillbox_requests_total{{verdict=\"{verdict}\",reason=\"{reason}\"}} {n}"
            );
        }
        family(
            &mut out,
            "skillbox_request_errors_total",
            "counter",
            "Extract requests that ended with a gRPC error status.",
        );
        for (code, n) in self
            .errors
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
        {
            let _ = writeln!(out, "skillbox_request_errors_total{{code=\"{code}\"}} {n}");
        }
        family(
            &mut out,
            "skillbox_unary_request_errors_total",
            "counter",
            "Release, GetTree and ServerInfo calls that ended with a gRPC error status, each once: a request that did not decode, one the call refused, and a GetTree stream that failed after it began (its status in the trailers: DataLoss, NotFound, DeadlineExceeded); a call whose client went away (before its request was whole, or before its stream's status was sent) is Cancelled.",
        );
        for ((method, code), n) in self
            .unary_errors
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
        {
            let _ = writeln!(
                out,
                "skillbox_unary_request_errors_total{{method=\"{method}\",code=\"{code}\"}} {n}"
            );
        }
        family(
            &mut out,
            "skillbox_request_duration_seconds",
            "histogram",
            "Extract request duration, upload included.",
        );
        for (i, le) in BUCKETS.iter().enumerate() {
            let n = self.buckets[i].load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "skillbox_request_duration_seconds_bucket{{le=\"{le}\"}} {n}"
            );
        }
        let count = self.duration_count.load(Ordering::Relaxed);
        let _ = writeln!(
            out,
            "skillbox_request_duration_seconds_bucket{{le=\"+Inf\"}} {count}"
        );
        let sum = self.duration_sum_us.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "skillbox_request_duration_seconds_sum {sum}");
        let _ = writeln!(out, "skillbox_request_duration_seconds_count {count}");
        let counters = [
            (
                "skillbox_children_killed_total",
                "Children killed before they answered: a deadline or a client hang-up (during the upload too), an upload refused (oversize, digest mismatch, malformed), the extraction timeout, shutdown.",
                &self.children_killed,
            ),
            (
                "skillbox_peers_refused_total",
                "Unix-socket requests refused by the peer uid check (PERMISSION_DENIED), and connections without peer credentials.",
                &self.peers_refused,
            ),
            (
                "skillbox_artifact_bytes_received_total",
                "Artifact bytes received.",
                &self.bytes_received,
            ),
            (
                "skillbox_staging_reaped_total",
                "Accepted staging directories removed by the TTL reaper.",
                &self.staging_reaped,
            ),
        ];
        let counters = counters
            .into_iter()
            .map(|(name, help, v)| (name, help, v.load(Ordering::Relaxed)))
            .chain([(
                "skillbox_connections_refused_total",
                "Connections closed unread because --max-connections were open.",
                g.connections_refused,
            )]);
        for (name, help, v) in counters {
            family(&mut out, name, "counter", help);
            let _ = writeln!(out, "{name} {v}");
        }
        let gauges = [
            (
                "skillbox_requests_in_progress",
                "Extract requests uploading, waiting or running.",
                g.in_progress as u64,
            ),
            (
                "skillbox_children_running",
                "Confined children running.",
                g.children_running as u64,
            ),
            (
                "skillbox_inflight_artifact_bytes",
                "Artifact bytes held in memory.",
                g.inflight_bytes,
            ),
            (
                "skillbox_staging_kept",
                "Accepted staging directories awaiting Release or the TTL.",
                g.staged_kept as u64,
            ),
            (
                "skillbox_connections_open",
                "Connections open (bounded by --max-connections).",
                u64::from(g.connections_open),
            ),
            (
                "skillbox_tree_streams_open",
                "GetTree and ExtractWithTree streams open in HTTP/2, read to the end or not (bounded by --max-open-tree-streams).",
                u64::from(g.tree_streams_open),
            ),
            (
                "skillbox_partial_request_bytes",
                "Bytes of request messages begun and not finished, uploads excepted (bounded by --max-partial-request-bytes).",
                g.partial_request_bytes,
            ),
        ];
        for (name, help, v) in gauges {
            family(&mut out, name, "gauge", help);
            let _ = writeln!(out, "{name} {v}");
        }
        out
    }
}

/// A metric family's `# HELP` and `# TYPE` lines.
fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// Serve `GET /metrics` on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, render: Arc<dyn Fn() -> String + Send + Sync>) {
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            continue;
        };
        let render = Arc::clone(&render);
        tokio::spawn(async move {
            let mut head = vec![0u8; 4096];
            let mut len = 0;
            let read = tokio::time::timeout(Duration::from_secs(5), async {
                while len < head.len() {
                    let n = stream.read(&mut head[len..]).await?;
                    if n == 0 {
                        break;
                    }
                    len += n;
                    if head[..len].windows(4).any(|w| w == b"\r\n\r\n") {
                        break;
                    }
                }
                Ok::<_, std::io::Error>(())
            })
            .await;
            if !matches!(read, Ok(Ok(()))) {
                return;
            }
            let response = if head[..len].starts_with(b"GET /metrics ")
                || head[..len].starts_with(b"GET /metrics?")
            {
                let body = render();
                format!(
                    "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                )
            } else {
                "HTTP/1.0 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                    .to_owned()
            };
            let _ = stream.write_all(response.as_bytes()).await;
            let _ = stream.shutdown().await;
        });
    }
}

/// Bind the metrics address (done before serving so a bad address fails start-up).
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_histogram_and_gauges() {
        let m = Metrics::default();
        m.outcome("rejected", "path_traversal");
        m.outcome("accepted", "none");
        m.error(tonic::Code::ResourceExhausted);
        m.unary_error("Release", tonic::Code::InvalidArgument);
        m.unary_error("Release", tonic::Code::InvalidArgument);
        m.duration(Duration::from_millis(3));
        let text = m.render(&Gauges {
            in_progress: 1,
            children_running: 0,
            inflight_bytes: 5,
            staged_kept: 2,
            connections_open: 3,
            connections_refused: 4,
            tree_streams_open: 5,
            partial_request_bytes: 6,
        });
        assert!(
            text.contains(
                "skillbox_requests_total{verdict=\"rejected\",reason=\"path_traversal\"} 1"
            )
        );
        assert!(text.contains("skillbox_request_errors_total{code=\"ResourceExhausted\"} 1"));
        assert!(text.contains(
            "skillbox_unary_request_errors_total{method=\"Release\",code=\"InvalidArgument\"} 2"
        ));
        assert!(text.contains("skillbox_request_duration_seconds_bucket{le=\"0.005\"} 1"));
        assert!(text.contains("skillbox_request_duration_seconds_bucket{le=\"0.002\"} 0"));
        assert!(text.contains("skillbox_staging_kept 2"));
        assert!(text.contains("skillbox_connections_open 3"));
        assert!(text.contains("skillbox_connections_refused_total 4"));
        assert!(text.contains("skillbox_tree_streams_open 5"));
        assert!(text.contains("skillbox_partial_request_bytes 6"));
    }
}
