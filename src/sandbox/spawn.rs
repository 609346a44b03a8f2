//! Starting the child: the artifact memfd (copied, hashed and sealed by [`SealedArtifact`]), the
//! request pipe whose last frame follows once the memfd is sealed ([`RequestTail`]), and an
//! exec'd child ([`ExecChild`], possibly started ahead of the request) or a zygote's spare,
//! handed exactly five fds, with an empty environment.
//!
//! Never a bare `fork` of the (possibly multi-threaded) parent: std's `Command` spawns with no
//! code of ours between fork and exec (posix_spawn; docs/sandbox.md, trap 1), and the request's
//! fds are sent to the new image over its socket. All confinement happens in the new image.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::process::{Child, Stdio};

use nix::fcntl::{FcntlArg, OFlag, SealFlag, fcntl};
use nix::sys::memfd::{MFdFlags, memfd_create};

use super::child_binary::ChildBinary;
use super::supervise::Running;
use super::wire::Ids;
use super::zygote::Zygote;
use crate::digest::{Hasher, Sha256Digest};
use crate::extract::policy::Limits;

/// The hidden subcommand the child runs under.
pub const CHILD_SUBCOMMAND: &str = "sandbox-child";

/// The artifact bytes in a sealed memfd: the child reads exactly what the parent hashed.
pub struct SealedArtifact {
    file: File,
    facts: SealedFacts,
}

impl SealedArtifact {
    /// Copy at most `max_bytes` from `src` into a new memfd, hashing on the way, then seal it
    /// against writing, growing, shrinking and further seal changes.
    ///
    /// Callers pass one byte more than the artifact-size limit, so an oversized artifact is
    /// still recognised (and rejected by the engine) without buffering all of it.
    pub fn copy_from(src: impl Read, max_bytes: u64) -> io::Result<Self> {
        Self::fill(Self::memfd()?, src, max_bytes)
    }

    /// A new, empty memfd that can be sealed: hand it to the child, then [`SealedArtifact::fill`]
    /// it while the child confines itself.
    pub fn memfd() -> io::Result<File> {
        let fd = memfd_create(
            "skillbox-artifact",
            MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING,
        )?;
        Ok(File::from(fd))
    }

    /// [`SealedArtifact::copy_from`] into `file`, a fresh [`SealedArtifact::memfd`].
    pub fn fill(file: File, src: impl Read, max_bytes: u64) -> io::Result<Self> {
        Self::fill_expecting(file, src, max_bytes, None)
    }

    /// [`SealedArtifact::fill`], told how many bytes `src` will likely yield (a file's size):
    /// from [`HASH_ASIDE_AFTER`] bytes on, the hashing thread starts with the first byte instead
    /// of after the first 4 MiB. A hint only: the bytes copied, and so the digest, are `src`'s
    /// whatever it turns out to yield.
    fn fill_expecting(
        mut file: File,
        src: impl Read,
        max_bytes: u64,
        expected: Option<u64>,
    ) -> io::Result<Self> {
        let mut hasher = Hasher::new();
        let mut src = src.take(max_bytes);
        // Hashed on this thread up to here, the rest on a second one.
        let here = match expected {
            Some(n) if n.min(max_bytes) >= HASH_ASIDE_AFTER => 0,
            _ => HASH_ASIDE_AFTER,
        };
        // Below glibc's mmap threshold (128 KiB), so the buffer comes from the heap and is not
        // mapped, faulted in and unmapped again on every request.
        let mut buf = vec![0u8; 64 * 1024];
        while hasher.bytes_hashed() < here {
            let n = match src.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            hasher.update(&buf[..n]);
            file.write_all(&buf[..n])?;
        }
        if hasher.bytes_hashed() >= here {
            let at = hasher.bytes_hashed();
            hasher = copy_hashing_aside(&mut src, &file, at, hasher)?;
        }
        let (digest, size) = hasher.finish();
        Self::seal(file, size, digest)
    }

