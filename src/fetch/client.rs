//! The HTTPS client: one GET, redirects followed by hand with every hop re-checked, the body
//! streamed into the caller's sink under the byte limit.
//!
//! Per hop: scheme, userinfo and origin rules; the name resolved and every address checked; a
//! TCP connection to a checked address (directly, or a proxy's CONNECT tunnel to it); TLS verified against the URL's host; `GET` with
//! `Accept-Encoding: identity` and `Connection: close`. A redirect's `Location` is resolved
//! against the request URL (RFC 9110 10.2.2) and goes round again. Nothing here decodes,
//! retries, or keeps a connection.

use std::io::{BufReader, Read, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection};
use serde::Serialize;
use url::{Host, Position, Url};

use super::http::{self, Body, Conn, Framing};
use super::policy::{FetchPolicy, Refusal, Rule};
use super::proxy::Proxy;
use super::{FetchError, resolve};
use crate::urls;

/// What is being downloaded; selects the byte limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum What {
    Index,
    Artifact,
}

/// One redirect followed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Hop {
    pub url: String,
    pub address: String,
    pub status: u16,
    pub location: String,
}

/// A completed download (the body went to the sink).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Download {
    pub hops: Vec<Hop>,
    pub final_url: String,
    pub address: String,
    pub content_type: Option<String>,
    pub bytes: u64,
    /// The proxy the final request went through (credentials redacted), if any.
    pub via_proxy: Option<String>,
}

/// The fetcher: a policy and a TLS configuration.
#[derive(Debug, Clone)]
pub struct Client {
    policy: FetchPolicy,
    tls: Arc<ClientConfig>,
    /// Where the bytes of artifact bodies are counted as they arrive (a progress display).
    progress: Option<Arc<AtomicU64>>,
}

const REDIRECTS: [u16; 5] = [301, 302, 303, 307, 308];

impl Client {
    pub fn new(policy: FetchPolicy, tls: Arc<ClientConfig>) -> Self {
        Self {
            policy,
            tls,
            progress: None,
        }
    }

    /// Count every artifact body byte written to the sink into `counter`, as it arrives.
    pub fn count_artifact_bytes(&mut self, counter: Arc<AtomicU64>) {
        self.progress = Some(counter);
    }

    pub fn policy(&self) -> &FetchPolicy {
        &self.policy
    }

    pub fn policy_mut(&mut self) -> &mut FetchPolicy {
        &mut self.policy
    }

    /// GET `url` and stream its body into `sink`. `hops` receives every redirect as it is
    /// followed, so a refusal mid-chain still shows the chain.
    pub fn get(
        &self,
        url: &Url,
        what: What,
        sink: &mut dyn Write,
        hops: &mut Vec<Hop>,
    ) -> Result<Download, FetchError> {
        // A policy built by hand skips `config::build`'s check: no download may run past a
        // day (`cache prune` relies on it), and a huge duration would overflow the deadline.
        self.policy
            .check_timeouts()
            .map_err(|(rule, detail)| FetchError::Refused(Refusal::new(rule, detail).at(url)))?;
        let deadline = Instant::now() + self.policy.total_timeout;
        // An artifact is cut at the smaller of the download bound and the extraction limit:
        // bytes past the latter can never be accepted, so they are not worth receiving.
        let (limit, extraction) = match what {
            What::Index => (self.policy.max_index_bytes, false),
            What::Artifact => self.policy.artifact_download_bound(),
        };
        let bound = Bound {
            what,
            limit,
            extraction,
        };
        let mut current = urls::redacted(url);
        current.set_fragment(None);
        loop {
            self.policy
                .check_url(&current)
                .map_err(FetchError::Refused)?;
            let addrs = resolve::checked_addresses(&current, &self.policy, deadline)?;
            let proxy = self.policy.proxy.for_url(&current);
            let (sock, addr) = match proxy {
                None => resolve::connect(&addrs, &self.policy, deadline, &current)?,
                Some(p) => connect_via(p, &addrs, &self.policy, deadline, &current)?,
            };
            let mut conn = self.handshake(&current, sock, deadline)?;
            send_request(&mut conn, &current).map_err(|e| at(e, &current))?;
            let mut reader = BufReader::with_capacity(16 * 1024, conn);
            let head = http::read_head(&mut reader).map_err(|e| at(e, &current))?;
            if REDIRECTS.contains(&head.status) {
                // Redacted as it enters: the hop is shown and recorded, the marker is refused.
                let location = head
                    .one("location")
                    .map(|l| l.map(|l| urls::redact_str(&l).into_owned()))
                    .map_err(|e| at(e, &current))?
                    .ok_or_else(|| {
                        FetchError::Http(format!(
                            "{current}: HTTP {} without a Location",
                            head.status
                        ))
                    })?;
                hops.push(Hop {
                    url: current.to_string(),
                    address: addr.to_string(),
                    status: head.status,
                    location: location.clone(),
                });
                reader.get_mut().cut();
                if hops.len() as u64 > u64::from(self.policy.max_redirects) {
                    return Err(FetchError::Refused(
                        Refusal::new(
                            Rule::MaxRedirects,
                            format!(
                                "redirect {} of at most {} (to {location:?})",
                                hops.len(),
                                self.policy.max_redirects
                            ),
                        )
                        .at(&current),
                    ));
                }
                let next = urls::resolve(&location, Some(&current)).map_err(|e| {
                    FetchError::Http(format!("{current}: redirect Location {location:?}: {e}"))
                })?;
                current = next.url;
                continue;
            }
            if head.status != 200 {
                return Err(FetchError::Status {
                    url: current.to_string(),
                    status: head.status,
                });
            }
            http::check_content_encoding(&head).map_err(|r| FetchError::Refused(r.at(&current)))?;
            let framing = http::framing(&head).map_err(|e| at(e, &current))?;
            let content_type = head.one("content-type").map_err(|e| at(e, &current))?;
            if let Framing::Length(n) = framing
                && n > limit
            {
                reader.get_mut().cut();
                return Err(bound.exceeded(Some(n), 0, &current));
            }
            let mut counted;
            let sink: &mut dyn Write = match (&self.progress, what) {
                (Some(count), What::Artifact) => {
                    counted = Counted { sink, count };
                    &mut counted
                }
                _ => sink,
            };
            let bytes = stream(&mut reader, framing, bound, sink, &current)?;
            return Ok(Download {
                hops: hops.clone(),
                final_url: current.to_string(),
                address: addr.to_string(),
                via_proxy: proxy.map(|p| p.to_string()),
                content_type,
                bytes,
            });
        }
    }

