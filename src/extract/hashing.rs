//! Hashing files on a second thread while the first decodes and writes them.
//!
//! In the confined child, SHA-256 of every file is about a third of the time of a large
//! artifact; on a second core it overlaps the decoding and the writing instead of adding to
//! them. The thread is started before confinement and confined with the process (the child
//! does that: `sandbox::child`); here is only what it does and how the two threads talk.
//!
//! The two threads talk through two pipes and share a few fixed buffers, so that, once confined,
//! the helper makes no system call but `read` and `write` on its pipes, both already on the
//! child's allow-list: no `futex` (a buffer's lock is only ever taken by the thread the pipe
//! protocol hands it to, so it is never contended and never waits), and no allocation (the
//! buffers are allocated by the decoding thread, and a glibc thread arena growing would need
//! `mprotect`, which the filter kills).
//!
//! A file under 16 KiB is hashed by the decoding thread itself: a message through the pipes
//! costs more than hashing a few kilobytes.

use std::fs::File;
use std::io::{self, Read, Write};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use crate::digest::{Hasher, Sha256Digest};

/// Bytes per buffer handed to the helper: large enough that the pipe round trip per buffer is
/// small against hashing it (about 0.2 ms at 1.5 GB/s), small enough to stay in the caches.
pub(crate) const CHUNK: usize = 256 * 1024;
/// A file in one buffer goes to the helper from this size on; a smaller one is hashed where it
/// was read (the message and the wake-up would cost more than hashing it).
const OFFLOAD_MIN: usize = 16 * 1024;
/// Buffers in flight: the decoder fills one while the helper hashes another.
const SLOTS: usize = 4;
/// Every message is this long: a pipe write of at most `PIPE_BUF` bytes is atomic, so a read of
/// this many bytes always gets exactly one message.
const MSG: usize = 48;

const OP_DATA: u8 = 1;
const OP_FINISH: u8 = 2;
const OP_RUN: u8 = 3;
const OP_FREE: u8 = 11;
const OP_DIGEST: u8 = 12;
const OP_RAN: u8 = 13;

type Task = Box<dyn FnOnce() + Send>;

struct Shared {
    slots: Vec<Mutex<Vec<u8>>>,
    /// A job for the helper itself (its own Landlock restriction; a probe).
    task: Mutex<Option<Task>>,
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
    /// The one thread that may use it, set by [`install`].
    owner: OnceLock<std::thread::ThreadId>,
}

#[derive(Default)]
struct State {
    free: Vec<usize>,
    next_seq: u64,
    /// Digests that arrived while waiting for something else, by file sequence number.
    done: std::collections::HashMap<u64, Sha256Digest>,
}

fn msg(op: u8, slot: usize, len: usize, seq: u64, digest: &[u8; 32]) -> [u8; MSG] {
    let mut m = [0u8; MSG];
    m[0] = op;
    m[1] = u8::try_from(slot).unwrap_or(u8::MAX);
    m[4..8].copy_from_slice(&u32::try_from(len).unwrap_or(u32::MAX).to_le_bytes());
    m[8..16].copy_from_slice(&seq.to_le_bytes());
    m[16..48].copy_from_slice(digest);
    m
}

struct Msg {
    op: u8,
    slot: usize,
    len: usize,
    seq: u64,
    digest: [u8; 32],
}

fn parse(m: &[u8; MSG]) -> Msg {
    let mut digest = [0u8; 32];
    digest.copy_from_slice(&m[16..48]);
    Msg {
        op: m[0],
        slot: usize::from(m[1]),
        len: u32::from_le_bytes([m[4], m[5], m[6], m[7]]) as usize,
        seq: u64::from_le_bytes([m[8], m[9], m[10], m[11], m[12], m[13], m[14], m[15]]),
        digest,
    }
}

