//! Hashing files on a second thread while the first decodes and writes them.
//!
//! In the confined child, SHA-256 of every file is about a third of the time of a large
//! artifact; on a second core it overlaps the decoding and the writing instead of adding to
//! them. The thread is started before confinement and confined with the process (the child
//! does that: `sandbox::child`); here is only what it does and how the two threads talk.
//!
//! The two threads talk through two pipes and share a few fixed buffers, so that, once confined,
//! the helper makes no system call but `read` and `write` on its pipes, `write` of file contents,
//! `close`, and the writer's own `openat(O_CREAT | O_EXCL | O_NOFOLLOW)` of a file it is handed
//! to create (below), all already on the child's allow-list (the same filter confines both
//! threads, and the helper restricts itself with the same Landlock ruleset):
//! no `futex` (a buffer's lock is only ever taken by the thread the pipe protocol hands it to, so
//! it is never contended and never waits), and no allocation (the buffers are allocated by the
//! decoding thread, and a glibc thread arena growing would need `mprotect`, which the filter
//! kills).
//!
//! A file of more than one buffer, or of one buffer of at least 16 KiB, is also *written* by the
//! helper: the decoding thread opens it, checks every chunk against the limits (before it reaches
//! the disk, as always), and hands the open file over in a shared table; the helper writes each
//! chunk, hashes it, and closes the file once told the file is complete (or abandoned). So the
//! decoding thread of a compressed artifact only decodes, and the two cores share the rest. The
//! file is the helper's from the handover to its close: the decoding thread never touches it
//! again, and its fd number cannot be reused before the helper has closed it. A write error is
//! reported with the file's digest, and refuses the package as it would have on the decoding
//! thread.
//!
//! A file under 4 KiB (16 KiB read in place, below) is hashed and written by the decoding thread
//! itself while the helper is busy: a message through the pipes costs more than hashing a few
//! kilobytes. But while fewer than [`ROOM`] files handed over are in the helper's hands, such a
//! file (one the helper may write) goes to it whole, and the helper also *creates* it: the
//! sink reaches its parent directory as for any entry (the component-wise walk, on the decoding
//! thread) and hands over that directory's fd, the name and the final mode
//! ([`super::writer::Create`]); the helper makes the same `openat` the writer would, on the
//! file's first piece. So the kernel's side of creating many small files, most of their cost,
//! is shared by both cores (10,000 tiny files -15 ms, bench-results/throughput.md), and the
//! decoding thread never waits for the helper to get it. A create that fails there comes back
//! with the file's digest, as a failed write does, and refuses the package the same way; the
//! writer waits for the helper to be quiet ([`quiesce`]) before it closes a directory such a
//! file may still need, and before the staged tree is cleared. Larger files are still created
//! on the decoding thread: creating those too left the helper the slower of the two.
//!
//! The helper may also run a [`FileScan`] over the first [`FILE_BYTES`] of each file it hashes
//! (the review's trigger pass, given by the child: this module knows nothing of what it finds),
//! while the bytes are in its caches; the offsets it marks come back in the digest's reply and
//! are kept for the review ([`super::captured::Captured::keep_scan`]). A scan holds everything
//! it needs from its creation, before confinement: on the helper it allocates nothing and makes
//! no system call.
//!
//! A file hashed on the decoding thread itself (too small to hand over) that the engine keeps
//! none of for the review (past [`super::captured::TOTAL_BYTES`]) gets the same trigger pass
//! there, from a second [`FileScan`] the child gives ([`HashThread::scan_inline`]): otherwise
//! the review would read it back from the staged tree (an `openat`, `fstat`, `read` and `close`
//! after the last file) only to find no trigger in most such files.
//!
//! A plain tarball's members are not copied into buffers at all: they lie in the mapped artifact
//! as they will lie on the disk, so the decoding thread checks and writes each piece straight from
//! the mapping and hands the helper a *view* of it (the window's mapping, shared, with an offset
//! and a length) to hash. The decoding thread puts the window in a view entry before the message
//! and takes it back (and unmaps it, if nothing else holds it) when the helper says it is done:
//! the helper only reads the mapped bytes, and never unmaps or frees anything.

use std::fs::File;
use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use super::captured::FILE_BYTES;
use super::input::View;
use super::writer::Create;
use crate::digest::{Hasher, Sha256Digest};
use crate::sys::SealedMapping;

/// Bytes per buffer handed to the helper: large enough that the pipe round trip per buffer is
/// small against hashing it (about 0.2 ms at 1.5 GB/s), small enough to stay in the caches.
pub(crate) const CHUNK: usize = 256 * 1024;
/// A file in one buffer goes to the helper from this size on; a smaller one is hashed where it
/// was read (the message and the wake-up would cost more than hashing and scanning it). 4 KiB,
/// not 16: once the helper also runs the review's trigger pass, handing over the 4-16 KiB
/// files of a compressed package took 20-30 ms off 2,000 files (bench-results/throughput.md).
const OFFLOAD_MIN: usize = 4 * 1024;
/// The same for a member read in place from the mapping (`fill_view`): there the decoding
/// thread only writes what it hands over, and a small one costs it more to hand over (a view
/// entry, a message, a reply) than to hash and scan here.
const VIEW_OFFLOAD_MIN: usize = 16 * 1024;
/// Buffers in flight: the decoder fills one while the helper hashes (and writes) others. 12,
/// not 4: with four the two threads waited on each other (2,000 files tar.gz and tar.zst -14
/// and -16 ms, the 200 MB tar.zst -19 ms); a buffer grows only as far as its file needs, so
/// small files cost little, and at most 12 x 256 KiB in all.
const SLOTS: usize = 12;
/// Files the helper may hold open at once: each handed-over file holds its entry until the
/// helper has closed it. In practice fewer are: a file in flight also holds a view (in place)
/// or a buffer. Within the child's 64 fds: 9 of its own, a directory chain of at most 32 at the
/// deepest path the default limits allow, the staging root opened once more for files created
/// on the helper (a file it is to create holds only a directory the writer's cache also holds:
/// `writer::DirCache::evict`), these, and the file being opened.
const FILES: usize = 14;
/// Views of the mapped artifact in flight (see the module's doc). 12, not 4: with four, the two
/// threads waited on each other for a third of a 2,000-file tar (11.5 ms of 135); 16 measured
/// no better. Each may keep its window mapped: a few MiB of the artifact more in the child.
const VIEWS: usize = 12;
/// The largest piece of a mapped member handed over at once: fewer messages than [`CHUNK`], no
/// buffer to fill; at most [`VIEWS`] of them ahead of the helper.
pub(crate) const VIEW_CHUNK: usize = 1024 * 1024;
/// A file small enough to be hashed where it was read goes to the helper all the same (created,
/// written, hashed and closed there) while fewer than this many files handed over are in its
/// hands: so the helper takes what it has time for, and the decoding thread, never waiting for
/// it, does the rest itself.
const ROOM: usize = 4;
/// No file entry: the helper only hashes.
const NO_FILE: u8 = u8::MAX;
/// Every message to the helper is this long: a pipe write of at most `PIPE_BUF` bytes is
/// atomic, so a read of this many bytes always gets exactly one message.
const MSG: usize = 48;
/// Every reply is this long (a message, then the bytes a scan covered and its summary); the
/// protocol keeps a few dozen replies in flight at most, far under a pipe's 64 KiB.
const REPLY: usize = 1024;
/// Where a scan's marks sit in a reply (after the message, the bytes the scan covered, where its
/// marks stop being complete, how many there are, and the scan's note).
const MARKS_AT: usize = MSG + 16;
/// The most marks a [`FileScan`] reports of one file (they travel in the digest's reply).
pub const MARKS: usize = (REPLY - MARKS_AT) / 4;

const OP_DATA: u8 = 1;
const OP_FINISH: u8 = 2;
const OP_RUN: u8 = 3;
const OP_ABORT: u8 = 4;
const OP_VIEW: u8 = 5;
const OP_SYNC: u8 = 7;
const OP_FREE: u8 = 11;
const OP_DIGEST: u8 = 12;
const OP_RAN: u8 = 13;
const OP_ABORTED: u8 = 14;
const OP_VIEW_DONE: u8 = 15;
const OP_SYNCED: u8 = 16;
/// In a message's flags: the piece is its file's last (the helper finishes the file with it).
const LAST: u8 = 1;
/// In a reply's flags: it carries a scan's summary.
const SCANNED: u8 = 1;
/// In a digest's flags: it also gives back the buffer (or the view) its last piece came in.
const FREES_SLOT: u8 = 2;
const FREES_VIEW: u8 = 4;

type Task = Box<dyn FnOnce() + Send>;

/// Work the helper does on the first [`FILE_BYTES`] of every file it hashes, for whoever reads
/// the file next: it marks offsets in them (what a mark means is the scan's business, but a
/// file it covered whole and marked nothing in is one whose reader needs only its head: the
/// engine then keeps no more of it, `sink.rs`), and may add a note of its own (a word whose
/// meaning is again the scan's business). It runs
/// on the confined helper: it must not allocate, free or make a system call (whatever it needs,
/// it holds from its creation), and must not panic.
pub trait FileScan: Send {
    /// A new file starts.
    fn begin(&mut self);
    /// The file's next bytes, in order (at most its first [`FILE_BYTES`] in all).
    fn feed(&mut self, bytes: &[u8]);
    /// The file is complete: its marks (ascending, at most [`MARKS`]), and the offset below which
    /// they are all of them (the bytes fed, unless it stopped early).
    fn finish(&self) -> (&[u32], u32);
    /// The scan's note on the file, once complete (see [`Scanned::note`]).
    fn note(&self) -> u32;
}

/// What a [`FileScan`] found in one file: its first `covered` bytes (all of them, up to
/// [`FILE_BYTES`]) were scanned, and `marks` are every mark below `complete`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scanned {
    pub covered: u64,
    pub complete: u64,
    pub marks: Vec<u32>,
    /// What the scan says of the `covered` bytes besides its marks ([`FileScan::note`]).
    pub note: u32,
}

