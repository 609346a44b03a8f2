//! A raw tar writer (POSIX.1-2001 ustar, GNU long names and sparse headers, pax extended
//! headers) plus the gzip and zstd wrappers. `tar::Builder` refuses `..` and absolute names and
//! cannot write sparse or device headers from bytes, so every header here is built by hand.
//!
//! mtime, uid and gid are always 0 and the owner names fixed, so output is reproducible.

use std::io::Write;

use flate2::write::GzEncoder;

use skillbox_tools::stock::gzip_at;

pub const REG: u8 = b'0';
pub const LINK: u8 = b'1';
pub const SYMLINK: u8 = b'2';
pub const CHAR: u8 = b'3';
pub const BLOCK: u8 = b'4';
pub const DIR: u8 = b'5';
pub const FIFO: u8 = b'6';
pub const GNU_LONGNAME: u8 = b'L';
pub const GNU_SPARSE: u8 = b'S';
pub const PAX: u8 = b'x';

pub const BLOCK_LEN: usize = 512;

/// Write `v` as zero-padded octal filling all but the last byte of `field`, then a NUL.
fn octal(field: &mut [u8], v: u64) {
    let width = field.len() - 1;
    let text = format!("{v:0width$o}");
    let bytes = text.as_bytes();
    let start = bytes.len().saturating_sub(width);
    field[..width].copy_from_slice(&bytes[start..]);
    field[width] = 0;
}

/// Recompute the header checksum (sum of all bytes with the field read as spaces).
pub fn fix_checksum(h: &mut [u8; BLOCK_LEN]) {
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h.iter().map(|b| u32::from(*b)).sum();
    let text = format!("{sum:06o}\0 ");
    h[148..156].copy_from_slice(text.as_bytes());
}

/// Which magic a header carries.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Magic {
    Ustar,
    Gnu,
}

/// A header block. `name` and `link` must fit their 100-byte fields (use a long-name record
/// otherwise).
pub fn header(
    name: &[u8],
    mode: u32,
    size: u64,
    kind: u8,
    link: &[u8],
    magic: Magic,
) -> [u8; BLOCK_LEN] {
    let mut h = [0u8; BLOCK_LEN];
    assert!(
        name.len() <= 100 && link.len() <= 100,
        "name or link too long for a plain header"
    );
    h[..name.len()].copy_from_slice(name);
    octal(&mut h[100..108], u64::from(mode));
    octal(&mut h[108..116], 0);
    octal(&mut h[116..124], 0);
    octal(&mut h[124..136], size);
    octal(&mut h[136..148], 0);
    h[156] = kind;
    h[157..157 + link.len()].copy_from_slice(link);
    match magic {
        Magic::Ustar => {
            h[257..263].copy_from_slice(b"ustar\0");
            h[263..265].copy_from_slice(b"00");
        }
        Magic::Gnu => h[257..265].copy_from_slice(b"ustar  \0"),
    }
    h[265..269].copy_from_slice(b"root");
    h[297..301].copy_from_slice(b"root");
    if magic == Magic::Ustar {
        octal(&mut h[329..337], 0);
        octal(&mut h[337..345], 0);
    }
    fix_checksum(&mut h);
    h
}

fn padding(len: usize) -> usize {
    (BLOCK_LEN - len % BLOCK_LEN) % BLOCK_LEN
}

/// A tar stream under construction.
#[derive(Default)]
pub struct Tar {
    buf: Vec<u8>,
}

impl Tar {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn block(&mut self, h: &[u8; BLOCK_LEN]) -> &mut Self {
        self.buf.extend_from_slice(h);
        self
    }

    /// Content, padded to the block size.
    pub fn data(&mut self, d: &[u8]) -> &mut Self {
        self.buf.extend_from_slice(d);
        self.buf.resize(self.buf.len() + padding(d.len()), 0);
        self
    }

    pub fn raw(&mut self, bytes: &[u8]) -> &mut Self {
        self.buf.extend_from_slice(bytes);
        self
    }

    /// Header (size = `data.len()`) and content.
    pub fn entry(
        &mut self,
        name: &[u8],
        mode: u32,
        kind: u8,
        link: &[u8],
        data: &[u8],
    ) -> &mut Self {
        let h = header(name, mode, data.len() as u64, kind, link, Magic::Ustar);
        self.block(&h).data(data)
    }

