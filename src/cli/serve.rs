//! `skillbox serve`: the flags (each also a `SKILLBOX_*` variable), logging set-up, and the
//! exit status. The settings are checked by the library ([`Config::from_settings`]); the
//! server itself is [`skillbox::broker`].
//!
//! Exit codes (see [`Exit`]): 0 after a graceful shutdown (SIGTERM), 1 a fault, 2 a bad setting.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};

use skillbox::broker::{self, Config, ServeError, Settings};
use skillbox::extract::policy::parse_size;

use super::exit::Exit;
use super::sandbox::{LeadingSandboxArgs, ServeSandboxArgs};

/// Flags of `skillbox serve`. Every flag can also be set by the environment variable named in
/// its help; a flag on the command line wins over the variable.
#[derive(Args, Debug, Clone)]
pub struct ServeArgs {
    /// Unix socket to listen on [default: $XDG_RUNTIME_DIR/skillbox/skillbox.sock, else
    /// /run/skillbox/skillbox.sock as root, else $TMPDIR/skillbox-UID/skillbox.sock].
    #[arg(long, env = "SKILLBOX_SOCKET", value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// Permission bits of the Unix socket, octal.
    #[arg(long, env = "SKILLBOX_SOCKET_MODE", value_name = "OCTAL", default_value = "0660", value_parser = parse_mode)]
    pub socket_mode: u32,
    /// Peer uids allowed on the Unix socket (SO_PEERCRED), comma-separated or repeated
    /// [default: the server's own uid and root].
    #[arg(
        long = "allow-uid",
        env = "SKILLBOX_ALLOW_UIDS",
        value_name = "UID",
        value_delimiter = ','
    )]
    pub allow_uids: Vec<u32>,
    /// Listen on TCP at this address instead of the Unix socket. A non-loopback address
    /// requires --tls-cert and --tls-key.
    #[arg(long, env = "SKILLBOX_TCP", value_name = "ADDR")]
    pub tcp: Option<SocketAddr>,
    /// PEM certificate chain for TLS on TCP.
    #[arg(
        long,
        env = "SKILLBOX_TLS_CERT",
        value_name = "PEM",
        value_parser = super::existing_file,
        requires = "tls_key"
    )]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key for TLS on TCP.
    #[arg(
        long,
        env = "SKILLBOX_TLS_KEY",
        value_name = "PEM",
        value_parser = super::existing_file,
        requires = "tls_cert"
    )]
    pub tls_key: Option<PathBuf>,
    /// PEM CA bundle: when given, clients must present a certificate it signed (mutual TLS).
    #[arg(
        long,
        env = "SKILLBOX_TLS_CLIENT_CA",
        value_name = "PEM",
        value_parser = super::existing_file,
        requires = "tls_cert"
    )]
    pub tls_client_ca: Option<PathBuf>,
    /// Directory under which one new staging directory is made per request [default: a
    /// `staging` directory beside the socket]. Owned by this server alone: entries left by a
    /// previous run are removed at start-up.
    #[arg(long, env = "SKILLBOX_STAGING_ROOT", value_name = "DIR")]
    pub staging_root: Option<PathBuf>,
    /// Seconds an accepted staging directory is kept without `Release`.
    #[arg(
        long,
        env = "SKILLBOX_STAGING_TTL",
        value_name = "SECS",
        default_value_t = 600
    )]
    pub staging_ttl: u64,
    /// Accepted trees held at once awaiting `Release` (or the TTL); past it requests fail
    /// with RESOURCE_EXHAUSTED until trees are released.
    #[arg(
        long,
        env = "SKILLBOX_MAX_KEPT_TREES",
        value_name = "N",
        default_value_t = 1024
    )]
    pub max_kept_trees: u64,
    /// File bytes the accepted trees awaiting `Release` may hold together (K, M, G suffixes;
    /// at least the limits' max_expanded_bytes).
    #[arg(long, env = "SKILLBOX_MAX_KEPT_BYTES", value_name = "BYTES", default_value = "4G", value_parser = parse_size)]
    pub max_kept_bytes: u64,
    /// Server limits file (.toml or .json, keys as in docs/limits.md); requests may only tighten it.
    #[arg(long, env = "SKILLBOX_LIMITS", value_name = "FILE")]
    pub limits: Option<PathBuf>,
    /// Concurrent confined children [default: the CPU count plus two].
    #[arg(long, env = "SKILLBOX_MAX_CHILDREN", value_name = "N")]
    pub max_children: Option<u32>,
    /// Requests admitted beyond the running children (uploading or waiting for a child); past
    /// it a request fails at once with RESOURCE_EXHAUSTED.
    #[arg(
        long,
        env = "SKILLBOX_MAX_QUEUED",
        value_name = "N",
        default_value_t = 64
    )]
    pub max_queued: u32,
    /// Artifact bytes held in memory across all requests (K, M, G suffixes; at least the
    /// limits' max_artifact_bytes, so that any allowed artifact can be uploaded).
    #[arg(long, env = "SKILLBOX_MAX_INFLIGHT_BYTES", value_name = "BYTES", default_value = "1G", value_parser = parse_size)]
    pub max_inflight_bytes: u64,
    /// Largest chunk accepted in one message (K, M suffixes).
    #[arg(long, env = "SKILLBOX_MAX_CHUNK_BYTES", value_name = "BYTES", default_value = "1M", value_parser = parse_size)]
    pub max_chunk_bytes: u64,
    /// Milliseconds one extraction may run before its child is killed (`timeout`).
    #[arg(
        long,
        env = "SKILLBOX_EXTRACT_TIMEOUT_MS",
        value_name = "MS",
        default_value_t = 30_000
    )]
    pub extract_timeout_ms: u64,
    /// Milliseconds from a request's admission until its header must have arrived; then it
    /// fails with DEADLINE_EXCEEDED and its place is freed.
    #[arg(
        long,
        env = "SKILLBOX_HEADER_TIMEOUT_MS",
        value_name = "MS",
        default_value_t = 10_000
    )]
    pub header_timeout_ms: u64,
    /// Milliseconds from a request's admission until its whole upload must have arrived
    /// (waiting for a child included); then it fails with DEADLINE_EXCEEDED, its child is
    /// killed and its staging directory removed. Raise it for large artifacts over slow links.
    #[arg(
        long,
        env = "SKILLBOX_UPLOAD_TIMEOUT_MS",
        value_name = "MS",
        default_value_t = 60_000
    )]
    pub upload_timeout_ms: u64,
    /// `GetTree` and `ExtractWithTree` streams at once, and tree streams one connection may
    /// hold open (ended ones its client has not read to the end included); past either a new
    /// one fails at once with RESOURCE_EXHAUSTED.
    #[arg(
        long,
        env = "SKILLBOX_MAX_TREE_STREAMS",
        value_name = "N",
        default_value_t = 32
    )]
    pub max_tree_streams: u32,
    /// Tree streams open across all connections (ended ones their clients have not read to
    /// the end included, each holding up to about 250 KB until they do), at least
    /// --max-tree-streams; past it a new one fails at once with RESOURCE_EXHAUSTED [default:
    /// eight times --max-tree-streams].
    #[arg(long, env = "SKILLBOX_MAX_OPEN_TREE_STREAMS", value_name = "N")]
    pub max_open_tree_streams: Option<u32>,
    /// Connections open at once (an idle one costs about 26 KB); past it
    /// a new connection is closed unread, counted in skillbox_connections_refused_total and
    /// logged at most once a minute.
    #[arg(
        long,
        env = "SKILLBOX_MAX_CONNECTIONS",
        value_name = "N",
        default_value_t = skillbox::broker::config::DEFAULT_MAX_CONNECTIONS
    )]
    pub max_connections: u32,
    /// Bytes of request messages begun and not finished, across all calls but uploads (each
    /// call's stream may otherwise hold up to a message's size limit, on every connection);
    /// past it the call whose frame would pass it fails with RESOURCE_EXHAUSTED. A message
    /// that arrives whole in one frame is never refused (K, M, G suffixes; at least 64K).
    #[arg(long, env = "SKILLBOX_MAX_PARTIAL_REQUEST_BYTES", value_name = "BYTES", default_value = "16M", value_parser = parse_size)]
    pub max_partial_request_bytes: u64,
    /// Milliseconds a tree stream may wait for its client to read before it ends with
    /// DEADLINE_EXCEEDED (what it had queued is dropped, its reading thread and its
    /// --max-tree-streams place freed).
    #[arg(
        long,
        env = "SKILLBOX_TREE_IDLE_TIMEOUT_MS",
        value_name = "MS",
        default_value_t = 30_000
    )]
    pub tree_idle_timeout_ms: u64,
    /// Seconds in-flight requests get to finish after SIGTERM before they are cancelled.
    #[arg(
        long,
        env = "SKILLBOX_GRACE",
        value_name = "SECS",
        default_value_t = 10
    )]
    pub grace: u64,
    /// Serve Prometheus metrics over HTTP at this address (off unless given).
    #[arg(long, env = "SKILLBOX_METRICS", value_name = "ADDR")]
    pub metrics: Option<SocketAddr>,
    /// Log format on stderr.
    #[arg(long, env = "SKILLBOX_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Log filter (tracing `EnvFilter` syntax, e.g. `info` or `skillbox=debug`).
    #[arg(
        long,
        env = "SKILLBOX_LOG",
        value_name = "FILTER",
        default_value = "info",
        value_parser = log_filter
    )]
    pub log: String,
    /// Run extractions even where confinement cannot be fully applied (degraded; reported by
    /// ServerInfo). Never the default.
    #[arg(long, env = "SKILLBOX_ALLOW_UNCONFINED")]
    pub allow_unconfined: bool,
    /// Fork each confined child from a pre-started zygote (a fresh exec of this binary that
    /// never sees a request's bytes), replaced by a new one after N children; 0 starts every
    /// child with its own exec. Children of one zygote share its address-space layout, which a
    /// smaller N bounds; the exec per request costs about 2 ms of CPU more.
    #[arg(
        long,
        env = "SKILLBOX_ZYGOTE_MAX_FORKS",
        value_name = "N",
        default_value_t = skillbox::sandbox::zygote::DEFAULT_MAX_FORKS
    )]
    pub zygote_max_forks: u32,
    #[command(flatten)]
    pub sandbox: ServeSandboxArgs,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