    /// [`SealedArtifact::fill`] from a source that hashed its bytes on their way in: they are
    /// written as they come, without a second pass, and the digest is the source's. At most
    /// `max_bytes`: a source that yields more is refused (cutting it would seal bytes other
    /// than those its digest covers).
    pub fn fill_hashed(
        mut file: File,
        mut src: impl HashedSource,
        max_bytes: u64,
    ) -> io::Result<Self> {
        let mut size = 0u64;
        loop {
            let piece = src.next_piece()?;
            if piece.is_empty() {
                break;
            }
            size = size.saturating_add(piece.len() as u64);
            if size > max_bytes {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("the source yielded more than {max_bytes} bytes"),
                ));
            }
            file.write_all(piece)?;
        }
        let digest = src.digest().ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidData, "the source named no digest")
        })?;
        Self::seal(file, size, digest)
    }

    fn seal(file: File, size: u64, digest: Sha256Digest) -> io::Result<Self> {
        let seals = SealFlag::F_SEAL_WRITE
            | SealFlag::F_SEAL_GROW
            | SealFlag::F_SEAL_SHRINK
            | SealFlag::F_SEAL_SEAL;
        retry_busy(|| fcntl(file.as_fd(), FcntlArg::F_ADD_SEALS(seals)).map(drop))?;
        Ok(Self {
            file,
            facts: SealedFacts { size, digest },
        })
    }

    /// [`SealedArtifact::fill`] `memfd` from a file, from offset 0 whatever its current position
    /// (the engine reads positionally too), bounded one byte past `limits.max_artifact_bytes`.
    pub fn fill_from_file(memfd: File, file: &File, limits: &Limits) -> io::Result<Self> {
        let expected = file.metadata().ok().map(|m| m.len());
        Self::fill_expecting(
            memfd,
            Positioned { file, pos: 0 },
            limits.max_artifact_bytes.saturating_add(1),
            expected,
        )
    }

    pub fn size(&self) -> u64 {
        self.facts.size
    }

    pub fn digest(&self) -> Sha256Digest {
        self.facts.digest
    }

    pub fn file(&self) -> &File {
        &self.file
    }

    /// Whether [`SealedArtifact::release`] closes the memfd on a thread of its own (it is
    /// [`FREE_ASIDE_FROM`] bytes or more): such a memfd is given up once the child that held it
    /// is gone, so ours is the last close and the child's exit does not free its pages (let go
    /// while the child ran, its last unmapping freed them in its exit, which the caller waits
    /// for: the 2,000-file tar 1.5 ms slower, bench-results/throughput.md). A smaller one is
    /// given up as soon as the child holds it: held to the child's end, its freeing on the
    /// broker's side cost the broker 2-3 % of its requests a second.
    pub(crate) fn frees_aside(&self) -> bool {
        self.facts.size >= FREE_ASIDE_FROM
    }

    /// Give the memfd up (once the child holds it: [`SealedArtifact::frees_aside`]), keeping
    /// its size and digest. Freeing a large memfd's pages is the last close's work (about
    /// 0.85 ms per 4 MiB here: 8.5 ms for the 2,000-file tar): past [`FREE_ASIDE_FROM`] bytes
    /// the memfd is closed on a thread of its own while the caller re-checks the tree; the
    /// thread is joined when the returned [`Freeing`] is dropped, so no work outlives the call.
    pub(crate) fn release(self) -> (SealedFacts, Freeing) {
        let facts = self.facts;
        if !self.frees_aside() {
            return (facts, Freeing(None));
        }
        let file = self.file;
        // If the thread cannot be made, the closure (and with it the memfd) is dropped here.
        let handle = std::thread::Builder::new()
            .name("skillbox-free".into())
            .spawn(move || drop(file))
            .ok();
        (facts, Freeing(handle))
    }
}

/// From this size on a released memfd is closed on a thread of its own: below it, freeing its
/// pages costs less than starting and joining the thread.
const FREE_ASIDE_FROM: u64 = 4 * 1024 * 1024;

/// What the parent keeps of a [`SealedArtifact`] once the child holds it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SealedFacts {
    pub(crate) size: u64,
    pub(crate) digest: Sha256Digest,
}

/// A released memfd being closed on its own thread; dropping this waits for it.
pub(crate) struct Freeing(Option<std::thread::JoinHandle<()>>);

impl Drop for Freeing {
    fn drop(&mut self) {
        if let Some(h) = self.0.take() {
            // The thread only closes a file: it cannot panic in a way worth reporting.
            let _ = h.join();
        }
    }
}

/// Attempts at sealing before its `EBUSY` is the answer.
const SEAL_ATTEMPTS: u32 = 5;