fn helper_loop(mut from_main: File, mut to_main: File, shared: Arc<Shared>) {
    let mut hasher = Hasher::new();
    let mut current: Option<u64> = None;
    let mut raw = [0u8; MSG];
    let zero = [0u8; 32];
    loop {
        // The decoding side is gone (only outside the child, whose helper lives as long as the
        // process): nothing left to do.
        if from_main.read_exact(&mut raw).is_err() {
            return;
        }
        let m = parse(&raw);
        let reply = match m.op {
            OP_DATA => {
                if current != Some(m.seq) {
                    hasher = Hasher::new();
                    current = Some(m.seq);
                }
                if let Some(slot) = shared.slots.get(m.slot) {
                    let buf = lock(slot);
                    hasher.update(&buf[..m.len.min(buf.len())]);
                }
                msg(OP_FREE, m.slot, 0, m.seq, &zero)
            }
            OP_FINISH => {
                if current != Some(m.seq) {
                    hasher = Hasher::new();
                }
                let (digest, _) = std::mem::replace(&mut hasher, Hasher::new()).finish();
                current = None;
                msg(OP_DIGEST, 0, 0, m.seq, digest.as_bytes())
            }
            OP_RUN => {
                let task = lock(&shared.task).take();
                if let Some(task) = task {
                    task();
                }
                msg(OP_RAN, 0, 0, 0, &zero)
            }
            _ => continue,
        };
        if to_main.write_all(&reply).is_err() {
            return;
        }
    }
}

impl HashThread {
    /// Start the helper. Call before confinement: it creates pipes and a thread, and warms the
    /// helper's allocator (a glibc arena is created with `mmap` and `mprotect` on a thread's
    /// first allocation, which the confined child could not do).
    pub fn spawn() -> io::Result<Self> {
        Self::spawn_with(pipe()?, pipe()?)
    }

    /// [`HashThread::spawn`] over two pipes the caller made, each as (read end, write end):
    /// the first carries work to the helper, the second its replies.
    pub fn spawn_with(work: (File, File), replies: (File, File)) -> io::Result<Self> {
        let (from_main, to) = work;
        let (from, to_main) = replies;
        let shared = Arc::new(Shared {
            slots: (0..SLOTS).map(|_| Mutex::new(Vec::new())).collect(),
            task: Mutex::new(None),
        });
        let theirs = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("skillbox-hash".into())
            // It hashes from shared buffers and keeps a few words of state.
            .stack_size(256 * 1024)
            .spawn(move || {
                let warm = std::hint::black_box(vec![0u8; 96 * 1024]);
                drop(warm);
                helper_loop(from_main, to_main, theirs)
            })?;
        let t = Self {
            to,
            from,
            shared,
            state: Mutex::new(State {
                free: (0..SLOTS).collect(),
                ..State::default()
            }),
            owner: OnceLock::new(),
        };
        // One round trip, so the thread has started (and taken its first allocation) before
        // the caller goes on to confine the process.
        t.run(|| ())?;
        Ok(t)
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
        self.send(&msg(OP_RUN, 0, 0, 0, &[0; 32]))?;
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
        let mut raw = [0u8; MSG];
        (&self.from).read_exact(&mut raw)?;
        Ok(parse(&raw))
    }

    /// Book a reply that is not the one being waited for.
    fn note(&self, m: Msg) {
        let mut st = lock(&self.state);
        match m.op {
            OP_FREE => st.free.push(m.slot),
            OP_DIGEST => {
                st.done.insert(m.seq, Sha256Digest::from_bytes(m.digest));
            }
            _ => {}
        }
    }

    /// A free buffer, waiting for one if all are with the helper.
    fn take_slot(&self) -> io::Result<usize> {
        loop {
            if let Some(s) = lock(&self.state).free.pop() {
                return Ok(s);
            }
            let m = self.recv()?;
            self.note(m);
        }
    }

    fn give_back(&self, slot: usize) {
        lock(&self.state).free.push(slot);
    }

