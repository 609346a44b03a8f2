//! One accepted connection, as its requests see it: the peer (as tonic describes it) and how
//! many of its tree streams are still open in HTTP/2.
//!
//! A tree stream's place among `--max-tree-streams` is held by its sending side and freed when
//! the reading is over ([`super::tree`]), but the HTTP/2 stream lives on until its client has
//! taken the rest: hyper keeps the part it took for a stream whose client gives it no
//! flow-control window (up to a 256 KiB chunk and its encoding buffer), and the trailers wait
//! behind it. Such streams cost their client nothing, so one connection could collect up to
//! HTTP/2's `max_concurrent_streams` of them (measured: 1024 streams of a 250 KB tree, opened in
//! under two seconds with no idle timeout involved, took the broker from 23 MB to 198 MB). So
//! each connection may hold at most `--max-tree-streams` tree streams open, counted from the
//! request until hyper drops the response stream (its end was sent, or the client reset it, or
//! the connection went); past that a new one on it fails with RESOURCE_EXHAUSTED. Other
//! connections are not affected, and what one holds this way is bounded like the upload bytes
//! its receive window can hold.
//!
//! Both of those are per connection, so together they are bounded only by how many
//! connections there are. Two broker-wide bounds close that: the tree streams open across all
//! connections (`--max-open-tree-streams`, counted exactly as the per-connection ones, so what
//! unread streams hold stays under about 250 KB times that bound whatever the number of
//! connections; measured: 64 connections of 16 such streams took the broker from 45 MB to
//! 198 MB), and the connections open at once (`--max-connections`: an idle connection costs
//! about 26 KB over the Unix socket, 24 KB over TCP). A connection past that bound is accepted
//! and closed at once, so its client fails now instead of waiting in the listen backlog.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tonic::transport::server::{Connected, TcpConnectInfo, TlsConnectInfo, UdsConnectInfo};

/// An accepted connection, passed through unchanged; its requests carry [`Conn`]. It holds
/// its place among the connections open at once until hyper drops it (the connection closed).
pub struct Tracked<IO> {
    io: IO,
    trees: Arc<OpenTrees>,
    _place: ConnPlace,
}

impl<IO> Tracked<IO> {
    pub fn new(io: IO, place: ConnPlace) -> Self {
        Self {
            io,
            trees: Arc::new(OpenTrees::default()),
            _place: place,
        }
    }
}

/// The connections open at once across the broker's listeners, bounded by `--max-connections`.
pub struct Connections {
    open: Arc<AtomicU32>,
    max: u32,
    /// Connections refused since the broker started, and when a refusal was last logged.
    refused: AtomicU64,
    logged: Mutex<Option<(Instant, u64)>>,
}

/// One open connection's place, given back when hyper drops the connection.
pub struct ConnPlace(Arc<AtomicU32>);

impl Drop for ConnPlace {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// How often a run of refused connections is logged: the first at once, then at most this
/// often with the count, so a client that reconnects in a loop cannot flood the log.
const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(60);

impl Connections {
    pub fn new(max: u32) -> Self {
        Self {
            open: Arc::new(AtomicU32::new(0)),
            max,
            refused: AtomicU64::new(0),
            logged: Mutex::new(None),
        }
    }

    /// A place for a connection just accepted, or None when `--max-connections` are open: then
    /// the caller closes it unread. Each refusal is counted, and logged once per minute at
    /// most.
    pub fn admit(&self) -> Option<ConnPlace> {
        if self
            .open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max).then_some(n + 1)
            })
            .is_ok()
        {
            return Some(ConnPlace(Arc::clone(&self.open)));
        }
        let refused = self.refused.fetch_add(1, Ordering::Relaxed) + 1;
        let mut logged = self.logged.lock().unwrap_or_else(PoisonError::into_inner);
        let since = logged.map_or(refused, |(_, at)| refused - at);
        if logged.is_none_or(|(when, _)| when.elapsed() >= REFUSAL_LOG_EVERY) {
            *logged = Some((Instant::now(), refused));
            tracing::warn!(
                max_connections = self.max,
                refused = since,
                "connection refused: --max-connections are open; more refusals are counted in skillbox_connections_refused_total and logged at most once a minute"
            );
        }
        None
    }

    /// Connections open now.
    pub fn open(&self) -> u32 {
        self.open.load(Ordering::Relaxed)
    }

    /// Connections refused since the start.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }
}

