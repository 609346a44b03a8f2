//! Reading the artifact: positioned reads with a count of bytes consumed.
//!
//! The count feeds the expansion-ratio rule (bytes produced per byte consumed), so a bomb is
//! stopped after a few megabytes of output, long before its headers' claims matter.

use std::cell::Cell;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::rc::Rc;

/// Shared count of artifact bytes handed to decoders.
#[derive(Debug, Clone, Default)]
pub(crate) struct Counter(Rc<Cell<u64>>);

impl Counter {
    pub(crate) fn get(&self) -> u64 {
        self.0.get()
    }

    fn add(&self, n: u64) {
        self.0.set(self.0.get().saturating_add(n));
    }
}

/// `Read + Seek` over the artifact file using `pread`, so no shared file offset is involved.
pub(crate) struct ArtifactReader<'f> {
    file: &'f File,
    pos: u64,
    size: u64,
    counter: Counter,
}

impl<'f> ArtifactReader<'f> {
    pub(crate) fn new(file: &'f File, size: u64, counter: Counter) -> Self {
        Self { file, pos: 0, size, counter }
    }
}

impl Read for ArtifactReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.pos >= self.size {
            return Ok(0);
        }
        let want = usize::try_from((self.size - self.pos).min(buf.len() as u64)).unwrap_or(buf.len());
        let n = self.file.read_at(&mut buf[..want], self.pos)?;
        self.pos += n as u64;
        self.counter.add(n as u64);
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
            None => Err(io::Error::new(io::ErrorKind::InvalidInput, "seek before start of artifact")),
        }
    }
}
