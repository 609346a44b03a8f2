//! The first bytes of each file as the engine wrote it, kept for the review.
//!
//! The review scans every text file of the staged tree. Reading the tree back costs an `openat`,
//! an `fstat`, a `read` and a `close` per file and a copy out of the page cache; for a package
//! of many small files that is a large part of the child's time. The engine already holds
//! every byte in its buffer while it writes it, so it keeps a bounded copy here (the same bytes
//! it wrote, in the same process) and the review reads a file back from the staged tree only
//! when its bytes are not here (past the bounds below, or a hard-link copy).
//!
//! A plain tarball's member read in place lies in the mapped artifact as it was written; one that
//! lies whole in one piece of the mapping is kept as that piece ([`Captured::keep_view`]) rather
//! than copied, its window held mapped (within [`PINNED_WINDOWS`]). The artifact is a sealed
//! memfd: its bytes cannot change under the mapping, so they are the bytes written.

use std::ops::Range;
use std::sync::Arc;

use super::hashing::Scanned;
use super::input::View;
use crate::names::NameMap;
use crate::sys::SealedMapping;

/// Bytes kept of one file: what the review reads of a file at most (its `max_file_bytes`
/// default, and more than SKILL.md's frontmatter bound).
pub const FILE_BYTES: usize = 1024 * 1024;
/// Bytes kept in all: a bound on the child's memory; later files are read back instead.
pub const TOTAL_BYTES: usize = 8 * 1024 * 1024;
/// Scan marks kept in all (4 bytes each): past them, a file's marks are cut short (and its
/// reader scans the rest itself).
pub const TOTAL_MARKS: usize = 256 * 1024;
/// The first bytes kept of a file whose bytes are not kept ([`Head`]): enough for a magic
/// number and a short first line.
pub const HEAD_BYTES: usize = 256;
/// The window [`Head::nul`] looks at: a NUL in a file's first `NUL_WINDOW` bytes.
pub const NUL_WINDOW: usize = 8192;
/// Bytes of heads kept in all; later files' heads are read back instead.
pub const TOTAL_HEAD_BYTES: usize = 2 * 1024 * 1024;
/// Windows of the mapped artifact kept mapped for the files whose bytes are kept there
/// ([`Captured::keep_view`]) instead of copied: at most this many (16 MiB, at the input's
/// 4 MiB windows), so a few small files spread over a large artifact cannot keep all of it
/// mapped; a file in another window is copied, as before.
pub const PINNED_WINDOWS: usize = 4;
/// A file is kept as a view from this size on: a smaller copy costs no fresh page of its own,
/// and 10,000 tiny files kept as views were 3-4 ms slower (bench-results/throughput.md).
const VIEW_MIN: usize = 4096;

/// The start of a file whose bytes are not kept: its first [`HEAD_BYTES`] (all of it when
/// shorter), and whether a NUL byte is in its first [`NUL_WINDOW`] bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    pub bytes: Box<[u8]>,
    pub nul: bool,
}

/// Where a file's kept bytes are.
enum Kept {
    /// In [`Captured`]'s buffer.
    Copied(Range<usize>),
    /// In the mapped artifact, as the file lies there (a plain tarball's member read in place:
    /// the sealed memfd's bytes cannot change), not copied.
    Viewed(View),
}

/// The kept bytes of written files, by inventory path, and what the hashing thread's scan
/// found in the files it hashed ([`super::hashing::FileScan`]).
#[derive(Default)]
pub struct Captured {
    bytes: Vec<u8>,
    files: NameMap<String, Kept>,
    /// Bytes of the files kept as views, counted in the total bound as if copied.
    viewed_bytes: usize,
    /// The windows those views hold mapped, with how many views each.
    pinned: Vec<(Arc<SealedMapping>, usize)>,
    scans: NameMap<String, Scanned>,
    marks: usize,
    heads: NameMap<String, Head>,
    head_bytes: usize,
}