/// Run `seal` again while it fails with `EBUSY`, a few times. `F_SEAL_WRITE` is refused with
/// `EBUSY` while some page of the memfd holds a reference besides its mappings; nobody maps
/// ours writable, but the kernel itself may hold a page a moment (migrating or compacting
/// memory after a large artifact, we think: seen once in some hundreds of 200 MB copies, a
/// `skillbox extract` failing with "Device or resource busy"), and it waits only about 150 ms
/// for such a page before answering. Only `EBUSY` is retried; the memfd is never used unsealed:
/// the last failure is the answer.
fn retry_busy(mut seal: impl FnMut() -> nix::Result<()>) -> io::Result<()> {
    let mut attempt = 1;
    loop {
        match seal() {
            Err(nix::errno::Errno::EBUSY) if attempt < SEAL_ATTEMPTS => {
                std::thread::sleep(std::time::Duration::from_millis(20 * u64::from(attempt)));
                attempt += 1;
            }
            r => return r.map_err(io::Error::from),
        }
    }
}

/// Bytes hashed on their way in by a caller that refuses a mismatch before the child is told
/// anything: the broker hashes an upload chunk by chunk as it arrives, so the sandbox need not
/// hash it again ([`SealedArtifact::fill_hashed`]).
pub trait HashedSource {
    /// The next piece, empty at the end.
    fn next_piece(&mut self) -> io::Result<&[u8]>;
    /// Once the end was reached: the digest of every piece returned, in order.
    fn digest(&self) -> Option<Sha256Digest>;
}

/// Past this many bytes the rest of an artifact is hashed on a second thread while this one
/// reads (all of it when a file's size says it will get there), the two sharing the writes: the
/// passes over a large artifact then cost about half (a 40 MB artifact spends some 20 ms in
/// each here), for one thread start.
const HASH_ASIDE_AFTER: u64 = 4 * 1024 * 1024;
/// The chunk handed between the two threads. Small enough, we think, that the chunks in flight
/// are still in the copying core's cache when the other hashes them: 128 KiB filled a 40 MB
/// memfd in 25.2 ms and a 104 MB one in 60.2, 1 MiB in 26.5 and 65.9 (64 KiB: 26.3, 63.1;
/// 32 KiB: 29.7, 71.3; bench-results/throughput.md).
const ASIDE_CHUNK: usize = 128 * 1024;
/// Chunks read and not yet written, at most: the buffers the two threads pass around.
const IN_FLIGHT: usize = 4;

/// One chunk of the artifact, read into a buffer of its own, bound for offset `at`.
struct Chunk {
    at: u64,
    buf: Vec<u8>,
    len: usize,
}

/// What the two threads of [`copy_hashing_aside`] share besides the chunks to hash.
#[derive(Default)]
struct Copying {
    /// Chunks hashed and not yet written, for whichever thread is free first.
    hashed: std::collections::VecDeque<Chunk>,
    /// Buffers written out, to read into again.
    free: Vec<Vec<u8>>,
    /// Buffers made so far (at most [`IN_FLIGHT`]).
    made: usize,
    /// Chunks read and not yet written.
    unwritten: usize,
    failed: Option<io::Error>,
}

/// [`Copying`] under its lock, with the condition either thread waits on.
struct Shared<'f> {
    state: std::sync::Mutex<Copying>,
    changed: std::sync::Condvar,
    file: &'f File,
}

impl Shared<'_> {
    fn lock(&self) -> std::sync::MutexGuard<'_, Copying> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn wait<'g>(
        &self,
        guard: std::sync::MutexGuard<'g, Copying>,
    ) -> std::sync::MutexGuard<'g, Copying> {
        self.changed
            .wait(guard)
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Write the oldest hashed chunk, if there is one (`false` if not): at its own offset,
    /// from the buffer it was hashed in, then give the buffer back.
    fn write_one(&self) -> bool {
        let Some(chunk) = self.lock().hashed.pop_front() else {
            return false;
        };
        let written = self.file.write_all_at(&chunk.buf[..chunk.len], chunk.at);
        let mut st = self.lock();
        st.unwritten -= 1;
        st.free.push(chunk.buf);
        if let Err(e) = written {
            st.failed.get_or_insert(e);
        }
        drop(st);
        self.changed.notify_all();
        true
    }

    /// Write hashed chunks, or wait for the other thread, until `done` holds (the lock is then
    /// returned held) or either thread has failed (its error, taken).
    fn write_until(
        &self,
        done: impl Fn(&Copying) -> bool,
    ) -> io::Result<std::sync::MutexGuard<'_, Copying>> {
        let mut st = self.lock();
        loop {
            if let Some(e) = st.failed.take() {
                return Err(e);
            }
            if done(&st) {
                return Ok(st);
            }
            if st.hashed.is_empty() {
                st = self.wait(st);
            } else {
                drop(st);
                self.write_one();
                st = self.lock();
            }
        }
    }
}

