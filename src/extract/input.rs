//! Reading the artifact: through a window mapping of a sealed memfd, or positioned reads (never
//! a shared file offset) behind a buffer that survives the zip reader's many seeks.
//!
//! Nothing here counts: the expansion budget is a multiple of the artifact's size, known
//! before the first byte is read, so what a decoder consumed does not matter.

use std::fs::File;
use std::io::{self, BufRead, Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;

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
const WINDOW: u64 = 4 * 1024 * 1024;

struct Mapped<'f> {
    file: &'f File,
    /// The window's offset in the artifact, and the window.
    window: Option<(u64, SealedMapping)>,
}

impl Mapped<'_> {
    /// The bytes from `pos` to the end of the window holding it (empty at the end).
    fn at(&mut self, pos: u64, size: u64) -> io::Result<&[u8]> {
        if pos >= size {
            return Ok(&[]);
        }
        let start = pos - pos % WINDOW;
        if self.window.as_ref().is_none_or(|(s, _)| *s != start) {
            // The old window goes first: two are never mapped together.
            self.window = None;
            let len = usize::try_from((size - start).min(WINDOW)).unwrap_or(0);
            self.window = Some((start, SealedMapping::new(self.file, start, len)?));
        }
        let Some((_, map)) = &self.window else {
            return Ok(&[]);
        };
        let skip = usize::try_from(pos - start).unwrap_or(usize::MAX);
        Ok(map.bytes().get(skip..).unwrap_or(&[]))
    }
}

impl<'f> SeekBuf<'f> {
    pub(crate) fn new(file: &'f File, size: u64, capacity: usize) -> Self {
        // Mapped when the file is a sealed memfd (nobody can change or shrink it under the
        // mapping) and the first window maps; read with `pread` otherwise.
        let mut mapped = Mapped { file, window: None };
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
