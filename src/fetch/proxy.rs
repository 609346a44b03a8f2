//! HTTPS through an HTTP `CONNECT` proxy (RFC 9110 9.3.6), with the destination rules kept.
//!
//! The proxy is the operator's choice (`--proxy`, the policy file, `HTTPS_PROXY`), so its own
//! address is not held to the destination rules. The target is: its name is resolved here and
//! every address checked exactly as without a proxy, and the tunnel is asked for one checked
//! *address* (`CONNECT 203.0.113.7:443`), never the name, so the proxy's own DNS answer cannot
//! take the connection somewhere the check did not see. TLS then runs inside the tunnel with
//! the original host name (SNI and certificate verification), so the proxy sees no plaintext.
//!
//! Proxy credentials (`http://user:password@proxy:3128`) are sent only to the proxy, in
//! `Proxy-Authorization`; everything shown or stored uses the redacted URL. This module never
//! decides whether a URL may be fetched: the policy does, before a proxy is involved.

use std::fmt;
use std::io::{BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Instant;

use url::Url;

use super::FetchError;
use super::http;
use super::policy::{Refusal, Rule};
use super::resolve::{bounded_wait, lookup};
use crate::urls::{self, RedactedUrl};

/// One proxy: where it listens, how it is shown, and the credentials it is sent.
#[derive(Clone, PartialEq, Eq)]
pub struct Proxy {
    host: String,
    port: u16,
    shown: RedactedUrl,
    /// `Basic <base64(user:password)>`, when the URL carried user information.
    authorization: Option<String>,
}

impl fmt::Debug for Proxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The credentials stay out of every debug print.
        f.debug_struct("Proxy")
            .field("url", &self.shown.as_str())
            .finish_non_exhaustive()
    }
}

impl fmt::Display for Proxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.shown.as_str())
    }
}

impl Proxy {
    /// Parse `http://[user:password@]host[:port][/]` (port 80 when absent; a bare `host:port`
    /// is read as `http://host:port`, as curl does). A TLS connection to the proxy itself
    /// (`https://`) is not supported and refused.
    pub fn parse(s: &str) -> Result<Self, String> {
        // A scheme is `ALPHA *( ALPHA / DIGIT / "+" / "-" / "." )` before the first `://`; a
        // `://` further on (`user:pw@host/x://`) does not make `user:pw@host` a scheme.
        // `http:` or `https:` followed by a slash is a mistyped scheme (`http:/host`), refused
        // for its slashes, not read as the host `http` with a path.
        let mistyped = ["http:/", "http:\\", "https:/", "https:\\"]
            .iter()
            .any(|p| {
                s.get(..p.len())
                    .is_some_and(|head| head.eq_ignore_ascii_case(p))
            });
        let has_scheme = mistyped
            || s.split_once("://").is_some_and(|(scheme, _)| {
                scheme.starts_with(|c: char| c.is_ascii_alphabetic())
                    && scheme
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
            });
        let with_scheme;
        let text = if has_scheme {
            s
        } else {
            with_scheme = format!("http://{s}");
            &with_scheme
        };
        // Masked as it is read, after `http://` is added: in a bare `user:pw@host:port`,
        // `user:` alone reads as a scheme, and masking that text would still show the user.
        // Every use below is a refusal, so the mask runs to the last `@`: a password with a `/`
        // (`alice:tok/en@proxy`, `alice:123/x@proxy`) ends the parsed authority before it.
        let shown_text = urls::redact_refused(text).into_owned();
        // Typed (a flag, a variable, the policy file): see `urls::check_typed`.
        let url = urls::parse_typed_keeping_userinfo(text)
            .map_err(|e| format!("proxy {shown_text:?}: {e}"))?;
        if url.scheme() != "http" {
            return Err(format!(
                "proxy {shown_text:?}: only an http:// proxy (HTTP CONNECT) is supported"
            ));
        }
        if url.path() != "/" || url.query().is_some() || url.fragment().is_some() {
            return Err(format!(
                "proxy {shown_text:?}: give http://[USER:PASSWORD@]HOST[:PORT] without a path"
            ));
        }
        let host = match url.host() {
            Some(url::Host::Ipv6(a)) => a.to_string(),
            Some(h) => h.to_string(),
            None => return Err(format!("proxy {shown_text:?}: no host")),
        };
        let port = url.port_or_known_default().unwrap_or(80);
        let authorization = (!url.username().is_empty() || url.password().is_some()).then(|| {
            let user = percent_decode(url.username());
            let pass = percent_decode(url.password().unwrap_or(""));
            let mut pair = user;
            pair.push(b':');
            pair.extend_from_slice(&pass);
            format!("Basic {}", base64(&pair))
        });
        Ok(Self {
            host,
            port,
            shown: RedactedUrl::new(url),
            authorization,
        })
    }