/// Marks the copy failed if the hashing thread unwinds, waking the other thread.
struct TellOnPanic<'a, 'f>(&'a Shared<'f>);

impl Drop for TellOnPanic<'_, '_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0
                .lock()
                .failed
                .get_or_insert_with(|| io::Error::other("the hashing thread panicked"));
            self.0.changed.notify_all();
        }
    }
}

/// Copy the rest of `src` into `file` from offset `at` while a second thread feeds every chunk,
/// in order, to `hasher`. A chunk is read into a buffer of its own, hashed, and written at its
/// offset from that same buffer, so the digest is of exactly the bytes written, each once.
///
/// Either thread writes a hashed chunk: this one when it has no free buffer to read into, the
/// hashing one when no chunk waits to be hashed. With this thread reading and writing every
/// chunk, as before, it was the slower of the two: filling from a 42 MB file took 10.5 ms of
/// reads and 16-25 ms of writes here against 24-26 ms of hashing there (the CLI, files2000.tar;
/// bench-results/throughput.md), so the copy, not the digest, set when the child could start.
fn copy_hashing_aside(
    src: &mut impl Read,
    file: &File,
    at: u64,
    hasher: Hasher,
) -> io::Result<Hasher> {
    let shared = Shared {
        state: std::sync::Mutex::new(Copying::default()),
        changed: std::sync::Condvar::new(),
        file,
    };
    let (to_hash, hashing) = std::sync::mpsc::sync_channel::<Chunk>(IN_FLIGHT);
    std::thread::scope(|s| {
        let shared = &shared;
        let worker = s.spawn(move || {
            // Should this thread panic, the other is told instead of waiting for it forever.
            let _told = TellOnPanic(shared);
            let mut hasher = hasher;
            loop {
                let chunk = match hashing.try_recv() {
                    Ok(chunk) => chunk,
                    Err(std::sync::mpsc::TryRecvError::Empty) => {
                        // Nothing to hash yet: write what is hashed, else wait for a chunk.
                        if shared.write_one() {
                            continue;
                        }
                        match hashing.recv() {
                            Ok(chunk) => chunk,
                            Err(_) => break,
                        }
                    }
                    Err(std::sync::mpsc::TryRecvError::Disconnected) => break,
                };
                hasher.update(&chunk.buf[..chunk.len]);
                shared.lock().hashed.push_back(chunk);
                shared.changed.notify_all();
            }
            hasher
        });
        let read = read_chunks(src, at, shared, &to_hash);
        // No more chunks: the hashing thread ends once it has hashed those sent.
        drop(to_hash);
        // Write what is left, with the hashing thread while it is still at it.
        let written = read.and_then(|()| shared.write_until(|st| st.unwritten == 0).map(drop));
        let hasher = worker
            .join()
            .map_err(|_| io::Error::other("the hashing thread panicked"))?;
        written.map(|()| hasher)
    })
}

