//! Where the records are and which host this is: the store's own SQLite file (the default), or
//! one PostgreSQL database a fleet of hosts shares (`--records postgres://USER@HOST:PORT/DB`).
//!
//! In a shared registry the decisions (approve, deny, withdraw), the reviews, the provenance and
//! the events are the fleet's; what describes one machine is kept per host: the versions in its
//! store, its agents and their installations, and its intent journal. A host is a validated
//! name (`--host`, else the system hostname) bound in the records to one store by the store's
//! random id, so two machines can never act as one host by accident.
//!
//! A password comes from the URL, `--records-password-file` or `PGPASSWORD`, lives only in the
//! connection settings, and never reaches output, errors, records or provenance: every printed
//! form of the URL is [`Location::display`], which has none, and connection errors are scrubbed
//! of it. A TCP host beyond loopback is reached over TLS only (verify-full: the chain against
//! Mozilla's roots or `--records-ca-file`, and the host name), as the broker refuses TCP beyond
//! loopback without TLS, so a password never crosses a network in clear; a Unix socket or a
//! loopback address may go without (`?sslmode=verify-full` asks for TLS there too).

use std::io::Read;
use std::net::IpAddr;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::{Error, Kind};

/// A password, kept out of every `Debug` and `Display`.
#[derive(Clone, Default)]
pub struct Secret(String);

impl Secret {
    pub fn new(s: String) -> Self {
        Secret(s)
    }

    pub fn expose(&self) -> &str {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[redacted]")
    }
}

/// Where a PostgreSQL server listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PgHost {
    Tcp {
        host: String,
        port: u16,
    },
    /// The directory holding the server's socket (`.s.PGSQL.<port>`).
    Socket {
        dir: PathBuf,
        port: u16,
    },
}

/// A PostgreSQL database to keep the records in.
#[derive(Debug, Clone)]
pub struct PgLocation {
    pub user: String,
    pub password: Option<Secret>,
    /// Where the password came from (`--records-password-file`, the URL, `PGPASSWORD`), for a
    /// refusal of the credentials to say which one to check; never the password itself.
    pub password_from: Option<&'static str>,
    pub host: PgHost,
    pub dbname: String,
    /// TLS (verify-full), and the CA file its trust anchors come from (none: Mozilla's).
    pub tls: Option<Tls>,
}

/// TLS to the server: the certificate chain and the host name are always verified.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tls {
    /// PEM trust anchors replacing Mozilla's (`--records-ca-file`).
    pub ca_file: Option<PathBuf>,
}

/// Where the records are.
#[derive(Debug, Clone, Default)]
pub enum Location {
    /// `STORE/records.db`.
    #[default]
    Sqlite,
    Postgres(PgLocation),
}

impl Location {
    /// What may be printed: never a password.
    pub fn display(&self) -> String {
        match self {
            Location::Sqlite => "sqlite (the store's records.db)".into(),
            Location::Postgres(p) => match &p.host {
                PgHost::Tcp { host, port } => {
                    let host = if host.contains(':') {
                        format!("[{host}]")
                    } else {
                        host.clone()
                    };
                    let tls = if p.tls.is_some() {
                        "?sslmode=verify-full"
                    } else {
                        ""
                    };
                    format!(
                        "postgres://{}@{host}:{port}/{}{tls}",
                        controls_escaped(&p.user),
                        controls_escaped(&p.dbname)
                    )
                }
                PgHost::Socket { dir, port } => format!(
                    "postgres://{}@/{}?host={}&port={port}",
                    controls_escaped(&p.user),
                    controls_escaped(&p.dbname),
                    controls_escaped(&dir.display().to_string())
                ),
            },
        }
    }

    pub fn is_shared(&self) -> bool {
        matches!(self, Location::Postgres(_))
    }
}

