//! The first bytes of each file as the engine wrote it, kept for the review.
//!
//! The review scans every text file of the staged tree. Reading the tree back costs an `openat`,
//! an `fstat`, a `read` and a `close` per file and a copy out of the page cache; for a package
//! of many small files that is a large part of the child's time. The engine already holds
//! every byte in its buffer while it writes it, so it keeps a bounded copy here (the same bytes
//! it wrote, in the same process) and the review reads a file back from the staged tree only
//! when its bytes are not here (past the bounds below, or a hard-link copy).

use std::ops::Range;

use super::hashing::Scanned;
use crate::names::NameMap;

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

/// The start of a file whose bytes are not kept: its first [`HEAD_BYTES`] (all of it when
/// shorter), and whether a NUL byte is in its first [`NUL_WINDOW`] bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    pub bytes: Box<[u8]>,
    pub nul: bool,
}

/// The kept bytes of written files, by inventory path, and what the hashing thread's scan
/// found in the files it hashed ([`super::hashing::FileScan`]).
#[derive(Debug, Default)]
pub struct Captured {
    bytes: Vec<u8>,
    files: NameMap<String, Range<usize>>,
    scans: NameMap<String, Scanned>,
    marks: usize,
    heads: NameMap<String, Head>,
    head_bytes: usize,
}

impl Captured {
    /// The first bytes of `path` as written: the whole file when it held at most
    /// [`FILE_BYTES`], else exactly its first [`FILE_BYTES`]. `None` when not kept.
    pub fn get(&self, path: &str) -> Option<&[u8]> {
        self.files.get(path).and_then(|r| self.bytes.get(r.clone()))
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
        (self.bytes.len() < TOTAL_BYTES).then_some(self.bytes.len())
    }

    /// [`Captured::begin`] for a file of `size` bytes, when known: `None` also when its kept
    /// part would not fit (it would be dropped at its end, as [`Captured::push`] does).
    pub(crate) fn begin_sized(&self, size: Option<u64>) -> Option<usize> {
        let start = self.begin()?;
        let want = size.map_or(0, |s| {
            usize::try_from(s).unwrap_or(usize::MAX).min(FILE_BYTES)
        });
        (start.saturating_add(want) <= TOTAL_BYTES).then_some(start)
    }

    /// Keep the next `chunk` of the file begun at `start`; `false` once it no longer fits (the
    /// partial copy is dropped, and the file is read back by the review instead).
    pub(crate) fn push(&mut self, start: usize, chunk: &[u8]) -> bool {
        let held = self.bytes.len() - start;
        let take = chunk.len().min(FILE_BYTES - held.min(FILE_BYTES));
        if self.bytes.len() + take > TOTAL_BYTES {
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
        self.files.insert(path.to_owned(), start..self.bytes.len());
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
