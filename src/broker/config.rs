//! Server settings ([`Settings`]: `skillbox serve`'s flags and `SKILLBOX_*` variables, or an
//! embedder's values, over embedded defaults), checked once into a [`Config`] that cannot hold
//! a contradiction (a non-loopback TCP address without TLS, limits that fail validation, a zero
//! bound).
//!
//! Nothing here opens a socket or a directory; [`super::listen`] and [`super::staging`] do.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::extract::policy::Limits;
use crate::sandbox::{Enforcement, SandboxConfig};

/// The settings of one server as given (by `skillbox serve`'s flags and `SKILLBOX_*` variables,
/// or by an embedder), before [`Config::from_settings`] checks them.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Unix socket to listen on [default: $XDG_RUNTIME_DIR/skillbox/skillbox.sock, else
    /// /run/skillbox/skillbox.sock as root, else $TMPDIR/skillbox-UID/skillbox.sock].
    pub socket: Option<PathBuf>,
    /// Permission bits of the Unix socket, octal.
    pub socket_mode: u32,
    /// Peer uids allowed on the Unix socket (SO_PEERCRED), comma-separated or repeated
    /// [default: the server's own uid and root].
    pub allow_uids: Vec<u32>,
    /// Listen on TCP at this address instead of the Unix socket. A non-loopback address
    /// requires --tls-cert and --tls-key.
    pub tcp: Option<SocketAddr>,
    /// PEM certificate chain for TLS on TCP.
    pub tls_cert: Option<PathBuf>,
    /// PEM private key for TLS on TCP.
    pub tls_key: Option<PathBuf>,
    /// PEM CA bundle: when given, clients must present a certificate it signed (mutual TLS).
    pub tls_client_ca: Option<PathBuf>,
    /// Directory under which one new staging directory is made per request [default: a
    /// `staging` directory beside the default socket]. Owned by this server alone: entries
    /// left by a previous run are removed at start-up.
    pub staging_root: Option<PathBuf>,
    /// Seconds an accepted staging directory is kept without `Release`.
    pub staging_ttl: u64,
    /// Accepted trees held at once awaiting `Release` (or the TTL); past it requests fail
    /// with RESOURCE_EXHAUSTED until trees are released.
    pub max_kept_trees: u64,
    /// File bytes the accepted trees awaiting `Release` may hold together (at least the
    /// limits' max_expanded_bytes, so that any accepted tree can be kept).
    pub max_kept_bytes: u64,
    /// Server limits file (.toml or .json, keys as in docs/limits.md); requests may only tighten it.
    pub limits: Option<PathBuf>,
    /// Concurrent confined children [default: the CPU count plus two].
    pub max_children: Option<u32>,
    /// Requests admitted beyond the running children (uploading or waiting for a child); past
    /// it a request fails at once with RESOURCE_EXHAUSTED.
    pub max_queued: u32,
    /// Artifact bytes held in memory across all requests (K, M, G suffixes; at least the
    /// limits' max_artifact_bytes, so that any allowed artifact can be uploaded).
    pub max_inflight_bytes: u64,
    /// Largest chunk accepted in one message (K, M suffixes).
    pub max_chunk_bytes: u64,
    /// Milliseconds one extraction may run before its child is killed (`timeout`).
    pub extract_timeout_ms: u64,
    /// Milliseconds from a request's admission until its header must have arrived; then it
    /// fails with DEADLINE_EXCEEDED and its place is freed.
    pub header_timeout_ms: u64,
    /// Milliseconds from a request's admission until its whole upload must have arrived
    /// (waiting for a child included); then it fails with DEADLINE_EXCEEDED, its child is
    /// killed and its staging directory removed.
    pub upload_timeout_ms: u64,
    /// `GetTree` and `ExtractWithTree` streams at once, and tree streams one connection may
    /// hold open (ended ones its client has not read to the end included); past either a new
    /// one fails at once with RESOURCE_EXHAUSTED.
    pub max_tree_streams: u32,
    /// Tree streams open across all connections (ended ones their clients have not read to
    /// the end included), at least `max_tree_streams`; past it a new one fails at once with
    /// RESOURCE_EXHAUSTED [default: eight times `max_tree_streams`].
    pub max_open_tree_streams: Option<u32>,
    /// Connections open at once; past it a new connection is closed unread.
    pub max_connections: u32,
    /// Bytes of request messages begun and not finished, across all calls but uploads; past it
    /// the call whose frame would pass it fails with RESOURCE_EXHAUSTED.
    pub max_partial_request_bytes: u64,
    /// Milliseconds a tree stream may wait for its client to read before it ends with
    /// DEADLINE_EXCEEDED (what it had queued is dropped and its reading thread freed).
    pub tree_idle_timeout_ms: u64,
    /// Seconds in-flight requests get to finish after SIGTERM before they are cancelled.
    pub grace: u64,
    /// Serve Prometheus metrics over HTTP at this address (off unless given).
    pub metrics: Option<SocketAddr>,
    /// Run extractions even where confinement cannot be fully applied (degraded; reported by
    /// ServerInfo). Never the default.
    pub allow_unconfined: bool,
    /// Fork each confined child from a pre-started zygote (a fresh exec of this binary that
    /// never sees a request's bytes), replaced by a new one after N children; 0 starts every
    /// child with its own exec. Children of one zygote share its address-space layout, which a
    /// smaller N bounds; the exec per request costs about 2 ms of CPU more.
    pub zygote_max_forks: u32,
}