/// Replies one `read` of the reply pipe takes at most.
const INBOX: usize = 16;

struct Inbox {
    buf: Vec<u8>,
    /// `buf[at..len]` holds whole replies not yet taken.
    at: usize,
    len: usize,
}

/// A digest from the helper, with its scan's summary when it has a scan.
type Done = Result<(Sha256Digest, Option<Scanned>), i32>;

/// A file handed over to the helper: open already, or to be created by it on its first piece
/// (or its end, when it has none).
#[derive(Default)]
struct FileEntry {
    /// Taken (and so closed) by the helper only.
    file: Option<File>,
    /// Left where it is by the helper once used (it frees nothing): taken back by the decoding
    /// thread with the file's digest, so the directory's fd is closed there, if at all.
    create: Option<Create>,
}

impl FileEntry {
    /// The open file, created first if it is still to be; the errno of a failed create.
    fn open(&mut self) -> Result<Option<&File>, i32> {
        if self.file.is_none()
            && let Some(c) = &self.create
        {
            self.file = Some(
                c.open()
                    .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?,
            );
        }
        Ok(self.file.as_ref())
    }
}

struct Shared {
    slots: Vec<Mutex<Vec<u8>>>,
    /// Files handed over to the helper, by entry.
    files: Vec<Mutex<FileEntry>>,
    /// Windows of the mapped artifact the helper hashes from, by view entry; put and taken by the
    /// decoding thread only (so the last reference, and the `munmap`, is always its own).
    views: Vec<Mutex<Option<Arc<SealedMapping>>>>,
    /// A job for the helper itself (its own Landlock restriction; a probe).
    task: Mutex<Option<Task>>,
    /// Files the helper is done with (finished or abandoned, and replied to): against the
    /// files the decoding thread told it to end, how many it still has ([`HashThread::has_room`]).
    ended: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The decoding thread's side of a running helper.
pub struct HashThread {
    to: File,
    from: File,
    shared: Arc<Shared>,
    state: Mutex<State>,
    /// Replies read from the pipe and not yet taken: every `read` takes all that are there (up
    /// to [`INBOX`]), not one per call.
    inbox: Mutex<Inbox>,
    /// The one thread that may use it, set by [`install`].
    owner: OnceLock<std::thread::ThreadId>,
    /// The trigger pass for files hashed on that thread ([`HashThread::scan_inline`]); only
    /// ever locked by it.
    inline_scan: Mutex<Option<Box<dyn FileScan>>>,
}

#[derive(Default)]
struct State {
    free: Vec<usize>,
    /// File entries not held by the helper.
    free_files: Vec<usize>,
    /// View entries not with the helper.
    free_views: Vec<usize>,
    /// Files the helper was told to end (finish, or abandon): see [`Shared::ended`].
    ending: u64,
    next_seq: u64,
    /// Digests (or the errno of a failed write) that arrived while waiting for something else,
    /// by file sequence number.
    done: std::collections::HashMap<u64, Done>,
}

/// One message. `file` is a file entry ([`NO_FILE`] for none); `len` carries the errno of a
/// failed write in an [`OP_DIGEST`] reply; an [`OP_VIEW`] carries the piece's offset in its
/// window where the other messages carry a digest.
fn msg(op: u8, slot: usize, file: u8, len: usize, seq: u64, digest: &[u8; 32]) -> [u8; MSG] {
    let mut m = [0u8; MSG];
    m[0] = op;
    m[1] = u8::try_from(slot).unwrap_or(u8::MAX);
    m[2] = file;
    m[4..8].copy_from_slice(&u32::try_from(len).unwrap_or(u32::MAX).to_le_bytes());
    m[8..16].copy_from_slice(&seq.to_le_bytes());
    m[16..48].copy_from_slice(digest);
    m
}

struct Msg {
    op: u8,
    slot: usize,
    file: u8,
    /// [`LAST`] in a message; [`SCANNED`], [`FREES_SLOT`] and [`FREES_VIEW`] in a reply.
    flags: u8,
    len: usize,
    seq: u64,
    digest: [u8; 32],
    /// An [`OP_DIGEST`]'s scan, when the helper has one.
    scanned: Option<Scanned>,
}

impl Msg {
    /// An [`OP_VIEW`]'s offset in its window (the first 8 bytes of the digest field).
    fn view_offset(&self) -> usize {
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.digest[..8]);
        usize::try_from(u64::from_le_bytes(b)).unwrap_or(usize::MAX)
    }
}

/// An [`OP_VIEW`] message: `len` bytes at `offset` of view entry `slot`.
fn view_msg(slot: usize, file: u8, offset: usize, len: usize, seq: u64) -> [u8; MSG] {
    let mut at = [0u8; 32];
    at[..8].copy_from_slice(&(offset as u64).to_le_bytes());
    msg(OP_VIEW, slot, file, len, seq, &at)
}

/// `m` as the last piece of its file: the helper finishes the file with it.
fn last(mut m: [u8; MSG]) -> [u8; MSG] {
    m[3] = LAST;
    m
}

/// `m` as a reply.
fn long(m: [u8; MSG]) -> [u8; REPLY] {
    let mut r = [0u8; REPLY];
    r[..MSG].copy_from_slice(&m);
    r
}

/// A message, or a reply (which may carry a scan).
fn parse(m: &[u8]) -> Msg {
    let mut digest = [0u8; 32];
    digest.copy_from_slice(&m[16..48]);
    let word = |at: usize| u32::from_le_bytes([m[at], m[at + 1], m[at + 2], m[at + 3]]);
    let scanned = (m.len() == REPLY && m[3] & SCANNED != 0).then(|| {
        let n = (word(MSG + 8) as usize).min(MARKS);
        Scanned {
            covered: u64::from(word(MSG)),
            complete: u64::from(word(MSG + 4)),
            marks: (0..n).map(|k| word(MARKS_AT + 4 * k)).collect(),
            note: word(MSG + 12),
        }
    });
    Msg {
        op: m[0],
        slot: usize::from(m[1]),
        file: m[2],
        flags: m[3],
        len: u32::from_le_bytes([m[4], m[5], m[6], m[7]]) as usize,
        seq: u64::from_le_bytes([m[8], m[9], m[10], m[11], m[12], m[13], m[14], m[15]]),
        digest,
        scanned,
    }
}

/// What the helper keeps of the file it is hashing.
struct Helping {
    hasher: Hasher,
    current: Option<u64>,
    /// Bytes of the current file given to the scan (at most FILE_BYTES).
    fed: usize,
    /// The first write (or create) error of the current file (an errno): later chunks are not
    /// written.
    failed: i32,
    scan: Option<Box<dyn FileScan>>,
}

impl Helping {
    /// File `seq` is the one being hashed (a new one starts when it was not).
    fn start(&mut self, seq: u64) {
        if self.current != Some(seq) {
            self.hasher = Hasher::new();
            self.current = Some(seq);
            self.failed = 0;
            self.fed = 0;
            if let Some(s) = self.scan.as_deref_mut() {
                s.begin();
            }
        }
    }

    /// The next piece of the current file: written to its entry's file (created first if it is
    /// still to be), hashed, scanned.
    fn piece(&mut self, shared: &Shared, m: &Msg) {
        // The piece: in a buffer, or in a window of the mapped artifact.
        let (buf, map);
        let chunk: &[u8] = if m.op == OP_DATA {
            buf = shared.slots.get(m.slot).map(lock);
            buf.as_deref().map_or(&[], |b| &b[..m.len.min(b.len())])
        } else {
            map = shared.views.get(m.slot).map(lock);
            let bytes = map
                .as_deref()
                .and_then(Option::as_ref)
                .map_or(&[][..], |w| w.bytes());
            let start = m.view_offset();
            bytes.get(start..start.saturating_add(m.len)).unwrap_or(&[])
        };
        if let Some(entry) = shared.files.get(usize::from(m.file))
            && self.failed == 0
        {
            // Created here on its first piece when it was handed over to be.
            match lock(entry).open() {
                Ok(Some(file)) => {
                    if let Err(e) = (&*file).write_all(chunk) {
                        self.failed = e.raw_os_error().unwrap_or(libc::EIO);
                    }
                }
                Ok(None) => {}
                Err(errno) => self.failed = errno,
            }
        }
        self.hasher.update(chunk);
        if let Some(s) = self.scan.as_deref_mut()
            && self.fed < FILE_BYTES
        {
            let take = chunk.len().min(FILE_BYTES - self.fed);
            s.feed(&chunk[..take]);
            self.fed += take;
        }
    }

    /// File `seq` (in entry `file`) is complete: its file closed (created first if it had no
    /// piece), and its digest's reply, with the scan's summary and the errno of a failed write.
    fn finish(&mut self, shared: &Shared, file: u8, seq: u64) -> [u8; REPLY] {
        self.start(seq);
        let (digest, _) = std::mem::replace(&mut self.hasher, Hasher::new()).finish();
        self.current = None;
        // Closed here, after its last write; the entry is free again once the decoding thread
        // reads this reply.
        if let Some(entry) = shared.files.get(usize::from(file)) {
            let mut entry = lock(entry);
            if self.failed == 0
                && let Err(errno) = entry.open()
            {
                self.failed = errno;
            }
            drop(entry.file.take());
        }
        let errno = usize::try_from(std::mem::take(&mut self.failed)).unwrap_or(0);
        let mut reply = long(msg(OP_DIGEST, 0, file, errno, seq, digest.as_bytes()));
        if let Some(s) = self.scan.as_deref() {
            let (marks, complete) = s.finish();
            let marks = &marks[..marks.len().min(MARKS)];
            reply[3] = SCANNED;
            // FILE_BYTES fits a u32 (a compile-time check below).
            reply[MSG..MSG + 4].copy_from_slice(&(self.fed as u32).to_le_bytes());
            reply[MSG + 4..MSG + 8].copy_from_slice(&complete.to_le_bytes());
            reply[MSG + 8..MSG + 12].copy_from_slice(&(marks.len() as u32).to_le_bytes());
            reply[MSG + 12..MARKS_AT].copy_from_slice(&s.note().to_le_bytes());
            for (k, mark) in marks.iter().enumerate() {
                reply[MARKS_AT + 4 * k..MARKS_AT + 4 * k + 4].copy_from_slice(&mark.to_le_bytes());
            }
        }
        reply
    }
}

