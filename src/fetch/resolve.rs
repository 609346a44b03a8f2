//! Name resolution with the destination check, and connecting to exactly the checked address.
//!
//! Every address a name resolves to is checked, and one refused address refuses the name (a
//! host that answers with both a public and a private address is not trusted to pick). The
//! connection then goes to one of those checked `SocketAddr`s; the name is never looked up a
//! second time, so DNS rebinding between check and connect has nothing to race.

use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use url::{Host, Url};

use super::FetchError;
use super::policy::{FetchPolicy, Refusal, Rule};

/// Addresses for `url`'s host and port, every one of them checked against the policy.
pub fn checked_addresses(
    url: &Url,
    policy: &FetchPolicy,
    deadline: Instant,
) -> Result<Vec<SocketAddr>, FetchError> {
    let port = url
        .port_or_known_default()
        .ok_or_else(|| FetchError::Http(format!("{url}: no port")))?;
    let (host_text, addrs) = match url.host() {
        Some(Host::Ipv4(a)) => (a.to_string(), vec![SocketAddr::new(IpAddr::V4(a), port)]),
        Some(Host::Ipv6(a)) => (a.to_string(), vec![SocketAddr::new(IpAddr::V6(a), port)]),
        Some(Host::Domain(d)) => (
            d.to_owned(),
            lookup(d, port, policy.connect_timeout, deadline, url)?,
        ),
        None => return Err(FetchError::Http(format!("{url}: no host"))),
    };
    if addrs.is_empty() {
        return Err(FetchError::Dns {
            host: host_text,
            detail: "no addresses".into(),
        });
    }
    for addr in &addrs {
        policy
            .check_destination(&host_text, *addr)
            .map_err(|r| FetchError::Refused(r.at(url)))?;
    }
    Ok(addrs)
}

/// getaddrinfo has no timeout of its own; run it on a thread and stop waiting at the bound.
pub(super) fn lookup(
    host: &str,
    port: u16,
    connect_timeout: Duration,
    deadline: Instant,
    url: &Url,
) -> Result<Vec<SocketAddr>, FetchError> {
    let wait =
        bounded_wait(connect_timeout, deadline).ok_or_else(|| timeout(Rule::TotalTimeout, url))?;
    let (tx, rx) = mpsc::channel();
    let name = host.to_owned();
    std::thread::Builder::new()
        .name("skillbox-dns".into())
        .spawn(move || {
            let result = (name.as_str(), port)
                .to_socket_addrs()
                .map(|it| it.collect::<Vec<_>>());
            let _ = tx.send(result);
        })
        .map_err(|e| FetchError::Dns {
            host: host.to_owned(),
            detail: format!("cannot start the resolver: {e}"),
        })?;
    match rx.recv_timeout(wait) {
        Ok(Ok(mut addrs)) => {
            addrs.dedup();
            Ok(addrs)
        }
        Ok(Err(e)) => Err(FetchError::Dns {
            host: host.to_owned(),
            detail: e.to_string(),
        }),
        Err(_) => Err(timeout(
            if Instant::now() >= deadline {
                Rule::TotalTimeout
            } else {
                Rule::ConnectTimeout
            },
            url,
        )),
    }
}

/// The shorter of the per-step bound and what is left of the total; `None` when nothing is left.
pub fn bounded_wait(step: Duration, deadline: Instant) -> Option<Duration> {
    let left = deadline.checked_duration_since(Instant::now())?;
    let wait = step.min(left);
    (!wait.is_zero()).then_some(wait)
}

fn timeout(rule: Rule, url: &Url) -> FetchError {
    let what = match rule {
        Rule::ConnectTimeout => {
            "name resolution or connection did not complete within the connect time limit"
        }
        _ => "the download did not complete within the total time limit",
    };
    FetchError::Refused(Refusal::new(rule, what).at(url))
}

/// Connect to the first of the checked addresses that answers.
pub fn connect(
    addrs: &[SocketAddr],
    policy: &FetchPolicy,
    deadline: Instant,
    url: &Url,
) -> Result<(TcpStream, SocketAddr), FetchError> {
    let mut last = None;
    for addr in addrs {
        let wait = bounded_wait(policy.connect_timeout, deadline)
            .ok_or_else(|| timeout(Rule::TotalTimeout, url))?;
        match TcpStream::connect_timeout(addr, wait) {
            Ok(s) => return Ok((s, *addr)),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
                ) =>
            {
                last = Some(timeout(Rule::ConnectTimeout, url));
            }
            Err(e) => {
                last = Some(FetchError::Connect {
                    addr: *addr,
                    detail: e.to_string(),
                })
            }
        }
    }
    Err(last.unwrap_or_else(|| FetchError::Dns {
        host: url.host_str().unwrap_or("").to_owned(),
        detail: "no addresses".into(),
    }))
}