/// The reading side of [`copy_hashing_aside`]: every chunk of `src`, from offset `at`, sent to
/// be hashed in order; when no buffer is free, hashed chunks are written until one is.
fn read_chunks(
    src: &mut impl Read,
    mut at: u64,
    shared: &Shared<'_>,
    to_hash: &std::sync::mpsc::SyncSender<Chunk>,
) -> io::Result<()> {
    loop {
        let mut st = shared.write_until(|st| !st.free.is_empty() || st.made < IN_FLIGHT)?;
        let mut buf = match st.free.pop() {
            Some(buf) => buf,
            None => {
                st.made += 1;
                // Zeroed once, when made: a chunk carries its filled length.
                vec![0u8; ASIDE_CHUNK]
            }
        };
        drop(st);
        // A whole chunk unless the source ends first.
        let mut len = 0;
        while len < buf.len() {
            match src.read(&mut buf[len..]) {
                Ok(0) => break,
                Ok(n) => len += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if len == 0 {
            return Ok(());
        }
        shared.lock().unwritten += 1;
        if to_hash.send(Chunk { at, buf, len }).is_err() {
            return Err(io::Error::other("the hashing thread stopped"));
        }
        at += len as u64;
    }
}

/// `Read` over a file by positioned reads, starting at `pos`.
struct Positioned<'a> {
    file: &'a File,
    pos: u64,
}

impl Read for Positioned<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.file.read_at(buf, self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

/// Start a child with the request's first two frames (`request_json`, then the BPF `program`)
/// on fd 0: a spare of the `zygote` when one is given, else an exec'd child (the one started
/// `ahead` when there is one, or one started now). Either way the child starts `child::main`
/// with the same five fds, and confines itself while the caller fills and seals `artifact`; it
/// reads nothing of the artifact before the caller has [`RequestTail::finish`]ed the request
/// with the sealed digest.
pub(crate) fn spawn(
    start: Start<'_>,
    request_json: &[u8],
    program: &[u8],
    artifact: BorrowedFd<'_>,
    staging: &OwnedFd,
) -> io::Result<(Running, RequestTail)> {
    let mut request = super::wire::frame(request_json)?;
    request.extend_from_slice(&super::wire::frame(program)?);
    let (request_r, tail) = request_pipe(&request, 4 + super::wire::SEALED_DIGEST_BYTES)?;
    let (answer_r, answer_w) = nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK)?;
    let (log_r, log_w) = nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK)?;
    // The child's ends must block: it writes with plain write_all.
    set_blocking(&answer_w)?;
    set_blocking(&log_w)?;
    let fds = [
        request_r.as_fd(),
        answer_w.as_fd(),
        log_w.as_fd(),
        artifact,
        staging.as_fd(),
    ];
    let pid = match start {
        Start::Zygote(zygote) => zygote.fork(fds)?,
        Start::Exec {
            binary,
            run_as,
            ahead,
        } => {
            let child = match ahead.map(|a| a.hand(&fds)) {
                Some(Ok(child)) => child,
                // None started ahead, or it died while it waited (it was reaped then): one now.
                None | Some(Err(_)) => ExecChild::start(binary, run_as)?.hand(&fds)?,
            };
            child.id()
        }
    };
    // Our copies of the child's ends go now, so EOF means the child is done.
    drop((request_r, answer_w, log_w));
    let running = Running::from_pid(pid, File::from(answer_r), File::from(log_r))?;
    Ok((running, tail))
}

/// How [`spawn`] starts the child.
pub(crate) enum Start<'a> {
    /// A spare forked by this zygote.
    Zygote(&'a Zygote),
    /// An `exec` of `binary` for `run_as`: the child started `ahead`, if any, else a new one.
    Exec {
        binary: &'a ChildBinary,
        run_as: Ids,
        ahead: Option<ExecChild>,
    },
}

/// An exec'd child waiting for its order (`child::run`): started with the parent's pid and the
/// identity on its command line and a socket on fd 0, it has taken (or is taking) the process
/// steps of confinement and holds no fd of any request. Dropped unused, it is killed and
/// reaped.
pub struct ExecChild {
    child: Option<Child>,
    socket: OwnedFd,
    run_as: Ids,
    /// The binary it was executed from.
    binary: ChildBinary,
}

impl ExecChild {
    /// `skillbox-child sandbox-child <our pid> <uid>:<gid>` with the socket on fd 0, `/dev/null`
    /// on 1 and 2 and an empty environment, executed through the child binary's fd
    /// (`child_binary.rs`), never its path.
    pub(crate) fn start(binary: &ChildBinary, run_as: Ids) -> io::Result<Self> {
        // The child closes every fd but its socket itself, before anything else (`child::run`).
        let (child, ours) = binary.spawn(CHILD_SUBCOMMAND, run_as, Stdio::null())?;
        Ok(Self {
            child: Some(child),
            socket: ours,
            run_as,
            binary: binary.clone(),
        })
    }

    /// The identity it takes.
    pub(crate) fn run_as(&self) -> Ids {
        self.run_as
    }

    /// The binary it runs.
    pub(crate) fn binary(&self) -> &ChildBinary {
        &self.binary
    }