impl Default for Settings {
    /// The embedded defaults (what `skillbox serve` uses with no flag and no variable).
    fn default() -> Self {
        Self {
            socket: None,
            socket_mode: 0o660,
            allow_uids: Vec::new(),
            tcp: None,
            tls_cert: None,
            tls_key: None,
            tls_client_ca: None,
            staging_root: None,
            staging_ttl: 600,
            max_kept_trees: 1024,
            max_kept_bytes: 4 << 30,
            limits: None,
            max_children: None,
            max_queued: 64,
            max_inflight_bytes: 1 << 30,
            max_chunk_bytes: 1 << 20,
            extract_timeout_ms: 30_000,
            header_timeout_ms: 10_000,
            upload_timeout_ms: 60_000,
            max_tree_streams: 32,
            max_open_tree_streams: None,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_partial_request_bytes: 16 << 20,
            tree_idle_timeout_ms: 30_000,
            grace: 10,
            metrics: None,
            allow_unconfined: false,
            zygote_max_forks: crate::sandbox::zygote::DEFAULT_MAX_FORKS,
        }
    }
}

/// Connections open at once by default. An idle connection costs the broker about 26 KB over
/// the Unix socket (24 KB over TCP), so 1024 hold under 30 MB; a client channel is one
/// connection, so a sidecar serves that many installer processes at once before it refuses
/// one; and they fit with the broker's other descriptors (children's pipes, tree files) in
/// the `LimitNOFILE=4096` of deploy/skillbox.service.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 1024;

/// Open tree streams across all connections by default, per `--max-tree-streams`: eight
/// times the streams served at once, so that well-behaved clients, whose streams close as they
/// read the last part, never meet it; 256 unread streams hold about 64 MB.
const OPEN_TREE_STREAMS_PER_PLACE: u32 = 8;

/// The least `--max-partial-request-bytes`: a request of this contract but an upload chunk
/// is under a kilobyte, and one sent over several frames is counted until its last one comes.
const MIN_PARTIAL_REQUEST_BYTES: u64 = 64 << 10;

/// Where the server listens.
#[derive(Debug, Clone)]
pub enum Listen {
    Unix {
        path: PathBuf,
        mode: u32,
        allow_uids: Vec<u32>,
    },
    Tcp {
        addr: SocketAddr,
        tls: Option<TlsFiles>,
    },
}

#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub client_ca: Option<PathBuf>,
}

/// Admission bounds: see [`super::admission`].
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    pub max_children: u32,
    pub max_queued: u32,
    pub max_inflight_bytes: u64,
    pub max_chunk_bytes: u64,
    pub max_tree_streams: u32,
    /// Tree streams open in HTTP/2 across all connections (see [`super::conn`]).
    pub max_open_tree_streams: u32,
    /// Connections open at once across the listeners.
    pub max_connections: u32,
    /// Bytes of unfinished request messages across all calls but uploads ([`super::partial`]).
    pub max_partial_request_bytes: u64,
}