fn parse_mode(s: &str) -> Result<u32, String> {
    let digits = s.trim_start_matches("0o");
    let mode = u32::from_str_radix(digits, 8).map_err(|_| format!("{s:?} is not an octal mode"))?;
    if mode & !0o777 != 0 {
        return Err(format!("{s:?}: only permission bits (0777) may be set"));
    }
    // Connecting to a Unix socket takes write permission, and the broker's own uid (allowed by
    // default) is its owner: without owner read and write nobody but root could use it.
    if mode & 0o600 != 0o600 {
        return Err(format!(
            "{s:?}: the socket's owner needs read and write (0600); e.g. 0600, or 0660 for its group too"
        ));
    }
    Ok(mode)
}

impl ServeArgs {
    fn settings(&self) -> Settings {
        // Destructured without `..`: a new flag does not compile until it reaches the settings.
        let Self {
            socket,
            socket_mode,
            allow_uids,
            tcp,
            tls_cert,
            tls_key,
            tls_client_ca,
            staging_root,
            staging_ttl,
            max_kept_trees,
            max_kept_bytes,
            limits,
            max_children,
            max_queued,
            max_inflight_bytes,
            max_chunk_bytes,
            extract_timeout_ms,
            header_timeout_ms,
            upload_timeout_ms,
            max_tree_streams,
            max_open_tree_streams,
            max_connections,
            max_partial_request_bytes,
            tree_idle_timeout_ms,
            grace,
            metrics,
            log_format: _,
            log: _,
            allow_unconfined,
            zygote_max_forks,
            sandbox: _,
        } = self.clone();
        // Beside the socket actually given, so that two brokers on two sockets never share
        // (and wipe at start-up) one staging root.
        let staging_root = staging_root.or_else(|| {
            socket
                .as_deref()
                .and_then(std::path::Path::parent)
                .map(|dir| dir.join("staging"))
        });
        Settings {
            socket,
            socket_mode,
            allow_uids,
            tcp,
            tls_cert,
            tls_key,
            tls_client_ca,
            staging_root,
            staging_ttl,
            max_kept_trees,
            max_kept_bytes,
            limits,
            max_children,
            max_queued,
            max_inflight_bytes,
            max_chunk_bytes,
            extract_timeout_ms,
            header_timeout_ms,
            upload_timeout_ms,
            max_tree_streams,
            max_open_tree_streams,
            max_connections,
            max_partial_request_bytes,
            tree_idle_timeout_ms,
            grace,
            metrics,
            allow_unconfined,
            zygote_max_forks,
        }
    }
}