    /// Its pid (tests check that it is gone).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Send the order; the child is then the request's, for the caller to supervise and reap.
    fn hand(mut self, fds: &[BorrowedFd<'_>; 5]) -> io::Result<Child> {
        super::zygote::send_order(self.socket.as_fd(), fds)?;
        self.child
            .take()
            .ok_or_else(|| io::Error::other("the child was handed an order already"))
    }
}

impl Drop for ExecChild {
    fn drop(&mut self) {
        // Unused: it holds nothing of any request; kill and reap it (our unreaped child, so the
        // pid cannot have been recycled).
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The parent's end of a child's request pipe, for the last frame.
pub struct RequestTail(File);

impl RequestTail {
    /// Send the digest of the sealed artifact, the request's last frame, and close the pipe.
    /// Fails only if the child is gone (its end is then classified as usual).
    pub fn finish(mut self, digest: &Sha256Digest) -> io::Result<()> {
        // Non-blocking, and room for it was reserved when the pipe was made.
        self.0.write_all(&super::wire::frame(digest.as_bytes())?)
    }
}

/// A pipe whose read end already holds `head`, with room reserved for `tail` more bytes; the
/// write end (non-blocking) is returned for those.
fn request_pipe(head: &[u8], tail: usize) -> io::Result<(OwnedFd, RequestTail)> {
    let (r, w) = nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK)?;
    // The default capacity is 64 KiB but may be a single page for a user over
    // pipe-user-pages-soft; ask for what we need (requests are a few KiB).
    let need = head.len().saturating_add(tail);
    let capacity = fcntl(w.as_fd(), FcntlArg::F_GETPIPE_SZ)?;
    if usize::try_from(capacity).unwrap_or(0) < need {
        let want = i32::try_from(need).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        fcntl(w.as_fd(), FcntlArg::F_SETPIPE_SZ(want))?;
    }
    let mut w = File::from(w);
    // Non-blocking: a request that does not fit is an error here, never a hang.
    w.write_all(head)?;
    set_blocking(&r)?;
    Ok((r, RequestTail(w)))
}

fn set_blocking(fd: &OwnedFd) -> io::Result<()> {
    let flags = OFlag::from_bits_truncate(fcntl(fd.as_fd(), FcntlArg::F_GETFL)?);
    fcntl(fd.as_fd(), FcntlArg::F_SETFL(flags - OFlag::O_NONBLOCK))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealing_is_tried_again_while_busy_and_only_then() {
        for (busy, want) in [
            (0, Ok(())),
            (2, Ok(())),
            (SEAL_ATTEMPTS - 1, Ok(())),
            (SEAL_ATTEMPTS, Err(libc::EBUSY)),
        ] {
            let mut calls = 0;
            let got = retry_busy(|| {
                calls += 1;
                if calls <= busy {
                    Err(nix::errno::Errno::EBUSY)
                } else {
                    Ok(())
                }
            });
            assert_eq!(
                got.map_err(|e| e.raw_os_error().unwrap_or(0)),
                want,
                "{busy} busy answers"
            );
            assert_eq!(
                calls,
                busy.min(SEAL_ATTEMPTS - 1) + 1,
                "{busy} busy answers"
            );
        }
        // Any other error is the answer at once.
        let mut calls = 0;
        let got = retry_busy(|| {
            calls += 1;
            Err(nix::errno::Errno::EPERM)
        });
        assert_eq!(
            got.map_err(|e| e.raw_os_error()).err(),
            Some(Some(libc::EPERM))
        );
        assert_eq!(calls, 1);
    }
    use std::io::Cursor;

    /// Not a multiple of any chunk size, and different at every offset.
    fn bytes(len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| u8::try_from((i * 7 + i / 4093) % 251).unwrap_or(0))
            .collect()
    }

    #[test]
    fn a_released_artifact_keeps_its_facts_and_a_large_one_is_closed_aside() {
        for (len, aside) in [(1000usize, false), (FREE_ASIDE_FROM as usize + 1, true)] {
            let data = vec![7u8; len];
            let sealed = SealedArtifact::copy_from(Cursor::new(&data), u64::MAX).expect("copy");
            let (size, digest) = (sealed.size(), sealed.digest());
            let (facts, freeing) = sealed.release();
            assert_eq!((facts.size, facts.digest), (size, digest), "{len}");
            assert_eq!(facts.size, len as u64);
            assert_eq!(
                freeing.0.is_some(),
                aside,
                "{len}: closed on a thread of its own"
            );
            drop(freeing);
        }
    }