/// The validated server configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: Listen,
    pub staging_root: PathBuf,
    pub staging_ttl: Duration,
    /// See [`Settings::max_kept_trees`] and [`Settings::max_kept_bytes`].
    pub kept: super::staging::KeptBounds,
    pub limits: Limits,
    pub bounds: Bounds,
    pub extract_timeout: Duration,
    /// From admission to the header: see [`Settings::header_timeout_ms`].
    pub header_timeout: Duration,
    /// From admission to the end of the upload: see [`Settings::upload_timeout_ms`].
    pub upload_timeout: Duration,
    /// See [`Settings::tree_idle_timeout_ms`].
    pub tree_idle_timeout: Duration,
    pub grace: Duration,
    pub metrics: Option<SocketAddr>,
    pub allow_unconfined: bool,
    /// How children are confined and started: the deadline, enforcement and zygote from the
    /// flags above; the re-check, seccomp profile and child identity from the global sandbox
    /// flags (see [`Config::with_sandbox_flags`]).
    pub sandbox: SandboxConfig,
}

/// A setting that cannot be used; `skillbox serve` exits 2 with it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    #[error("--tcp {addr} is not a loopback address: serving it requires --tls-cert and --tls-key")]
    PlaintextNonLoopback { addr: SocketAddr },
    #[error(
        "TLS files were given but no --tcp address (the Unix socket is protected by its mode and peer uid)"
    )]
    TlsWithoutTcp,
    #[error("{0}")]
    Limits(#[from] crate::extract::policy::LimitsError),
    #[error("--{flag} must be at least {min}")]
    TooSmall { flag: &'static str, min: u64 },
    #[error("--max-chunk-bytes {0} exceeds 16 MiB")]
    ChunkTooLarge(u64),
    #[error(
        "--sandbox-timeout does not apply to serve: set the per-extraction deadline with --extract-timeout-ms (SKILLBOX_EXTRACT_TIMEOUT_MS)"
    )]
    SandboxTimeout,
}