/// `text` with its control characters escaped (`\u{1b}`, `\0`): a user, database or socket
/// directory typed %-encoded (`%1b`, `%00`) is shown in messages and `status`, and never
/// reaches a terminal raw (an escape sequence, a NUL cutting the line short).
fn controls_escaped(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// Decode `%XX` escapes (URL userinfo, path and query parts).
fn percent_decode(s: &str) -> Result<String, String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = b
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or("a bad %-escape")?;
            out.push(hex);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "not UTF-8 once %-decoded".to_owned())
}

fn usage(m: impl Into<String>) -> Error {
    Error::new(Kind::Usage, format!("--records: {}", m.into()))
}

/// The form `--records` takes, ending a message as written (not masked: [`Error::hint`]).
const FORM: &str = "postgres://USER@HOST:PORT/DB";

/// Parse `--records`: `sqlite` (the default), or `postgres://USER[:PASSWORD]@HOST[:PORT]/DB`
/// (`postgresql://` too; a Unix socket as `?host=/DIR`). No message quotes the value: it may
/// hold a password.
pub fn parse_location(text: &str) -> Result<Location, Error> {
    if text.is_empty() {
        // Security: an empty value (an unset variable in a script) is a mistake, not a choice
        // of the store's own records: those would not know a fleet's store's trees.
        return Err(usage("empty; give ")
            .with_hint("postgres://USER@HOST:PORT/DB, or sqlite for the store's own records.db"));
    }
    if text == "sqlite" {
        return Ok(Location::Sqlite);
    }
    let Some(rest) = text
        .strip_prefix("postgres://")
        .or_else(|| text.strip_prefix("postgresql://"))
    else {
        return Err(usage("give ")
            .with_hint("postgres://USER@HOST:PORT/DB (or postgresql://...), or sqlite"));
    };
    // The program's rule for typed URLs (`urls::check_typed`): a password holding an unescaped
    // `/`, `?` or `#` (`postgres://sb:12/pw@h/db`, `sb:x?pw@h`) cuts the authority short, so the
    // rest of the password would be read as the database or a parameter, and a parameter's
    // name is repeated by its error. Refused first, saying how to write it; the message never
    // quotes the text.
    crate::urls::check_typed(text).map_err(|e| usage(e.to_string()))?;
    let (rest, query) = match rest.split_once('?') {
        Some((r, q)) => (r, Some(q)),
        None => (rest, None),
    };
    let (authority, path) = match rest.split_once('/') {
        Some((a, p)) => (a, p),
        None => (rest, ""),
    };
    // The userinfo ends at the last '@' (a password may hold '@' only %-encoded, but be lenient).
    let (userinfo, hostport) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    let (user, password) = match userinfo {
        Some(u) => match u.split_once(':') {
            Some((n, p)) => (
                percent_decode(n).map_err(|e| usage(format!("the user: {e}")))?,
                Some(Secret(
                    percent_decode(p).map_err(|e| usage(format!("the password: {e}")))?,
                )),
            ),
            None => (
                percent_decode(u).map_err(|e| usage(format!("the user: {e}")))?,
                None,
            ),
        },
        None => (String::new(), None),
    };
    if user.is_empty() {
        return Err(usage("name the user: ").with_hint(FORM));
    }
    let dbname = percent_decode(path).map_err(|e| usage(format!("the database: {e}")))?;
    if dbname.is_empty() || dbname.contains('/') {
        return Err(usage("name the database: ").with_hint(FORM));
    }
    // PostgreSQL's names are C strings: a NUL (`%00`) names no user or database. Refused
    // without quoting the text.
    if dbname.contains('\0') || user.contains('\0') {
        return Err(usage(
            "a user or database name holding a NUL byte (%00) names nothing in PostgreSQL",
        ));
    }
    let mut socket: Option<PathBuf> = None;
    let mut query_port: Option<u16> = None;
    let mut sslmode: Option<bool> = None;
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let v = percent_decode(v).map_err(|e| usage(format!("parameter {k}: {e}")))?;
        match k {
            "host" if v.starts_with('/') => socket = Some(PathBuf::from(v)),
            "host" => return Err(usage("?host= takes a socket directory (an absolute path)")),
            "port" => {
                query_port = Some(v.parse().map_err(|_| usage("?port= takes a port number"))?)
            }
            "sslmode" if v == "verify-full" => sslmode = Some(true),
            "sslmode" if v == "disable" => sslmode = Some(false),
            "sslmode" => {
                // Security: libpq's require and verify-ca accept a server of any name (require
                // any certificate): a man in the middle would get the password.
                return Err(usage(
                    "sslmode: verify-full (the certificate chain and the host name checked) or disable; others are not supported",
                ));
            }
            // Named only when it reads as a parameter name: text after a `?` may be the rest
            // of a password holding an unescaped `@` and `?` (`sb:a@b/c?pw@h/db`).
            other
                if !other.is_empty()
                    && other
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'_') =>
            {
                return Err(usage(format!(
                    "unknown parameter {other:?} (host, port and sslmode are known)"
                )));
            }
            _ => {
                return Err(usage(
                    "a parameter that is no parameter name (host, port and sslmode are known); a \"?\" or \"@\" in a password is written %3F, %40",
                ));
            }
        }
    }
    let (host, port) = split_host_port(hostport)?;
    let port = query_port.or(port).unwrap_or(5432);
    let host = match (socket, host) {
        (Some(dir), h) if h.is_empty() || h == "localhost" => PgHost::Socket { dir, port },
        (Some(_), _) => return Err(usage("give either a host or ?host=/SOCKET_DIR, not both")),
        (None, h) if h.is_empty() => {
            return Err(usage("name the host: ").with_hint(FORM));
        }
        (None, h) if h.starts_with('/') => PgHost::Socket {
            dir: PathBuf::from(h),
            port,
        },
        (None, h) => PgHost::Tcp { host: h, port },
    };
    let tls = match (&host, sslmode) {
        (PgHost::Socket { .. }, Some(true)) => {
            return Err(usage(
                "sslmode=verify-full is for a TCP host; a Unix socket stays on this machine",
            ));
        }
        (PgHost::Socket { .. }, _) => None,
        (PgHost::Tcp { host, .. }, mode) => {
            // Security: without TLS a password and every record would cross the network in
            // clear, so plain TCP is only for loopback (a name only if it is `localhost`:
            // another name could resolve anywhere).
            let loopback =
                host == "localhost" || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback());
            match mode {
                Some(true) => Some(Tls::default()),
                None | Some(false) if loopback => None,
                None => Some(Tls::default()),
                Some(false) => {
                    return Err(Error::new(
                        Kind::Usage,
                        format!(
                            "--records: PostgreSQL host {} is not loopback: skillbox reaches it over TLS only (leave out sslmode=disable; a private CA: --records-ca-file)",
                            host.escape_default()
                        ),
                    ));
                }
            }
        }
    };
    let password_from = password.as_ref().map(|_| PASSWORD_IN_URL);
    Ok(Location::Postgres(PgLocation {
        user,
        password,
        password_from,
        host,
        dbname,
        tls,
    }))
}