    fn contents(sealed: &SealedArtifact) -> Vec<u8> {
        let mut out = Vec::new();
        Positioned {
            file: sealed.file(),
            pos: 0,
        }
        .read_to_end(&mut out)
        .expect("read_to_end");
        out
    }

    #[test]
    fn small_and_large_artifacts_are_copied_and_hashed_exactly() {
        // Below, at and well past the point where hashing moves to a second thread.
        let aside = usize::try_from(HASH_ASIDE_AFTER).unwrap_or(usize::MAX);
        for len in [0, 1, 65_537, aside, aside + 1, 3 * aside + ASIDE_CHUNK / 3] {
            let data = bytes(len);
            let sealed = SealedArtifact::copy_from(Cursor::new(&data), u64::MAX)
                .unwrap_or_else(|e| panic!("{len}: {e}"));
            assert_eq!(sealed.size(), len as u64);
            assert_eq!(sealed.digest(), Sha256Digest::of_bytes(&data), "{len}");
            assert!(contents(&sealed) == data, "{len}: the memfd differs");
        }
    }

    /// A source that yields a few bytes fewer than asked, in varying amounts.
    struct Ragged<'a> {
        data: &'a [u8],
        calls: usize,
    }

    impl Read for Ragged<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.calls += 1;
            let n = buf
                .len()
                .min(self.data.len())
                .saturating_sub(self.calls % 7);
            let n = if n == 0 {
                buf.len().min(self.data.len())
            } else {
                n
            };
            buf[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }

    #[test]
    fn chunks_of_any_length_are_written_once_each_at_their_offsets() {
        // Short reads make chunks of uneven lengths, so every offset is other than a multiple
        // of the chunk; far more chunks than buffers, so both threads write some.
        let data = bytes(40 * ASIDE_CHUNK + 12_345);
        let src = Ragged {
            data: &data,
            calls: 0,
        };
        let sealed = SealedArtifact::fill_expecting(
            SealedArtifact::memfd().expect("memfd"),
            src,
            u64::MAX,
            Some(data.len() as u64),
        )
        .expect("fill");
        assert_eq!(sealed.size(), data.len() as u64);
        assert_eq!(sealed.digest(), Sha256Digest::of_bytes(&data));
        assert!(contents(&sealed) == data, "the memfd differs");
    }

