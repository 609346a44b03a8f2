//! The benchmark peer's hasher: `sha256_files PATH...` prints `<hex>  <path>` for every file
//! given, and for every regular file beneath a directory given (symlinks are not followed).
//!
//! Debian's `sha256sum` does not use the CPU's SHA extensions; `sha2` does (runtime detection),
//! so the peer in `benches/extract.rs` is not handicapped by a slow hasher.

use std::io::{self, Read, Write};
use std::path::Path;

use sha2::{Digest, Sha256};

fn visit(path: &Path, buf: &mut [u8], out: &mut impl Write) -> io::Result<()> {
    let meta = std::fs::symlink_metadata(path)?;
    if meta.is_dir() {
        for entry in std::fs::read_dir(path)? {
            visit(&entry?.path(), buf, out)?;
        }
    } else if meta.is_file() {
        let (mut file, mut hasher) = (std::fs::File::open(path)?, Sha256::new());
        loop {
            match file.read(buf)? {
                0 => break,
                n => hasher.update(&buf[..n]),
            }
        }
        writeln!(
            out,
            "{}  {}",
            hex::encode(hasher.finalize()),
            path.display()
        )?;
    }
    Ok(())
}

fn main() -> io::Result<()> {
    let (mut buf, mut out) = (
        vec![0u8; 256 * 1024],
        io::BufWriter::new(io::stdout().lock()),
    );
    for arg in std::env::args_os().skip(1) {
        visit(Path::new(&arg), &mut buf, &mut out)?;
    }
    out.flush()
}