/// Messages one `read` of the work pipe takes at most.
const BATCH: usize = 16;

fn helper_loop(
    mut from_main: File,
    mut to_main: File,
    shared: Arc<Shared>,
    scan: Option<Box<dyn FileScan>>,
) {
    let mut h = Helping {
        hasher: Hasher::new(),
        current: None,
        fed: 0,
        failed: 0,
        scan,
    };
    let zero = [0u8; 32];
    let mut raw = [0u8; BATCH * MSG];
    loop {
        // Every message is written whole in one `write` (of at most PIPE_BUF bytes), so the pipe
        // only ever holds whole messages: a read takes as many as are there. The decoding side
        // gone (only outside the child, whose helper lives as long as the process): nothing left
        // to do.
        let n = match from_main.read(&mut raw) {
            Ok(0) => return,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return,
        };
        // Never seen; completed rather than misread if it were.
        let whole = n.div_ceil(MSG) * MSG;
        if from_main.read_exact(&mut raw[n..whole]).is_err() {
            return;
        }
        for one in raw[..whole].chunks_exact(MSG) {
            let m = parse(one);
            let (reply, ended) = match m.op {
                OP_DATA | OP_VIEW => {
                    h.start(m.seq);
                    h.piece(&shared, &m);
                    let frees = if m.op == OP_DATA {
                        FREES_SLOT
                    } else {
                        FREES_VIEW
                    };
                    if m.flags & LAST != 0 {
                        // The file's last piece: one reply gives back its buffer or view and
                        // brings the digest.
                        let mut reply = h.finish(&shared, m.file, m.seq);
                        reply[1] = m.slot as u8;
                        reply[3] |= frees;
                        (reply, true)
                    } else {
                        let done = if m.op == OP_DATA {
                            OP_FREE
                        } else {
                            OP_VIEW_DONE
                        };
                        (long(msg(done, m.slot, NO_FILE, 0, m.seq, &zero)), false)
                    }
                }
                OP_FINISH => (h.finish(&shared, m.file, m.seq), true),
                OP_ABORT => {
                    if h.current == Some(m.seq) {
                        h.hasher = Hasher::new();
                        h.current = None;
                        h.failed = 0;
                    }
                    if let Some(entry) = shared.files.get(usize::from(m.file)) {
                        drop(lock(entry).file.take());
                    }
                    (long(msg(OP_ABORTED, 0, m.file, 0, m.seq, &zero)), true)
                }
                OP_RUN => {
                    let task = lock(&shared.task).take();
                    if let Some(task) = task {
                        task();
                    }
                    (long(msg(OP_RAN, 0, NO_FILE, 0, 0, &zero)), false)
                }
                // Everything sent before it is done: every file handed over is created or
                // failed.
                OP_SYNC => (long(msg(OP_SYNCED, 0, NO_FILE, 0, 0, &zero)), false),
                _ => continue,
            };
            if to_main.write_all(&reply).is_err() {
                return;
            }
            if ended {
                shared.ended.fetch_add(1, Ordering::Release);
            }
        }
    }
}

impl HashThread {
    /// Start the helper. Call before confinement: it creates pipes and a thread, and warms the
    /// helper's allocator (a glibc arena is created with `mmap` and `mprotect` on a thread's
    /// first allocation, which the confined child could not do).
    pub fn spawn() -> io::Result<Self> {
        Self::spawn_with(pipe()?, pipe()?, None)
    }

    /// [`HashThread::spawn`] over two pipes the caller made, each as (read end, write end):
    /// the first carries work to the helper, the second its replies; `scan` runs over every
    /// file the helper hashes.
    pub fn spawn_with(
        work: (File, File),
        replies: (File, File),
        scan: Option<Box<dyn FileScan>>,
    ) -> io::Result<Self> {
        let t = Self::start_with(work, replies, scan)?;
        t.wait_started()?;
        Ok(t)
    }

    /// Return once the helper has started (and taken its first allocation): one round trip.
    /// Before any confinement step that forbids the calls of a thread's start.
    pub fn wait_started(&self) -> io::Result<()> {
        self.run(|| ())
    }

    /// [`HashThread::spawn_with`] without waiting for the thread to start. The caller's first
    /// [`HashThread::run`] (or [`HashThread::wait_started`]) returns only once it has, and must
    /// come before any step that would forbid the calls of a thread's start (a seccomp filter).
    pub fn start_with(
        work: (File, File),
        replies: (File, File),
        scan: Option<Box<dyn FileScan>>,
    ) -> io::Result<Self> {
        let (from_main, to) = work;
        let (from, to_main) = replies;
        let shared = Arc::new(Shared {
            slots: (0..SLOTS).map(|_| Mutex::new(Vec::new())).collect(),
            files: (0..FILES)
                .map(|_| Mutex::new(FileEntry::default()))
                .collect(),
            views: (0..VIEWS).map(|_| Mutex::new(None)).collect(),
            task: Mutex::new(None),
            ended: AtomicU64::new(0),
        });
        let theirs = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("skillbox-hash".into())
            // It hashes from shared buffers and keeps a few words of state.
            .stack_size(256 * 1024)
            .spawn(move || {
                let warm = std::hint::black_box(vec![0u8; 96 * 1024]);
                drop(warm);
                helper_loop(from_main, to_main, theirs, scan)
            })?;
        let t = Self {
            to,
            from,
            shared,
            state: Mutex::new(State {
                free: (0..SLOTS).collect(),
                free_files: (0..FILES).collect(),
                free_views: (0..VIEWS).collect(),
                ..State::default()
            }),
            inbox: Mutex::new(Inbox {
                buf: vec![0u8; INBOX * REPLY],
                at: 0,
                len: 0,
            }),
            owner: OnceLock::new(),
            inline_scan: Mutex::new(None),
        };
        Ok(t)
    }

    /// Run `scan` over the first [`FILE_BYTES`] of every file hashed on the decoding thread
    /// itself that the engine keeps none of ([`FileHash::scan_here`]), as the helper's scan
    /// runs over the files it hashes.
    pub fn scan_inline(self, scan: Box<dyn FileScan>) -> Self {
        *lock(&self.inline_scan) = Some(scan);
        self
    }

