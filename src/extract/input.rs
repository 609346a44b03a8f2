//! Reading the artifact: through a window mapping of a sealed memfd, or positioned reads (never
//! a shared file offset) behind a buffer that survives the zip reader's many seeks.
//!
//! Nothing here counts: the expansion budget is a multiple of the artifact's size, known
//! before the first byte is read, so what a decoder consumed does not matter.

use std::cell::RefCell;
use std::fs::File;
use std::io::{self, BufRead, Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::rc::Rc;
use std::sync::Arc;

use crate::sys::SealedMapping;

/// `Read + Seek` over the artifact file using `pread`, so no shared file offset is involved.
pub(crate) struct ArtifactReader<'f> {
    file: &'f File,
    pos: u64,
    size: u64,
}

impl<'f> ArtifactReader<'f> {
    pub(crate) fn new(file: &'f File, size: u64) -> Self {
        Self { file, pos: 0, size }
    }
}

impl Read for ArtifactReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.pos >= self.size {
            return Ok(0);
        }
        let want =
            usize::try_from((self.size - self.pos).min(buf.len() as u64)).unwrap_or(buf.len());
        let n = self.file.read_at(&mut buf[..want], self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl Seek for ArtifactReader<'_> {
    fn seek(&mut self, pos: SeekFrom) -> io::Result<u64> {
        let target = match pos {
            SeekFrom::Start(p) => Some(p),
            SeekFrom::End(d) => self.size.checked_add_signed(d),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        };
        match target {
            Some(p) => {
                self.pos = p;
                Ok(p)
            }
            None => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "seek before start of artifact",
            )),
        }
    }
}

/// A read buffer that survives seeks landing inside it.
///
/// The zip crate seeks to every local header several times (overlap check, header
/// consistency, then the data); `BufReader::seek` would drop and refill the whole buffer each
/// time, copying gigabytes for a small archive with many entries. `seek_relative` keeps it.
///
/// Over a sealed memfd (the confined child's artifact) it reads through a mapping instead, one
/// window at a time: the decoders read the artifact's pages in place, with no copy into a
/// buffer, and no more than one window is mapped (and counted in the child's memory) at once.
pub(crate) struct SeekBuf<'f> {
    inner: Inner<'f>,
    pos: u64,
    size: u64,
}

enum Inner<'f> {
    Buffered(io::BufReader<ArtifactReader<'f>>),
    Mapped(Mapped<'f>),
}

/// Bytes mapped at once: a few zstd blocks, far below the memory ceiling.
pub(crate) const WINDOW: u64 = 4 * 1024 * 1024;

/// A window at its offset in the artifact.
type Window = (u64, Arc<SealedMapping>);

struct Mapped<'f> {
    file: &'f File,
    /// The window in use (shared with the hashing thread while it hashes a part of it, see
    /// [`Views`]).
    window: Option<Window>,
    /// The window mapped last by the parser or by its [`Views`], so that the two map each part
    /// of the artifact once: the headers and the data of a small member lie in the same one.
    last: Rc<RefCell<Option<Window>>>,
}

impl Mapped<'_> {
    /// The window holding `pos` (`pos < size`), and where `pos` is in it.
    fn window(&mut self, pos: u64, size: u64) -> io::Result<(&Arc<SealedMapping>, usize)> {
        let start = pos - pos % WINDOW;
        if self.window.as_ref().is_none_or(|(s, _)| *s != start) {
            // The old window goes first (unmapped now unless someone else still has it).
            self.window = None;
            let last = self
                .last
                .borrow()
                .as_ref()
                .filter(|(s, _)| *s == start)
                .map(|(s, m)| (*s, Arc::clone(m)));
            let window = match last {
                Some(w) => w,
                None => {
                    // Dropped from `last` first, so two windows are not mapped here at once.
                    *self.last.borrow_mut() = None;
                    let len = usize::try_from((size - start).min(WINDOW)).unwrap_or(0);
                    let map = Arc::new(SealedMapping::new(self.file, start, len)?);
                    *self.last.borrow_mut() = Some((start, Arc::clone(&map)));
                    (start, map)
                }
            };
            self.window = Some(window);
        }
        match &self.window {
            Some((_, map)) => Ok((map, usize::try_from(pos - start).unwrap_or(usize::MAX))),
            None => Err(io::Error::other("no window mapped")),
        }
    }

    /// The bytes from `pos` to the end of the window holding it (empty at the end).
    fn at(&mut self, pos: u64, size: u64) -> io::Result<&[u8]> {
        if pos >= size {
            return Ok(&[]);
        }
        let (map, skip) = self.window(pos, size)?;
        Ok(map.bytes().get(skip..).unwrap_or(&[]))
    }
}

/// A piece of the mapped artifact, held by whoever holds the view (the mapping stays until the
/// last view of it is dropped).
#[derive(Clone)]
pub(crate) struct View {
    pub(crate) map: Arc<SealedMapping>,
    pub(crate) offset: usize,
    pub(crate) len: usize,
}