impl std::fmt::Debug for Captured {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Captured")
            .field("files", &self.files.len())
            .field("bytes", &self.used())
            .field("pinned_windows", &self.pinned.len())
            .field("scans", &self.scans.len())
            .field("heads", &self.heads.len())
            .finish_non_exhaustive()
    }
}

impl Captured {
    /// The first bytes of `path` as written: the whole file when it held at most
    /// [`FILE_BYTES`], else exactly its first [`FILE_BYTES`]. `None` when not kept.
    pub fn get(&self, path: &str) -> Option<&[u8]> {
        match self.files.get(path)? {
            Kept::Copied(r) => self.bytes.get(r.clone()),
            Kept::Viewed(v) => Some(v.bytes()),
        }
    }

    /// Bytes kept, copied or in views: what the total bound counts.
    fn used(&self) -> usize {
        self.bytes.len() + self.viewed_bytes
    }

    /// The start of `path` when its bytes are not kept (and its head was, within the bound).
    pub fn head(&self, path: &str) -> Option<&Head> {
        self.heads.get(path)
    }

    /// Keep the start of the file written at `path` (its first bytes, up to [`HEAD_BYTES`]),
    /// unless the bound on heads is reached (then `false`).
    pub(crate) fn keep_head(&mut self, path: &str, first: &[u8], nul: bool) -> bool {
        let bytes = &first[..first.len().min(HEAD_BYTES)];
        if self.head_bytes + bytes.len() > TOTAL_HEAD_BYTES {
            return false;
        }
        self.head_bytes += bytes.len();
        self.heads.insert(
            path.to_owned(),
            Head {
                bytes: bytes.into(),
                nul,
            },
        );
        true
    }

    /// The hashing thread's scan of `path`'s first bytes, when it hashed the file with one.
    pub fn scanned(&self, path: &str) -> Option<&Scanned> {
        self.scans.get(path)
    }

    /// Keep the scan of the file written at `path`, its marks cut short at [`TOTAL_MARKS`].
    pub(crate) fn keep_scan(&mut self, path: String, mut scanned: Scanned) {
        let room = TOTAL_MARKS - self.marks;
        if scanned.marks.len() > room {
            scanned.complete = u64::from(scanned.marks[room]);
            scanned.marks.truncate(room);
        }
        self.marks += scanned.marks.len();
        self.scans.insert(path, scanned);
    }

    /// Start keeping a file's bytes: returns where they begin, or `None` when the total bound
    /// leaves no room for a file at all.
    pub(crate) fn begin(&self) -> Option<usize> {
        (self.used() < TOTAL_BYTES).then_some(self.bytes.len())
    }

    /// [`Captured::begin`] for a file of `size` bytes, when known: `None` also when its kept
    /// part would not fit (it would be dropped at its end, as [`Captured::push`] does).
    pub(crate) fn begin_sized(&self, size: Option<u64>) -> Option<usize> {
        let start = self.begin()?;
        let want = size.map_or(0, |s| {
            usize::try_from(s).unwrap_or(usize::MAX).min(FILE_BYTES)
        });
        (self.used().saturating_add(want) <= TOTAL_BYTES).then_some(start)
    }

    /// Keep the next `chunk` of the file begun at `start`; `false` once it no longer fits (the
    /// partial copy is dropped, and the file is read back by the review instead).
    pub(crate) fn push(&mut self, start: usize, chunk: &[u8]) -> bool {
        let held = self.bytes.len() - start;
        let take = chunk.len().min(FILE_BYTES - held.min(FILE_BYTES));
        if self.used() + take > TOTAL_BYTES {
            self.bytes.truncate(start);
            return false;
        }
        if self.bytes.capacity() == 0 {
            // The whole bound at once, as address space: a page is only allocated when first
            // written. Grown by doubling, the buffer was moved (copied into new pages, a fault
            // each) once other allocations sat after it: about 27 of a broker child's 127 page
            // faults on the typical package (bench-results/load.md).
            self.bytes.reserve_exact(TOTAL_BYTES);
        }
        self.bytes.extend_from_slice(&chunk[..take]);
        true
    }