    /// Run `f` on the helper thread and wait for it. For what the helper must do to itself
    /// (restrict itself with Landlock; a probe); never while a file is being hashed.
    pub fn run<R: Send + 'static>(&self, f: impl FnOnce() -> R + Send + 'static) -> io::Result<R> {
        let out: Arc<Mutex<Option<R>>> = Arc::new(Mutex::new(None));
        let theirs = Arc::clone(&out);
        *lock(&self.shared.task) = Some(Box::new(move || {
            let r = f();
            *lock(&theirs) = Some(r);
        }));
        self.send(&msg(OP_RUN, 0, NO_FILE, 0, 0, &[0; 32]))?;
        loop {
            let m = self.recv()?;
            if m.op == OP_RAN {
                break;
            }
            self.note(m);
        }
        lock(&out)
            .take()
            .ok_or_else(|| io::Error::other("the hashing thread did not run the task"))
    }

    fn send(&self, m: &[u8; MSG]) -> io::Result<()> {
        (&self.to).write_all(m)
    }

    fn recv(&self) -> io::Result<Msg> {
        let mut inbox = lock(&self.inbox);
        let inbox = &mut *inbox;
        if inbox.at == inbox.len {
            // Every reply is written whole in one `write` of at most PIPE_BUF bytes, so the pipe
            // only ever holds whole replies: a read takes as many as are there.
            let n = loop {
                match (&self.from).read(&mut inbox.buf) {
                    Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                    Ok(n) => break n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                }
            };
            // Never seen; completed rather than misread if it were.
            let whole = n.div_ceil(REPLY) * REPLY;
            (&self.from).read_exact(&mut inbox.buf[n..whole])?;
            (inbox.at, inbox.len) = (0, whole);
        }
        let m = parse(&inbox.buf[inbox.at..inbox.at + REPLY]);
        inbox.at += REPLY;
        Ok(m)
    }

    /// Book a reply that is not the one being waited for.
    fn note(&self, m: Msg) {
        if m.op == OP_VIEW_DONE {
            return self.view_back(m.slot);
        }
        let mut st = lock(&self.state);
        match m.op {
            OP_FREE => st.free.push(m.slot),
            OP_DIGEST => {
                let got = match i32::try_from(m.len) {
                    Ok(0) => Ok((Sha256Digest::from_bytes(m.digest), m.scanned)),
                    Ok(errno) => Err(errno),
                    Err(_) => Err(libc::EIO),
                };
                st.done.insert(m.seq, got);
                // It came with the file's last piece: the piece's buffer is free too.
                if m.flags & FREES_SLOT != 0 {
                    st.free.push(m.slot);
                }
                drop(st);
                if m.flags & FREES_VIEW != 0 {
                    self.view_back(m.slot);
                }
                self.free_file_entry(m.file);
            }
            OP_ABORTED => {
                drop(st);
                self.free_file_entry(m.file);
            }
            _ => {}
        }
    }

    /// View entry `v` is the helper's no more: its window is taken back here, on this thread
    /// (and unmapped here when this was its last reference).
    fn view_back(&self, v: usize) {
        if let Some(view) = self.shared.views.get(v) {
            drop(lock(view).take());
            lock(&self.state).free_views.push(v);
        }
    }

    /// File entry `e` is the helper's no more: what it was to create is taken back (and its
    /// directory's fd closed here when this was its last holder), and the entry is free.
    fn free_file_entry(&self, e: u8) {
        let Some(entry) = self.shared.files.get(usize::from(e)) else {
            return;
        };
        drop(lock(entry).create.take());
        lock(&self.state).free_files.push(usize::from(e));
    }

    /// Whether the helper may take one more small file (see [`ROOM`]): fewer than that many of
    /// the files it was told to end are not done yet. Reads nothing: its replies wait in the
    /// pipe until an entry, a buffer or a view is wanted back.
    fn has_room(&self) -> bool {
        self.backlog() < ROOM as u64
    }

    /// Whether the helper holds as many files still to end as there are views: a member read
    /// in place that lies whole in one view is then hashed here rather than waiting for a view
    /// to come back. On these virtual machines a wait costs a wake-up of a halted core; once
    /// the review's kept bytes were views rather than copies (`captured.rs`), this thread
    /// waited about 57 times more per 2,000-file tar, and that run was 0.5-2.2 ms slower
    /// instead of faster; with this, 1.3 ms faster (bench-results/throughput.md).
    fn full(&self) -> bool {
        self.backlog() >= VIEWS as u64
    }

    /// Files the helper was told to end and has not yet.
    fn backlog(&self) -> u64 {
        let ending = lock(&self.state).ending;
        ending.saturating_sub(self.shared.ended.load(Ordering::Acquire))
    }

    /// Send `m`, which ends a file on the helper (its finish, or its abandonment).
    fn send_end(&self, m: &[u8; MSG]) -> io::Result<()> {
        lock(&self.state).ending += 1;
        self.send(m)
    }

    /// Wait for the helper to have done all it was sent (see [`quiesce`]).
    fn quiesce(&self) -> io::Result<()> {
        self.send(&msg(OP_SYNC, 0, NO_FILE, 0, 0, &[0; 32]))?;
        loop {
            let m = self.recv()?;
            if m.op == OP_SYNCED {
                return Ok(());
            }
            self.note(m);
        }
    }

    /// A free entry of the list `which` picks, waiting for the helper to give one back if it
    /// holds them all.
    fn take_free(&self, which: fn(&mut State) -> &mut Vec<usize>) -> io::Result<usize> {
        loop {
            if let Some(e) = which(&mut lock(&self.state)).pop() {
                return Ok(e);
            }
            let m = self.recv()?;
            self.note(m);
        }
    }

    /// A free file entry, waiting for the helper to close a file if it holds them all.
    fn take_file_entry(&self) -> io::Result<usize> {
        self.take_free(|st| &mut st.free_files)
    }

    /// A free buffer for `want` bytes, waiting for one if all are with the helper: the
    /// smallest free one that holds `want` already, else the largest. Every byte a buffer grows
    /// by is zeroed and faulted in, once per child; taking the buffer last given back (as a
    /// stack would) grew a new one for each file in flight, about 54 pages a typical package
    /// where the largest files in flight need about half (bench-results/load.md).
    fn take_slot(&self, want: usize) -> io::Result<usize> {
        loop {
            {
                let mut st = lock(&self.state);
                // A free buffer's lock is uncontended: the helper dropped it before its reply
                // put the buffer back on the list.
                let lens = st
                    .free
                    .iter()
                    .map(|&slot| lock(&self.shared.slots[slot]).len());
                if let Some(i) = best_fit(lens, want) {
                    return Ok(st.free.swap_remove(i));
                }
            }
            let m = self.recv()?;
            self.note(m);
        }
    }

    fn give_back(&self, slot: usize) {
        lock(&self.state).free.push(slot);
    }

    /// The digest of file `seq` and its scan, waiting for them; the error of the helper's write,
    /// if one failed.
    pub(crate) fn digest(&self, seq: u64) -> io::Result<(Sha256Digest, Option<Scanned>)> {
        loop {
            {
                if let Some(d) = lock(&self.state).done.remove(&seq) {
                    return d.map_err(io::Error::from_raw_os_error);
                }
            }
            let m = self.recv()?;
            self.note(m);
        }
    }

    fn new_seq(&self) -> u64 {
        let mut st = lock(&self.state);
        st.next_seq += 1;
        st.next_seq
    }
}

/// Which of the buffers of lengths `lens` to take for `want` bytes (see
/// [`HashThread::take_slot`]): the position of the shortest that holds `want`, else of the
/// longest; `None` when there is none.
fn best_fit(lens: impl Iterator<Item = usize>, want: usize) -> Option<usize> {
    let mut fits: Option<(usize, usize)> = None;
    let mut longest: Option<(usize, usize)> = None;
    for (i, len) in lens.enumerate() {
        if len >= want && fits.is_none_or(|(_, l)| len < l) {
            fits = Some((i, len));
        }
        if longest.is_none_or(|(_, l)| len > l) {
            longest = Some((i, len));
        }
    }
    fits.or(longest).map(|(i, _)| i)
}

fn pipe() -> io::Result<(File, File)> {
    let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    Ok((File::from(r), File::from(w)))
}

static HELPER: OnceLock<HashThread> = OnceLock::new();

/// Make `t` the hashing thread of this process's extractions (the confined child, once).
/// Only the calling thread uses it. `false` when one was installed already (`t` is dropped).
pub fn install(t: HashThread) -> bool {
    let _ = t.owner.set(std::thread::current().id());
    HELPER.set(t).is_ok()
}

/// The installed hashing thread, if any.
pub fn installed() -> Option<&'static HashThread> {
    HELPER.get()
}

/// Set once, for the rest of the process, by [`hash_here_only`].
static HERE_ONLY: AtomicBool = AtomicBool::new(false);

/// Artifacts under this size are extracted without the helper when the child's request says
/// other requests keep the cores busy (`sandbox::wire::ChildRequest::busy`): the hand-over then
/// only adds work (a message, a wake-up and a reply per file; no idle core runs the helper
/// beside this thread). Larger ones keep it: their hashing is more than the hand-over.
pub const BUSY_INLINE_BELOW: u64 = 1024 * 1024;

/// From now on this process's extractions hash, scan and write every file on the calling
/// thread, as with no helper installed; the helper stays as it is (confined, waiting on its
/// pipe) and is never sent anything. The confined child's choice for one busy request.
pub fn hash_here_only() {
    HERE_ONLY.store(true, Ordering::Relaxed);
}

/// The installed hashing thread when this thread installed it (the protocol has one client),
/// unless [`hash_here_only`] was called.
fn mine() -> Option<&'static HashThread> {
    if HERE_ONLY.load(Ordering::Relaxed) {
        return None;
    }
    scanner()
}

/// The installed hashing thread when this thread installed it, even after [`hash_here_only`]:
/// for its inline scan ([`HashThread::scan_inline`]), which runs on this thread. A busy child
/// hashes every file here, and so runs the trigger pass over every one here too.
fn scanner() -> Option<&'static HashThread> {
    HELPER
        .get()
        .filter(|h| h.owner.get() == Some(&std::thread::current().id()))
}

/// Whether files written on this thread are hashed (and may be created) on the helper.
pub(crate) fn helps_here() -> bool {
    mine().is_some()
}

/// Whether a file of `size` bytes (read in place from the mapping when `mapped`) is one this
/// thread would hash and write itself, unless the helper has room for it (see [`ROOM`]).
pub(crate) fn small(size: u64, mapped: bool) -> bool {
    size < if mapped {
        VIEW_OFFLOAD_MIN
    } else {
        OFFLOAD_MIN
    } as u64
}

/// Whether the installed helper (this thread's) has room for one more file (see [`ROOM`]).
pub(crate) fn room_here() -> bool {
    mine().is_some_and(HashThread::has_room)
}

/// Wait until the installed helper has done everything sent to it so far, when this thread
/// installed it: every file it was handed is created (or failed), written and closed, and
/// what it was to create taken back. Before the staged tree is cleared (nothing may appear in
/// it after), and before the writer closes directories a file still to be created needs.
pub(crate) fn quiesce() -> io::Result<()> {
    match mine() {
        Some(h) => h.quiesce(),
        None => Ok(()),
    }
}

/// The digest of a file being written: computed on the helper when one is installed and the file
/// is larger than one buffer, inline otherwise.
pub(crate) enum Pending<'h> {
    /// Hashed here, with the inline scan's summary when it ran ([`FileHash::scan_here`]).
    Ready(Sha256Digest, Option<Scanned>),
    Helper(u64, &'h HashThread),
}

impl Pending<'_> {
    /// The inline scan's summary, when the file was hashed here with one.
    pub(crate) fn scanned_here(&self) -> Option<&Scanned> {
        match self {
            Pending::Ready(_, scanned) => scanned.as_ref(),
            Pending::Helper(..) => None,
        }
    }

    #[cfg(test)]
    pub(crate) fn resolve(self) -> io::Result<Sha256Digest> {
        self.resolve_scanned().map(|(d, _)| d)
    }

    /// The digest, and the helper's scan of the file when it hashed it with one.
    pub(crate) fn resolve_scanned(self) -> io::Result<(Sha256Digest, Option<Scanned>)> {
        match self {
            Pending::Ready(d, scanned) => Ok((d, scanned)),
            Pending::Helper(seq, h) => h.digest(seq),
        }
    }
}

// The bytes a scan covers travel as a u32.
const _: () = assert!(FILE_BYTES <= u32::MAX as usize);

/// How feeding a [`FileHash`] failed.
pub(crate) enum Failure {
    /// Reading the member's data (the decoder).
    Read(io::Error),
    /// Writing the file.
    Write(io::Error),
    /// Talking to the helper.
    Fault(io::Error),
}

