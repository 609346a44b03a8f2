//! The gRPC broker behind `skillbox serve`: installers stream an artifact in, a confined child
//! extracts it into a fresh staging directory, the verdict and inventory go back.
//!
//! The broker never parses artifact bytes: it receives, hashes, counts and seals them, and
//! every extraction runs through [`job`], the one place bytes are handed on. It never queues
//! without bound ([`admission`]), never reuses or leaks a staging directory ([`staging`]), and
//! listens on a Unix socket checked by peer uid unless TCP is asked for ([`listen`]).
//! Errors become gRPC statuses in exactly one place ([`error`]).

mod admission;
mod authority;
mod body;
pub mod config;
mod conn;

mod error;
mod job;
mod listen;
mod metrics;
mod partial;
mod service;
mod staging;
mod tree;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tonic::transport::{Certificate, Identity, Server, ServerTlsConfig};

pub use config::{Config, ConfigError, Settings};
pub use error::RequestError;
pub use listen::{TcpBound, bind_tcp};
pub use staging::is_staging_id;

use crate::proto as pb;
use service::{SkillboxService, State};

pub use crate::convert::MAX_RESPONSE_BYTES;

/// Why the server could not start or stopped abnormally.
#[derive(Debug, thiserror::Error)]
// Not `non_exhaustive`: the CLI maps every variant to an exit status, and a new one must
// not compile until it has one.
pub enum ServeError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Listen(#[from] listen::ListenError),
    #[error(transparent)]
    Staging(#[from] staging::StagingError),
    #[error("sandbox: {0}")]
    Runner(#[from] job::RunnerError),
    #[error("sandbox: {0}")]
    Sandbox(String),
    #[error("TLS: {0}")]
    Tls(String),
    #[error("metrics address {addr}: {source}")]
    Metrics {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
    #[error("server: {0}")]
    Transport(#[from] tonic::transport::Error),
    #[error("cannot install the signal handler: {0}")]
    Signal(std::io::Error),
    #[error("cannot start the runtime: {0}")]
    Runtime(std::io::Error),
}

/// HTTP/2 receive window of one upload stream: a typical package (about 250 KB) fits in one,
/// so once admitted its upload is already here; with 128 KiB its client had to be woken for
/// the rest while the child waited, and at concurrency 8 on a journaled disk 384 KiB served
/// about a tenth more requests a second (broker RSS at concurrency 64: 32 -> 42 MiB;
/// bench-results/load.md).
const STREAM_WINDOW: u32 = 384 * 1024;

/// The receive windows: per stream, and for a connection.
///
/// A queued request does not read its upload until it gets a child permit, so the bytes its
/// client has already sent sit in the connection's window. If the queued streams of one
/// connection could fill it, the admitted ones would get no credit: every request on that
/// connection would stall until its deadline (64 uploads of 290 KB on one channel did, with
/// hyper's 1 MiB default). So the connection window holds one full stream window for every
/// request the admission bounds let in, plus one for the other services; what is buffered
/// while queued stays bounded by that product too (about 26 MiB with the defaults on 2 CPUs).
fn flow_control_windows(bounds: &config::Bounds) -> (u32, u32) {
    let streams = u64::from(bounds.max_children)
        .saturating_add(u64::from(bounds.max_queued))
        .saturating_add(1);
    let connection = streams
        .saturating_mul(u64::from(STREAM_WINDOW))
        .min(i32::MAX as u64);
    (
        STREAM_WINDOW,
        u32::try_from(connection).unwrap_or(i32::MAX as u32),
    )
}

/// Run the broker on a runtime of its own until SIGTERM or SIGINT, then drain; a second signal
/// stops it at once ([`serve`], [`signals`]).
pub fn run_until_signal(config: Config) -> Result<(), ServeError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(ServeError::Runtime)?;
    let result = runtime.block_on(async {
        let (first, again) = signals().map_err(ServeError::Signal)?;
        serve(config, None, || {}, first, again).await
    });
    // What is left are connections and the reading threads of tree streams (whose trees are
    // gone): nothing to wait for.
    runtime.shutdown_timeout(Duration::from_millis(500));
    result
}

/// The first SIGTERM or SIGINT (to [`serve`] as `shutdown`), and the second (`stop_now`), each
/// logged. Installs the handlers now: call it inside the runtime, before serving. After these
/// two, the signals are ignored (the stop is bounded; SIGKILL stops anything).
pub fn signals() -> std::io::Result<(
    impl Future<Output = ()> + Send + 'static,
    impl Future<Output = ()> + Send + 'static,
)> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let (first_tx, first_rx) = tokio::sync::oneshot::channel::<()>();
    let (again_tx, again_rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let name = |t: bool| if t { "SIGTERM" } else { "SIGINT" };
        let first = tokio::select! {
            _ = term.recv() => name(true),
            _ = int.recv() => name(false),
        };
        tracing::info!(
            "{first}: draining (in-flight requests get the grace period; send it again to stop now)"
        );
        let _ = first_tx.send(());
        let again = tokio::select! {
            _ = term.recv() => name(true),
            _ = int.recv() => name(false),
        };
        tracing::warn!(
            "{again} again: stopping now, cancelling the requests in flight and removing every staged tree"
        );
        let _ = again_tx.send(());
    });
    // A sender dropped without sending (the runtime is going) is no signal.
    let arrived = |rx: tokio::sync::oneshot::Receiver<()>| async move {
        if rx.await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    Ok((arrived(first_rx), arrived(again_rx)))
}

/// How long stopping waits for the children of cancelled requests to be killed and reaped and
/// their staging directories removed (what is left then goes at the next start).
const STOP_WAIT: Duration = Duration::from_secs(10);

/// Run the broker until `shutdown` resolves, then drain for the grace period; then, or as soon
/// as `stop_now` resolves (during the drain or before it), stop: every `Extract` still in
/// flight ends with UNAVAILABLE, its child killed and reaped and its staging directory removed,
/// and every accepted tree nobody released is removed, before this returns.
///
/// On TCP it serves on `bound` when given (bound by the caller before it made anything, so the
/// port it names is the one served; its address is the config's), else it binds the config's
/// address itself; `bound` is dropped unused on a Unix socket. `ready` is called once, when the
/// listener is bound and the server about to accept on it: a line saying "serving" said then
/// never precedes the listener, nor names one another process holds.
pub async fn serve(
    config: Config,
    bound: Option<TcpBound>,
    ready: impl FnOnce() + Send,
    shutdown: impl Future<Output = ()> + Send + 'static,
    stop_now: impl Future<Output = ()> + Send,
) -> Result<(), ServeError> {
    let metrics = Arc::new(metrics::Metrics::default());
    let runner = Arc::new(job::Runner::new(config.sandbox.clone())?);
    let confinement = runner.confinement();
    if !confinement.confined {
        tracing::warn!(
            "extractions are NOT confined (landlock: {}, seccomp: {})",
            confinement.landlock,
            confinement.seccomp
        );
    }
    let (staging_root, stale) =
        staging::StagingRoot::open(&config.staging_root, config.staging_ttl, config.kept)?;
    if stale > 0 {
        tracing::info!(stale, root = %config.staging_root.display(), "removed staging directories left by a previous run");
    }
    // Said once at start: such a disk makes every request slower than the one before.
    if let Some(w) = crate::staging_fs::warning_at(&config.staging_root) {
        tracing::warn!(root = %config.staging_root.display(), "staging on {w}");
    }
    let state = Arc::new(State {
        admission: admission::Admission::new(config.bounds),
        staging: Arc::clone(&staging_root),
        runner,
        metrics: Arc::clone(&metrics),
        config: config.clone(),
        stop: tokio::sync::watch::Sender::new(false),
    });

    let reaper = tokio::spawn(reap(Arc::clone(&staging_root), Arc::clone(&metrics)));
    let metrics_task = match config.metrics {
        Some(addr) => {
            let listener = metrics::bind(addr)
                .await
                .map_err(|source| ServeError::Metrics { addr, source })?;
            tracing::info!(addr = %listener.local_addr().map_or(addr, |a| a), "metrics on /metrics");
            let s = Arc::clone(&state);
            let render = Arc::new(move || {
                s.metrics.render(&metrics::Gauges {
                    in_progress: s.admission.in_progress(),
                    children_running: s.admission.children_running(),
                    inflight_bytes: s.admission.inflight_bytes(),
                    staged_kept: s.staging.kept_count(),
                    connections_open: s.admission.connections.open(),
                    connections_refused: s.admission.connections.refused(),
                    tree_streams_open: s.admission.open_trees.open(),
                    partial_request_bytes: s.admission.partial.held(),
                })
            });
            Some(tokio::spawn(metrics::serve(listener, render)))
        }
        None => None,
    };

    let (health, health_service) = tonic_health::server::health_reporter();
    health
        .set_serving::<pb::skillbox_server::SkillboxServer<SkillboxService>>()
        .await;
    // Our descriptor set also holds the error details the broker sends (google.rpc.BadRequest,
    // RetryInfo, QuotaFailure) and their imports, so a reflection-only client can decode them.
    let reflection_v1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()
        .map_err(|e| ServeError::Sandbox(format!("reflection: {e}")))?;
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1alpha()
        .map_err(|e| ServeError::Sandbox(format!("reflection: {e}")))?;
    let max_decode = usize::try_from(config.bounds.max_chunk_bytes)
        .unwrap_or(usize::MAX)
        .saturating_add(64 * 1024);
    let skillbox =
        pb::skillbox_server::SkillboxServer::new(SkillboxService::new(Arc::clone(&state)))
            .max_decoding_message_size(max_decode)
            .max_encoding_message_size(MAX_RESPONSE_BYTES);

    // Every service's unfinished request messages share one budget (uploads excepted).
    let budget = &state.admission.partial;
    let (stream_window, connection_window) = flow_control_windows(&config.bounds);
    let mut builder = Server::builder()
        .initial_stream_window_size(Some(stream_window))
        .initial_connection_window_size(Some(connection_window))
        .http2_keepalive_interval(Some(Duration::from_secs(30)))
        .http2_keepalive_timeout(Some(Duration::from_secs(10)))
        .max_concurrent_streams(Some(1024))
        // hyper's default, stated here because the Unix socket's authority layer bounds the
        // header blocks it decodes by it (`authority::MAX_HEADER_LIST`). On TCP it is the only
        // bound: h2 closes a connection whose header block passes it (GOAWAY
        // ENHANCE_YOUR_CALM) before decoding it whole; raised to 1 GiB, a 40 KB block
        // decoding to 160 MB kept its connection open.
        .http2_max_header_list_size(Some(authority::MAX_HEADER_LIST));
    if let config::Listen::Tcp {
        tls: Some(files), ..
    } = &config.listen
    {
        builder = builder.tls_config(tls_config(files)?)?;
    }
    let allow: Arc<[u32]> = match &config.listen {
        config::Listen::Unix { allow_uids, .. } => allow_uids.clone().into(),
        config::Listen::Tcp { .. } => Arc::from([]),
    };
    let router = builder
        .layer(tonic::service::InterceptorLayer::new(listen::PeerPolicy {
            allow,
            unix: matches!(config.listen, config::Listen::Unix { .. }),
            metrics: Arc::clone(&metrics),
        }))
        .add_service(body::Guarded::budgeted(health_service, budget))
        .add_service(body::Guarded::budgeted(reflection_v1, budget))
        .add_service(body::Guarded::budgeted(reflection_v1alpha, budget))
        .add_service(body::Guarded::skillbox(skillbox, budget, &metrics));

    // Draining starts when `shutdown` resolves; the grace timer starts then too.
    let (drain_tx, drain_rx) = tokio::sync::watch::channel(false);
    let mut unix_path = None;
    let signal = {
        let health = health.clone();
        async move {
            shutdown.await;
            health
                .set_not_serving::<pb::skillbox_server::SkillboxServer<SkillboxService>>()
                .await;
            health
                .set_service_status("", tonic_health::ServingStatus::NotServing)
                .await;
            let _ = drain_tx.send(true);
        }
    };
    let server: std::pin::Pin<
        Box<dyn Future<Output = Result<(), tonic::transport::Error>> + Send>,
    > = match &config.listen {
        config::Listen::Unix {
            path,
            mode,
            allow_uids,
        } => {
            let socket = listen::bind_unix(path, *mode)?;
            tracing::info!(socket = %path.display(), mode = format!("{mode:04o}"), allow_uids = ?allow_uids, "listening");
            let incoming = listen::unix_incoming(
                socket.listener,
                Arc::clone(&metrics),
                Arc::clone(&state.admission.connections),
            );
            unix_path = Some((socket.path, socket.ino));
            Box::pin(router.serve_with_incoming_shutdown(incoming, signal))
        }
        config::Listen::Tcp { addr, tls } => {
            let listener = match bound {
                Some(bound) => bound.into_tokio()?,
                None => tokio::net::TcpListener::bind(addr).await.map_err(|e| {
                    listen::ListenError::Io {
                        path: addr.to_string(),
                        source: e,
                    }
                })?,
            };
            tracing::info!(addr = %listener.local_addr().map_or(*addr, |a| a), tls = tls.is_some(), mtls = tls.as_ref().is_some_and(|t| t.client_ca.is_some()), "listening");
            let incoming = listen::tcp_incoming(listener, Arc::clone(&state.admission.connections));
            Box::pin(router.serve_with_incoming_shutdown(incoming, signal))
        }
    };
    ready();
    let unlink = move || {
        if let Some((path, ino)) = &unix_path {
            listen::unlink_if_ours(path, *ino);
        }
    };

    let grace = config.grace;
    let mut drain = drain_rx;
    let unlink_early = unlink.clone();
    let result = tokio::select! {
        r = server => r.map_err(ServeError::from),
        () = async move {
            let _ = drain.wait_for(|d| *d).await;
            // New clients get "no such socket" at once instead of a connection that is never served.
            unlink_early();
            tokio::time::sleep(grace).await;
        } => {
            tracing::warn!(grace_secs = grace.as_secs(), "grace period over: cancelling the requests still in flight");
            Ok(())
        }
        // Logged by whoever resolved it (`signals`).
        () = stop_now => Ok(()),
    };
    unlink();
    reaper.abort();
    if let Some(t) = metrics_task {
        t.abort();
    }
    stop(&state, &staging_root).await;
    result
}

/// The last thing every way out of [`serve`] does. Trees go now, not at the next start (a
/// sidecar's staging volume may outlive this process, or be handed to another), and only once
/// no child can write into them any more.
async fn stop(state: &State, staging_root: &staging::StagingRoot) {
    // Every Extract still in flight ends now: its child is killed, and the job reaps it and
    // removes its staging directory. None is made or kept after this.
    state.stop.send_replace(true);
    let left = staging_root.close(STOP_WAIT).await;
    if left > 0 {
        tracing::error!(
            left,
            wait_secs = STOP_WAIT.as_secs(),
            "staging directories of cancelled requests not yet removed; the next start removes what remains"
        );
    }
    let unreleased = staging_root.take_all();
    for id in &unreleased {
        if let Err(e) = staging_root.remove(id) {
            tracing::error!(staging_id = %id, error = %e, "cannot remove an unreleased staging directory");
        }
    }
    tracing::info!(
        removed = unreleased.len(),
        "stopped; removed the accepted staging directories not released"
    );
}

fn tls_config(files: &config::TlsFiles) -> Result<ServerTlsConfig, ServeError> {
    let read = |p: &std::path::Path| {
        std::fs::read(p).map_err(|e| ServeError::Tls(format!("{}: {e}", p.display())))
    };
    let mut tls =
        ServerTlsConfig::new().identity(Identity::from_pem(read(&files.cert)?, read(&files.key)?));
    if let Some(ca) = &files.client_ca {
        tls = tls
            .client_ca_root(Certificate::from_pem(read(ca)?))
            .client_auth_optional(false);
    }
    Ok(tls)
}

/// Remove accepted staging directories nobody released within the TTL.
async fn reap(root: Arc<staging::StagingRoot>, metrics: Arc<metrics::Metrics>) {
    let period = (root.ttl() / 4).clamp(Duration::from_secs(1), Duration::from_secs(30));
    let mut tick = tokio::time::interval(period);
    loop {
        tick.tick().await;
        let expired = root.take_expired();
        if expired.is_empty() {
            continue;
        }
        let r = Arc::clone(&root);
        let n = expired.len() as u64;
        let removed = tokio::task::spawn_blocking(move || {
            for id in &expired {
                if let Err(e) = r.remove(id) {
                    tracing::error!(staging_id = %id, error = %e, "cannot remove an expired staging directory");
                }
            }
        })
        .await;
        if removed.is_ok() {
            metrics.reaped(n);
            tracing::info!(
                expired = n,
                "removed accepted staging directories past their TTL"
            );
        }
    }
}
