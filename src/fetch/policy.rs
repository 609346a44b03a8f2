//! The fetch policy: one value holding every rule the fetcher enforces, and the refusal that
//! names the rule when one fires.
//!
//! Defaults are strict: HTTPS only, no userinfo, at most 5 redirects, public unicast destinations
//! only, bounded time and bytes, identity encoding only, and an empty origin allow-list (so
//! nothing is fetched until the caller names the origins it trusts). This module decides; it
//! never opens a connection.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use url::{Host, Url};

/// Everything the fetcher may and may not do. Built once at the boundary (CLI flags), then read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchPolicy {
    /// Origins (always `https`) the index and artifacts may be fetched from; empty refuses all
    /// but [`Self::index_origin`].
    pub allowed_origins: Vec<AllowedOrigin>,
    /// The origin of the INDEX_URL a person typed: naming it is the choice to trust it, so the
    /// index and same-origin artifacts (and same-origin redirects) need no `--allow-origin`.
    /// Never set from anything a server sent. Set with [`Self::allow_index_origin`].
    pub index_origin: Option<AllowedOrigin>,
    /// Exact `address:port` pairs exempt from the destination-range rules. For tests and local
    /// development only (a loopback test server); never needed for a public host.
    pub allowed_destinations: Vec<SocketAddr>,
    /// Most redirects followed; one more is refused.
    pub max_redirects: u32,
    /// Bound on name resolution plus the TCP connect to one address.
    pub connect_timeout: Duration,
    /// Bound on one whole download, every redirect hop included.
    pub total_timeout: Duration,
    /// Largest artifact body, counted while streaming (`--max-bytes`, rule `max_bytes`).
    pub max_artifact_bytes: u64,
    /// The extraction limit on the artifact's size (the engine's `Limits::max_artifact_bytes`,
    /// `--max-artifact-bytes`), when the caller knows it. A body past it can never be
    /// extracted, so the download is cut at the smaller of the two bounds; cut at this one, it
    /// is [`super::FetchError::ArtifactTooLarge`] (the engine's `artifact_size` rejection,
    /// reached before the bytes are), not the `max_bytes` refusal. Set with
    /// [`Self::bound_by_extraction_limit`].
    pub extraction_max_artifact_bytes: Option<u64>,
    /// Largest index body, counted while streaming.
    pub max_index_bytes: u64,
    /// The HTTP CONNECT proxy, if any, and the hosts reached without it. The destination
    /// rules hold through it (see [`super::proxy`]).
    pub proxy: super::proxy::ProxyConfig,
}

impl Default for FetchPolicy {
    fn default() -> Self {
        Self {
            allowed_origins: Vec::new(),
            index_origin: None,
            allowed_destinations: Vec::new(),
            max_redirects: 5,
            connect_timeout: Duration::from_secs(10),
            total_timeout: Duration::from_secs(60),
            max_artifact_bytes: 256 << 20,
            extraction_max_artifact_bytes: None,
            max_index_bytes: 1 << 20,
            proxy: super::proxy::ProxyConfig::default(),
        }
    }
}

/// One allowed origin: `https`, a host, a port (RFC 6454 origin with the scheme fixed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowedOrigin {
    host: Host<String>,
    port: u16,
}

impl AllowedOrigin {
    /// Parse `https://host[:port]` (a trailing `/` is tolerated; nothing else may follow).
    pub fn parse(s: &str) -> Result<Self, String> {
        // Typed (a flag, a variable, the policy file): see `urls::check_typed`.
        let url = crate::urls::parse_typed(s);
        // Never echo credentials back, not even in the refusal of them.
        // Every message below refuses `s`: masked to its last `@` (a password with `/`, `?`
        // or `#` ends the parsed authority early, and the scoped mask would miss it).
        let s = &*crate::urls::redact_refused(s);
        let url = url.map_err(|e| format!("{s:?}: {e}"))?;
        if url.scheme() != "https" {
            return Err(format!(
                "{s:?}: an allowed origin must be https://HOST[:PORT]"
            ));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(format!("{s:?}: an origin carries no user information"));
        }
        if url.path() != "/" || url.query().is_some() || url.fragment().is_some() {
            return Err(format!(
                "{s:?}: give only the origin, https://HOST[:PORT], without a path"
            ));
        }
        Self::of(&url).ok_or_else(|| format!("{s:?}: no host"))
    }