    /// The proxy URL with its credentials replaced by the marker.
    pub fn shown(&self) -> &RedactedUrl {
        &self.shown
    }

    /// Open a tunnel to `target` (a checked address) through the proxy. `url` is the request
    /// being made, for messages.
    pub fn connect(
        &self,
        target: SocketAddr,
        connect_timeout: std::time::Duration,
        deadline: Instant,
        url: &Url,
    ) -> Result<TcpStream, FetchError> {
        let err = |detail: String| FetchError::Proxy {
            proxy: self.shown.to_string(),
            detail,
        };
        let out_of_time = || {
            FetchError::Refused(
                Refusal::new(
                    Rule::TotalTimeout,
                    "connecting to the proxy: the total time limit passed",
                )
                .at(url),
            )
        };
        if bounded_wait(connect_timeout, deadline).is_none() {
            return Err(out_of_time());
        }
        // The proxy's name is bounded like any other (getaddrinfo has no timeout of its own).
        let addrs: Vec<SocketAddr> = match self.host.parse::<std::net::IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, self.port)],
            Err(_) => lookup(&self.host, self.port, connect_timeout, deadline, url).map_err(
                |e| match e {
                    FetchError::Dns { detail, .. } => {
                        err(format!("cannot resolve the proxy: {detail}"))
                    }
                    other => other,
                },
            )?,
        };
        let sock = match dial_first(
            &addrs,
            connect_timeout,
            deadline,
            TcpStream::connect_timeout,
        ) {
            Ok(s) => s,
            Err(Dial::OutOfTime) => return Err(out_of_time()),
            Err(Dial::Failed(last)) => return Err(err(last)),
        };
        // The CONNECT exchange is bounded by the connect time and by the total, on every socket
        // read and write: a proxy trickling its answer a byte at a time cannot outlast either.
        let step = (Instant::now() + connect_timeout).min(deadline);
        let mut sock = http::DeadlineStream::new(sock, step);
        let timeout = |what: &str| {
            if Instant::now() >= deadline {
                FetchError::Refused(
                    Refusal::new(
                        Rule::TotalTimeout,
                        format!("{what}: the total time limit passed"),
                    )
                    .at(url),
                )
            } else {
                err(format!(
                    "{what}: no answer within the connect time limit ({} s)",
                    connect_timeout.as_secs_f64()
                ))
            }
        };
        // RFC 9110 9.3.6: the request target is authority-form; here always the checked
        // address, so the proxy never resolves the name itself.
        let mut request = format!(
            "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\nUser-Agent: skillbox/{}\r\n",
            env!("CARGO_PKG_VERSION")
        );
        if let Some(auth) = &self.authorization {
            request.push_str(&format!("Proxy-Authorization: {auth}\r\n"));
        }
        request.push_str("\r\n");
        sock.write_all(request.as_bytes())
            .and_then(|()| sock.flush())
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::TimedOut => timeout("sending CONNECT"),
                _ => err(format!("sending CONNECT: {e}")),
            })?;
        let mut reader = BufReader::with_capacity(8 * 1024, sock);
        let head = http::read_head(&mut reader).map_err(|e| match e {
            FetchError::Refused(r) if r.rule == Rule::TotalTimeout => {
                timeout("waiting for the answer to CONNECT")
            }
            other => err(format!("CONNECT: {other}")),
        })?;
        if !(200..300).contains(&head.status) {
            let what = match head.status {
                // 407 is the standard answer (RFC 9110 15.5.8); some proxies (tinyproxy) say 401.
                401 | 407 => format!(
                    "refused the credentials for CONNECT to {target} (HTTP {})",
                    head.status
                ),
                s => format!("refused CONNECT to {target} for {url} with HTTP {s}"),
            };
            return Err(err(what));
        }
        // Nothing may follow a 2xx CONNECT answer before our TLS ClientHello; bytes here would
        // be the proxy speaking for the server.
        if !reader.buffer().is_empty() {
            return Err(err(
                "sent data in the tunnel before the TLS handshake".into()
            ));
        }
        Ok(reader.into_inner().into_inner())
    }
}

/// Why no proxy address answered.
#[derive(Debug, PartialEq, Eq)]
enum Dial {
    /// The total time ran out before an address could be tried.
    OutOfTime,
    /// Every address failed; the last failure.
    Failed(String),
}