    /// The digest of file `seq`, waiting for it.
    pub(crate) fn digest(&self, seq: u64) -> io::Result<Sha256Digest> {
        loop {
            {
                if let Some(d) = lock(&self.state).done.remove(&seq) {
                    return Ok(d);
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

fn pipe() -> io::Result<(File, File)> {
    let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    Ok((File::from(r), File::from(w)))
}

static HELPER: OnceLock<HashThread> = OnceLock::new();

/// Make `t` the hashing thread of this process's extractions (the confined child, once).
/// Only the calling thread uses it.
pub fn install(t: HashThread) -> Result<(), HashThread> {
    let _ = t.owner.set(std::thread::current().id());
    HELPER.set(t)
}

/// The installed hashing thread, if any.
pub fn installed() -> Option<&'static HashThread> {
    HELPER.get()
}

/// The digest of a file being written: computed on the helper when one is installed and the file
/// is larger than one buffer, inline otherwise.
pub(crate) enum Pending<'h> {
    Ready(Sha256Digest),
    Helper(u64, &'h HashThread),
}

impl Pending<'_> {
    pub(crate) fn resolve(self) -> io::Result<Sha256Digest> {
        match self {
            Pending::Ready(d) => Ok(d),
            Pending::Helper(seq, h) => h.digest(seq),
        }
    }
}

/// One file's bytes on their way to the disk and the hasher. Feed it with [`FileHash::fill`],
/// which reads into a buffer and returns it to be written; end with [`FileHash::finish`].
pub(crate) struct FileHash<'h> {
    helper: Option<&'h HashThread>,
    seq: u64,
    /// Sent to the helper already: whether this file is hashed there.
    offloaded: bool,
    /// The last chunk read, not yet hashed (the helper's slot, or the inline buffer).
    held: Option<(usize, usize)>,
    inline: Hasher,
}

/// Where [`FileHash`] reads into when hashing inline.
#[derive(Default)]
pub(crate) struct InlineBuf(pub Vec<u8>);

impl FileHash<'static> {
    /// On the installed hashing thread, when there is one and this is the thread that installed
    /// it (the protocol has one client: replies are read by whoever waits).
    pub(crate) fn new() -> Self {
        let helper = HELPER
            .get()
            .filter(|h| h.owner.get() == Some(&std::thread::current().id()));
        FileHash::using(helper)
    }
}

impl<'h> FileHash<'h> {
    pub(crate) fn using(helper: Option<&'h HashThread>) -> Self {
        FileHash {
            helper,
            seq: helper.map_or(0, HashThread::new_seq),
            offloaded: false,
            held: None,
            inline: Hasher::new(),
        }
    }

    /// Read the next chunk of `data` and hand it to `sink` (which writes it and may refuse it);
    /// returns the number of bytes, 0 at the end. `expect` is how many bytes the file should
    /// still hold (its header's word, or `None`): a buffer is grown only as far as that needs,
    /// so a package of small files does not zero and fault in every buffer whole.
    pub(crate) fn fill<E>(
        &mut self,
        inline: &mut InlineBuf,
        expect: Option<u64>,
        data: &mut dyn Read,
        mut sink: impl FnMut(&[u8]) -> Result<(), E>,
        read_err: impl FnOnce(io::Error) -> E,
        fault: impl Fn(io::Error) -> E,
    ) -> Result<usize, E> {
        let Some(h) = self.helper else {
            let n = read_some(data, &mut inline.0).map_err(read_err)?;
            if n > 0 {
                sink(&inline.0[..n])?;
                self.inline.update(&inline.0[..n]);
            }
            return Ok(n);
        };
        let slot = h.take_slot().map_err(&fault)?;
        let mut buf = lock(&h.shared.slots[slot]);
        // One byte more than expected, so a file that holds what it says ends in this call;
        // never less than a page. A file that holds more only takes more calls.
        let want = expect.map_or(CHUNK, |left| {
            usize::try_from(left.saturating_add(1)).map_or(CHUNK, |w| w.clamp(4096, CHUNK))
        });
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
                    return Err(read_err(e));
                }
            }
        }
        if n == 0 {
            drop(buf);
            h.give_back(slot);
            return Ok(0);
        }
        if let Err(e) = sink(&buf[..n]) {
            drop(buf);
            h.give_back(slot);
            return Err(e);
        }
        drop(buf);
        // The chunk before this one goes to the helper now that the file is known to span more
        // than one buffer.
        if let Some((prev, len)) = self.held.replace((slot, n)) {
            self.offloaded = true;
            h.send(&msg(OP_DATA, prev, len, self.seq, &[0; 32]))
                .map_err(fault)?;
        }
        Ok(n)
    }

    /// The file is complete: its digest, now or from the helper later.
    pub(crate) fn finish(mut self) -> io::Result<Pending<'h>> {
        let Some(h) = self.helper else {
            let (d, _) = std::mem::replace(&mut self.inline, Hasher::new()).finish();
            return Ok(Pending::Ready(d));
        };
        match self.held.take() {
            Some((slot, len)) if self.offloaded || len >= OFFLOAD_MIN => {
                // One write of two messages (atomic: under PIPE_BUF), one wake-up.
                let mut both = [0u8; 2 * MSG];
                both[..MSG].copy_from_slice(&msg(OP_DATA, slot, len, self.seq, &[0; 32]));
                both[MSG..].copy_from_slice(&msg(OP_FINISH, 0, 0, self.seq, &[0; 32]));
                (&h.to).write_all(&both)?;
                Ok(Pending::Helper(self.seq, h))
            }
            Some((slot, len)) => {
                let mut hasher = Hasher::new();
                hasher.update(&lock(&h.shared.slots[slot])[..len]);
                h.give_back(slot);
                Ok(Pending::Ready(hasher.finish().0))
            }
            None => Ok(Pending::Ready(Hasher::new().finish().0)),
        }
    }
}