    fn handshake(
        &self,
        url: &Url,
        sock: std::net::TcpStream,
        deadline: Instant,
    ) -> Result<Conn, FetchError> {
        let name = match url.host() {
            Some(Host::Domain(d)) => ServerName::try_from(d.to_owned())
                .map_err(|e| FetchError::Tls(format!("{d}: {e}")))?,
            Some(Host::Ipv4(a)) => ServerName::IpAddress(std::net::IpAddr::V4(a).into()),
            Some(Host::Ipv6(a)) => ServerName::IpAddress(std::net::IpAddr::V6(a).into()),
            None => return Err(FetchError::Http(format!("{url}: no host"))),
        };
        let tls = ClientConnection::new(Arc::clone(&self.tls), name)
            .map_err(|e| FetchError::Tls(e.to_string()))?;
        Conn::handshake(tls, sock, deadline).map_err(|e| match e.kind() {
            std::io::ErrorKind::TimedOut => at(http::io_error(e, "TLS handshake"), url),
            _ => FetchError::Tls(format!(
                "handshake with {}: {e}",
                url.host_str().unwrap_or("")
            )),
        })
    }
}

/// Tunnel to the first of the checked addresses the proxy connects us to, trying them in order
/// as a direct connection does; the last failure is the one reported.
fn connect_via(
    proxy: &Proxy,
    addrs: &[std::net::SocketAddr],
    policy: &FetchPolicy,
    deadline: Instant,
    url: &Url,
) -> Result<(std::net::TcpStream, std::net::SocketAddr), FetchError> {
    let mut last = None;
    for addr in addrs {
        match proxy.connect(*addr, policy.connect_timeout, deadline, url) {
            Ok(s) => return Ok((s, *addr)),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| FetchError::Dns {
        host: url.host_str().unwrap_or("").to_owned(),
        detail: "no addresses".into(),
    }))
}

fn at(e: FetchError, url: &Url) -> FetchError {
    match e {
        FetchError::Refused(r) if r.url.is_none() => FetchError::Refused(r.at(url)),
        other => other,
    }
}

/// The byte limit a body is read under, and which setting it comes from.
#[derive(Debug, Clone, Copy)]
struct Bound {
    what: What,
    limit: u64,
    /// The artifact's extraction limit (below `max_bytes`), not the download bound.
    extraction: bool,
}