impl Config {
    /// Check the settings and fill in the defaults.
    pub fn from_settings(args: &Settings) -> Result<Self, ConfigError> {
        let base = default_base_dir();
        let listen = match args.tcp {
            Some(addr) => {
                let tls = match (&args.tls_cert, &args.tls_key) {
                    (Some(cert), Some(key)) => Some(TlsFiles {
                        cert: cert.clone(),
                        key: key.clone(),
                        client_ca: args.tls_client_ca.clone(),
                    }),
                    _ => None,
                };
                if tls.is_none() && !addr.ip().is_loopback() {
                    return Err(ConfigError::PlaintextNonLoopback { addr });
                }
                Listen::Tcp { addr, tls }
            }
            None => {
                if args.tls_cert.is_some() || args.tls_key.is_some() || args.tls_client_ca.is_some()
                {
                    return Err(ConfigError::TlsWithoutTcp);
                }
                let mut allow_uids = if args.allow_uids.is_empty() {
                    vec![nix::unistd::Uid::effective().as_raw(), 0]
                } else {
                    args.allow_uids.clone()
                };
                allow_uids.sort_unstable();
                allow_uids.dedup();
                Listen::Unix {
                    path: args
                        .socket
                        .clone()
                        .unwrap_or_else(|| base.join("skillbox.sock")),
                    mode: args.socket_mode,
                    allow_uids,
                }
            }
        };
        let limits = match &args.limits {
            Some(path) => Limits::from_file(path)?,
            None => Limits::default(),
        };
        limits.validate()?;
        // Two children more than CPUs by default: a request holds its child from before its
        // upload has arrived until its tree is re-checked and answered, stretches in which that
        // child uses no CPU, so with one per CPU the cores idle at full load (2 cores: 3
        // children gave about 11 % more requests a second than 2 at concurrency 8). Since a
        // busy child extracts on one thread (`ChildRequest::busy`), 4 gave about 5 % more than
        // 3, on tmpfs and on a journaled disk, and 5 or 6 no more than 4 (bench-results/load.md).
        let max_children = match args.max_children {
            Some(n) => n,
            None => std::thread::available_parallelism()
                .map_or(1, |n| u32::try_from(n.get()).unwrap_or(u32::MAX))
                .saturating_add(2),
        };
        if max_children == 0 {
            return Err(ConfigError::TooSmall {
                flag: "max-children",
                min: 1,
            });
        }
        if args.max_chunk_bytes < 1024 {
            return Err(ConfigError::TooSmall {
                flag: "max-chunk-bytes",
                min: 1024,
            });
        }
        if args.max_chunk_bytes > 16 << 20 {
            return Err(ConfigError::ChunkTooLarge(args.max_chunk_bytes));
        }
        if args.max_inflight_bytes < args.max_chunk_bytes {
            return Err(ConfigError::TooSmall {
                flag: "max-inflight-bytes",
                min: args.max_chunk_bytes,
            });
        }
        if args.extract_timeout_ms == 0 {
            return Err(ConfigError::TooSmall {
                flag: "extract-timeout-ms",
                min: 1,
            });
        }
        for (flag, ms) in [
            ("header-timeout-ms", args.header_timeout_ms),
            ("upload-timeout-ms", args.upload_timeout_ms),
            ("tree-idle-timeout-ms", args.tree_idle_timeout_ms),
            ("max-tree-streams", u64::from(args.max_tree_streams)),
        ] {
            if ms == 0 {
                return Err(ConfigError::TooSmall { flag, min: 1 });
            }
        }
        if args.max_connections == 0 {
            return Err(ConfigError::TooSmall {
                flag: "max-connections",
                min: 1,
            });
        }
        if args.max_partial_request_bytes < MIN_PARTIAL_REQUEST_BYTES {
            return Err(ConfigError::TooSmall {
                flag: "max-partial-request-bytes",
                min: MIN_PARTIAL_REQUEST_BYTES,
            });
        }
        let max_open_tree_streams = args.max_open_tree_streams.unwrap_or_else(|| {
            args.max_tree_streams
                .saturating_mul(OPEN_TREE_STREAMS_PER_PLACE)
        });
        // Fewer would lower the per-connection bound below what --max-tree-streams says.
        if max_open_tree_streams < args.max_tree_streams {
            return Err(ConfigError::TooSmall {
                flag: "max-open-tree-streams",
                min: u64::from(args.max_tree_streams),
            });
        }
        if args.max_kept_trees == 0 {
            return Err(ConfigError::TooSmall {
                flag: "max-kept-trees",
                min: 1,
            });
        }
        // A lone upload of the largest artifact the limits allow must fit the budget: below
        // it, such an upload is refused as "at capacity" with a retry hint, on an idle server
        // and on every retry.
        if args.max_inflight_bytes < limits.max_artifact_bytes {
            return Err(ConfigError::TooSmall {
                flag: "max-inflight-bytes",
                min: limits.max_artifact_bytes,
            });
        }
        if args.max_kept_bytes < limits.max_expanded_bytes {
            return Err(ConfigError::TooSmall {
                flag: "max-kept-bytes",
                min: limits.max_expanded_bytes,
            });
        }
        if args.staging_ttl == 0 {
            return Err(ConfigError::TooSmall {
                flag: "staging-ttl",
                min: 1,
            });
        }
        Ok(Self {
            listen,
            staging_root: args
                .staging_root
                .clone()
                .unwrap_or_else(|| base.join("staging")),
            staging_ttl: Duration::from_secs(args.staging_ttl),
            kept: super::staging::KeptBounds {
                trees: args.max_kept_trees,
                bytes: args.max_kept_bytes,
            },
            limits,
            bounds: Bounds {
                max_children,
                max_queued: args.max_queued,
                max_inflight_bytes: args.max_inflight_bytes,
                max_chunk_bytes: args.max_chunk_bytes,
                max_tree_streams: args.max_tree_streams,
                max_open_tree_streams,
                max_connections: args.max_connections,
                max_partial_request_bytes: args.max_partial_request_bytes,
            },
            extract_timeout: Duration::from_millis(args.extract_timeout_ms),
            header_timeout: Duration::from_millis(args.header_timeout_ms),
            upload_timeout: Duration::from_millis(args.upload_timeout_ms),
            tree_idle_timeout: Duration::from_millis(args.tree_idle_timeout_ms),
            grace: Duration::from_secs(args.grace),
            metrics: args.metrics,
            allow_unconfined: args.allow_unconfined,
            sandbox: SandboxConfig {
                timeout: Duration::from_millis(args.extract_timeout_ms),
                enforcement: if args.allow_unconfined {
                    Enforcement::AllowUnconfined
                } else {
                    Enforcement::Required
                },
                zygote_max_forks: args.zygote_max_forks,
                ..SandboxConfig::default()
            },
        })
    }

