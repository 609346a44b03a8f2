//! Where the broker listens, and who may talk to it.
//!
//! The Unix socket is created with a restrictive umask and then given its mode (0660 by
//! default), so it is never briefly more open than configured. An existing path is replaced
//! only when it is a socket nobody answers on; anything else (a live server, a regular file, a
//! symlink) is refused, never deleted. Each request's peer uid (SO_PEERCRED of its connection)
//! is checked against the allow-list before any service sees it; others get PERMISSION_DENIED.
//!
//! TCP is opt-in; a non-loopback address was refused without TLS in [`super::config`].

use std::io;
use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::net::{TcpListener, UnixListener, UnixStream};
use tokio_stream::wrappers::{TcpListenerStream, UnixListenerStream};
use tokio_stream::{Stream, StreamExt as _};

use super::authority::FixAuthority;
use super::conn::{self, Connections, Tracked};
use super::metrics::Metrics;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ListenError {
    #[error("{path} is in use by a running server")]
    InUse { path: String },
    #[error("{path} exists and is not a socket; refusing to replace it")]
    NotASocket { path: String },
    #[error("{path}: {source}")]
    Io { path: String, source: io::Error },
    #[error("socket directory: {0}")]
    Directory(#[from] crate::owned_dir::OwnedDirError),
}

/// A bound Unix socket; remembers the inode it created so it removes only its own.
pub struct UnixSocket {
    pub listener: UnixListener,
    pub path: PathBuf,
    /// (device, inode) of the socket we created.
    pub ino: (u64, u64),
}

/// Remove the socket at `path` if it is still the one we created (`ino`).
pub fn unlink_if_ours(path: &Path, ino: (u64, u64)) {
    if let Ok(m) = std::fs::symlink_metadata(path)
        && (m.dev(), m.ino()) == ino
    {
        let _ = std::fs::remove_file(path);
    }
}

/// Bind `path` with permission bits `mode`.
pub fn bind_unix(path: &Path, mode: u32) -> Result<UnixSocket, ListenError> {
    let shown = path.display().to_string();
    let io_err = |source| ListenError::Io {
        path: shown.clone(),
        source,
    };
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        // The socket's directory must be ours: whoever can write to it can swap the socket.
        // Created reachable by the socket's group; the socket's own mode and the uid check
        // guard the socket itself.
        crate::owned_dir::ensure(parent, 0o755)?;
    }
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => match std::os::unix::net::UnixStream::connect(path) {
            Ok(_) => return Err(ListenError::InUse { path: shown }),
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                std::fs::remove_file(path).map_err(io_err)?;
            }
            Err(e) => return Err(io_err(e)),
        },
        Ok(_) => return Err(ListenError::NotASocket { path: shown }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_err(e)),
    }
    // umask is process-wide; this runs at start-up, before anything else creates files.
    let old = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o177));
    let bound = UnixListener::bind(path);
    nix::sys::stat::umask(old);
    let listener = bound.map_err(io_err)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(io_err)?;
    let m = std::fs::symlink_metadata(path).map_err(io_err)?;
    Ok(UnixSocket {
        listener,
        path: path.to_owned(),
        ino: (m.dev(), m.ino()),
    })
}

/// A TCP listener bound before the broker starts ([`bind_tcp`]), handed to [`super::serve`].
/// `skillbox serve --tcp HOST:0` learns its port from it: with a probe bound, dropped and bound
/// again by the broker, another process could take the port in between, and the broker then
/// failed where it had been told to serve. Bound once, the port named is the one served.
#[derive(Debug)]
pub struct TcpBound {
    listener: std::net::TcpListener,
    addr: std::net::SocketAddr,
}

impl TcpBound {
    /// The address it is bound to (the kernel's port for a port 0).
    pub fn local_addr(&self) -> std::net::SocketAddr {
        self.addr
    }

    /// The listener on the current runtime.
    pub(super) fn into_tokio(self) -> Result<TcpListener, ListenError> {
        let shown = self.addr.to_string();
        self.listener
            .set_nonblocking(true)
            .and_then(|()| TcpListener::from_std(self.listener))
            .map_err(|source| ListenError::Io {
                path: shown,
                source,
            })
    }
}

/// Bind `addr` (listening at once; connections wait in its backlog until the broker serves).
pub fn bind_tcp(addr: std::net::SocketAddr) -> Result<TcpBound, ListenError> {
    let io_err = |source| ListenError::Io {
        path: addr.to_string(),
        source,
    };
    let listener = std::net::TcpListener::bind(addr).map_err(io_err)?;
    let addr = listener.local_addr().map_err(io_err)?;
    crate::stop_point::stop_point("broker:tcp-bound");
    Ok(TcpBound { listener, addr })
}