/// `--records-ca-file`: the trust anchors for TLS to the server (replacing Mozilla's).
pub fn set_ca_file(loc: &mut Location, ca_file: Option<&Path>) -> Result<(), Error> {
    let Some(path) = ca_file else {
        return Ok(());
    };
    match loc {
        Location::Postgres(PgLocation { tls: Some(t), .. }) => {
            t.ca_file = Some(path.to_owned());
            Ok(())
        }
        _ => Err(Error::new(
            Kind::Usage,
            "--records-ca-file is for TLS to PostgreSQL: a host beyond loopback, or ?sslmode=verify-full",
        )),
    }
}

/// `HOST[:PORT]`, `[V6][:PORT]`, or a %-encoded socket directory.
fn split_host_port(s: &str) -> Result<(String, Option<u16>), Error> {
    let port_of = |p: &str| {
        p.parse::<u16>()
            .map(Some)
            .map_err(|_| usage("the port is a number"))
    };
    if let Some(rest) = s.strip_prefix('[') {
        let (h, tail) = rest
            .split_once(']')
            .ok_or_else(|| usage("an IPv6 host is [ADDRESS]"))?;
        let port = match tail.strip_prefix(':') {
            Some(p) => port_of(p)?,
            None if tail.is_empty() => None,
            None => return Err(usage("junk after the host")),
        };
        return Ok((h.to_owned(), port));
    }
    let decoded = percent_decode(s).map_err(|e| usage(format!("the host: {e}")))?;
    if decoded.starts_with('/') {
        return Ok((decoded, None));
    }
    match s.rsplit_once(':') {
        Some((h, p)) => Ok((h.to_ascii_lowercase(), port_of(p)?)),
        None => Ok((s.to_ascii_lowercase(), None)),
    }
}