/// One file's bytes on their way to the disk and the hasher. Feed it with [`FileHash::fill`],
/// which reads into a buffer, has `sink` check it, and writes it (or has the helper write it);
/// end with [`FileHash::finish`].
pub(crate) struct FileHash<'h> {
    helper: Option<&'h HashThread>,
    /// Whose inline scan runs over what is hashed here: the helper's, also when it hashes
    /// nothing for this thread ([`hash_here_only`]).
    scanner: Option<&'h HashThread>,
    seq: u64,
    /// Sent to the helper already: whether this file is hashed there.
    offloaded: bool,
    /// The last chunk read, not yet hashed (the helper's slot, or the inline buffer), nor
    /// written when the helper may write the file.
    held: Option<(usize, usize)>,
    inline: Hasher,
    /// The file (or what will create it), while it is ours.
    file: Option<Target>,
    /// Whether the helper may take the file over (else this thread writes every chunk).
    hand_over: bool,
    /// The helper's entry holding the file, once handed over and until finished or abandoned.
    entry: Option<usize>,
    /// The helper was told the file is complete with its last piece ([`FileHash::fill_view`]).
    told_finish: bool,
    /// Bytes of the file given to the inline scan, once begun ([`FileHash::scan_here`]).
    scanned_here: Option<usize>,
    /// Whether the inline scan runs over what is hashed here.
    scan_here: bool,
    /// Some of the file was hashed here already (`fill_view` of a small file): the rest is too.
    hashed_here: bool,
}

/// The file a [`FileHash`] writes: open, or to be created by whoever writes it first (the helper,
/// when the file is handed over before anything is written to it).
pub(crate) enum Target {
    Open(File),
    Create(Create),
}

impl From<File> for Target {
    fn from(f: File) -> Self {
        Target::Open(f)
    }
}

/// Where [`FileHash`] reads into when hashing inline.
#[derive(Default)]
pub(crate) struct InlineBuf(pub Vec<u8>);

/// The read buffer of a file hashed without the helper: sized at its first use, since a process
/// with a helper never reads into it (zeroed ahead, it cost 16 fresh pages per child).
const INLINE_BYTES: usize = 64 * 1024;

impl FileHash<'static> {
    /// On the installed hashing thread, when there is one and this is the thread that installed
    /// it (the protocol has one client: replies are read by whoever waits). `hand_over`: the
    /// helper may write `file` (a file that needs nothing more of us once its bytes are in).
    pub(crate) fn new(file: Target, hand_over: bool) -> Self {
        let mut fh = FileHash::using(mine(), file, hand_over);
        fh.scanner = scanner();
        fh
    }
}

impl<'h> FileHash<'h> {
    pub(crate) fn using(
        helper: Option<&'h HashThread>,
        file: impl Into<Target>,
        hand_over: bool,
    ) -> Self {
        FileHash {
            helper,
            scanner: helper,
            seq: helper.map_or(0, HashThread::new_seq),
            offloaded: false,
            held: None,
            inline: Hasher::new(),
            file: Some(file.into()),
            hand_over: hand_over && helper.is_some(),
            entry: None,
            told_finish: false,
            scanned_here: None,
            scan_here: false,
            hashed_here: false,
        }
    }

    /// The engine keeps none of this file's bytes for the review: what is hashed here also goes
    /// through the inline scan (see the module's doc), when the helper has one. Set before the
    /// first piece.
    pub(crate) fn scan_here(&mut self, yes: bool) {
        self.scan_here = yes;
    }

    /// `bytes`, hashed here, through the inline scan when it runs.
    fn feed_here(&mut self, bytes: &[u8]) {
        let Some(h) = self.scanner.filter(|_| self.scan_here) else {
            return;
        };
        let mut scan = lock(&h.inline_scan);
        let Some(s) = scan.as_deref_mut() else {
            return;
        };
        let fed = *self.scanned_here.get_or_insert_with(|| {
            s.begin();
            0
        });
        let take = bytes.len().min(FILE_BYTES - fed.min(FILE_BYTES));
        s.feed(&bytes[..take]);
        self.scanned_here = Some(fed + take);
    }

    /// The inline scan's summary of this file, when it ran.
    fn scanned_here(&self) -> Option<Scanned> {
        let (fed, h) = (self.scanned_here?, self.scanner?);
        let scan = lock(&h.inline_scan);
        let s = scan.as_deref()?;
        let (marks, complete) = s.finish();
        Some(Scanned {
            covered: fed as u64,
            complete: u64::from(complete),
            marks: marks[..marks.len().min(MARKS)].to_vec(),
            note: s.note(),
        })
    }

    /// The file, created here first if it is still to be (it is still ours).
    fn open_here(&mut self) -> Result<&File, Failure> {
        if let Some(Target::Create(c)) = &self.file {
            self.file = Some(Target::Open(c.open().map_err(Failure::Write)?));
        }
        match &self.file {
            Some(Target::Open(f)) => Ok(f),
            _ => Err(Failure::Fault(io::Error::other("the file was handed over"))),
        }
    }

    /// Write `chunk` here (the file is still ours).
    fn write_here(&mut self, chunk: &[u8]) -> Result<(), Failure> {
        let f = self.open_here()?;
        (&*f).write_all(chunk).map_err(Failure::Write)
    }

    /// Whether a small file may go to the helper all the same (see [`ROOM`]): the helper may
    /// take it over, and has room for it.
    fn room_for_small(&self, h: &HashThread) -> bool {
        self.hand_over && h.has_room()
    }

    /// The file, ours still, open (created here if it was not yet): to be returned by
    /// [`Self::finish`].
    fn take_open(&mut self) -> Result<Option<File>, Failure> {
        match self.file {
            None => Ok(None),
            Some(_) => {
                self.open_here()?;
                match self.file.take() {
                    Some(Target::Open(f)) => Ok(Some(f)),
                    _ => Ok(None),
                }
            }
        }
    }

    /// The helper's entry for the file, handing it over first if it is still ours (and may be).
    fn entry_for_helper(&mut self, h: &HashThread) -> Result<u8, Failure> {
        if !self.hand_over {
            return Ok(NO_FILE);
        }
        if self.entry.is_none() {
            let e = h.take_file_entry().map_err(Failure::Fault)?;
            let mut entry = lock(&h.shared.files[e]);
            match self.file.take() {
                Some(Target::Open(f)) => entry.file = Some(f),
                Some(Target::Create(c)) => entry.create = Some(c),
                None => {}
            }
            drop(entry);
            self.entry = Some(e);
        }
        Ok(self.entry.map_or(NO_FILE, |e| e as u8))
    }