/// Connect to the first of `addrs` that answers. Each attempt is bounded by the connect time and
/// by what is left of the total, computed afresh before it: with one wait computed up front, N
/// unreachable addresses would take N waits, past the deadline.
fn dial_first<S>(
    addrs: &[SocketAddr],
    connect_timeout: std::time::Duration,
    deadline: Instant,
    mut dial: impl FnMut(&SocketAddr, std::time::Duration) -> std::io::Result<S>,
) -> Result<S, Dial> {
    let mut last = String::from("no addresses");
    for a in addrs {
        let wait = bounded_wait(connect_timeout, deadline).ok_or(Dial::OutOfTime)?;
        match dial(a, wait) {
            Ok(s) => return Ok(s),
            Err(e) => last = format!("cannot connect to the proxy at {a}: {e}"),
        }
    }
    Err(Dial::Failed(last))
}

/// `NO_PROXY`: host names (and their subdomains; a leading `.` means the same) and literal
/// addresses reached directly, `*` for all. Ports and CIDR ranges are not read: an entry with
/// either is kept as text and only matches that exact text.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NoProxy(Vec<String>);

impl NoProxy {
    pub fn parse(list: &str) -> Self {
        Self::from_entries(list.split(','))
    }

    pub fn from_entries<'a>(entries: impl IntoIterator<Item = &'a str>) -> Self {
        Self(
            entries
                .into_iter()
                .map(|e| {
                    e.trim()
                        .trim_start_matches('.')
                        .trim_start_matches('[')
                        .trim_end_matches(']')
                        .to_ascii_lowercase()
                })
                .filter(|e| !e.is_empty())
                .collect(),
        )
    }

    pub fn entries(&self) -> &[String] {
        &self.0
    }

    /// Whether `host` (as the URL has it, IPv6 without brackets) is reached directly.
    pub fn matches(&self, host: &str) -> bool {
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase();
        self.0.iter().any(|e| {
            e == "*"
                || *e == host
                || (host.len() > e.len()
                    && host.ends_with(e.as_str())
                    && host.as_bytes()[host.len() - e.len() - 1] == b'.')
        })
    }
}

/// Which proxy, if any, each request goes through.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProxyConfig {
    pub proxy: Option<Proxy>,
    pub no_proxy: NoProxy,
}

impl ProxyConfig {
    /// The proxy for `url`, or `None` to connect directly.
    pub fn for_url(&self, url: &Url) -> Option<&Proxy> {
        let proxy = self.proxy.as_ref()?;
        let host = url.host_str()?;
        (!self.no_proxy.matches(host)).then_some(proxy)
    }
}

fn percent_decode(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        if b[i] == b'%'
            && i + 2 < b.len()
            && let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2]))
        {
            out.push((h * 16 + l) as u8);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    out
}