/// The password: `--records-password-file` (mode 0600 or stricter), else the URL's, else
/// `PGPASSWORD`. Giving it both in the URL and in a file is refused (which one is meant?).
pub fn resolve_password(loc: &mut Location, file: Option<&Path>) -> Result<(), Error> {
    let Location::Postgres(p) = loc else {
        if file.is_some() {
            return Err(Error::new(
                Kind::Usage,
                "--records-password-file is for --records postgres://...",
            ));
        }
        return Ok(());
    };
    if let Some(path) = file {
        if p.password.is_some() {
            return Err(usage(
                "the URL has a password and --records-password-file gives one too; keep one (the file)",
            ));
        }
        p.password = Some(read_password_file(path)?);
        p.password_from = Some("--records-password-file");
        return Ok(());
    }
    if p.password.is_none()
        && let Some(pw) = std::env::var_os("PGPASSWORD").filter(|v| !v.is_empty())
    {
        p.password = Some(Secret(pw.to_string_lossy().into_owned()));
        p.password_from = Some("PGPASSWORD");
    }
    Ok(())
}

/// [`PgLocation::password_from`] for a password written in the records URL.
const PASSWORD_IN_URL: &str = "the records URL";

fn read_password_file(path: &Path) -> Result<Secret, Error> {
    let shown = path.display();
    let f = std::fs::File::open(path)
        .map_err(|e| Error::new(Kind::Usage, format!("--records-password-file {shown}: {e}")))?;
    let md = f
        .metadata()
        .map_err(|e| Error::io(format!("--records-password-file {shown}"), &e))?;
    if !md.is_file() {
        return Err(Error::new(
            Kind::Usage,
            format!("--records-password-file {shown} is not a regular file"),
        ));
    }
    // Security: a password file others can read is a leaked password (libpq's .pgpass rule).
    if md.mode() & 0o077 != 0 {
        return Err(Error::new(
            Kind::Usage,
            format!(
                "--records-password-file {shown} is readable by others (mode {:o}); chmod 600 it",
                md.mode() & 0o7777
            ),
        ));
    }
    let mut text = String::new();
    f.take(4096)
        .read_to_string(&mut text)
        .map_err(|e| Error::io(format!("--records-password-file {shown}"), &e))?;
    let line = text.lines().next().unwrap_or("").to_owned();
    if line.is_empty() {
        return Err(Error::new(
            Kind::Usage,
            format!("--records-password-file {shown} is empty"),
        ));
    }
    Ok(Secret(line))
}

/// Which host this is: a name, and whether the operator gave it (`--host`, `SKILLBOX_HOST`) or
/// it is the system hostname (then the name the records bound this store to wins).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostChoice {
    pub name: String,
    pub explicit: bool,
}

/// A host name: 1 to 64 of letters, digits, '.', '-', '_', starting with a letter or digit.
pub fn check_host_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "host name {:?}: 1 to 64 letters, digits, '.', '-' or '_', starting with a letter or digit",
            name.escape_default().to_string()
        ))
    }
}

impl HostChoice {
    /// `localhost`, not given by the operator: for a store's own records when the system
    /// hostname is not a usable name.
    pub fn local() -> Self {
        HostChoice {
            name: "localhost".into(),
            explicit: false,
        }
    }