/// Run `skillbox serve` until SIGTERM or SIGINT.
/// Flags of `skillbox health`.
#[derive(Args, Debug, Clone)]
pub struct HealthArgs {
    /// The broker's Unix socket [default: the same default as `serve --socket`].
    #[arg(
        long,
        env = "SKILLBOX_SOCKET",
        value_name = "PATH",
        conflicts_with = "server"
    )]
    pub socket: Option<PathBuf>,
    /// Or any broker URI (`http://127.0.0.1:PORT`, `https://HOST:PORT` with SKILLBOX_TLS_CA).
    #[arg(long, value_name = "URI")]
    pub server: Option<String>,
    /// The service to ask about; empty for the server as a whole.
    #[arg(long, default_value = "")]
    pub service: String,
    /// Seconds to wait for the answer, at least 1.
    #[arg(long, value_name = "SECS", default_value = "3")]
    pub timeout: std::num::NonZeroU64,
}

/// `skillbox health`: exit 0 when the broker answers SERVING, 1 otherwise (not serving, no
/// answer, no socket), with one line saying which. For probes that exec a command (a
/// container runtime cannot dial a Unix socket).
pub fn health(args: &HealthArgs) -> Exit {
    let uri = match (&args.server, &args.socket) {
        (Some(uri), _) => match super::extract::server_uri(uri) {
            Ok(uri) => uri,
            Err(f) => {
                eprintln!("skillbox: {}", f.message);
                return f.exit;
            }
        },
        (None, Some(path)) => format!("unix://{}", path.display()),
        (None, None) => format!("unix://{}", skillbox::convert::default_socket().display()),
    };
    let timeout = std::time::Duration::from_secs(args.timeout.get());
    match skillbox::client::health_blocking(&uri, &args.service, timeout) {
        Ok(status) => {
            let name = status.as_str_name();
            println!("{uri}: {name}");
            if status == tonic_health::pb::health_check_response::ServingStatus::Serving {
                Exit::Ok
            } else {
                Exit::Operational
            }
        }
        Err(e @ skillbox::client::ClientError::Connect { .. }) => {
            eprintln!("skillbox: {}", super::extract::no_broker(&uri, &e));
            Exit::Operational
        }
        Err(e @ skillbox::client::ClientError::Tls(_)) => {
            eprintln!("skillbox: {uri}: {}", super::extract::tls_settings(&e));
            Exit::Operational
        }
        Err(skillbox::client::ClientError::Unavailable(why)) => {
            eprintln!("skillbox: {}", super::extract::closed_unread(&uri, &why));
            Exit::Operational
        }
        Err(e) => {
            eprintln!("skillbox: {uri}: {e}");
            Exit::Operational
        }
    }
}