    /// Read the next chunk of `data`, have `sink` check it (it may refuse it: nothing of a
    /// refused chunk is written), and write it; returns the number of bytes, 0 at the end.
    /// `expect` is how many bytes the file should still hold (its header's word, or `None`): a
    /// buffer is grown only as far as that needs, so a package of small files does not zero and
    /// fault in every buffer whole.
    pub(crate) fn fill<E>(
        &mut self,
        inline: &mut InlineBuf,
        expect: Option<u64>,
        data: &mut dyn Read,
        mut sink: impl FnMut(&[u8]) -> Result<(), E>,
        failed: impl Fn(Failure) -> E,
    ) -> Result<usize, E> {
        let Some(h) = self.helper else {
            if inline.0.is_empty() {
                inline.0.resize(INLINE_BYTES, 0);
            }
            let n = read_some(data, &mut inline.0).map_err(|e| failed(Failure::Read(e)))?;
            if n > 0 {
                sink(&inline.0[..n])?;
                self.write_here(&inline.0[..n]).map_err(&failed)?;
                self.inline.update(&inline.0[..n]);
                self.feed_here(&inline.0[..n]);
            }
            return Ok(n);
        };
        // One byte more than expected, so a file that holds what it says ends in this call;
        // never less than a page. A file that holds more only takes more calls.
        let want = expect.map_or(CHUNK, |left| {
            usize::try_from(left.saturating_add(1)).map_or(CHUNK, |w| w.clamp(4096, CHUNK))
        });
        let slot = h.take_slot(want).map_err(|e| failed(Failure::Fault(e)))?;
        let mut buf = lock(&h.shared.slots[slot]);
        if buf.len() < want {
            buf.resize(want, 0);
        }
        // The whole buffer, unless the file ends first: a reader that yields small pieces (the
        // zip crate's) must not cost a message and a wake-up per piece.
        let mut n = 0;
        while n < buf.len() {
            match read_some(data, &mut buf[n..]) {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) => {
                    drop(buf);
                    h.give_back(slot);
                    return Err(failed(Failure::Read(e)));
                }
            }
        }
        if n == 0 {
            drop(buf);
            h.give_back(slot);
            return Ok(0);
        }
        let checked = sink(&buf[..n]);
        // Written now unless the helper may write it (then it is written with its hashing).
        let written = match (&checked, self.hand_over) {
            (Ok(()), false) => self.write_here(&buf[..n]).map_err(&failed),
            _ => Ok(()),
        };
        drop(buf);
        if let Err(e) = checked.and(written) {
            h.give_back(slot);
            return Err(e);
        }
        // The chunk before this one goes to the helper now that the file is known to span more
        // than one buffer.
        if let Some((prev, len)) = self.held.replace((slot, n)) {
            self.offloaded = true;
            let file = match self.entry_for_helper(h) {
                Ok(f) => f,
                Err(e) => {
                    h.give_back(prev);
                    return Err(failed(e));
                }
            };
            h.send(&msg(OP_DATA, prev, file, len, self.seq, &[0; 32]))
                .map_err(|e| failed(Failure::Fault(e)))?;
        }
        Ok(n)
    }

    /// Take the next piece of a member from the mapped artifact (see the module's doc): have
    /// `sink` check it (a refused piece is not written), write it straight from the mapping, and
    /// hash it (on the helper, from the same mapping, once the file is known to be large:
    /// `expect`, the bytes the member still holds, says so). Returns the piece's length.
    pub(crate) fn fill_view<E>(
        &mut self,
        view: View,
        expect: u64,
        mut sink: impl FnMut(&[u8]) -> Result<(), E>,
        failed: impl Fn(Failure) -> E,
    ) -> Result<usize, E> {
        let n = view.len;
        sink(view.bytes())?;
        // A small member in one piece goes too when the helper has room for it (see [`ROOM`]);
        // not the last piece of one whose first was hashed here (cut short by a window's end).
        // A larger one in one piece stays here when the helper is full (`HashThread::full`).
        let helper = self.helper.filter(|h| {
            self.offloaded
                || (expect >= VIEW_OFFLOAD_MIN as u64 && (n as u64 != expect || !h.full()))
                || (!self.hashed_here && n as u64 == expect && self.room_for_small(h))
        });
        let Some(h) = helper else {
            // Small: hashed and written here (a message would cost more than hashing it).
            self.write_here(view.bytes()).map_err(&failed)?;
            self.inline.update(view.bytes());
            self.hashed_here = true;
            self.feed_here(view.bytes());
            return Ok(n);
        };
        if self.held.is_some() || self.told_finish {
            return Err(failed(Failure::Fault(io::Error::other(
                "a file read both into buffers and in place, or past its end",
            ))));
        }
        let file = self.entry_for_helper(h).map_err(&failed)?;
        if !self.hand_over {
            self.write_here(view.bytes()).map_err(&failed)?;
        }
        let v = h
            .take_free(|st| &mut st.free_views)
            .map_err(|e| failed(Failure::Fault(e)))?;
        let (offset, map) = (view.offset, view.map);
        *lock(&h.shared.views[v]) = Some(map);
        self.offloaded = true;
        let piece = view_msg(v, file, offset, n, self.seq);
        if n as u64 == expect {
            // The member's last piece (its header's size, checked by `sink` above): the file is
            // complete with it, so the helper finishes (and closes) it with this message, and one
            // reply brings the view back with the digest.
            self.entry = None;
            self.told_finish = true;
            h.send_end(&last(piece))
                .map_err(|e| failed(Failure::Fault(e)))?;
        } else {
            h.send(&piece).map_err(|e| failed(Failure::Fault(e)))?;
        }
        Ok(n)
    }

    /// The file is complete: its digest, now or from the helper later (with the error of the
    /// helper's write, if one failed), and the file unless the helper took it over.
    pub(crate) fn finish(mut self) -> Result<(Pending<'h>, Option<File>), Failure> {
        let Some(h) = self.helper else {
            let (d, _) = std::mem::replace(&mut self.inline, Hasher::new()).finish();
            let scanned = self.scanned_here();
            return Ok((Pending::Ready(d, scanned), self.take_open()?));
        };
        match self.held.take() {
            Some((slot, len)) if self.offloaded || len >= OFFLOAD_MIN || self.room_for_small(h) => {
                let file = match self.entry_for_helper(h) {
                    Ok(f) => f,
                    Err(e) => {
                        h.give_back(slot);
                        return Err(e);
                    }
                };
                // Closed by the helper with this message: no longer ours to abandon.
                self.entry = None;
                // Its last piece, which ends it: one message, one wake-up, one reply.
                h.send_end(&last(msg(OP_DATA, slot, file, len, self.seq, &[0; 32])))
                    .map_err(Failure::Fault)?;
                Ok((Pending::Helper(self.seq, h), self.take_open()?))
            }
            Some((slot, len)) => {
                let mut hasher = Hasher::new();
                let written = {
                    let buf = lock(&h.shared.slots[slot]);
                    hasher.update(&buf[..len]);
                    self.feed_here(&buf[..len]);
                    if self.hand_over {
                        self.write_here(&buf[..len])
                    } else {
                        Ok(())
                    }
                };
                h.give_back(slot);
                written?;
                let scanned = self.scanned_here();
                Ok((
                    Pending::Ready(hasher.finish().0, scanned),
                    self.take_open()?,
                ))
            }
            // Told already, with the last piece.
            None if self.told_finish => Ok((Pending::Helper(self.seq, h), self.take_open()?)),
            // Every piece went to the helper as a view (`fill_view`).
            None if self.offloaded => {
                let file = self.entry_for_helper(h)?;
                self.entry = None;
                h.send_end(&msg(OP_FINISH, 0, file, 0, self.seq, &[0; 32]))
                    .map_err(Failure::Fault)?;
                Ok((Pending::Helper(self.seq, h), self.take_open()?))
            }
            // Nothing, or only pieces hashed here (`fill_view` of a small file).
            None => {
                let (d, _) = std::mem::replace(&mut self.inline, Hasher::new()).finish();
                let scanned = self.scanned_here();
                Ok((Pending::Ready(d, scanned), self.take_open()?))
            }
        }
    }
}

impl Drop for FileHash<'_> {
    fn drop(&mut self) {
        let Some(h) = self.helper else {
            return;
        };
        // A file abandoned half-way (a rejection): its held buffer is free again, and the
        // helper closes the file it holds (nothing more is written to it).
        if let Some((slot, _)) = self.held.take() {
            h.give_back(slot);
        }
        if let Some(e) = self.entry.take() {
            let _ = h.send_end(&msg(OP_ABORT, 0, e as u8, 0, self.seq, &[0; 32]));
        }
    }
}