    /// The file begun at `start` is not kept after all: its bytes are given back, for the next
    /// file's to take their place (and pages).
    pub(crate) fn give_back(&mut self, start: usize) {
        self.bytes.truncate(start);
    }

    /// The file begun at `start` is complete: keep it under `path`.
    pub(crate) fn commit(&mut self, path: &str, start: usize) {
        let old = self
            .files
            .insert(path.to_owned(), Kept::Copied(start..self.bytes.len()));
        self.unpin(old);
    }

    /// Whether a file lying whole in `view` (begun at `start`, nothing pushed) may be kept as
    /// that view: its window is held already, or one more may be (and the file fits the total
    /// bound, as a copy would have to).
    pub(crate) fn may_keep_view(&self, start: usize, view: &View) -> bool {
        start == self.bytes.len()
            && (VIEW_MIN..=FILE_BYTES).contains(&view.len)
            && self.used() + view.len <= TOTAL_BYTES
            && (self.pinned.len() < PINNED_WINDOWS
                || self.pinned.iter().any(|(m, _)| Arc::ptr_eq(m, &view.map)))
    }

    /// Keep the file written at `path`, all of it in `view` (begun at `start`, nothing pushed
    /// since), as that view when [`Captured::may_keep_view`] allows, else copied; `false` when
    /// neither fits (then it is not kept).
    pub(crate) fn keep_view(&mut self, path: &str, start: usize, view: View) -> bool {
        if !self.may_keep_view(start, &view) {
            if !self.push(start, view.bytes()) {
                return false;
            }
            self.commit(path, start);
            return true;
        }
        match self
            .pinned
            .iter_mut()
            .find(|(m, _)| Arc::ptr_eq(m, &view.map))
        {
            Some((_, n)) => *n += 1,
            None => self.pinned.push((Arc::clone(&view.map), 1)),
        }
        self.viewed_bytes += view.len;
        let old = self.files.insert(path.to_owned(), Kept::Viewed(view));
        self.unpin(old);
        true
    }

    /// How many files are kept as views (for tests).
    #[cfg(test)]
    pub(crate) fn views_kept(&self) -> usize {
        self.files
            .values()
            .filter(|k| matches!(k, Kept::Viewed(_)))
            .count()
    }