/// Run `skillbox serve` until SIGTERM or SIGINT, then drain for the grace period; a second
/// signal during the drain stops at once: in-flight requests are cancelled, their children
/// killed and reaped, and every staged tree (kept or in flight) removed before it exits.
pub fn run(args: &ServeArgs, leading: &LeadingSandboxArgs) -> Exit {
    init_logging(args);
    let sandbox = leading.merge_serve(&args.sandbox);
    // Every flag is checked before anything is made: a refused command (a usage error) leaves
    // no directory behind (`--socket /nonexistent/x.sock` with a flag serve refuses created
    // `/nonexistent`, as root, and only then said no).
    let config = Config::from_settings(&args.settings())
        .and_then(|c| c.with_sandbox(sandbox.config(), sandbox.sandbox_timeout.is_some()))
        .map_err(ServeError::from);
    let mut config = match config {
        Ok(c) => c,
        Err(e) => return failed(args, &e.to_string(), exit_for(&e)),
    };
    // A directory the user named is used, never invented ([`super::parent_exists`]).
    for (flag, path) in [
        ("--socket", args.socket.as_deref()),
        ("--staging-root", args.staging_root.as_deref()),
    ] {
        if let Some(path) = path
            && let Err(message) = super::parent_exists(flag, path)
        {
            return failed(args, &message, Exit::Usage);
        }
    }
    // The broker opens (and makes) its staging root before it binds: a socket or address a
    // running server holds is refused here first, so that a second `serve` makes nothing.
    if let Err(message) = not_in_use(&config.listen) {
        return failed(args, &message, Exit::Operational);
    }
    // TCP is bound here, once, before anything is made (a port taken makes nothing), and the
    // broker serves on this very listener: with `--tcp HOST:0` the port the "serving on" line
    // names is the kernel's pick, which nobody can take between learning it and serving it.
    let bound = match &mut config.listen {
        broker::config::Listen::Tcp { addr, .. } => match broker::bind_tcp(*addr) {
            Ok(bound) => {
                *addr = bound.local_addr();
                Some(bound)
            }
            Err(e) => return failed(args, &e.to_string(), Exit::Operational),
        },
        broker::config::Listen::Unix { .. } => None,
    };
    // The default staging root is made inside the socket's directory, and the broker opens it
    // before it binds: so that directory is checked first, as the socket's own check would
    // (a squatted or symlinked directory gets nothing of ours).
    if let (None, Some(dir)) = (
        &args.staging_root,
        args.socket
            .as_deref()
            .and_then(std::path::Path::parent)
            .filter(|p| !p.as_os_str().is_empty()),
    ) && let Err(e) = skillbox::owned_dir::ensure(dir, 0o755)
    {
        return failed(args, &format!("socket directory: {e}"), Exit::Operational);
    }
    match serve_until_signals(config, bound, args.log_format) {
        Ok(()) => Exit::Ok,
        Err(e) => failed(args, &e.to_string(), exit_for(&e)),
    }
}