/// What a request knows of its connection: tonic's description of the peer, and the
/// connection's open tree streams.
#[derive(Clone)]
pub struct Conn<P> {
    pub peer: P,
    trees: Arc<OpenTrees>,
}

/// Tree streams still open in HTTP/2: those of one connection, or of all of them.
#[derive(Default)]
pub struct OpenTrees {
    open: AtomicU32,
}

/// One open tree stream in one count, given back when dropped.
struct Held(Arc<OpenTrees>);

impl Drop for Held {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// One open tree stream, counted on its connection and broker-wide until hyper drops it.
pub struct TreeSlot {
    _conn: Held,
    _all: Held,
}

impl OpenTrees {
    /// One more open tree stream, unless `max` are open already.
    fn take(self: &Arc<Self>, max: u32) -> Option<Held> {
        self.open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()
            .map(|_| Held(Arc::clone(self)))
    }

    /// Tree streams open now.
    pub fn open(&self) -> u32 {
        self.open.load(Ordering::Relaxed)
    }
}

/// The open-tree count of the connection a request came on: over the Unix socket, plain TCP
/// or TLS. None only for a request that did not come through [`Tracked`].
fn open_trees(ext: &tonic::Extensions) -> Option<&Arc<OpenTrees>> {
    ext.get::<Conn<UdsConnectInfo>>()
        .map(|c| &c.trees)
        .or_else(|| ext.get::<Conn<TcpConnectInfo>>().map(|c| &c.trees))
        .or_else(|| {
            ext.get::<TlsConnectInfo<Conn<TcpConnectInfo>>>()
                .map(|t| &t.get_ref().trees)
        })
}

/// Why a tree stream was refused on its connection: a client that keeps this many open has
/// not read them to the end (or stopped reading them), and must before it opens more.
pub const TOO_MANY_ON_CONNECTION: &str = "tree streams open on this connection (--max-tree-streams per connection, ended ones its client has not read to the end included); read or cancel them, or use another connection";

/// Why a tree stream was refused broker-wide: the clients of all connections together hold
/// this many open, read or not.
pub const TOO_MANY_OPEN: &str = "tree streams open across all connections (--max-open-tree-streams, ended ones their clients have not read to the end included); try again once other clients have read theirs";

/// A slot for one more open tree stream on the request's connection (at most `per_conn`
/// there) and among those of every connection (`all`, at most `max_all`), or the reason it
/// has none. A request that came through no [`Tracked`] connection gets none either: every
/// listener wraps its connections, and a bound that a missing wrapper lifted silently would
/// be no bound.
pub fn tree_slot(
    ext: &tonic::Extensions,
    per_conn: u32,
    all: &Arc<OpenTrees>,
    max_all: u32,
) -> Result<TreeSlot, &'static str> {
    let conn = open_trees(ext)
        .and_then(|t| t.take(per_conn))
        .ok_or(TOO_MANY_ON_CONNECTION)?;
    // Refused here, the connection's slot goes back as `conn` drops.
    let all = all.take(max_all).ok_or(TOO_MANY_OPEN)?;
    Ok(TreeSlot {
        _conn: conn,
        _all: all,
    })
}

/// The Unix peer of a request, if it came over the socket.
pub fn unix_peer(ext: &tonic::Extensions) -> Option<&UdsConnectInfo> {
    ext.get::<Conn<UdsConnectInfo>>().map(|c| &c.peer)
}

impl<IO: Connected> Connected for Tracked<IO> {
    type ConnectInfo = Conn<IO::ConnectInfo>;

    fn connect_info(&self) -> Self::ConnectInfo {
        Conn {
            peer: self.io.connect_info(),
            trees: Arc::clone(&self.trees),
        }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Tracked<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Tracked<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_bounded_and_given_back() {
        let trees = Arc::new(OpenTrees::default());
        let a = trees.take(2);
        let b = trees.take(2);
        assert!(a.is_some() && b.is_some());
        assert!(trees.take(2).is_none(), "a third beside two open");
        drop(a);
        assert!(trees.take(2).is_some(), "one was given back");
    }

    #[test]
    fn connection_places_are_bounded_given_back_and_refusals_counted() {
        let conns = Connections::new(2);
        let a = conns.admit();
        let _b = conns.admit();
        assert!(a.is_some() && conns.open() == 2);
        assert!(conns.admit().is_none(), "a third beside two open");
        assert!(conns.admit().is_none());
        assert_eq!(conns.refused(), 2);
        drop(a);
        assert_eq!(conns.open(), 1);
        assert!(conns.admit().is_some(), "one was given back");
    }
}