impl Bound {
    /// The byte limit fired: `declared` is the Content-Length when the server sent one, else
    /// reading stopped one buffer past the limit, `received` body bytes in.
    fn exceeded(self, declared: Option<u64>, received: u64, url: &Url) -> FetchError {
        let limit = self.limit;
        let how = match declared {
            Some(n) => format!("{n} bytes declared by Content-Length"),
            None => "more arrived before reading stopped".to_owned(),
        };
        match self.what {
            What::Index => FetchError::IndexTooLarge {
                url: url.to_string(),
                size: declared,
                max: limit,
            },
            What::Artifact if self.extraction => FetchError::ArtifactTooLarge {
                url: url.to_string(),
                size: declared,
                received,
                max: limit,
            },
            What::Artifact => FetchError::Refused(
                Refusal::new(
                    Rule::MaxBytes,
                    format!(
                        "body is larger than the limit of {limit} bytes ({how}); the connection was cut"
                    ),
                )
                .at(url),
            ),
        }
    }
}

fn send_request(conn: &mut Conn, url: &Url) -> Result<(), FetchError> {
    let target = &url[Position::BeforePath..Position::AfterQuery];
    let host = match url.port() {
        Some(p) => format!("{}:{p}", url.host_str().unwrap_or("")),
        None => url.host_str().unwrap_or("").to_owned(),
    };
    let request = format!(
        "GET {target} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: skillbox/{}\r\nAccept: */*\r\nAccept-Encoding: identity\r\nConnection: close\r\n\r\n",
        env!("CARGO_PKG_VERSION")
    );
    conn.write_all(request.as_bytes())
        .map_err(|e| http::io_error(e, "sending the request"))?;
    conn.flush()
        .map_err(|e| http::io_error(e, "sending the request"))
}

/// A sink that counts what passes through it.
struct Counted<'a> {
    sink: &'a mut dyn Write,
    count: &'a AtomicU64,
}

impl Write for Counted<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.sink.write(buf)?;
        self.count.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.sink.flush()
    }
}

/// Copy the body to `sink`, never holding more than one buffer and never writing past `limit`.
fn stream(
    reader: &mut BufReader<Conn>,
    framing: Framing,
    bound: Bound,
    sink: &mut dyn Write,
    url: &Url,
) -> Result<u64, FetchError> {
    let mut buf = vec![0u8; 64 * 1024];
    let mut total = 0u64;
    let result = (|| {
        let mut body = Body::new(reader, framing);
        loop {
            let n = body.read(&mut buf).map_err(|e| match e.kind() {
                // Both a peer that closed without TLS close_notify (rustls refuses to call that
                // an end: it may be a truncation attack) and one that closed short of the
                // framing's end cut the body off.
                std::io::ErrorKind::UnexpectedEof => FetchError::Http(format!(
                    "{url}: the connection was closed before the body ended ({total} bytes received)"
                )),
                _ => at(http::io_error(e, "reading the body"), url),
            })?;
            if n == 0 {
                return Ok(total);
            }
            let observed = total + n as u64;
            if observed > bound.limit {
                return Err(bound.exceeded(None, observed, url));
            }
            sink.write_all(&buf[..n]).map_err(FetchError::Sink)?;
            total = observed;
        }
    })();
    if result.is_err() {
        reader.get_mut().cut();
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A policy set up by hand (not through `config::build`) with a timeout over a day is
    /// refused before anything is resolved or connected to (the address, in a documentation
    /// range, would be refused by the destination rules only after).
    #[test]
    fn a_hand_built_policy_with_a_timeout_over_a_day_is_refused() {
        let tls = super::super::tls::Trust::WebPki
            .client_config()
            .unwrap_or_else(|e| panic!("{e}"));
        let url = Url::parse("https://192.0.2.1/x").unwrap_or_else(|e| panic!("{e}"));
        for (connect, total, rule) in [
            (10, 2 * 86_400, Rule::TotalTimeout),
            (86_401, 60, Rule::ConnectTimeout),
        ] {
            let policy = FetchPolicy {
                connect_timeout: Duration::from_secs(connect),
                total_timeout: Duration::from_secs(total),
                ..FetchPolicy::default()
            };
            let client = Client::new(policy, tls.clone());
            let mut hops = Vec::new();
            match client.get(&url, What::Artifact, &mut Vec::new(), &mut hops) {
                Err(FetchError::Refused(r)) => {
                    assert_eq!(r.rule, rule);
                    assert!(r.detail.contains("at most a day"), "{}", r.detail);
                }
                other => panic!("{rule}: {other:?}"),
            }
            assert!(hops.is_empty());
        }
    }
}