/// A running server answering on the socket or address is this one's refusal, said before
/// anything is made. The broker checks again when it binds (another may start in between).
fn not_in_use(listen: &broker::config::Listen) -> Result<(), String> {
    match listen {
        broker::config::Listen::Unix { path, .. } => {
            let socket = std::fs::symlink_metadata(path)
                .is_ok_and(|m| std::os::unix::fs::FileTypeExt::is_socket(&m.file_type()));
            if socket && std::os::unix::net::UnixStream::connect(path).is_ok() {
                return Err(format!("{} is in use by a running server", path.display()));
            }
        }
        broker::config::Listen::Tcp { addr, .. } => {
            if addr.port() != 0
                && std::net::TcpStream::connect_timeout(addr, Duration::from_millis(500)).is_ok()
            {
                return Err(format!("{addr} is in use: something answers there"));
            }
        }
    }
    Ok(())
}

/// Say once why serve stopped (a plain line for a person, a log line where logs are JSON).
fn failed(args: &ServeArgs, message: &str, exit: Exit) -> Exit {
    match args.log_format {
        LogFormat::Json => tracing::error!(error = %message, "skillbox serve failed"),
        LogFormat::Text => eprintln!("skillbox: {message}"),
    }
    exit
}

/// The broker on a runtime of its own: the first SIGTERM or SIGINT starts the drain, a second
/// one ends it ([`broker::signals`]).
fn serve_until_signals(
    config: Config,
    bound: Option<broker::TcpBound>,
    format: LogFormat,
) -> Result<(), ServeError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(ServeError::Runtime)?;
    let (uri, dial) = listen_uris(&config.listen);
    // Said once the broker has its listener (its own socket, or `bound`) and is about to
    // accept: never before, and never when it fails instead (another server holds the socket,
    // the staging root cannot be opened), so the line never sends clients elsewhere.
    let ready = move || {
        let hint = format!("skillbox extract --server {dial} ARTIFACT");
        match format {
            LogFormat::Json => tracing::info!(listen = %uri, try_it = %hint, "ready"),
            LogFormat::Text => {
                let every = if dial == uri {
                    ""
                } else {
                    " (every address of this host)"
                };
                eprintln!("skillbox: serving on {uri}{every}; talk to it with: {hint}");
            }
        }
    };
    let result = runtime.block_on(async {
        let (first, again) = broker::signals().map_err(ServeError::Signal)?;
        // Not raced here: `serve` stops on the second signal itself, and returns once the
        // children of the requests it cancelled are reaped and every staged tree is removed.
        broker::serve(config, bound, ready, first, again).await
    });
    // What is left are connections and the reading threads of tree streams (whose trees are
    // gone): nothing to wait for.
    runtime.shutdown_timeout(Duration::from_millis(500));
    result
}

/// Where the broker listens, and the URI a client dials to reach it. `0.0.0.0` or `[::]` is
/// every address of this host, not one to dial, nor one a certificate names (a client told
/// `https://0.0.0.0:PORT` failed its TLS handshake): the client's URI says `HOST` there.
fn listen_uris(listen: &broker::config::Listen) -> (String, String) {
    match listen {
        broker::config::Listen::Unix { path, .. } => {
            let uri = format!("unix://{}", path.display());
            (uri.clone(), uri)
        }
        broker::config::Listen::Tcp { addr, tls } => {
            let scheme = if tls.is_some() { "https" } else { "http" };
            let uri = format!("{scheme}://{addr}");
            if addr.ip().is_unspecified() {
                let dial = format!("{scheme}://HOST:{}", addr.port());
                (uri, dial)
            } else {
                (uri.clone(), uri)
            }
        }
    }
}