    /// The origin of an `https` URL with a host.
    pub fn of(url: &Url) -> Option<Self> {
        let host = url.host()?.to_owned();
        Some(Self {
            host,
            port: url.port_or_known_default()?,
        })
    }
}

impl fmt::Display for AllowedOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.host {
            Host::Ipv6(a) => write!(f, "https://[{a}]")?,
            Host::Domain(d) => write!(f, "https://{d}")?,
            Host::Ipv4(a) => write!(f, "https://{a}")?,
        }
        if self.port != 443 {
            write!(f, ":{}", self.port)?;
        }
        Ok(())
    }
}

/// The rule that fired. The wire name (`as_str`) is stable: scripts match on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Rule {
    HttpsOnly,
    NoUserinfo,
    OriginAllowList,
    Destination(AddrClass),
    MaxRedirects,
    ConnectTimeout,
    TotalTimeout,
    MaxBytes,
    IdentityEncoding,
}

impl Rule {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::HttpsOnly => "https_only",
            Self::NoUserinfo => "no_userinfo",
            Self::OriginAllowList => "origin_allow_list",
            Self::Destination(class) => class.rule_name(),
            Self::MaxRedirects => "max_redirects",
            Self::ConnectTimeout => "connect_timeout",
            Self::TotalTimeout => "total_timeout",
            Self::MaxBytes => "max_bytes",
            Self::IdentityEncoding => "identity_encoding",
        }
    }

    /// What changes the outcome, if anything does.
    pub fn hint(self) -> Option<&'static str> {
        match self {
            Self::HttpsOnly | Self::NoUserinfo | Self::IdentityEncoding => None,
            Self::OriginAllowList => {
                Some("allow the origin with --allow-origin https://HOST[:PORT]")
            }
            Self::Destination(_) => Some(
                "only --allow-destination IP:PORT (tests and local development only) exempts an exact address",
            ),
            Self::MaxRedirects => Some("--max-redirects N"),
            Self::ConnectTimeout => Some("--connect-timeout SECONDS"),
            Self::TotalTimeout => Some("--total-timeout SECONDS"),
            Self::MaxBytes => Some("--max-bytes N"),
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A refusal by the fetch policy: the rule, what it saw, and the URL concerned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("refused by fetch policy (rule {rule}): {detail}")]
pub struct Refusal {
    pub rule: Rule,
    pub detail: String,
    pub url: Option<String>,
}

impl Refusal {
    pub fn new(rule: Rule, detail: impl Into<String>) -> Self {
        Self {
            rule,
            detail: detail.into(),
            url: None,
        }
    }

    pub fn at(mut self, url: &Url) -> Self {
        self.url = Some(url.to_string());
        self
    }
}

/// Why an address is not a fetch destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddrClass {
    Loopback,
    /// RFC 1918.
    Private,
    LinkLocal,
    /// RFC 6598 shared address space, 100.64.0.0/10.
    Cgnat,
    /// RFC 4193, fc00::/7.
    UniqueLocal,
    Multicast,
    Unspecified,
    /// RFC 5737 / RFC 3849 / RFC 9637 documentation ranges.
    Documentation,
    /// RFC 2544 / RFC 5180 benchmarking ranges.
    Benchmark,
    /// Everything else that is not public unicast: reserved, broadcast, site-local, Teredo,
    /// deprecated IPv4-compatible forms, IPv6 outside 2000::/3.
    Reserved,
}