/// RFC 4648 base64 with padding (for `Proxy-Authorization: Basic`, RFC 7617).
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = match chunk {
            [a, b, c] => u32::from(*a) << 16 | u32::from(*b) << 8 | u32::from(*c),
            [a, b] => u32::from(*a) << 16 | u32::from(*b) << 8,
            [a] => u32::from(*a) << 16,
            _ => 0,
        };
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc4648_vectors() {
        for (input, want) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(input.as_bytes()), want, "{input}");
        }
    }

    #[test]
    fn proxy_urls_parse_and_never_show_credentials() {
        let p = Proxy::parse("http://alice:s%40cret@proxy.example:3128")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(p.port, 3128);
        assert_eq!(
            p.authorization.as_deref(),
            Some(format!("Basic {}", base64(b"alice:s@cret")).as_str())
        );
        assert!(!format!("{p} {p:?}").contains("cret"));
        assert_eq!(p.to_string(), "http://***@proxy.example:3128/");
        let bare = Proxy::parse("127.0.0.1:8080").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((bare.host.as_str(), bare.port), ("127.0.0.1", 8080));
        for bad in ["https://p:1", "http://p:1/path", "socks5://p:1"] {
            assert!(Proxy::parse(bad).is_err(), "{bad}");
        }
        let e = Proxy::parse("https://u:pw-MARK@p:1")
            .err()
            .unwrap_or_default();
        assert!(!e.contains("pw-MARK"), "{e}");
        // Without a scheme (`http://` is implied), refused or not: neither the password nor
        // the user is shown, as curl would read the same text.
        for bare in [
            "alice:pw-MARK@proxy.example:3128/x",
            "alice:pw-MARK@proxy.example:99999",
            "alice:pw-MARK@proxy.example:3128/x://y",
            "alice:pw-MARK@[::1",
        ] {
            let e = Proxy::parse(bare).err().unwrap_or_default();
            assert!(
                e.contains("http://***@") && !e.contains("pw-MARK") && !e.contains("alice"),
                "{bare}: {e}"
            );
        }
        let p = Proxy::parse("alice:pw-MARK@proxy.example:3128").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(p.to_string(), "http://***@proxy.example:3128/");
        assert_eq!(
            p.authorization.as_deref(),
            Some(format!("Basic {}", base64(b"alice:pw-MARK")).as_str())
        );
    }

    #[test]
    fn a_password_the_parser_cuts_short_is_never_shown() {
        // A `/`, `?` or `#` in the password ends the parsed authority before the `@`: the text
        // fails to parse (`tok` is no port) or parses as host `alice`, port 123 and a path, and
        // is refused either way. The refusal masks to the last `@`.
        for text in [
            "http://alice:pw-MARK/en@proxy:3128",
            "http://alice:pw-MARK?en@proxy:3128",
            "http://alice:pw-MARK#en@proxy:3128",
            "http://alice:123/pw-MARK@proxy",
            "alice:pw-MARK/en@proxy:3128",
            "alice:123/pw-MARK@proxy:3128",
            "http:/alice:pw-MARK@proxy:3128",
            "HTTP:\\alice:pw-MARK@proxy:3128",
        ] {
            let e = Proxy::parse(text).err().unwrap_or_default();
            assert!(
                e.contains("***@proxy") && !e.contains("pw-MARK") && !e.contains("alice"),
                "{text}: {e}"
            );
        }
        // A mistyped single slash is refused for its slashes, not read as a host `http`.
        let e = Proxy::parse("http:/proxy:3128").err().unwrap_or_default();
        assert!(e.contains("exactly \"//\""), "{e}");
        // The refusal says how to write it, and the written-out form reaches the proxy as
        // the password that was meant.
        let e = Proxy::parse("http://alice:123/pw-MARK@proxy:3128")
            .err()
            .unwrap_or_default();
        assert!(e.contains("%2F") && !e.contains("pw-MARK"), "{e}");
        let p =
            Proxy::parse("http://alice:123%2Fpw-MARK@proxy:3128").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((p.host.as_str(), p.port), ("proxy", 3128));
        assert_eq!(
            p.authorization.as_deref(),
            Some(format!("Basic {}", base64(b"alice:123/pw-MARK")).as_str())
        );
    }

    #[test]
    fn each_proxy_address_gets_only_what_is_left_of_the_total() {
        // Three unreachable addresses, each dial hanging for the whole wait it is given: the
        // waits are computed per address, so none reaches past the deadline and the dial ends
        // out of time, not after three full waits.
        let addrs: Vec<SocketAddr> = (1..=3)
            .map(|i| SocketAddr::from(([192, 0, 2, i], 3128)))
            .collect();
        let connect_timeout = std::time::Duration::from_secs(10);
        let total = std::time::Duration::from_millis(60);
        let deadline = Instant::now() + total;
        let mut tried = Vec::new();
        let got = dial_first(&addrs, connect_timeout, deadline, |a, wait| {
            tried.push((*a, wait));
            std::thread::sleep(wait);
            Err::<(), _>(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "timed out",
            ))
        });
        assert_eq!(got, Err(Dial::OutOfTime));
        assert!(!tried.is_empty() && tried.len() < addrs.len(), "{tried:?}");
        // Each wait is at most what was left when it was given, so together they fit the total.
        let waited: std::time::Duration = tried.iter().map(|(_, w)| *w).sum();
        assert!(waited <= total, "{tried:?}");
        // With time left, every address is tried and the last failure is named.
        let deadline = Instant::now() + connect_timeout;
        let got = dial_first(&addrs, connect_timeout, deadline, |_, _| {
            Err::<(), _>(std::io::Error::from(std::io::ErrorKind::ConnectionRefused))
        });
        assert!(
            matches!(&got, Err(Dial::Failed(m)) if m.contains("192.0.2.3:3128")),
            "{got:?}"
        );
    }

    #[test]
    fn no_proxy_matches_hosts_and_subdomains() {
        let n = NoProxy::parse("example.com, .corp.test,[::1],10.0.0.1");
        assert!(n.matches("example.com"));
        assert!(n.matches("a.example.com"));
        assert!(!n.matches("badexample.com"));
        assert!(n.matches("x.corp.test"));
        assert!(n.matches("[::1]"));
        assert!(n.matches("10.0.0.1"));
        assert!(!n.matches("10.0.0.2"));
        assert!(NoProxy::parse("*").matches("anything"));
        assert!(!NoProxy::default().matches("a"));
    }
}