    #[test]
    fn a_write_that_fails_fails_the_copy_and_both_threads_end() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("ro");
        std::fs::write(&path, b"").expect("write");
        // Opened for reading only: every write is refused (EBADF), by whichever thread.
        let read_only = File::open(&path).expect("open");
        let data = bytes(20 * ASIDE_CHUNK);
        let got = copy_hashing_aside(&mut Cursor::new(&data), &read_only, 0, Hasher::new());
        assert!(got.is_err(), "a refused write went unnoticed");
    }

    #[test]
    fn a_file_is_copied_and_hashed_exactly_whatever_its_size_says() {
        let dir = tempfile::tempdir().expect("tempdir");
        let aside = usize::try_from(HASH_ASIDE_AFTER).unwrap_or(usize::MAX);
        // Under the hint, at it, past it, and past it by less than a chunk.
        for len in [100, aside - 1, aside, 3 * aside + ASIDE_CHUNK / 3] {
            let data = bytes(len);
            let path = dir.path().join(format!("a{len}"));
            std::fs::write(&path, &data).expect("write");
            let file = File::open(&path).expect("open");
            let limits = Limits::default();
            let sealed = SealedArtifact::fill_from_file(
                SealedArtifact::memfd().expect("memfd"),
                &file,
                &limits,
            )
            .unwrap_or_else(|e| panic!("{len}: {e}"));
            assert_eq!(sealed.size(), len as u64);
            assert_eq!(sealed.digest(), Sha256Digest::of_bytes(&data), "{len}");
            assert!(contents(&sealed) == data, "{len}: the memfd differs");
        }
        // The size is a hint: a bound under it still holds, and the digest is of what was sealed.
        let data = bytes(2 * aside);
        let sealed = SealedArtifact::fill_expecting(
            SealedArtifact::memfd().expect("memfd"),
            Cursor::new(&data),
            HASH_ASIDE_AFTER + 5,
            Some(data.len() as u64),
        )
        .expect("fill");
        let cut = aside + 5;
        assert_eq!(sealed.size(), cut as u64);
        assert_eq!(sealed.digest(), Sha256Digest::of_bytes(&data[..cut]));
        // A source shorter than it said.
        let short = bytes(1000);
        let sealed = SealedArtifact::fill_expecting(
            SealedArtifact::memfd().expect("memfd"),
            Cursor::new(&short),
            u64::MAX,
            Some(HASH_ASIDE_AFTER * 2),
        )
        .expect("fill");
        assert_eq!(sealed.size(), 1000);
        assert_eq!(sealed.digest(), Sha256Digest::of_bytes(&short));
    }

    #[test]
    fn the_bound_holds_on_both_paths() {
        let data = bytes(3 * usize::try_from(HASH_ASIDE_AFTER).unwrap_or(0));
        for max in [10, HASH_ASIDE_AFTER + 5] {
            let sealed = SealedArtifact::copy_from(Cursor::new(&data), max).expect("copy_from");
            let max_len = usize::try_from(max).unwrap_or(0);
            assert_eq!(sealed.size(), max);
            assert_eq!(sealed.digest(), Sha256Digest::of_bytes(&data[..max_len]));
        }
    }

    /// A source that fails after `ok` bytes.
    struct FailsAfter {
        ok: usize,
    }

    impl Read for FailsAfter {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.ok == 0 {
                return Err(io::Error::other("source broke"));
            }
            let n = buf.len().min(self.ok);
            buf[..n].fill(b'x');
            self.ok -= n;
            Ok(n)
        }
    }

    #[test]
    fn a_read_error_is_reported_on_both_paths() {
        let aside = usize::try_from(HASH_ASIDE_AFTER).unwrap_or(0);
        for ok in [100, aside + ASIDE_CHUNK + 17] {
            let err = SealedArtifact::copy_from(FailsAfter { ok }, u64::MAX)
                .err()
                .unwrap_or_else(|| panic!("{ok}: a broken source was sealed"));
            assert_eq!(err.to_string(), "source broke", "{ok}");
        }
    }

    /// Pieces as a caller that hashed them hands them over, with the digest it names.
    struct Pieces {
        pieces: std::vec::IntoIter<Vec<u8>>,
        cur: Vec<u8>,
        named: Option<Sha256Digest>,
        ended: bool,
    }

    impl Pieces {
        fn new(pieces: Vec<Vec<u8>>, named: Option<Sha256Digest>) -> Self {
            Pieces {
                pieces: pieces.into_iter(),
                cur: Vec::new(),
                named,
                ended: false,
            }
        }
    }

    impl HashedSource for Pieces {
        fn next_piece(&mut self) -> io::Result<&[u8]> {
            match self.pieces.next() {
                Some(p) => self.cur = p,
                None => {
                    self.ended = true;
                    self.cur.clear();
                }
            }
            Ok(&self.cur)
        }

        fn digest(&self) -> Option<Sha256Digest> {
            self.named.filter(|_| self.ended)
        }
    }

    #[test]
    fn pieces_hashed_on_their_way_in_are_sealed_with_the_digest_named() {
        let data = bytes(300_001);
        let pieces: Vec<Vec<u8>> = data.chunks(65_536).map(<[u8]>::to_vec).collect();
        let digest = Sha256Digest::of_bytes(&data);
        let sealed = SealedArtifact::fill_hashed(
            SealedArtifact::memfd().expect("memfd"),
            Pieces::new(pieces.clone(), Some(digest)),
            300_001,
        )
        .expect("fill_hashed");
        assert_eq!(sealed.size(), 300_001);
        assert_eq!(sealed.digest(), digest);
        assert!(contents(&sealed) == data, "the memfd differs");
        // Sealed: no more writing.
        assert!((&sealed.file).write_all(b"x").is_err());

        // More than the bound is refused, not cut (the digest would cover other bytes).
        let over = SealedArtifact::fill_hashed(
            SealedArtifact::memfd().expect("memfd"),
            Pieces::new(pieces.clone(), Some(digest)),
            300_000,
        );
        assert_eq!(
            over.err().map(|e| e.kind()),
            Some(io::ErrorKind::InvalidData)
        );
        // A source that names no digest is refused.
        let unnamed = SealedArtifact::fill_hashed(
            SealedArtifact::memfd().expect("memfd"),
            Pieces::new(pieces, None),
            u64::MAX,
        );
        assert_eq!(
            unnamed.err().map(|e| e.kind()),
            Some(io::ErrorKind::InvalidData)
        );
    }
}