    /// `--host NAME` when given, else the system hostname.
    pub fn new(given: Option<&str>) -> Result<Self, Error> {
        if let Some(n) = given {
            check_host_name(n).map_err(|e| Error::new(Kind::Usage, format!("--host: {e}")))?;
            return Ok(HostChoice {
                name: n.to_owned(),
                explicit: true,
            });
        }
        let name = nix::unistd::gethostname()
            .map_err(|e| {
                Error::new(
                    Kind::Operational,
                    format!("cannot read the hostname: {e}; give --host NAME"),
                )
            })?
            .to_string_lossy()
            .into_owned();
        check_host_name(&name).map_err(|e| {
            Error::new(
                Kind::Usage,
                format!("the system hostname is not usable: {e}; give --host NAME"),
            )
        })?;
        Ok(HostChoice {
            name,
            explicit: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pg(text: &str) -> PgLocation {
        match parse_location(text) {
            Ok(Location::Postgres(p)) => p,
            Ok(Location::Sqlite) => panic!("sqlite for {text}"),
            Err(e) => panic!("{text}: {e}"),
        }
    }

    #[test]
    fn urls_parse_and_print_without_their_password() {
        let p = pg("postgres://sb:MARKER%40x@127.0.0.1:6543/fleet");
        assert_eq!(p.user, "sb");
        assert_eq!(p.password.as_ref().map(Secret::expose), Some("MARKER@x"));
        assert_eq!(
            p.host,
            PgHost::Tcp {
                host: "127.0.0.1".into(),
                port: 6543
            }
        );
        let shown = Location::Postgres(p.clone()).display();
        assert_eq!(shown, "postgres://sb@127.0.0.1:6543/fleet");
        assert!(!format!("{p:?}").contains("MARKER"));
        let p = pg("postgresql://sb@[::1]/fleet");
        assert_eq!(
            p.host,
            PgHost::Tcp {
                host: "::1".into(),
                port: 5432
            }
        );
        let p = pg("postgres://sb@/fleet?host=/run/postgresql&port=5433");
        assert_eq!(
            p.host,
            PgHost::Socket {
                dir: "/run/postgresql".into(),
                port: 5433
            }
        );
        let p = pg("postgres://sb@%2Frun%2Fpostgresql/fleet");
        assert!(matches!(p.host, PgHost::Socket { .. }), "{:?}", p.host);
        assert!(matches!(parse_location("sqlite"), Ok(Location::Sqlite)));
    }

    #[test]
    fn bad_urls_are_refused_without_quoting_the_password() {
        for bad in [
            "postgres://sb:MARKER@db.example.com/fleet?sslmode=disable",
            "postgres://sb:MARKER@10.0.0.5:5432/fleet?sslmode=disable",
            "postgres://sb:MARKER@127.0.0.1/fleet?sslmode=require",
            "postgres://sb:MARKER@/fleet?host=/run/postgresql&sslmode=verify-full",
            "postgres://sb:MARKER@127.0.0.1/fleet?password=MARKER",
            "postgres://sb:MARKER@127.0.0.1:port/fleet",
            "postgres://:MARKER@127.0.0.1/fleet",
            "postgres://sb:MARKER@127.0.0.1/",
            "mysql://sb:MARKER@127.0.0.1/fleet",
        ] {
            let e = parse_location(bad)
                .err()
                .unwrap_or_else(|| panic!("{bad} accepted"));
            assert_eq!(e.kind, Kind::Usage, "{bad}");
            assert!(!e.message.contains("MARKER"), "{bad}: {}", e.message);
        }
        let e = parse_location("postgres://sb@db.example.com/fleet?sslmode=disable")
            .err()
            .map(|e| e.message)
            .unwrap_or_default();
        assert!(e.contains("not loopback") && e.contains("TLS"), "{e}");
    }

    /// A password holding an unescaped `/`, `?` or `#` is refused by the typed-URL rule, with
    /// what to write instead, and never repeated. (Before: `?` made the rest of the password
    /// a parameter whose name the error quoted, `#` was taken as part of the password, and `/`
    /// was "name the user".)
    #[test]
    fn a_password_cut_short_by_a_slash_is_refused_without_quoting_it() {
        for bad in [
            "postgres://sb:x?MARKER@127.0.0.1/fleet",
            "postgres://sb:x?MARKER@127.0.0.1:5432/fleet?sslmode=disable",
            "postgres://sb:12/MARKER@127.0.0.1/fleet",
            "postgresql://sb:x/MARKER@db.example.com:5432/fleet",
            "postgres://sb:x#MARKER@127.0.0.1/fleet",
        ] {
            let e = parse_location(bad)
                .err()
                .unwrap_or_else(|| panic!("{bad} accepted"));
            assert_eq!(e.kind, Kind::Usage, "{bad}");
            assert!(!e.message.contains("MARKER"), "{bad}: {}", e.message);
            assert!(
                e.message.contains("USER:PASSWORD@HOST") && e.message.contains("%2F"),
                "{bad}: {}",
                e.message
            );
        }
        // A password holding an unescaped `@`, then `/` and `?` (`a@b/c?MARKER`): the
        // authority holds an `@` and the typed-URL rule lets it pass (credentials as written),
        // the rest after the `?` is a parameter, not named. (Before: quoted by "unknown
        // parameter".)
        for bad in [
            "postgres://sb:a@b/c?MARKER@127.0.0.1/fleet",
            "postgres://sb:MARK@ER?MARKER@127.0.0.1/fleet?sslmode=disable",
        ] {
            let e = parse_location(bad)
                .err()
                .unwrap_or_else(|| panic!("{bad} accepted"));
            assert_eq!(e.kind, Kind::Usage, "{bad}");
            assert!(!e.message.contains("MARKER"), "{bad}: {}", e.message);
        }
        let e = parse_location("postgres://sb@127.0.0.1/fleet?connect_timeout=3").err();
        assert!(e.is_some_and(|e| e.message.contains("unknown parameter \"connect_timeout\"")));
        // Written percent-encoded, the same password is read whole.
        let p = pg("postgres://sb:x%3FMARKER@127.0.0.1/fleet");
        assert_eq!(p.password.as_ref().map(Secret::expose), Some("x?MARKER"));
        assert_eq!(p.dbname, "fleet");
        // An `@` in a parameter after a whole userinfo, a socket directory, a port: unchanged.
        assert!(parse_location("postgres://sb:pw@127.0.0.1:5432/fleet").is_ok());
        assert!(parse_location("postgres://sb@/fleet?host=/run/postgresql&port=5433").is_ok());
    }

    #[test]
    fn tls_is_required_beyond_loopback_and_optional_on_it() {
        assert!(pg("postgres://sb@db.example.com/fleet").tls.is_some());
        assert!(
            pg("postgres://sb@10.0.0.5/fleet?sslmode=verify-full")
                .tls
                .is_some()
        );
        assert!(pg("postgres://sb@127.0.0.1/fleet").tls.is_none());
        assert!(
            pg("postgres://sb@localhost/fleet?sslmode=disable")
                .tls
                .is_none()
        );
        let mut loc = Location::Postgres(pg("postgres://sb@localhost/fleet?sslmode=verify-full"));
        assert_eq!(
            loc.display(),
            "postgres://sb@localhost:5432/fleet?sslmode=verify-full"
        );
        assert!(set_ca_file(&mut loc, Some(Path::new("/ca.pem"))).is_ok());
        let mut plain = Location::Postgres(pg("postgres://sb@127.0.0.1/fleet"));
        assert!(set_ca_file(&mut plain, Some(Path::new("/ca.pem"))).is_err());
    }

    #[test]
    fn host_names_are_checked() {
        for ok in ["host-a", "web01.example.com", "a", "A_1"] {
            assert!(check_host_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "-a", ".a", "a b", "a/b", "ä", &"x".repeat(65)] {
            assert!(check_host_name(bad).is_err(), "{bad}");
        }
    }
}
