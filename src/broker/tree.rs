//! Reading an accepted staging tree back out for a remote client (`GetTree`).
//!
//! The broker moves bytes, it never parses them: every node of the inventory, in inventory
//! order, is opened beneath the staging directory fd with `openat2(RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS)` and `O_NOFOLLOW`, held against its inventory entry (kind, mode, size,
//! link target) and, for a file, streamed in bounded chunks while it is hashed. The first node
//! that differs ends the stream with an error: a tree changed after the child's inventory was
//! checked is never passed on as if it were the accepted one. This runs in the broker (not in
//! the seccomp-confined child), so `openat2`'s resolve flags are available here.
//!
//! It must never follow a link, never read past the inventory's size for a file, and never
//! hold more than the channel's few chunks in memory; a client that goes away stops it, and
//! one that stops reading for the idle timeout ends it: the queued chunks are dropped, the
//! reading thread returns and the client gets DEADLINE_EXCEEDED if it ever reads again. The
//! place among the tree streams (`Admission::tree_stream`) is held by the sending side, as the
//! thread and the queued chunks are what it bounds: it is freed when [`send`] returns (the
//! connection took every queued part, or the stream was ended or abandoned), never left to the
//! connection, which stops polling a stream whose client gives it no flow-control window.
//! What the connection took for such a stream stays until the stream goes in HTTP/2; the
//! response side holds the stream's slot on its connection for that long ([`super::conn`]).

use std::fs::File;
use std::io::{self, Read as _};
use std::os::fd::{AsFd, OwnedFd};
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use nix::fcntl::{OFlag, OpenHow, ResolveFlag, openat2, readlinkat};
use nix::sys::stat::{SFlag, fstat};
use tokio::sync::{OwnedSemaphorePermit, mpsc};
use tonic::Status;

use super::conn::TreeSlot;
use super::error::RequestError;
use crate::convert;
use crate::digest::Hasher;
use crate::extract::inventory::{Entry, Kind};
use crate::proto as pb;

/// Bytes per `chunk` part: large enough for throughput, small enough for any client's default
/// message bound (4 MiB).
pub const CHUNK_BYTES: usize = 256 * 1024;
/// Parts buffered between the reading thread and the connection.
pub const QUEUE_PARTS: usize = 8;

pub type Part = Result<pb::TreePart, Status>;

/// The response stream of a tree: what the reading thread queued, then the end. It holds no
/// place: hyper drops it only when the stream completes or the connection goes, and polls it
/// no more while a part it took waits for the client's window, which may be never. It holds
/// its connection's slot among the tree streams open there (`conn`), which bounds how many
/// such streams, with the part hyper took for each, one connection can keep.
pub struct TreeStream {
    queue: Arc<Mutex<Queue>>,
    _open: Option<TreeSlot>,
}

enum Queue {
    Open(mpsc::Receiver<Part>),
    /// The reader gave up on an idle client: the queued parts are gone, this is said once.
    Ended(Option<Status>),
}

/// The reading side of a [`TreeStream`], holding its place among the tree streams: dropped
/// when the reading is over, so a client that stalls its stream cannot keep the place.
pub struct Sender {
    // Declared first so it is dropped first: the place is free before `tx` goes and the
    // stream's end reaches the client, so a client that read a whole tree may open the next
    // at once even at the bound. (Fields drop in declaration order.)
    _place: OwnedSemaphorePermit,
    tx: mpsc::Sender<Part>,
    queue: Arc<Mutex<Queue>>,
    idle: Duration,
}

/// A tree stream whose sending side holds `place` and whose response side holds `open` (its
/// slot on the connection, if it carries a tree), whose client may leave it unread for `idle`
/// at most.
pub fn channel(
    place: OwnedSemaphorePermit,
    open: Option<TreeSlot>,
    idle: Duration,
) -> (Sender, TreeStream) {
    let (tx, rx) = mpsc::channel(QUEUE_PARTS);
    let queue = Arc::new(Mutex::new(Queue::Open(rx)));
    (
        Sender {
            _place: place,
            tx,
            queue: Arc::clone(&queue),
            idle,
        },
        TreeStream { queue, _open: open },
    )
}