    pub fn file(&mut self, name: impl AsRef<[u8]>, data: impl AsRef<[u8]>) -> &mut Self {
        self.entry(name.as_ref(), 0o644, REG, b"", data.as_ref())
    }

    pub fn file_mode(
        &mut self,
        name: impl AsRef<[u8]>,
        mode: u32,
        data: impl AsRef<[u8]>,
    ) -> &mut Self {
        self.entry(name.as_ref(), mode, REG, b"", data.as_ref())
    }

    pub fn dir(&mut self, name: impl AsRef<[u8]>) -> &mut Self {
        self.entry(name.as_ref(), 0o755, DIR, b"", b"")
    }

    pub fn dir_mode(&mut self, name: impl AsRef<[u8]>, mode: u32) -> &mut Self {
        self.entry(name.as_ref(), mode, DIR, b"", b"")
    }

    pub fn symlink(&mut self, name: impl AsRef<[u8]>, target: impl AsRef<[u8]>) -> &mut Self {
        self.entry(name.as_ref(), 0o777, SYMLINK, target.as_ref(), b"")
    }

    pub fn hardlink(&mut self, name: impl AsRef<[u8]>, target: impl AsRef<[u8]>) -> &mut Self {
        self.entry(name.as_ref(), 0o644, LINK, target.as_ref(), b"")
    }

    /// A character/block device or FIFO header with device numbers.
    pub fn special(&mut self, name: &str, kind: u8, major: u64, minor: u64) -> &mut Self {
        let mut h = header(name.as_bytes(), 0o644, 0, kind, b"", Magic::Ustar);
        octal(&mut h[329..337], major);
        octal(&mut h[337..345], minor);
        fix_checksum(&mut h);
        self.block(&h)
    }

    /// GNU `././@LongLink` record carrying `name`, then the entry itself with a truncated name.
    pub fn gnu_long(&mut self, name: &[u8], mode: u32, kind: u8, data: &[u8]) -> &mut Self {
        let mut long = name.to_vec();
        long.push(0);
        let h = header(
            b"././@LongLink",
            0o644,
            long.len() as u64,
            GNU_LONGNAME,
            b"",
            Magic::Gnu,
        );
        self.block(&h).data(&long);
        let short = &name[..name.len().min(100)];
        let h = header(short, mode, data.len() as u64, kind, b"", Magic::Gnu);
        self.block(&h).data(data)
    }

    /// A pax extended header (POSIX.1-2001 `x`) with `records`, then a regular entry whose
    /// ustar name is `ustar_name`.
    pub fn pax_file(
        &mut self,
        records: &[(&str, &[u8])],
        ustar_name: &[u8],
        data: &[u8],
    ) -> &mut Self {
        let body = pax_records(records);
        let h = header(
            b"PaxHeaders.0/entry",
            0o644,
            body.len() as u64,
            PAX,
            b"",
            Magic::Ustar,
        );
        self.block(&h).data(&body);
        self.entry(ustar_name, 0o644, REG, b"", data)
    }

    /// A pax extended header (POSIX.1-2001 `x`) alone, describing whatever comes next.
    pub fn pax_header(&mut self, records: &[(&str, &[u8])]) -> &mut Self {
        let body = pax_records(records);
        let h = header(
            b"PaxHeaders.0/entry",
            0o644,
            body.len() as u64,
            PAX,
            b"",
            Magic::Ustar,
        );
        self.block(&h).data(&body)
    }

    /// The end-of-archive marker: two zero blocks.
    pub fn finish(&mut self) -> Vec<u8> {
        let mut out = std::mem::take(&mut self.buf);
        out.resize(out.len() + 2 * BLOCK_LEN, 0);
        out
    }

    /// The stream so far, without an end-of-archive marker.
    pub fn unfinished(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.buf)
    }
}

/// Pax records: `"<len> <key>=<value>\n"`, where `<len>` counts the whole record including
/// its own digits.
pub fn pax_records(records: &[(&str, &[u8])]) -> Vec<u8> {
    let mut out = Vec::new();
    for (key, value) in records {
        let rest = key.len() + value.len() + 3; // space, '=', newline
        let mut len = rest + 1;
        while len != rest + len.to_string().len() {
            len = rest + len.to_string().len();
        }
        out.extend_from_slice(format!("{len} {key}=").as_bytes());
        out.extend_from_slice(value);
        out.push(b'\n');
    }
    out
}

