//! Reading the artifact: positioned reads (never a shared file offset, never a mapping)
//! behind a buffer that survives the zip reader's many seeks.
//!
//! Nothing here counts: the expansion budget is a multiple of the artifact's size, known
//! before the first byte is read, so what a decoder consumed does not matter.

use std::fs::File;
use std::io::{self, BufRead, Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;

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
pub(crate) struct SeekBuf<R> {
    inner: io::BufReader<R>,
    pos: u64,
    size: u64,
}

impl<R: Read + Seek> SeekBuf<R> {
    pub(crate) fn new(inner: R, size: u64, capacity: usize) -> Self {
        Self {
            inner: io::BufReader::with_capacity(capacity, inner),
            pos: 0,
            size,
        }
    }
}

impl<R: Read> Read for SeekBuf<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl<R: Read> BufRead for SeekBuf<R> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        self.inner.fill_buf()
    }

    fn consume(&mut self, amt: usize) {
        self.pos += amt as u64;
        self.inner.consume(amt);
    }
}

impl<R: Read + Seek> Seek for SeekBuf<R> {
    fn seek(&mut self, pos: SeekFrom) -> io::Result<u64> {
        let target = match pos {
            SeekFrom::Start(p) => Some(p),
            SeekFrom::End(d) => self.size.checked_add_signed(d),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        }
        .ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, "seek before start of artifact")
        })?;
        let delta = i64::try_from(i128::from(target) - i128::from(self.pos))
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "seek out of range"))?;
        self.inner.seek_relative(delta)?;
        self.pos = target;
        Ok(target)
    }
}