impl Sender {
    /// Queue `part` without waiting (the queue is new and empty for the first part).
    pub fn first(&self, part: Part) {
        let _ = self.tx.try_send(part);
    }

    /// Queue `part`, waiting while the queue is full; false when the client is gone or has
    /// read nothing for the idle timeout (then the stream is ended here). Blocking: call it
    /// on a blocking thread.
    fn put(&self, part: Part) -> bool {
        let part = match self.tx.try_send(part) {
            Ok(()) => return true,
            Err(mpsc::error::TrySendError::Closed(_)) => return false,
            Err(mpsc::error::TrySendError::Full(part)) => part,
        };
        let sent = tokio::runtime::Handle::current()
            .block_on(async { tokio::time::timeout(self.idle, self.tx.send(part)).await });
        match sent {
            Ok(sent) => sent.is_ok(),
            Err(_) => {
                self.end();
                false
            }
        }
    }

    /// Wait until the connection has taken every queued part, each within the idle timeout
    /// (else the stream is ended here): the place bounds the queued chunks too, so it is not
    /// given up while a stalled client leaves a whole queue unread. Blocking, like `put`.
    fn drain(&self) {
        loop {
            let free = self.tx.capacity();
            if free >= self.tx.max_capacity() {
                return;
            }
            // One more free slot than now: the connection took a part.
            let taken = tokio::runtime::Handle::current().block_on(async {
                tokio::time::timeout(self.idle, self.tx.reserve_many(free + 1))
                    .await
                    .map(|r| r.is_ok())
            });
            match taken {
                Ok(true) => {}
                // The client is gone: the queue went with the stream.
                Ok(false) => return,
                Err(_) => return self.end(),
            }
        }
    }

    /// End the stream of a client that read nothing for the idle timeout.
    fn end(&self) {
        // The queued chunks go now, not when the client reads or its connection ends.
        let ended = Status::deadline_exceeded(format!(
            "the client read nothing of its tree stream for {} ms (the server's --tree-idle-timeout-ms)",
            self.idle.as_millis()
        ));
        *self.queue.lock().unwrap_or_else(PoisonError::into_inner) = Queue::Ended(Some(ended));
        tracing::warn!(
            idle_ms = u64::try_from(self.idle.as_millis()).unwrap_or(u64::MAX),
            "tree stream ended: its client stopped reading"
        );
    }
}

impl tokio_stream::Stream for TreeStream {
    type Item = Part;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Part>> {
        let mut queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        match &mut *queue {
            Queue::Open(rx) => rx.poll_recv(cx),
            Queue::Ended(status) => Poll::Ready(status.take().map(Err)),
        }
    }
}

fn open_beneath(dir: &OwnedFd, path: &str, flags: OFlag) -> io::Result<OwnedFd> {
    let how = OpenHow::new()
        .flags(flags | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC)
        .resolve(
            ResolveFlag::RESOLVE_BENEATH
                | ResolveFlag::RESOLVE_NO_SYMLINKS
                | ResolveFlag::RESOLVE_NO_MAGICLINKS
                | ResolveFlag::RESOLVE_NO_XDEV,
        );
    Ok(openat2(dir.as_fd(), path, how)?)
}

/// A node that is not what the inventory says.
fn differs(path: &str, what: impl std::fmt::Display) -> Status {
    Status::data_loss(format!(
        "staged {path:?} differs from the accepted inventory: {what}"
    ))
}

/// Send every node of `entries` beneath `dir` on `tx`, ending with an error part at the first
/// difference. Blocking: run it on a blocking thread. Returns when the connection has taken
/// every part, when the receiver is gone, or when the client read nothing for the idle
/// timeout; the stream's place is freed then.
///
/// `kept` tells whether the tree `id` is still held: a tree released (or expired) while it is
/// read loses its nodes beneath the stream, and that ends it as a `GetTree` of it would now
/// (NOT_FOUND naming `id`, in the same words: [`RequestError::NotFound`]), rather than with
/// the DATA_LOSS that says the staged tree was changed.
pub fn send(dir: OwnedFd, entries: Arc<[Entry]>, tx: Sender, id: &str, kept: impl Fn() -> bool) {
    if send_all(&dir, &entries, &tx, id, &kept) {
        tx.drain();
    }
}