impl Drop for FileHash<'_> {
    fn drop(&mut self) {
        // A file abandoned half-way (a rejection): its held buffer is free again.
        if let (Some(h), Some((slot, _))) = (self.helper, self.held.take()) {
            h.give_back(slot);
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

    /// `data` through a [`FileHash`], the file's header claiming `claim` bytes (true or not).
    fn through(t: Option<&HashThread>, data: &[u8], claim: Option<u64>) -> (Vec<u8>, Sha256Digest) {
        let mut fh = FileHash::using(t);
        let mut inline = InlineBuf(vec![0u8; 64 * 1024]);
        let mut src = data;
        let mut out = Vec::new();
        loop {
            let left = claim.map(|c| c.saturating_sub(out.len() as u64));
            let n = fh
                .fill(
                    &mut inline,
                    left,
                    &mut src,
                    |c: &[u8]| -> Result<(), io::Error> {
                        out.extend_from_slice(c);
                        Ok(())
                    },
                    |e| e,
                    |e| e,
                )
                .expect("fill");
            if n == 0 {
                break;
            }
        }
        let d = fh.finish().and_then(Pending::resolve).expect("digest");
        (out, d)
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
                for helper in [None, Some(&t)] {
                    let (written, got) = through(helper, &data[..len], claim);
                    assert_eq!(written, &data[..len], "{len} bytes written, claim {k}");
                    assert_eq!(
                        got,
                        want,
                        "{len} bytes, claim {k}, helper {}",
                        helper.is_some()
                    );
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
        for i in 0..40usize {
            let part = &data[i * 1000..i * 1000 + OFFLOAD_MIN + i];
            let mut fh = FileHash::using(Some(&t));
            let mut inline = InlineBuf(vec![0u8; 64 * 1024]);
            let mut src = part;
            while fh
                .fill(
                    &mut inline,
                    None,
                    &mut src,
                    |_| Ok::<(), io::Error>(()),
                    |e| e,
                    |e| e,
                )
                .expect("fill")
                > 0
            {}
            pending.push((Sha256Digest::of_bytes(part), fh.finish().expect("finish")));
        }
        for (want, p) in pending.into_iter().rev() {
            assert_eq!(p.resolve().expect("resolve"), want);
        }
        // A task runs on the thread itself.
        let me = std::thread::current().id();
        let there = t
            .run(move || std::thread::current().id() != me)
            .expect("run");
        assert!(there);
    }
}