impl View {
    pub(crate) fn bytes(&self) -> &[u8] {
        self.map
            .bytes()
            .get(self.offset..self.offset.saturating_add(self.len))
            .unwrap_or(&[])
    }
}

/// File contents read in place from a mapped artifact (a plain tarball's members): each piece
/// is written and hashed straight from the mapping, with no copy into a buffer. One window is
/// mapped here at a time, besides those the hashing thread still reads.
pub(crate) struct Views<'f> {
    mapped: Mapped<'f>,
    size: u64,
}

/// `data` in a sealed memfd, as the confined child's artifact is (for tests of what reads it).
#[cfg(test)]
pub(crate) fn sealed(data: &[u8]) -> File {
    use nix::fcntl::{FcntlArg, SealFlag, fcntl};
    use nix::sys::memfd::{MFdFlags, memfd_create};
    use std::io::Write;
    let fd =
        memfd_create("test", MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING).expect("memfd");
    let mut f = File::from(fd);
    f.write_all(data).expect("fill");
    let all = SealFlag::F_SEAL_WRITE
        | SealFlag::F_SEAL_SHRINK
        | SealFlag::F_SEAL_GROW
        | SealFlag::F_SEAL_SEAL;
    fcntl(&f, FcntlArg::F_ADD_SEALS(all)).expect("seal");
    f
}

impl<'f> Views<'f> {
    /// Over a sealed memfd only (the confined child's artifact); `None` for anything else.
    #[cfg(test)]
    pub(crate) fn new(file: &'f File, size: u64) -> Option<Self> {
        let mut mapped = Mapped {
            file,
            window: None,
            last: Rc::default(),
        };
        match mapped.at(0, size) {
            Ok(_) if size > 0 => Some(Self { mapped, size }),
            _ => None,
        }
    }

    /// At most `max` bytes from `pos`, never past `end` nor the end of the artifact, nor across
    /// a window's end; `None` when nothing is left.
    pub(crate) fn view(&mut self, pos: u64, end: u64, max: usize) -> io::Result<Option<View>> {
        let end = end.min(self.size);
        if pos >= end {
            return Ok(None);
        }
        let (map, offset) = self.mapped.window(pos, self.size)?;
        let in_window = map.bytes().len().saturating_sub(offset);
        let left = usize::try_from(end - pos).unwrap_or(usize::MAX);
        let len = max.min(in_window).min(left);
        if len == 0 {
            return Ok(None);
        }
        Ok(Some(View {
            map: Arc::clone(map),
            offset,
            len,
        }))
    }
}

impl<'f> SeekBuf<'f> {
    pub(crate) fn new(file: &'f File, size: u64, capacity: usize) -> Self {
        // Mapped when the file is a sealed memfd (nobody can change or shrink it under the
        // mapping) and the first window maps; read with `pread` otherwise.
        let mut mapped = Mapped {
            file,
            window: None,
            last: Rc::default(),
        };
        let inner = match mapped.at(0, size) {
            Ok(_) if size > 0 => Inner::Mapped(mapped),
            _ => Inner::Buffered(io::BufReader::with_capacity(
                capacity,
                ArtifactReader::new(file, size),
            )),
        };
        Self {
            inner,
            pos: 0,
            size,
        }
    }
}

impl<'f> SeekBuf<'f> {
    /// In-place views of the same artifact, sharing its windows; `None` unless it is mapped.
    pub(crate) fn views(&self) -> Option<Views<'f>> {
        match &self.inner {
            Inner::Mapped(m) => Some(Views {
                mapped: Mapped {
                    file: m.file,
                    window: None,
                    last: Rc::clone(&m.last),
                },
                size: self.size,
            }),
            Inner::Buffered(_) => None,
        }
    }
}

impl Read for SeekBuf<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = match &mut self.inner {
            Inner::Buffered(b) => b.read(buf)?,
            Inner::Mapped(m) => {
                let have = m.at(self.pos, self.size)?;
                let n = have.len().min(buf.len());
                buf[..n].copy_from_slice(&have[..n]);
                n
            }
        };
        self.pos += n as u64;
        Ok(n)
    }
}

impl BufRead for SeekBuf<'_> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        match &mut self.inner {
            Inner::Buffered(b) => b.fill_buf(),
            Inner::Mapped(m) => m.at(self.pos, self.size),
        }
    }

    fn consume(&mut self, amt: usize) {
        self.pos += amt as u64;
        if let Inner::Buffered(b) = &mut self.inner {
            b.consume(amt);
        }
    }
}

impl Seek for SeekBuf<'_> {
    fn seek(&mut self, pos: SeekFrom) -> io::Result<u64> {
        let target = match pos {
            SeekFrom::Start(p) => Some(p),
            SeekFrom::End(d) => self.size.checked_add_signed(d),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        }
        .ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, "seek before start of artifact")
        })?;
        if let Inner::Buffered(b) = &mut self.inner {
            let delta = i64::try_from(i128::from(target) - i128::from(self.pos))
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "seek out of range"))?;
            b.seek_relative(delta)?;
        }
        self.pos = target;
        Ok(target)
    }
}