/// Queue every part; false when the stream was ended or abandoned on the way.
fn send_all(
    dir: &OwnedFd,
    entries: &[Entry],
    tx: &Sender,
    id: &str,
    kept: &dyn Fn() -> bool,
) -> bool {
    for e in entries {
        if !tx.put(Ok(part_entry(e))) {
            return false;
        }
        if let Err(status) = send_node(dir, e, tx) {
            let status = if kept() {
                status
            } else {
                RequestError::NotFound(id.to_owned()).into()
            };
            return tx.put(Err(status));
        }
    }
    true
}

fn part_entry(e: &Entry) -> pb::TreePart {
    pb::TreePart {
        part: Some(pb::tree_part::Part::Entry(convert::entry_to_proto(e))),
    }
}

fn send_node(dir: &OwnedFd, e: &Entry, tx: &Sender) -> Result<(), Status> {
    let path = e.path.as_str();
    let io_err = |err: io::Error| differs(path, err);
    let want_mode = u32::from_str_radix(&e.mode, 8).unwrap_or(u32::MAX);
    match e.kind {
        Kind::Dir => {
            let fd = open_beneath(dir, path, OFlag::O_PATH | OFlag::O_DIRECTORY).map_err(io_err)?;
            let st = fstat(fd.as_fd()).map_err(|err| io_err(err.into()))?;
            if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT != SFlag::S_IFDIR {
                return Err(differs(path, "not a directory"));
            }
            Ok(())
        }
        Kind::Symlink => {
            let fd = open_beneath(dir, path, OFlag::O_PATH).map_err(io_err)?;
            let st = fstat(fd.as_fd()).map_err(|err| io_err(err.into()))?;
            if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT != SFlag::S_IFLNK {
                return Err(differs(path, "not a symlink"));
            }
            let target = readlinkat(fd.as_fd(), "").map_err(|err| io_err(err.into()))?;
            if Some(target.as_encoded_bytes()) != e.link_target.as_deref().map(str::as_bytes) {
                return Err(differs(path, "another link target"));
            }
            Ok(())
        }
        Kind::File => {
            // O_NONBLOCK: a FIFO planted in a file's place must not block the reader.
            let fd =
                open_beneath(dir, path, OFlag::O_RDONLY | OFlag::O_NONBLOCK).map_err(io_err)?;
            let st = fstat(fd.as_fd()).map_err(|err| io_err(err.into()))?;
            if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT != SFlag::S_IFREG {
                return Err(differs(path, "not a regular file"));
            }
            if st.st_mode & 0o7777 != want_mode {
                return Err(differs(path, format!("mode {:04o}", st.st_mode & 0o7777)));
            }
            if u64::try_from(st.st_size).ok() != Some(e.size) {
                return Err(differs(path, format!("{} bytes", st.st_size)));
            }
            let mut file = File::from(fd);
            let mut hasher = Hasher::new();
            let mut left = e.size;
            while left > 0 {
                // Read straight into the part's own buffer: the bytes are copied once from
                // the file, hashed there and handed on, never copied again here.
                let want = usize::try_from(left).unwrap_or(usize::MAX).min(CHUNK_BYTES);
                let mut chunk = Vec::with_capacity(want);
                let n = (&mut file)
                    .take(want as u64)
                    .read_to_end(&mut chunk)
                    .map_err(io_err)?;
                if n == 0 {
                    return Err(differs(path, "shorter than its size"));
                }
                hasher.update(&chunk);
                left -= n as u64;
                let part = pb::TreePart {
                    part: Some(pb::tree_part::Part::Chunk(chunk.into())),
                };
                if !tx.put(Ok(part)) {
                    return Err(Status::cancelled("the client went away"));
                }
            }
            if file.read(&mut [0u8; 1]).map_err(io_err)? != 0 {
                return Err(differs(path, "longer than its size"));
            }
            let (digest, _) = hasher.finish();
            if Some(digest) != e.sha256 {
                return Err(differs(path, "another SHA-256"));
            }
            Ok(())
        }
    }
}
