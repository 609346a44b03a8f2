//! `skillbox serve` settings: flags, `SKILLBOX_*` environment variables and embedded defaults,
//! parsed once into a [`Config`] that cannot hold a contradiction (a non-loopback TCP address
//! without TLS, limits that fail validation, a zero bound).
//!
//! Nothing here opens a socket or a directory; [`super::listen`] and [`super::staging`] do.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};

use crate::extract::policy::{Limits, parse_size};
use crate::sandbox::cli::SandboxArgs;
use crate::sandbox::{Enforcement, SandboxConfig};

/// Flags of `skillbox serve`. Every flag can also be set by the environment variable named in
/// its help; a flag on the command line wins over the variable.
#[derive(Args, Debug, Clone, Default)]
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
        requires = "tls_key"
    )]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key for TLS on TCP.
    #[arg(
        long,
        env = "SKILLBOX_TLS_KEY",
        value_name = "PEM",
        requires = "tls_cert"
    )]
    pub tls_key: Option<PathBuf>,
    /// PEM CA bundle: when given, clients must present a certificate it signed (mutual TLS).
    #[arg(
        long,
        env = "SKILLBOX_TLS_CLIENT_CA",
        value_name = "PEM",
        requires = "tls_cert"
    )]
    pub tls_client_ca: Option<PathBuf>,
    /// Directory under which one new staging directory is made per request [default: a
    /// `staging` directory beside the default socket]. Owned by this server alone: entries
    /// left by a previous run are removed at start-up.
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
    /// Server limits file (.toml or .json, keys as in the README); requests may only tighten it.
    #[arg(long, env = "SKILLBOX_LIMITS", value_name = "FILE")]
    pub limits: Option<PathBuf>,
    /// Concurrent confined children [default: the CPU count].
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
    /// Artifact bytes held in memory across all requests (K, M, G suffixes).
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
        default_value = "info"
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
        default_value_t = 256
    )]
    pub zygote_max_forks: u32,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

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
}

/// The validated server configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: Listen,
    pub staging_root: PathBuf,
    pub staging_ttl: Duration,
    pub limits: Limits,
    pub bounds: Bounds,
    pub extract_timeout: Duration,
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
    /// Check the flags and fill in the defaults.
    pub fn from_args(args: &ServeArgs) -> Result<Self, ConfigError> {
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
        let max_children = match args.max_children {
            Some(n) => n,
            None => std::thread::available_parallelism()
                .map_or(1, |n| u32::try_from(n.get()).unwrap_or(u32::MAX)),
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
            limits,
            bounds: Bounds {
                max_children,
                max_queued: args.max_queued,
                max_inflight_bytes: args.max_inflight_bytes,
                max_chunk_bytes: args.max_chunk_bytes,
            },
            extract_timeout: Duration::from_millis(args.extract_timeout_ms),
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

    /// Apply the global sandbox flags (`skillbox --verify-staged full serve`, ...). The
    /// per-extraction deadline has its own serve flag, so `--sandbox-timeout` is refused here
    /// rather than silently ignored.
    pub fn with_sandbox_flags(mut self, flags: &SandboxArgs) -> Result<Self, ConfigError> {
        if flags.sandbox_timeout.is_some() {
            return Err(ConfigError::SandboxTimeout);
        }
        let global = flags.config();
        self.sandbox.verify = global.verify;
        self.sandbox.seccomp_profile = global.seccomp_profile;
        self.sandbox.run_as = global.run_as;
        if flags.allow_unconfined {
            self.allow_unconfined = true;
            self.sandbox.enforcement = Enforcement::AllowUnconfined;
        }
        Ok(self)
    }
}

pub use crate::convert::{default_base_dir, default_socket};

fn parse_mode(s: &str) -> Result<u32, String> {
    let digits = s.trim_start_matches("0o");
    let mode = u32::from_str_radix(digits, 8).map_err(|_| format!("{s:?} is not an octal mode"))?;
    if mode & !0o777 != 0 {
        return Err(format!("{s:?}: only permission bits (0777) may be set"));
    }
    Ok(mode)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> ServeArgs {
        ServeArgs {
            socket_mode: 0o660,
            staging_ttl: 600,
            max_queued: 64,
            max_inflight_bytes: 1 << 30,
            max_chunk_bytes: 1 << 20,
            extract_timeout_ms: 30_000,
            grace: 10,
            log: "info".into(),
            ..ServeArgs::default()
        }
    }

    #[test]
    fn embedded_defaults_are_a_unix_socket_for_us_and_root() {
        let c = Config::from_args(&args()).unwrap_or_else(|e| panic!("{e}"));
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
        assert!(c.bounds.max_children >= 1);
    }

    #[test]
    fn plaintext_tcp_only_on_loopback() {
        let mut a = args();
        a.tcp = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
        assert!(Config::from_args(&a).is_ok());
        a.tcp = Some(SocketAddr::from(([0, 0, 0, 0], 7000)));
        assert!(matches!(
            Config::from_args(&a),
            Err(ConfigError::PlaintextNonLoopback { .. })
        ));
        a.tls_cert = Some("c.pem".into());
        a.tls_key = Some("k.pem".into());
        assert!(Config::from_args(&a).is_ok());
    }

    #[test]
    fn modes() {
        assert_eq!(parse_mode("0660"), Ok(0o660));
        assert!(parse_mode("4755").is_err());
    }
}
