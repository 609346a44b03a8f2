//! Reading the artifact: positioned reads with a count of bytes consumed.
//!
//! The count feeds the expansion-ratio rule (bytes produced per byte consumed), so a bomb is
//! stopped after a few megabytes of output, long before its headers' claims matter. It is
//! taken above the read buffer ([`Counted`]), so it counts what decoders actually consumed, not
//! what a buffer prefetched or re-read after a seek (which would let an archive with many
//! entries earn "credit" against the ratio rule).

use std::cell::Cell;
use std::fs::File;
use std::io::{self, BufRead, Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::rc::Rc;

/// Shared count of artifact bytes handed to decoders.
#[derive(Debug, Clone, Default)]
pub(crate) struct Counter(Rc<Cell<u64>>);

impl Counter {
    pub(crate) fn get(&self) -> u64 {
        self.0.get()
    }

    pub(crate) fn add(&self, n: u64) {
        self.0.set(self.0.get().saturating_add(n));
    }
}

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

/// Counts bytes taken from a buffered reader by its consumer (`read`, or `consume` for
/// decoders that use the `BufRead` interface); seeks pass through uncounted.
pub(crate) struct Counted<R> {
    inner: R,
    counter: Counter,
}

impl<R> Counted<R> {
    pub(crate) fn new(inner: R, counter: Counter) -> Self {
        Self { inner, counter }
    }
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.counter.add(n as u64);
        Ok(n)
    }
}

impl<R: BufRead> BufRead for Counted<R> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        self.inner.fill_buf()
    }

    fn consume(&mut self, amt: usize) {
        self.counter.add(amt as u64);
        self.inner.consume(amt);
    }
}

impl<R: Seek> Seek for Counted<R> {
    fn seek(&mut self, pos: SeekFrom) -> io::Result<u64> {
        self.inner.seek(pos)
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