    /// Apply the global sandbox settings (`skillbox --verify-staged full serve`, ...): the
    /// re-check, seccomp profile and child identity of `global`, and its enforcement when it
    /// allows running unconfined. The per-extraction deadline has its own setting, so a global
    /// sandbox timeout (`timeout_given`) is refused here rather than silently ignored.
    pub fn with_sandbox(
        mut self,
        global: SandboxConfig,
        timeout_given: bool,
    ) -> Result<Self, ConfigError> {
        if timeout_given {
            return Err(ConfigError::SandboxTimeout);
        }
        self.sandbox.verify = global.verify;
        self.sandbox.seccomp_profile = global.seccomp_profile;
        self.sandbox.run_as = global.run_as;
        if global.enforcement == Enforcement::AllowUnconfined {
            self.allow_unconfined = true;
            self.sandbox.enforcement = Enforcement::AllowUnconfined;
        }
        Ok(self)
    }
}

pub use crate::convert::{default_base_dir, default_socket};

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> Settings {
        Settings::default()
    }

    #[test]
    fn embedded_defaults_are_a_unix_socket_for_us_and_root() {
        let c = Config::from_settings(&args()).expect("from_settings");
        match c.listen {
            Listen::Unix {
                mode, allow_uids, ..
            } => {
                assert_eq!(mode, 0o660);
                assert!(allow_uids.contains(&0));
                assert!(allow_uids.contains(&nix::unistd::Uid::effective().as_raw()));
            }
            Listen::Tcp { .. } => panic!("TCP without a flag"),
        }
        // Two children more than CPUs (see `from_settings`).
        let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        assert_eq!(usize::try_from(c.bounds.max_children).ok(), Some(cpus + 2));
        assert_eq!(c.bounds.max_connections, 1024);
        assert_eq!(c.bounds.max_open_tree_streams, 8 * 32);
    }

    #[test]
    fn broker_wide_bounds_are_checked() {
        let mut a = args();
        a.max_tree_streams = 5;
        let c = Config::from_settings(&a).expect("from_settings");
        assert_eq!(c.bounds.max_open_tree_streams, 40, "eight per place");
        a.max_open_tree_streams = Some(4);
        assert!(matches!(
            Config::from_settings(&a),
            Err(ConfigError::TooSmall {
                flag: "max-open-tree-streams",
                min: 5
            })
        ));
        a.max_open_tree_streams = Some(5);
        assert!(Config::from_settings(&a).is_ok());
        a.max_partial_request_bytes = (64 << 10) - 1;
        assert!(matches!(
            Config::from_settings(&a),
            Err(ConfigError::TooSmall {
                flag: "max-partial-request-bytes",
                ..
            })
        ));
        a.max_partial_request_bytes = 64 << 10;
        a.max_connections = 0;
        assert!(matches!(
            Config::from_settings(&a),
            Err(ConfigError::TooSmall {
                flag: "max-connections",
                ..
            })
        ));
    }

    #[test]
    fn plaintext_tcp_only_on_loopback() {
        let mut a = args();
        a.tcp = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
        assert!(Config::from_settings(&a).is_ok());
        a.tcp = Some(SocketAddr::from(([0, 0, 0, 0], 7000)));
        assert!(matches!(
            Config::from_settings(&a),
            Err(ConfigError::PlaintextNonLoopback { .. })
        ));
        a.tls_cert = Some("c.pem".into());
        a.tls_key = Some("k.pem".into());
        assert!(Config::from_settings(&a).is_ok());
    }
}
