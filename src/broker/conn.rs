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

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tonic::transport::server::{Connected, TcpConnectInfo, TlsConnectInfo, UdsConnectInfo};

/// An accepted connection, passed through unchanged; its requests carry [`Conn`].
pub struct Tracked<IO> {
    io: IO,
    trees: Arc<OpenTrees>,
}

impl<IO> Tracked<IO> {
    pub fn new(io: IO) -> Self {
        Self {
            io,
            trees: Arc::new(OpenTrees::default()),
        }
    }
}

/// What a request knows of its connection: tonic's description of the peer, and the
/// connection's open tree streams.
#[derive(Clone)]
pub struct Conn<P> {
    pub peer: P,
    trees: Arc<OpenTrees>,
}

/// The tree streams of one connection still open in HTTP/2.
#[derive(Default)]
pub struct OpenTrees {
    open: AtomicU32,
}

/// One open tree stream of a connection, given back when dropped.
pub struct TreeSlot(Arc<OpenTrees>);

impl Drop for TreeSlot {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::AcqRel);
    }
}

impl OpenTrees {
    /// One more open tree stream, unless `max` are open already.
    fn take(self: &Arc<Self>, max: u32) -> Option<TreeSlot> {
        self.open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()
            .map(|_| TreeSlot(Arc::clone(self)))
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

/// A slot for one more open tree stream on the request's connection, or None when it holds
/// `max` already. A request that came through no [`Tracked`] connection gets none either:
/// every listener wraps its connections, and a bound that a missing wrapper lifted silently
/// would be no bound.
pub fn tree_slot(ext: &tonic::Extensions, max: u32) -> Option<TreeSlot> {
    open_trees(ext)?.take(max)
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
}