/// A GNU sparse (`S`) header: `stored` bytes of data describing one region of a file whose
/// real size is `real_size`.
pub fn gnu_sparse_header(name: &[u8], stored: u64, real_size: u64) -> [u8; BLOCK_LEN] {
    let mut h = header(name, 0o644, stored, GNU_SPARSE, b"", Magic::Gnu);
    // struct gnu_header: sparse[4] at 386 (offset[12], numbytes[12]), isextended at 482,
    // realsize at 483.
    octal(&mut h[386..398], real_size - stored);
    octal(&mut h[398..410], stored);
    h[482] = 0;
    octal(&mut h[483..495], real_size);
    fix_checksum(&mut h);
    h
}

/// gzip (RFC 1952) with mtime 0, OS 255 and a fixed level.
pub fn gzip(data: &[u8]) -> Vec<u8> {
    let mut enc = gzip_stream();
    let _ = enc.write_all(data);
    enc.finish().unwrap_or_default()
}

/// A gzip encoder to stream large inputs through.
pub fn gzip_stream() -> GzEncoder<Vec<u8>> {
    gzip_at(Vec::new(), 9)
}

/// zstd (RFC 8878) at a fixed level, single-threaded.
pub fn zstd(data: &[u8]) -> Vec<u8> {
    zstd::bulk::compress(data, 19).unwrap_or_default()
}

/// A hand-built zstd frame (RFC 8878 3.1.1): `prefix` as one Raw block, then `zeros` zero
/// bytes as RLE blocks of 128 KiB, each 4 bytes on the wire. The frame header declares no
/// content size and a 128 KiB window, so decoding needs little memory: only the ratio rule
/// can stop it.
pub fn zstd_rle_bomb(prefix: &[u8], zeros: u64) -> Vec<u8> {
    const MAX_BLOCK: u64 = 128 * 1024;
    let mut out = vec![0x28, 0xb5, 0x2f, 0xfd];
    out.push(0x00); // Frame_Header_Descriptor: no FCS, not single-segment, no checksum, no dict
    out.push(7 << 3); // Window_Descriptor: exponent 7, mantissa 0 -> 2^17 bytes
    let block_header = |out: &mut Vec<u8>, size: u64, kind: u64, last: bool| {
        let v = (size << 3) | (kind << 1) | u64::from(last);
        out.extend_from_slice(&v.to_le_bytes()[..3]);
    };
    for chunk in prefix.chunks(MAX_BLOCK as usize) {
        block_header(&mut out, chunk.len() as u64, 0, false);
        out.extend_from_slice(chunk);
    }
    if zeros == 0 {
        block_header(&mut out, 0, 0, true); // an empty last Raw block ends the frame
    }
    let mut left = zeros;
    while left > 0 {
        let n = left.min(MAX_BLOCK);
        left -= n;
        block_header(&mut out, n, 1, left == 0);
        out.push(0);
    }
    out
}

/// zstd as `tar c | zstd --long=WLOG` writes it: streamed (no content size known up front), so
/// the frame header declares the whole 2^`window_log` window the decoder must allocate.
pub fn zstd_long(data: &[u8], window_log: u32) -> Vec<u8> {
    let build = || -> std::io::Result<Vec<u8>> {
        let mut enc = zstd::stream::write::Encoder::new(Vec::new(), 19)?;
        enc.long_distance_matching(true)?;
        enc.window_log(window_log)?;
        // Two writes: the encoder never sees the whole input in one call, so it cannot shrink
        // the window to the content size.
        let (a, b) = data.split_at(data.len() / 2);
        enc.write_all(a)?;
        enc.flush()?;
        enc.write_all(b)?;
        enc.finish()
    };
    build().unwrap_or_default()
}

/// The Window_Descriptor of a zstd frame as log2 bytes (RFC 8878 3.1.1.1.2), when present.
pub fn zstd_window_log(frame: &[u8]) -> Option<u32> {
    let fhd = *frame.get(4)?;
    if fhd & 0x20 != 0 {
        return None; // single segment: no window descriptor
    }
    Some(10 + u32::from(frame.get(5)? >> 3))
}