/// Accepted Unix connections with their peer credentials; a peer without credentials is
/// closed unread. A peer whose uid is not allowed is still accepted so that it can be told
/// why ([`PeerPolicy`]): a bare reset reads as an outage, not as policy. Past
/// `--max-connections` open at once a connection is closed unread ([`Connections::admit`]),
/// whoever its peer: each one costs the broker memory before any rule has seen a request.
pub fn unix_incoming(
    listener: UnixListener,
    metrics: Arc<Metrics>,
    conns: Arc<Connections>,
) -> impl Stream<Item = io::Result<Tracked<FixAuthority<UnixStream>>>> {
    UnixListenerStream::new(listener).filter_map(move |conn| match conn {
        Err(e) => Some(Err(e)),
        Ok(stream) => match stream.peer_cred() {
            Ok(_) => Some(Ok(Tracked::new(FixAuthority::new(stream), conns.admit()?))),
            Err(e) => {
                metrics.peer_refused();
                tracing::warn!(error = %e, "connection refused: no peer credentials");
                None
            }
        },
    })
}

/// The peer-uid rule, applied to every request on a Unix connection before any service sees
/// it: a uid not in the allow-list gets PERMISSION_DENIED naming the rule. Its bytes reach
/// only h2's framing and this check, never a handler. TCP requests carry no peer uid and
/// are not subject to it (TLS, and mutual TLS when configured, decides there).
#[derive(Clone)]
pub struct PeerPolicy {
    pub allow: Arc<[u32]>,
    /// Serving a Unix socket: then a request without a Unix peer is refused, never waved
    /// through (fail closed: a connection wrapper that changed what a request carries would
    /// otherwise lift the uid rule for everyone, silently).
    pub unix: bool,
    pub metrics: Arc<Metrics>,
}

impl tonic::service::Interceptor for PeerPolicy {
    fn call(&mut self, req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        let Some(info) = conn::unix_peer(req.extensions()) else {
            if self.unix {
                self.metrics.peer_refused();
                tracing::warn!("request refused: no Unix peer recorded for it");
                return Err(tonic::Status::permission_denied(
                    "no peer credentials on this socket connection",
                ));
            }
            return Ok(req);
        };
        match info.peer_cred {
            Some(cred) if self.allow.contains(&cred.uid()) => Ok(req),
            Some(cred) => {
                self.metrics.peer_refused();
                tracing::warn!(
                    peer_uid = cred.uid(),
                    peer_pid = cred.pid(),
                    "request refused: peer uid not allowed"
                );
                Err(tonic::Status::permission_denied(format!(
                    "peer uid {} is not allowed on this socket (allowed: {}; the server's --allow-uid)",
                    cred.uid(),
                    self.allow
                        .iter()
                        .map(u32::to_string)
                        .collect::<Vec<_>>()
                        .join(",")
                )))
            }
            None => {
                self.metrics.peer_refused();
                Err(tonic::Status::permission_denied(
                    "no peer credentials on this socket connection",
                ))
            }
        }
    }
}

/// Accepted TCP connections (TLS, when configured, is applied by the server); past
/// `--max-connections` open at once a connection is closed unread, before its TLS handshake.
pub fn tcp_incoming(
    listener: TcpListener,
    conns: Arc<Connections>,
) -> impl Stream<Item = io::Result<Tracked<tokio::net::TcpStream>>> {
    TcpListenerStream::new(listener).filter_map(move |conn| {
        let stream = match conn {
            Ok(s) => s,
            Err(e) => return Some(Err(e)),
        };
        let place = conns.admit()?;
        Some(
            stream
                .set_nodelay(true)
                .map(|()| Tracked::new(stream, place)),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn stale_sockets_are_replaced_live_ones_and_files_are_not() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("s.sock");
        let first = bind_unix(&path, 0o660).expect("bind_unix");
        let mode = std::fs::metadata(&path)
            .map(|m| m.permissions().mode() & 0o777)
            .unwrap_or(0);
        assert_eq!(mode, 0o660);
        assert!(matches!(
            bind_unix(&path, 0o660),
            Err(ListenError::InUse { .. })
        ));
        drop(first.listener);
        // The path is still there, but nobody listens: stale, replaced.
        let second = bind_unix(&path, 0o600).expect("bind_unix");
        unlink_if_ours(&second.path, second.ino);
        assert!(!path.exists());

        let file = tmp.path().join("f.sock");
        std::fs::write(&file, b"not a socket").expect("write");
        assert!(matches!(
            bind_unix(&file, 0o660),
            Err(ListenError::NotASocket { .. })
        ));
        assert!(file.exists());
    }

    /// The uid rule fails closed: on a Unix socket, a request that carries no Unix peer (a
    /// connection wrapper that changed what requests carry) is refused, not waved through.
    #[test]
    fn a_unix_policy_refuses_a_request_without_a_unix_peer() {
        use tonic::service::Interceptor as _;
        let policy = |unix| PeerPolicy {
            allow: Arc::from([0, 1000]),
            unix,
            metrics: Arc::new(Metrics::default()),
        };
        let refused = policy(true)
            .call(tonic::Request::new(()))
            .expect_err("refused");
        assert_eq!(refused.code(), tonic::Code::PermissionDenied);
        // TCP carries no uid: TLS decides there.
        assert!(policy(false).call(tonic::Request::new(())).is_ok());
    }
}