impl AddrClass {
    fn rule_name(self) -> &'static str {
        match self {
            Self::Loopback => "destination_loopback",
            Self::Private => "destination_private",
            Self::LinkLocal => "destination_link_local",
            Self::Cgnat => "destination_cgnat",
            Self::UniqueLocal => "destination_unique_local",
            Self::Multicast => "destination_multicast",
            Self::Unspecified => "destination_unspecified",
            Self::Documentation => "destination_documentation",
            Self::Benchmark => "destination_benchmark",
            Self::Reserved => "destination_reserved",
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            Self::Loopback => "loopback",
            Self::Private => "private (RFC 1918)",
            Self::LinkLocal => "link-local",
            Self::Cgnat => "shared CGNAT space (RFC 6598)",
            Self::UniqueLocal => "unique-local (fc00::/7)",
            Self::Multicast => "multicast",
            Self::Unspecified => "unspecified",
            Self::Documentation => "documentation range",
            Self::Benchmark => "benchmarking range",
            Self::Reserved => "reserved or non-unicast",
        }
    }
}

/// `None` for a public unicast address; otherwise why it is refused. IPv6 forms that embed an
/// IPv4 address (mapped, compatible, NAT64, 6to4) are judged by the address they embed.
pub fn classify(ip: IpAddr) -> Option<AddrClass> {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

fn in_v4(ip: Ipv4Addr, net: [u8; 4], prefix: u32) -> bool {
    let mask = if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - prefix)
    };
    (u32::from(ip) & mask) == (u32::from(Ipv4Addr::from(net)) & mask)
}

fn classify_v4(ip: Ipv4Addr) -> Option<AddrClass> {
    use AddrClass::*;
    // Ordered most specific first where ranges nest (192.0.0.0/24 inside nothing else, etc.).
    let table: &[([u8; 4], u32, AddrClass)] = &[
        ([0, 0, 0, 0], 8, Unspecified),
        ([10, 0, 0, 0], 8, Private),
        ([100, 64, 0, 0], 10, Cgnat),
        ([127, 0, 0, 0], 8, Loopback),
        ([169, 254, 0, 0], 16, LinkLocal),
        ([172, 16, 0, 0], 12, Private),
        ([192, 0, 0, 0], 24, Reserved),
        ([192, 0, 2, 0], 24, Documentation),
        ([192, 88, 99, 0], 24, Reserved),
        ([192, 168, 0, 0], 16, Private),
        ([198, 18, 0, 0], 15, Benchmark),
        ([198, 51, 100, 0], 24, Documentation),
        ([203, 0, 113, 0], 24, Documentation),
        ([224, 0, 0, 0], 4, Multicast),
        ([240, 0, 0, 0], 4, Reserved),
    ];
    table
        .iter()
        .find(|(net, prefix, _)| in_v4(ip, *net, *prefix))
        .map(|(_, _, class)| *class)
}

fn in_v6(ip: Ipv6Addr, net: Ipv6Addr, prefix: u32) -> bool {
    let mask = if prefix == 0 {
        0
    } else {
        u128::MAX << (128 - prefix)
    };
    (u128::from(ip) & mask) == (u128::from(net) & mask)
}

fn v6(s: [u16; 8]) -> Ipv6Addr {
    Ipv6Addr::new(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7])
}

fn low_v4(ip: Ipv6Addr) -> Ipv4Addr {
    let o = ip.octets();
    Ipv4Addr::new(o[12], o[13], o[14], o[15])
}