/// 2 for a setting the operator must change, 1 for anything else.
fn exit_for(e: &ServeError) -> Exit {
    match e {
        ServeError::Config(_) => Exit::Usage,
        ServeError::Listen(_)
        | ServeError::Staging(_)
        | ServeError::Runner(_)
        | ServeError::Sandbox(_)
        | ServeError::Tls(_)
        | ServeError::Metrics { .. }
        | ServeError::Transport(_)
        | ServeError::Signal(_)
        | ServeError::Runtime(_) => Exit::Operational,
    }
}

/// `--log FILTER` parses as an `EnvFilter`, or is a usage error: a filter that did not parse
/// was replaced by `info` without a word.
fn log_filter(s: &str) -> Result<String, String> {
    tracing_subscriber::EnvFilter::try_new(s)
        .map(|_| s.to_owned())
        .map_err(|e| format!("not a log filter ({e}); e.g. `info` or `skillbox=debug`"))
}

fn init_logging(args: &ServeArgs) {
    let filter = tracing_subscriber::EnvFilter::try_new(&args.log)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        // A broker outlives whoever reads its stderr (`skillbox serve 2>&1 | head`, a log pipe
        // or journal stream that goes away): a failed write is dropped, never a panic (which
        // ended it with 101, its socket left behind, or hung it mid-drain).
        .with_writer(|| super::Stderr)
        // Colour codes only for a person at a terminal, never in a log file or a pipe.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let _ = match args.log_format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder.try_init(),
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Wrap {
        #[command(flatten)]
        serve: ServeArgs,
    }

    #[test]
    fn flag_defaults_are_the_library_defaults() {
        let w = Wrap::try_parse_from(["serve"]).expect("no flags parse");
        let s = w.serve.settings();
        let d = Settings::default();
        assert_eq!(
            (
                s.socket_mode,
                s.staging_ttl,
                s.max_queued,
                s.max_inflight_bytes
            ),
            (
                d.socket_mode,
                d.staging_ttl,
                d.max_queued,
                d.max_inflight_bytes
            )
        );
        assert_eq!(
            (
                s.max_chunk_bytes,
                s.extract_timeout_ms,
                s.grace,
                s.zygote_max_forks
            ),
            (
                d.max_chunk_bytes,
                d.extract_timeout_ms,
                d.grace,
                d.zygote_max_forks
            )
        );
        assert_eq!(
            (
                s.header_timeout_ms,
                s.upload_timeout_ms,
                s.max_tree_streams,
                s.tree_idle_timeout_ms,
                s.max_kept_trees,
                s.max_kept_bytes,
                s.max_open_tree_streams,
                s.max_connections,
                s.max_partial_request_bytes
            ),
            (
                d.header_timeout_ms,
                d.upload_timeout_ms,
                d.max_tree_streams,
                d.tree_idle_timeout_ms,
                d.max_kept_trees,
                d.max_kept_bytes,
                d.max_open_tree_streams,
                d.max_connections,
                d.max_partial_request_bytes
            )
        );
    }

    /// `0.0.0.0` and `[::]` are said as every address; the command to try names HOST there.
    #[test]
    fn a_client_is_never_told_to_dial_every_address() {
        use broker::config::{Listen, TlsFiles};
        let tls = || {
            Some(TlsFiles {
                cert: "c.pem".into(),
                key: "k.pem".into(),
                client_ca: None,
            })
        };
        for (addr, dial) in [
            ("0.0.0.0:8443", "https://HOST:8443"),
            ("[::]:8443", "https://HOST:8443"),
            ("192.0.2.1:8443", "https://192.0.2.1:8443"),
        ] {
            let listen = Listen::Tcp {
                addr: addr.parse().expect("addr"),
                tls: tls(),
            };
            let (uri, to) = listen_uris(&listen);
            assert_eq!(to, dial, "{addr}");
            assert_eq!(uri, format!("https://{addr}"));
        }
        let (uri, to) = listen_uris(&Listen::Tcp {
            addr: "127.0.0.1:80".parse().expect("addr"),
            tls: None,
        });
        assert_eq!(
            (uri.as_str(), to.as_str()),
            ("http://127.0.0.1:80", "http://127.0.0.1:80")
        );
    }

    #[test]
    fn modes() {
        assert_eq!(parse_mode("0660"), Ok(0o660));
        assert!(parse_mode("4755").is_err());
        assert_eq!(parse_mode("0600"), Ok(0o600));
        for nobody_can_use in ["0000", "0060", "0400", "0200", "0066"] {
            assert!(parse_mode(nobody_can_use).is_err(), "{nobody_can_use}");
        }
    }
}