    /// What was kept of a path is kept no more (the sink never writes a path twice): a view's
    /// bytes leave the bound, and its window is let go when no other view holds it.
    fn unpin(&mut self, old: Option<Kept>) {
        let Some(Kept::Viewed(old)) = old else {
            return;
        };
        self.viewed_bytes -= old.len;
        if let Some(i) = self
            .pinned
            .iter()
            .position(|(m, _)| Arc::ptr_eq(m, &old.map))
        {
            self.pinned[i].1 -= 1;
            if self.pinned[i].1 == 0 {
                self.pinned.swap_remove(i);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_whole_small_files_and_the_head_of_large_ones() {
        let mut c = Captured::default();
        let s = c.begin().unwrap_or(usize::MAX);
        assert!(c.push(s, b"hello "));
        assert!(c.push(s, b"world"));
        c.commit("a.txt", s);
        let big = vec![7u8; FILE_BYTES + 10];
        let s = c.begin().unwrap_or(usize::MAX);
        assert!(c.push(s, &big[..100]));
        assert!(c.push(s, &big[100..]));
        c.commit("big.bin", s);
        assert_eq!(c.get("a.txt"), Some(&b"hello world"[..]));
        assert_eq!(c.get("big.bin").map(<[u8]>::len), Some(FILE_BYTES));
        assert_eq!(c.get("missing"), None);
    }

    #[test]
    fn keeps_members_as_views_of_at_most_four_windows_and_copies_the_rest() {
        use super::super::input::{Views, WINDOW, sealed};
        let window = usize::try_from(WINDOW).unwrap_or(usize::MAX);
        // Six windows, each byte telling its window and place apart from the others'.
        let art: Vec<u8> = (0..6 * window)
            .map(|i| (i % 251) as u8 ^ (i / window) as u8)
            .collect();
        let memfd = sealed(&art);
        let mut views = Views::new(&memfd, art.len() as u64).expect("views");
        let mut view = |pos: usize, len: usize| {
            views
                .view(pos as u64, (pos + len) as u64, FILE_BYTES)
                .expect("view")
                .expect("some")
        };
        let mut c = Captured::default();
        // One member a window in the first five: four kept as views, the fifth copied; another
        // member of the fourth window (still the one mapped) is a view too, the fifth's
        // window being full or not.
        let mut names = Vec::new();
        for (w, off) in [(0, 100), (1, 100), (2, 100), (3, 100), (3, 9000), (4, 100)] {
            let (at, len) = (w * window + off, VIEW_MIN + w);
            let v = view(at, len);
            let s = c.begin_sized(Some(len as u64)).expect("room");
            assert_eq!(c.may_keep_view(s, &v), w < PINNED_WINDOWS, "window {w}");
            let name = format!("w{w}-{off}");
            assert!(c.keep_view(&name, s, v));
            names.push((name, at, len));
        }
        for (name, at, len) in &names {
            assert_eq!(c.get(name), Some(&art[*at..at + len]), "{name}");
        }
        assert_eq!((c.views_kept(), c.pinned.len()), (5, PINNED_WINDOWS));
        assert_eq!(
            c.bytes.len(),
            VIEW_MIN + 4,
            "the fifth window's member was copied"
        );
        let small = view(4 * window + 50, VIEW_MIN - 1);
        assert!(!c.may_keep_view(c.bytes.len(), &small), "under a page");
        // Views count in the total bound as copies do.
        let viewed: usize = (0..PINNED_WINDOWS).map(|w| VIEW_MIN + w).sum::<usize>() + VIEW_MIN + 3;
        assert_eq!(c.used(), viewed + VIEW_MIN + 4);
        let big = vec![0u8; FILE_BYTES];
        while c.used() < TOTAL_BYTES {
            let s = c.begin().expect("room");
            let take = (TOTAL_BYTES - c.used()).min(FILE_BYTES);
            assert!(c.push(s, &big[..take]));
            c.commit(&format!("fill{}", c.used()), s);
        }
        assert_eq!(c.begin(), None);
        assert!(!c.may_keep_view(c.bytes.len(), &view(window + 7, VIEW_MIN)));
        // A window is held as long as a view of it is kept, and let go with the last.
        let held = Arc::clone(&c.pinned[0].0);
        assert!(Arc::strong_count(&held) > 1);
        drop(c);
        assert_eq!(Arc::strong_count(&held), 1);
    }

    #[test]
    fn stops_at_the_total_bound_and_drops_the_partial_file() {
        let mut c = Captured::default();
        let chunk = vec![1u8; FILE_BYTES];
        for i in 0..(TOTAL_BYTES / FILE_BYTES) {
            let s = c.begin().unwrap_or(usize::MAX);
            assert!(c.push(s, &chunk));
            c.commit(&format!("f{i}"), s);
        }
        assert_eq!(c.begin(), None);
        // Room for less than the next file: its partial copy is dropped.
        let mut c2 = Captured::default();
        for i in 0..(TOTAL_BYTES / FILE_BYTES - 1) {
            let s = c2.begin().unwrap_or(usize::MAX);
            assert!(c2.push(s, &chunk));
            c2.commit(&format!("f{i}"), s);
        }
        let s = c2.begin().unwrap_or(usize::MAX);
        assert!(c2.push(s, &chunk[..FILE_BYTES - 5]));
        c2.commit("x", s);
        let s = c2.begin().unwrap_or(usize::MAX);
        assert!(!c2.push(s, b"0123456789"));
        assert_eq!(c2.get("y"), None);
        assert_eq!(c2.get("x").map(<[u8]>::len), Some(FILE_BYTES - 5));
        assert_eq!(c2.begin(), Some(TOTAL_BYTES - 5));
    }
}
