//! Archives made by the stock writers (the `tar`, `zip` and `flate2` crates), and the
//! deterministic byte source their contents come from; shared by the corpus generators and the
//! extraction benchmark, so all of them hand the engine what real packagers produce.
//!
//! Every byte is a function of the arguments: fixed header fields ([`TarStyle`]), zip times at
//! the DOS epoch, fixed compression levels. It never writes a malformed header: faults are made
//! by the corpus generator's raw writers, which the library writers would refuse.

use std::io::{self, Cursor, Write};

/// splitmix64: small, fast, and the same stream on every machine.
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// Fill `out` with the stream, eight little-endian bytes a draw.
    pub fn fill(&mut self, out: &mut [u8]) {
        for chunk in out.chunks_mut(8) {
            let v = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }
}

/// `len` bytes of the stream seeded with `seed`: incompressible-looking filler.
pub fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut out = vec![0; len];
    SplitMix64(seed).fill(&mut out);
    out
}

/// One file of a package: path, unix mode, content.
#[derive(Clone)]
pub struct F {
    pub path: String,
    pub mode: u32,
    pub data: Vec<u8>,
}

/// One member, in the order the writer emits it.
pub enum Member<'a> {
    /// A directory (0755); the name carries its trailing slash.
    Dir(&'a str),
    File(&'a F),
}

/// The tar header fields that do not come from the member.
#[derive(Debug, Clone, Copy)]
pub struct TarStyle {
    /// GNU headers (else POSIX ustar).
    pub gnu: bool,
    pub mtime: u64,
    /// Both uid and gid.
    pub owner: u64,
}

impl TarStyle {
    /// GNU headers, mtime 0, owned by root: the corpus's.
    pub const GNU_EPOCH: Self = Self {
        gnu: true,
        mtime: 0,
        owner: 0,
    };
    /// ustar headers, mtime 0, owned by root: the review corpus's.
    pub const USTAR_EPOCH: Self = Self {
        gnu: false,
        mtime: 0,
        owner: 0,
    };
    /// ustar headers, a recent mtime, uid and gid 1000: what a developer's own `tar -c` writes
    /// (the benchmark's).
    pub const USTAR_USER: Self = Self {
        gnu: false,
        mtime: 1_700_000_000,
        owner: 1000,
    };
}

/// A tar header from the `tar` crate for a member of `kind` in `style`. The builder's
/// `append_data` sets the path and the checksum.
pub fn tar_header(style: TarStyle, kind: tar::EntryType, mode: u32, size: u64) -> tar::Header {
    let mut h = if style.gnu {
        tar::Header::new_gnu()
    } else {
        tar::Header::new_ustar()
    };
    h.set_entry_type(kind);
    h.set_mode(mode);
    h.set_size(size);
    h.set_mtime(style.mtime);
    h.set_uid(style.owner);
    h.set_gid(style.owner);
    h
}

/// A finished tar of `members` from `tar::Builder` (a name past 100 bytes becomes a GNU
/// `././@LongLink` record, as the builder writes it).
pub fn tar_library(members: &[Member<'_>], style: TarStyle) -> io::Result<Vec<u8>> {
    let data: usize = members
        .iter()
        .map(|m| match m {
            Member::Dir(_) => 0,
            Member::File(x) => x.data.len(),
        })
        .sum();
    // Headers and padding: at most two blocks a member past its data, plus the trailer.
    let mut b = tar::Builder::new(Vec::with_capacity(data + members.len() * 1024 + 4096));
    for m in members {
        match m {
            Member::Dir(d) => b.append_data(
                &mut tar_header(style, tar::EntryType::Directory, 0o755, 0),
                d,
                &[][..],
            )?,
            Member::File(x) => b.append_data(
                &mut tar_header(style, tar::EntryType::Regular, x.mode, x.data.len() as u64),
                &x.path,
                &x.data[..],
            )?,
        }
    }
    b.into_inner()
}

/// Zip options from the `zip` crate for a member of `mode`: deflate level 6, DOS-epoch time.
pub fn zip_options(mode: u32) -> zip::write::SimpleFileOptions {
    zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated)
        .compression_level(Some(6))
        .last_modified_time(zip::DateTime::DEFAULT)
        .unix_permissions(mode)
}

/// A zip of `members` from `zip::ZipWriter`; with `zip64_first`, the first file carries zip64
/// sizes although it is small (as writers that stream unknown sizes do).
pub fn zip_library(members: &[Member<'_>], zip64_first: bool) -> zip::result::ZipResult<Vec<u8>> {
    let mut w = zip::ZipWriter::new(Cursor::new(Vec::new()));
    let mut first = zip64_first;
    for m in members {
        match m {
            Member::Dir(d) => w.add_directory(*d, zip_options(0o755))?,
            Member::File(x) => {
                w.start_file(x.path.as_str(), zip_options(x.mode).large_file(first))?;
                first = false;
                w.write_all(&x.data)?;
            }
        }
    }
    Ok(w.finish()?.into_inner())
}

/// gzip at `level`, mtime 0 and no operating system named.
pub fn gzip_at<W: Write>(out: W, level: u32) -> flate2::write::GzEncoder<W> {
    flate2::GzBuilder::new()
        .mtime(0)
        .operating_system(255)
        .write(out, flate2::Compression::new(level))
}
