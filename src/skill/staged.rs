//! Reading the staged tree back for review: beneath the staging fd, never by path, bounded.
//!
//! Like the writer (and through the same [`DirCache`]), every parent is reached by a
//! component-wise `openat(O_RDONLY | O_DIRECTORY | O_NOFOLLOW)` walk and every leaf is opened with
//! `O_RDONLY | O_NOFOLLOW`, so a symlink anywhere fails instead of being followed. The only
//! system calls used are `openat` (with `O_NOFOLLOW`, never `O_PATH`), `fstat`, `read` and
//! `close`: what the confined child's seccomp filter allows. No `lseek`, no `mmap`.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd};

use nix::fcntl::{OFlag, openat};
use nix::sys::stat::{Mode, SFlag, fstat};

use crate::extract::writer::DirCache;

/// Opens files beneath a root directory fd, keeping the directories it used open.
pub struct StagedReader<'a> {
    dirs: DirCache<'a>,
}

impl<'a> StagedReader<'a> {
    pub fn new(root: BorrowedFd<'a>) -> Self {
        Self {
            dirs: DirCache::new(root),
        }
    }

    /// Read at most `cap` bytes of regular file `path` (relative, normalised) into `buf`
    /// (cleared first). Returns the file's size as `fstat` reports it.
    pub fn read_capped(&mut self, path: &str, cap: usize, buf: &mut Vec<u8>) -> io::Result<u64> {
        buf.clear();
        if path.is_empty() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty path"));
        }
        let (parent, leaf) = crate::extract::writer::split(path);
        let file = {
            let dir = self.dirs.get(parent)?;
            File::from(openat(
                dir,
                leaf,
                OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                Mode::empty(),
            )?)
        };
        let st = fstat(file.as_fd())?;
        if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT != SFlag::S_IFREG {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "not a regular file",
            ));
        }
        let size = u64::try_from(st.st_size).unwrap_or(0);
        let want = usize::try_from(size).unwrap_or(usize::MAX).min(cap);
        // Plain read(2) into the buffer: `read_to_end` on a File would also `lseek`.
        buf.resize(want, 0);
        let mut filled = 0;
        while filled < want {
            let n = (&file).read(&mut buf[filled..])?;
            if n == 0 {
                break;
            }
            filled += n;
        }
        buf.truncate(filled);
        Ok(size)
    }
}