fn read_some(data: &mut dyn Read, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        match data.read(buf) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            r => return r,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fail(f: Failure) -> io::Error {
        match f {
            Failure::Read(e) | Failure::Write(e) | Failure::Fault(e) => e,
        }
    }

    /// End `fh`, wait for its digest, and read back what its file (`back`) holds.
    fn finished(fh: FileHash<'_>, back: &mut File) -> (Vec<u8>, Sha256Digest) {
        let (pending, file) = fh.finish().map_err(fail).expect("finish");
        let d = pending.resolve().expect("digest");
        drop(file);
        let mut on_disk = Vec::new();
        std::io::Seek::rewind(back).expect("rewind");
        back.read_to_end(&mut on_disk).expect("read back");
        (on_disk, d)
    }

    /// `data` through a [`FileHash`] into a file, the file's header claiming `claim` bytes (true
    /// or not), the helper writing it when `hand_over`: what the sink saw, what the file holds
    /// once the digest is in, and the digest.
    fn through(
        t: Option<&HashThread>,
        data: &[u8],
        claim: Option<u64>,
        hand_over: bool,
    ) -> (Vec<u8>, Vec<u8>, Sha256Digest) {
        let file = tempfile::tempfile().expect("tempfile");
        let mut back = file.try_clone().expect("try_clone");
        let mut fh = FileHash::using(t, file, hand_over);
        let mut inline = InlineBuf::default();
        let mut src = data;
        let mut seen = Vec::new();
        loop {
            let left = claim.map(|c| c.saturating_sub(seen.len() as u64));
            let n = fh
                .fill(
                    &mut inline,
                    left,
                    &mut src,
                    |c: &[u8]| -> Result<(), io::Error> {
                        seen.extend_from_slice(c);
                        Ok(())
                    },
                    fail,
                )
                .expect("fill");
            if n == 0 {
                break;
            }
        }
        let (on_disk, d) = finished(fh, &mut back);
        (seen, on_disk, d)
    }

    use super::super::input::sealed;

    /// The member at `start`, `len` bytes long by its header, through [`FileHash::fill_view`]
    /// as the tar reader feeds it: what the sink saw, what the file holds, and the digest.
    fn through_views(
        t: Option<&HashThread>,
        views: &mut super::super::input::Views<'_>,
        start: u64,
        len: u64,
        hand_over: bool,
    ) -> (Vec<u8>, Vec<u8>, Sha256Digest) {
        let file = tempfile::tempfile().expect("tempfile");
        let mut back = file.try_clone().expect("try_clone");
        let mut fh = FileHash::using(t, file, hand_over);
        let mut seen: Vec<u8> = Vec::new();
        while let Some(view) = views
            .view(start + seen.len() as u64, start + len, VIEW_CHUNK)
            .expect("view")
        {
            let left = len - seen.len() as u64;
            fh.fill_view(
                view,
                left,
                |c: &[u8]| -> Result<(), io::Error> {
                    seen.extend_from_slice(c);
                    Ok(())
                },
                fail,
            )
            .expect("fill_view");
        }
        let (on_disk, d) = finished(fh, &mut back);
        (seen, on_disk, d)
    }

    /// Marks every `#` of the bytes fed, up to [`MARKS`] of them; its note: the `!` fed, and
    /// a high bit, so that every byte of the word travels.
    struct Hashes {
        pos: usize,
        marks: Vec<u32>,
        full_at: Option<u32>,
        bangs: u32,
    }

    impl Hashes {
        fn new() -> Self {
            Hashes {
                pos: 0,
                marks: Vec::with_capacity(MARKS),
                full_at: None,
                bangs: 0,
            }
        }
    }

    /// A helper running [`Hashes`] over every file it hashes.
    fn scanning_helper() -> HashThread {
        HashThread::spawn_with(
            pipe().expect("pipe"),
            pipe().expect("pipe"),
            Some(Box::new(Hashes::new())),
        )
        .expect("spawn")
    }

    impl FileScan for Hashes {
        fn begin(&mut self) {
            self.pos = 0;
            self.marks.clear();
            self.full_at = None;
            self.bangs = 0;
        }
        fn feed(&mut self, bytes: &[u8]) {
            for (i, &b) in bytes.iter().enumerate() {
                let at = (self.pos + i) as u32;
                self.bangs += u32::from(b == b'!');
                if b == b'#' && self.full_at.is_none() {
                    if self.marks.len() == MARKS {
                        self.full_at = Some(at);
                    } else {
                        self.marks.push(at);
                    }
                }
            }
            self.pos += bytes.len();
        }
        fn finish(&self) -> (&[u32], u32) {
            (&self.marks, self.full_at.unwrap_or(self.pos as u32))
        }
        fn note(&self) -> u32 {
            0x8000_0000 | self.bangs
        }
    }

    /// What the reference scan finds in `data`'s first [`FILE_BYTES`].
    fn expected_scan(data: &[u8]) -> Scanned {
        let head = &data[..data.len().min(FILE_BYTES)];
        let all: Vec<u32> = (0..head.len())
            .filter(|&i| head[i] == b'#')
            .map(|i| i as u32)
            .collect();
        let complete = all.get(MARKS).map_or(head.len() as u64, |&m| u64::from(m));
        Scanned {
            covered: head.len() as u64,
            complete,
            marks: all.into_iter().take(MARKS).collect(),
            note: 0x8000_0000 | head.iter().filter(|&&b| b == b'!').count() as u32,
        }
    }

    /// All of `data` through `fh` in buffers (each call told what the file still holds, as the
    /// sink tells it), then its end.
    fn buffered<'h>(mut fh: FileHash<'h>, data: &[u8]) -> Pending<'h> {
        let mut inline = InlineBuf::default();
        let mut src = data;
        while fh
            .fill(
                &mut inline,
                Some(src.len() as u64),
                &mut src,
                |_: &[u8]| Ok::<(), io::Error>(()),
                fail,
            )
            .expect("fill")
            > 0
        {}
        fh.finish().map_err(fail).expect("finish").0
    }

    /// All of `data` (which `memfd` holds) through `fh` as views of the mapping, then its end.
    fn in_place<'h>(mut fh: FileHash<'h>, memfd: &File, data: &[u8]) -> Pending<'h> {
        let mut views = super::super::input::Views::new(memfd, data.len() as u64).expect("views");
        let mut at = 0u64;
        while let Some(view) = views.view(at, data.len() as u64, VIEW_CHUNK).expect("view") {
            // What the member still holds, this piece included (as the sink says).
            let left = data.len() as u64 - at;
            at += view.len as u64;
            fh.fill_view(view, left, |_: &[u8]| Ok::<(), io::Error>(()), fail)
                .expect("fill_view");
        }
        fh.finish().map_err(fail).expect("finish").0
    }

    #[test]
    fn files_handed_over_to_be_created_are_created_where_they_are_written() {
        use std::os::fd::OwnedFd;
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let root = Arc::new(OwnedFd::from(File::open(dir.path()).expect("open")));
        let create = |name: &str, mode| Target::Create(Create::at(Arc::clone(&root), name, mode));
        let t = HashThread::spawn().expect("spawn");
        let large: Vec<u8> = (0..CHUNK + 777).map(|i| (i % 253) as u8).collect();
        let cases: [(&str, &[u8], u32); 4] = [
            ("small", b"tiny file\n", 0o644),
            ("script", b"#!/bin/sh\n", 0o755),
            ("empty", b"", 0o644),
            ("large", &large, 0o644),
        ];
        for (name, data, mode) in cases {
            let pending = buffered(FileHash::using(Some(&t), create(name, mode), true), data);
            // An idle helper has room: a small file is created there too.
            if !data.is_empty() {
                assert!(
                    matches!(pending, Pending::Helper(..)),
                    "{name} not on the helper"
                );
            }
            assert_eq!(
                pending.resolve().expect("digest"),
                Sha256Digest::of_bytes(data),
                "{name}"
            );
            let path = dir.path().join(name);
            assert_eq!(std::fs::read(&path).expect("read back"), data, "{name}");
            let got = std::fs::metadata(&path)
                .expect("metadata")
                .permissions()
                .mode();
            assert_eq!(got & 0o100, mode & 0o100, "{name}: mode {got:o}");
        }
        // A create the helper fails comes back with the digest; the file there is untouched.
        let again = buffered(
            FileHash::using(Some(&t), create("small", 0o644), true),
            b"other",
        );
        let err = again.resolve().err().and_then(|e| e.raw_os_error());
        assert_eq!(err, Some(libc::EEXIST));
        assert_eq!(
            std::fs::read(dir.path().join("small")).expect("read back"),
            b"tiny file\n"
        );
        // Read in place from the mapping, small and large.
        let memfd = sealed(&large);
        for (name, len) in [("viewed-small", 100), ("viewed-large", large.len())] {
            let mut fh = FileHash::using(Some(&t), create(name, 0o644), true);
            let mut views = super::super::input::Views::new(&memfd, len as u64).expect("views");
            let mut at = 0u64;
            while let Some(view) = views.view(at, len as u64, VIEW_CHUNK).expect("view") {
                let left = len as u64 - at;
                at += view.len as u64;
                fh.fill_view(view, left, |_: &[u8]| Ok::<(), io::Error>(()), fail)
                    .expect("fill_view");
            }
            let (pending, file) = fh.finish().map_err(fail).expect("finish");
            assert!(file.is_none(), "{name}: the file was handed over");
            assert_eq!(
                pending.resolve().expect("digest"),
                Sha256Digest::of_bytes(&large[..len])
            );
            assert_eq!(
                std::fs::read(dir.path().join(name)).expect("read back"),
                &large[..len]
            );
        }
        // A file abandoned half-way: once the helper is quiet, nothing of it is held there.
        {
            let mut fh = FileHash::using(Some(&t), create("abandoned", 0o644), true);
            let mut inline = InlineBuf::default();
            let mut src: &[u8] = &large;
            for _ in 0..2 {
                fh.fill(
                    &mut inline,
                    Some(large.len() as u64),
                    &mut src,
                    |_: &[u8]| Ok::<(), io::Error>(()),
                    fail,
                )
                .expect("fill");
            }
        }
        t.quiesce().expect("quiesce");
        assert!(
            t.shared
                .files
                .iter()
                .all(|e| lock(e).file.is_none() && lock(e).create.is_none()),
            "an entry still holds a file or a create"
        );
        assert_eq!(lock(&t.state).free_files.len(), FILES);
        assert_eq!(Arc::strong_count(&root), 1, "a directory is still held");
    }

    #[test]
    fn a_buffer_is_taken_by_best_fit() {
        assert_eq!(best_fit([].into_iter(), 10), None);
        // The shortest that holds it, wherever it is in the list.
        assert_eq!(best_fit([0, 300, 100, 4096, 120].into_iter(), 100), Some(2));
        assert_eq!(best_fit([0, 300, 100, 4096, 120].into_iter(), 101), Some(4));
        // None holds it: the longest grows least.
        assert_eq!(best_fit([0, 300, 100, 120].into_iter(), 5000), Some(1));
        assert_eq!(best_fit([0, 0].into_iter(), 4096), Some(0));
    }

    #[test]
    fn buffers_grow_only_as_far_as_the_files_in_flight_need() {
        let t = HashThread::spawn().expect("spawn");
        let grown = || -> usize { t.shared.slots.iter().map(|s| lock(s).len()).sum() };
        let (large, small, middle) = (vec![1u8; 100_000], vec![2u8; 8_000], vec![3u8; 50_000]);
        // Two files in flight at once: two buffers, given back large first.
        let a = buffered(
            FileHash::using(Some(&t), tempfile::tempfile().expect("tempfile"), true),
            &large,
        );
        let b = buffered(
            FileHash::using(Some(&t), tempfile::tempfile().expect("tempfile"), true),
            &small,
        );
        assert!(matches!(a, Pending::Helper(..)) && matches!(b, Pending::Helper(..)));
        a.resolve().expect("digest");
        b.resolve().expect("digest");
        let two = grown();
        assert_eq!(
            two,
            100_001 + 8_001 + 4_096,
            "one byte more than each file, as `fill` asks, and a page for the call that finds \
             the first file's end"
        );
        // The next file fits in the large buffer: nothing grows (the buffer given back last,
        // the small one, would have grown by 42 KB).
        let c = buffered(
            FileHash::using(Some(&t), tempfile::tempfile().expect("tempfile"), true),
            &middle,
        );
        assert_eq!(
            c.resolve().expect("digest"),
            Sha256Digest::of_bytes(&middle)
        );
        assert_eq!(grown(), two);
    }

    #[test]
    fn a_small_file_is_hashed_here_while_the_helper_has_no_room() {
        let t = HashThread::spawn().expect("spawn");
        // The helper waits on a task of ours: what is handed to it stays in its hands.
        let (go, wait) = std::sync::mpsc::channel::<()>();
        *lock(&t.shared.task) = Some(Box::new(move || {
            let _ = wait.recv();
        }));
        t.send(&msg(OP_RUN, 0, NO_FILE, 0, 0, &[0; 32]))
            .expect("send");
        let mut held = Vec::new();
        for k in 0..ROOM {
            let file = tempfile::tempfile().expect("tempfile");
            let p = buffered(FileHash::using(Some(&t), file, true), b"small");
            assert!(matches!(p, Pending::Helper(..)), "file {k} not handed over");
            held.push(p);
        }
        let file = tempfile::tempfile().expect("tempfile");
        let here = buffered(FileHash::using(Some(&t), file, true), b"one more");
        assert!(matches!(here, Pending::Ready(..)), "hashed here: no room");
        assert_eq!(
            here.resolve().expect("digest"),
            Sha256Digest::of_bytes(b"one more")
        );
        go.send(()).expect("release the helper");
        for p in held {
            assert_eq!(
                p.resolve().expect("digest"),
                Sha256Digest::of_bytes(b"small")
            );
        }
    }

    #[test]
    fn the_inline_scan_covers_small_files_hashed_here_when_asked() {
        let t = scanning_helper().scan_inline(Box::new(Hashes::new()));
        // Under OFFLOAD_MIN (one buffer, hashed here), and under VIEW_OFFLOAD_MIN from the
        // mapping (hashed here too).
        let small = b"a # b!\n".repeat(OFFLOAD_MIN / 8);
        let view = b"c ## d!\n".repeat(VIEW_OFFLOAD_MIN / 10);
        assert!(small.len() < OFFLOAD_MIN && view.len() < VIEW_OFFLOAD_MIN);
        let memfd = sealed(&view);
        for (here, data, mapped) in [true, false]
            .into_iter()
            .flat_map(|here| [(here, &small, None), (here, &view, Some(&memfd))])
        {
            // Not the helper's to write: it would take a small file it has room for.
            let file = tempfile::tempfile().expect("tempfile");
            let mut fh = FileHash::using(Some(&t), file, false);
            fh.scan_here(here);
            let pending = match mapped {
                Some(memfd) => in_place(fh, memfd, data),
                None => buffered(fh, data),
            };
            assert!(matches!(pending, Pending::Ready(..)), "hashed here");
            let (d, scanned) = pending.resolve_scanned().expect("digest");
            assert_eq!(d, Sha256Digest::of_bytes(data));
            let how = format!("scan {here}, mapped {}", mapped.is_some());
            assert_eq!(scanned, here.then(|| expected_scan(data)), "{how}");
        }
    }

    #[test]
    fn the_helpers_scan_covers_the_first_bytes_of_every_file_it_hashes() {
        let t = scanning_helper();
        let sparse: Vec<u8> = (0..3 * FILE_BYTES / 2)
            .map(|i| match (i % 4099, i % 5003) {
                (7, _) => b'#',
                (_, 11) => b'!',
                _ => b'.',
            })
            .collect();
        let dense = b"ab#".repeat(OFFLOAD_MIN);
        // (data, scanned by the helper): hashed here when small (unless the helper may write it
        // and has room for it, as an idle one has), else on the helper, through buffers (`fill`)
        // and from the mapping (`fill_view`).
        let cases: [(&[u8], bool); 5] = [
            (b"# small, hashed here", false),
            (&sparse[..OFFLOAD_MIN], true),
            (&sparse, true),
            (&dense, true),
            (&sparse[..CHUNK + 1], true),
        ];
        for (data, on_helper) in cases {
            for hand_over in [false, true] {
                let file = tempfile::tempfile().expect("tempfile");
                let fh = FileHash::using(Some(&t), file, hand_over);
                let (d, scanned) = buffered(fh, data).resolve_scanned().expect("digest");
                assert_eq!(d, Sha256Digest::of_bytes(data));
                let how = format!("{} bytes, hand-over {hand_over}", data.len());
                let on_helper = on_helper || hand_over;
                assert_eq!(scanned, on_helper.then(|| expected_scan(data)), "{how}");
            }
        }
        let memfd = sealed(&sparse);
        let file = tempfile::tempfile().expect("tempfile");
        let fh = FileHash::using(Some(&t), file, true);
        let (_, scanned) = in_place(fh, &memfd, &sparse)
            .resolve_scanned()
            .expect("digest");
        assert_eq!(scanned, Some(expected_scan(&sparse)), "from the mapping");
    }

    #[test]
    fn members_read_in_place_from_the_mapping_are_written_and_hashed_whole() {
        use super::super::input::{Views, WINDOW};
        let window = WINDOW as usize;
        let data: Vec<u8> = (0..2 * window + 12_345)
            .map(|i| (i * 31 % 251) as u8)
            .collect();
        let memfd = sealed(&data);
        // Only a sealed memfd is read in place.
        let plain = tempfile::tempfile().expect("tempfile");
        (&plain).write_all(&data[..4096]).expect("write");
        assert!(
            Views::new(&plain, 4096).is_none(),
            "an unsealed file is mapped"
        );
        let mut views = Views::new(&memfd, data.len() as u64).expect("views");
        let t = HashThread::spawn().expect("spawn");
        let n = data.len();
        // (start, length by the header): empty, small (hashed here), just large enough for the
        // helper, across a window's end, the whole artifact, unaligned, and a member whose header
        // claims more than the artifact holds (cut at its end: the sink sees what is there).
        let members = [
            (0, 0),
            (1, 100),
            (5000, VIEW_OFFLOAD_MIN),
            (window - 1000, 3 * VIEW_CHUNK),
            (0, n),
            (17, n - 17),
            (2 * window - 1, 2),
            (n - 10, 100),
        ];
        for (start, len) in members {
            let want = &data[start..(start + len).min(n)];
            for (helper, hand_over) in [(None, false), (Some(&t), false), (Some(&t), true)] {
                let (seen, on_disk, got) =
                    through_views(helper, &mut views, start as u64, len as u64, hand_over);
                let how = format!(
                    "member at {start}, {len} bytes, helper {}, hand-over {hand_over}",
                    helper.is_some()
                );
                assert!(seen == want, "bytes checked differ: {how}");
                assert!(on_disk == want, "bytes on disk differ: {how}");
                assert_eq!(got, Sha256Digest::of_bytes(want), "{how}");
            }
        }
        // Every window the helper had is back, and none is still held by its entries.
        assert_eq!(
            lock(&t.state).free_views.len(),
            VIEWS,
            "every view entry is free"
        );
        assert!(t.shared.views.iter().all(|v| lock(v).is_none()));
        assert_eq!(
            lock(&t.state).free_files.len(),
            FILES,
            "every file entry is free"
        );
    }

    #[test]
    fn digests_match_inline_and_on_the_thread_at_every_size() {
        let data: Vec<u8> = (0..3 * CHUNK + 77).map(|i| (i * 31 % 251) as u8).collect();
        let sizes = [
            0,
            1,
            OFFLOAD_MIN - 1,
            OFFLOAD_MIN,
            CHUNK - 1,
            CHUNK,
            CHUNK + 1,
            2 * CHUNK,
            data.len(),
        ];
        // The header's word sizes the buffers only: a claim that is right, too small, too large
        // or absent changes neither the bytes nor the digest. A fresh thread for each kind of
        // claim, so its buffers start small and grow as that kind of claim makes them.
        let claims: [fn(u64) -> Option<u64>; 6] = [
            |_| None,
            Some,
            |_| Some(0),
            |l| Some(l / 2),
            |l| Some(l + 1),
            |l| Some(2 * l + 9000),
        ];
        for (k, claim) in claims.iter().enumerate() {
            let t = HashThread::spawn().expect("spawn");
            for len in sizes {
                let want = Sha256Digest::of_bytes(&data[..len]);
                let claim = claim(len as u64);
                for (helper, hand_over) in [(None, false), (Some(&t), false), (Some(&t), true)] {
                    let (seen, on_disk, got) = through(helper, &data[..len], claim, hand_over);
                    let how = format!(
                        "claim {k}, helper {}, hand-over {hand_over}",
                        helper.is_some()
                    );
                    assert_eq!(seen, &data[..len], "{len} bytes checked, {how}");
                    assert!(on_disk == data[..len], "{len} bytes on disk, {how}");
                    assert_eq!(got, want, "{len} bytes, {how}");
                }
            }
            if k == 2 {
                // Claims of nothing never grew a buffer past a page.
                assert!(t.shared.slots.iter().all(|b| lock(b).len() <= 4096));
            }
        }
        let t = HashThread::spawn().expect("spawn");
        // Many files in flight at once: digests come back by file, whatever the order.
        let mut pending = Vec::new();
        // More files than the helper has file entries, each handed over: it closes each once
        // written, and entries are reused.
        for i in 0..40usize {
            let part = &data[i * 1000..i * 1000 + OFFLOAD_MIN + i];
            let file = tempfile::tempfile().expect("tempfile");
            let back = file.try_clone().expect("try_clone");
            let mut fh = FileHash::using(Some(&t), file, i % 2 == 0);
            let mut inline = InlineBuf::default();
            let mut src = part;
            while fh
                .fill(
                    &mut inline,
                    None,
                    &mut src,
                    |_| Ok::<(), io::Error>(()),
                    fail,
                )
                .expect("fill")
                > 0
            {}
            let (p, _file) = fh.finish().map_err(fail).expect("finish");
            pending.push((part, back, p));
        }
        for (part, mut back, p) in pending.into_iter().rev() {
            assert_eq!(p.resolve().expect("resolve"), Sha256Digest::of_bytes(part));
            let mut on_disk = Vec::new();
            std::io::Seek::rewind(&mut back).expect("rewind");
            back.read_to_end(&mut on_disk).expect("read back");
            assert!(on_disk == part, "a file written by the helper differs");
        }
        assert_eq!(
            lock(&t.state).free_files.len(),
            FILES,
            "every file entry is free"
        );

        // A file abandoned half-way: the helper closes it, writes nothing more, frees its entry,
        // and the next file is whole.
        let file = tempfile::tempfile().expect("tempfile");
        let mut fh = FileHash::using(Some(&t), file, true);
        let mut inline = InlineBuf(Vec::new());
        let mut src = &data[..];
        for _ in 0..2 {
            fh.fill(
                &mut inline,
                None,
                &mut src,
                |_| Ok::<(), io::Error>(()),
                fail,
            )
            .expect("fill");
        }
        // Refused by the sink: nothing of this chunk is written.
        let refused = fh.fill(
            &mut inline,
            None,
            &mut src,
            |_| Err(io::Error::other("refused")),
            fail,
        );
        assert!(refused.is_err());
        drop(fh);
        let (seen, on_disk, got) = through(Some(&t), &data[..CHUNK + 5], None, true);
        assert!(seen == data[..CHUNK + 5] && on_disk == seen);
        assert_eq!(got, Sha256Digest::of_bytes(&data[..CHUNK + 5]));
        assert_eq!(
            lock(&t.state).free_files.len(),
            FILES,
            "the abandoned file's entry is free"
        );

        // A write that fails on the helper comes back with the file's digest, as its errno;
        // on this thread it fails the chunk itself.
        let named = tempfile::NamedTempFile::new().expect("tempfile");
        for hand_over in [true, false] {
            let read_only = File::open(named.path()).expect("open");
            let mut fh = FileHash::using(Some(&t), read_only, hand_over);
            let mut inline = InlineBuf(Vec::new());
            let mut src = &data[..];
            let mut failed = None;
            loop {
                match fh.fill(
                    &mut inline,
                    None,
                    &mut src,
                    |_| Ok::<(), io::Error>(()),
                    fail,
                ) {
                    Ok(0) => break,
                    Ok(_) => {}
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                }
            }
            let errno = if hand_over {
                assert!(failed.is_none(), "the helper's write fails later");
                let (p, _) = fh.finish().map_err(fail).expect("finish");
                p.resolve().expect_err("a failed write").raw_os_error()
            } else {
                failed.expect("a failed write").raw_os_error()
            };
            assert_eq!(errno, Some(libc::EBADF), "hand-over {hand_over}");
        }
        assert_eq!(lock(&t.state).free_files.len(), FILES);
        // A task runs on the thread itself.
        let me = std::thread::current().id();
        let there = t
            .run(move || std::thread::current().id() != me)
            .expect("run");
        assert!(there);
    }
}