fn classify_v6(ip: Ipv6Addr) -> Option<AddrClass> {
    use AddrClass::*;
    if ip.is_unspecified() {
        return Some(Unspecified);
    }
    if ip.is_loopback() {
        return Some(Loopback);
    }
    // ::ffff:0:0/96, IPv4-mapped: the socket really talks to the embedded IPv4 address.
    if let Some(v4) = ip.to_ipv4_mapped() {
        return classify_v4(v4);
    }
    // ::/96, the deprecated IPv4-compatible form (RFC 4291 2.5.5.1): judged by what it embeds,
    // and refused even when that is public, since nothing legitimate uses it.
    if in_v6(ip, Ipv6Addr::UNSPECIFIED, 96) {
        return Some(classify_v4(low_v4(ip)).unwrap_or(Reserved));
    }
    // 64:ff9b::/96, well-known NAT64 prefix (RFC 6052): the translator reaches the embedded IPv4.
    if in_v6(ip, v6([0x64, 0xff9b, 0, 0, 0, 0, 0, 0]), 96) {
        return classify_v4(low_v4(ip));
    }
    // 2002::/16, 6to4 (RFC 3056): the relay reaches the IPv4 address in bits 16..48.
    if in_v6(ip, v6([0x2002, 0, 0, 0, 0, 0, 0, 0]), 16) {
        let o = ip.octets();
        return classify_v4(Ipv4Addr::new(o[2], o[3], o[4], o[5]));
    }
    let table: &[([u16; 8], u32, AddrClass)] = &[
        ([0x64, 0xff9b, 1, 0, 0, 0, 0, 0], 48, Reserved), // RFC 8215 local-use NAT64
        ([0x100, 0, 0, 0, 0, 0, 0, 0], 64, Reserved),     // RFC 6666 discard-only
        ([0x2001, 0, 0, 0, 0, 0, 0, 0], 32, Reserved),    // Teredo: hides an IPv4 peer
        ([0x2001, 0x2, 0, 0, 0, 0, 0, 0], 48, Benchmark), // RFC 5180
        ([0x2001, 0x10, 0, 0, 0, 0, 0, 0], 28, Reserved), // ORCHID
        ([0x2001, 0x20, 0, 0, 0, 0, 0, 0], 28, Reserved), // ORCHIDv2
        ([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0], 32, Documentation),
        ([0x3fff, 0, 0, 0, 0, 0, 0, 0], 20, Documentation),
        ([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7, UniqueLocal),
        ([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10, LinkLocal),
        ([0xfec0, 0, 0, 0, 0, 0, 0, 0], 10, Reserved), // deprecated site-local
        ([0xff00, 0, 0, 0, 0, 0, 0, 0], 8, Multicast),
    ];
    if let Some((_, _, class)) = table
        .iter()
        .find(|(net, prefix, _)| in_v6(ip, v6(*net), *prefix))
    {
        return Some(*class);
    }
    // Only 2000::/3 is allocated global unicast (RFC 4291 2.4); anything else is not a host.
    if !in_v6(ip, v6([0x2000, 0, 0, 0, 0, 0, 0, 0]), 3) {
        return Some(Reserved);
    }
    None
}

/// The longest `connect_timeout` and `total_timeout` may be: a day. So no download runs
/// longer, which is what lets `cache prune` tell a dead partial download an older version left
/// from a live one ([`super::cache::OLD_PARTIAL_AGE`]).
pub const MAX_DURATION: Duration = Duration::from_secs(86_400);

impl FetchPolicy {
    /// Whether the timeouts are usable: each above 0 and at most [`MAX_DURATION`]. Checked by
    /// [`super::config::build`] (every layer, the caller's own values included) and again by
    /// the client before it fetches, for a policy a library caller set up by hand.
    pub fn check_timeouts(&self) -> Result<(), (Rule, String)> {
        for (rule, d) in [
            (Rule::ConnectTimeout, self.connect_timeout),
            (Rule::TotalTimeout, self.total_timeout),
        ] {
            if d.is_zero() || d > MAX_DURATION {
                return Err((
                    rule,
                    format!(
                        "{rule} is {} s: give a duration above 0 and at most a day ({} s)",
                        d.as_secs_f64(),
                        MAX_DURATION.as_secs()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Bound artifact downloads by the extraction limit `max_artifact_bytes` too: every caller
    /// that knows the limits the engine will apply should set it, so that a download that can
    /// never be accepted stops at that limit instead of running on to `--max-bytes` (and being
    /// cached) first.
    pub fn bound_by_extraction_limit(&mut self, max_artifact_bytes: u64) {
        self.extraction_max_artifact_bytes = Some(max_artifact_bytes);
    }

    /// The bound an artifact download is cut at, and whether it is the extraction limit (only
    /// when strictly below `max_bytes`; at a tie the download bound is the one reported, as
    /// before the extraction limit was known here).
    pub fn artifact_download_bound(&self) -> (u64, bool) {
        match self.extraction_max_artifact_bytes {
            Some(n) if n < self.max_artifact_bytes => (n, true),
            _ => (self.max_artifact_bytes, false),
        }
    }

    /// Allow the origin of `index_url`, the URL the person gave on the command line (only an
    /// `https` URL has an origin that can be allowed). The destination rules still apply to it.
    pub fn allow_index_origin(&mut self, index_url: &Url) {
        if index_url.scheme() == "https" {
            self.index_origin = AllowedOrigin::of(index_url);
        }
    }

    /// Whether `origin` may be fetched from.
    pub fn origin_allowed(&self, origin: &AllowedOrigin) -> bool {
        self.index_origin.as_ref() == Some(origin) || self.allowed_origins.contains(origin)
    }

    /// Scheme, userinfo and origin rules for one URL (the index, the artifact, every redirect).
    pub fn check_url(&self, url: &Url) -> Result<(), Refusal> {
        if url.scheme() != "https" {
            return Err(Refusal::new(
                Rule::HttpsOnly,
                format!(
                    "scheme {:?} is refused; only https is fetched",
                    url.scheme()
                ),
            )
            .at(url));
        }
        if !url.username().is_empty() || url.password().is_some() {
            // Never echo the credentials themselves, but show that there were some
            // (`https://***@host/`): with the user information removed, the URL shown would
            // not be the one refused, and the reader could not see why it was.
            return Err(Refusal {
                rule: Rule::NoUserinfo,
                detail: "URLs with user information (user:password@) are refused".into(),
                url: Some(crate::urls::redacted(url).to_string()),
            });
        }
        let Some(origin) = AllowedOrigin::of(url) else {
            return Err(Refusal::new(Rule::OriginAllowList, "URL has no host").at(url));
        };
        if !self.origin_allowed(&origin) {
            let detail = if self.allowed_origins.is_empty() && self.index_origin.is_none() {
                format!("origin {origin} is not allowed: the origin allow-list is empty")
            } else {
                format!("origin {origin} is not on the origin allow-list")
            };
            return Err(Refusal::new(
                Rule::OriginAllowList,
                format!("{detail}; pass --allow-origin {origin} to allow it"),
            )
            .at(url));
        }
        Ok(())
    }

    /// Destination rule for one resolved address.
    pub fn check_destination(&self, host: &str, addr: SocketAddr) -> Result<(), Refusal> {
        let canonical = SocketAddr::new(addr.ip().to_canonical(), addr.port());
        if self
            .allowed_destinations
            .iter()
            .any(|a| *a == addr || *a == canonical)
        {
            return Ok(());
        }
        match classify(addr.ip()) {
            None => Ok(()),
            Some(class) => Err(Refusal::new(
                Rule::Destination(class),
                format!(
                    "{host} resolves to {}, a {} address",
                    addr.ip(),
                    class.describe()
                ),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(s: &str) -> Option<AddrClass> {
        classify(s.parse().unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED)))
    }

    #[test]
    fn refused_ranges() {
        use AddrClass::*;
        let cases = [
            ("127.0.0.1", Some(Loopback)),
            ("127.255.255.254", Some(Loopback)),
            ("10.1.2.3", Some(Private)),
            ("172.16.0.1", Some(Private)),
            ("172.31.255.255", Some(Private)),
            ("172.32.0.1", None),
            ("192.168.1.1", Some(Private)),
            ("169.254.169.254", Some(LinkLocal)),
            ("100.64.0.1", Some(Cgnat)),
            ("100.127.255.255", Some(Cgnat)),
            ("100.128.0.0", None),
            ("0.0.0.0", Some(Unspecified)),
            ("224.0.0.1", Some(Multicast)),
            ("255.255.255.255", Some(Reserved)),
            ("192.0.2.1", Some(Documentation)),
            ("198.18.0.1", Some(Benchmark)),
            ("8.8.8.8", None),
            ("::", Some(Unspecified)),
            ("::1", Some(Loopback)),
            ("::ffff:127.0.0.1", Some(Loopback)),
            ("::ffff:10.0.0.1", Some(Private)),
            ("::ffff:8.8.8.8", None),
            ("::127.0.0.1", Some(Loopback)),
            ("::8.8.8.8", Some(Reserved)),
            ("64:ff9b::a9fe:a9fe", Some(LinkLocal)),
            ("2002:7f00:1::", Some(Loopback)),
            ("fc00::1", Some(UniqueLocal)),
            ("fd12:3456::1", Some(UniqueLocal)),
            ("fe80::1", Some(LinkLocal)),
            ("ff02::1", Some(Multicast)),
            ("2001:db8::1", Some(Documentation)),
            ("2001::1", Some(Reserved)),
            ("4000::1", Some(Reserved)),
            ("2606:4700::1111", None),
        ];
        for (ip, want) in cases {
            assert_eq!(class(ip), want, "{ip}");
        }
    }

    #[test]
    fn empty_allow_list_refuses_and_names_the_flag() {
        let url = Url::parse("https://example.com/x").expect("parse");
        let err = FetchPolicy::default()
            .check_url(&url)
            .err()
            .unwrap_or_else(|| panic!("allowed"));
        assert_eq!(err.rule, Rule::OriginAllowList);
        assert!(
            err.detail.contains("--allow-origin https://example.com"),
            "{}",
            err.detail
        );
    }

    #[test]
    fn origin_parsing_is_exact() {
        let o = AllowedOrigin::parse("https://Example.COM:443/").expect("parse");
        assert_eq!(o.to_string(), "https://example.com");
        assert!(AllowedOrigin::parse("http://example.com").is_err());
        assert!(AllowedOrigin::parse("https://example.com/path").is_err());
        assert!(AllowedOrigin::parse("https://u@example.com").is_err());
        let policy = FetchPolicy {
            allowed_origins: vec![o],
            ..FetchPolicy::default()
        };
        let ok = Url::parse("https://example.com/a").expect("parse");
        let other_port = Url::parse("https://example.com:8443/a").expect("parse");
        assert!(policy.check_url(&ok).is_ok());
        assert!(policy.check_url(&other_port).is_err());
    }

    #[test]
    fn the_index_origin_is_allowed_and_nothing_else() {
        let mut policy = FetchPolicy::default();
        let index = Url::parse("https://example.com/.well-known/agent-skills/index.json")
            .unwrap_or_else(|e| panic!("{e}"));
        policy.allow_index_origin(&index);
        let same = Url::parse("https://example.com/d/x.zip").unwrap_or_else(|e| panic!("{e}"));
        let other = Url::parse("https://cdn.example.com/x.zip").unwrap_or_else(|e| panic!("{e}"));
        assert!(policy.check_url(&index).is_ok());
        assert!(policy.check_url(&same).is_ok());
        assert_eq!(
            policy.check_url(&other).err().map(|r| r.rule),
            Some(Rule::OriginAllowList)
        );
        let mut plain = FetchPolicy::default();
        plain.allow_index_origin(
            &Url::parse("http://example.com/i.json").unwrap_or_else(|e| panic!("{e}")),
        );
        assert_eq!(plain.index_origin, None);
    }

    #[test]
    fn exact_destination_allowance_only() {
        let addr: SocketAddr = "127.0.0.1:4433".parse().expect("parse");
        let policy = FetchPolicy {
            allowed_destinations: vec![addr],
            ..FetchPolicy::default()
        };
        assert!(policy.check_destination("h", addr).is_ok());
        let other: SocketAddr = "127.0.0.1:4434".parse().expect("parse");
        assert!(policy.check_destination("h", other).is_err());
        assert!(FetchPolicy::default().check_destination("h", addr).is_err());
    }
}
