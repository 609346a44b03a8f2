//! A raw zip writer (APPNOTE.TXT 6.3.10, sections 4.3 and 4.4) in which every header field is
//! ours to set, including the wrong ones: library writers refuse to emit overlapping records,
//! local/central disagreements, bad CRCs or foreign method ids, and those are the point here.
//!
//! Times are fixed at the DOS epoch (1980-01-01 00:00) so output is byte-for-byte reproducible.

use std::io::Write;

use flate2::write::DeflateEncoder;
use flate2::{Compression, Crc};

pub const STORED: u16 = 0;
pub const DEFLATE: u16 = 8;
pub const FLAG_ENCRYPTED: u16 = 1;
pub const FLAG_DESCRIPTOR: u16 = 1 << 3;
pub const FLAG_UTF8: u16 = 1 << 11;

const LOCAL_SIG: u32 = 0x0403_4b50;
const CENTRAL_SIG: u32 = 0x0201_4b50;
const EOCD_SIG: u32 = 0x0605_4b50;
const DESCRIPTOR_SIG: u32 = 0x0807_4b50;
const ZIP64_EOCD_SIG: u32 = 0x0606_4b50;
const ZIP64_LOCATOR_SIG: u32 = 0x0706_4b50;
const DOS_DATE_1980_01_01: u16 = (1 << 5) | 1;
/// "Version made by": high byte 3 = UNIX (so the external attributes carry `st_mode`), 3.0.
const MADE_BY_UNIX: u16 = (3 << 8) | 30;
const VERSION_NEEDED: u16 = 20;

pub fn crc32(data: &[u8]) -> u32 {
    let mut crc = Crc::new();
    crc.update(data);
    crc.sum()
}

/// Raw deflate (RFC 1951) at a fixed level.
pub fn deflate(data: &[u8]) -> Vec<u8> {
    let mut enc = DeflateEncoder::new(Vec::new(), Compression::new(9));
    // Writing to a Vec cannot fail.
    let _ = enc.write_all(data);
    enc.finish().unwrap_or_default()
}

/// One RFC 1951 stored block that is not the final one: it quotes `bytes` verbatim.
pub fn stored_block_nonfinal(bytes: &[u8]) -> Vec<u8> {
    let len = u16::try_from(bytes.len()).unwrap_or(u16::MAX);
    let mut out = vec![0x00];
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&(!len).to_le_bytes());
    out.extend_from_slice(&bytes[..usize::from(len)]);
    out
}

/// One zip member, with optional overrides for every field a hostile archive lies about.
#[derive(Clone, Debug)]
pub struct Entry {
    pub name: Vec<u8>,
    /// The uncompressed bytes the CRC and sizes describe (unless overridden).
    pub data: Vec<u8>,
    pub method: u16,
    pub flags: u16,
    /// Unix `st_mode` including the file-type bits; `None` writes a DOS-made entry.
    pub mode: Option<u32>,
    /// The bytes stored in the archive; derived from `method` when `None`.
    pub payload: Option<Vec<u8>>,
    pub crc: Option<u32>,
    pub uncompressed_size: Option<u32>,
    pub extra: Vec<u8>,
    /// Local-header values that differ from the central directory.
    pub local_name: Option<Vec<u8>>,
    pub local_method: Option<u16>,
    pub local_compressed_size: Option<u32>,
    /// Data-descriptor values (CRC, compressed, uncompressed) that differ from the central
    /// directory's.
    pub descriptor: Option<[u32; 3]>,
    /// Write the data descriptor without its optional signature (APPNOTE 4.3.9.3).
    pub descriptor_unsigned: bool,
    /// Extra fields of the local header only (the central record keeps `extra`).
    pub local_extra: Option<Vec<u8>>,
    /// With a data descriptor, write the sizes in the local header too and only the CRC as zero
    /// (as libarchive's writer does).
    pub descriptor_local_sizes: bool,
}

impl Entry {
    pub fn file(name: impl AsRef<[u8]>, data: impl AsRef<[u8]>) -> Self {
        Self {
            name: name.as_ref().to_vec(),
            data: data.as_ref().to_vec(),
            method: DEFLATE,
            flags: 0,
            mode: Some(0o100_644),
            payload: None,
            crc: None,
            uncompressed_size: None,
            extra: Vec::new(),
            local_name: None,
            local_method: None,
            local_compressed_size: None,
            descriptor: None,
            descriptor_unsigned: false,
            local_extra: None,
            descriptor_local_sizes: false,
        }
    }

    pub fn dir(name: impl AsRef<[u8]>) -> Self {
        let mut e = Self::file(name, b"").stored();
        e.mode = Some(0o040_755);
        e
    }

    /// Info-ZIP convention: a symlink is a member whose `st_mode` says S_IFLNK and whose
    /// content is the target.
    pub fn symlink(name: impl AsRef<[u8]>, target: impl AsRef<[u8]>) -> Self {
        let mut e = Self::file(name, target).stored();
        e.mode = Some(0o120_777);
        e
    }

    pub fn stored(mut self) -> Self {
        self.method = STORED;
        self
    }

    pub fn mode(mut self, mode: u32) -> Self {
        self.mode = Some(mode);
        self
    }

    pub fn flags(mut self, flags: u16) -> Self {
        self.flags |= flags;
        self
    }

    pub fn payload(mut self, method: u16, payload: Vec<u8>) -> Self {
        self.method = method;
        self.payload = Some(payload);
        self
    }

    pub fn crc(mut self, crc: u32) -> Self {
        self.crc = Some(crc);
        self
    }

    fn effective_flags(&self) -> u16 {
        // APPNOTE 4.4.4 bit 11: names are UTF-8. Set it whenever a name is not plain ASCII.
        let utf8 = if self.name.is_ascii() { 0 } else { FLAG_UTF8 };
        self.flags | utf8
    }

    fn effective_payload(&self) -> Vec<u8> {
        match &self.payload {
            Some(p) => p.clone(),
            None if self.method == DEFLATE => deflate(&self.data),
            None => self.data.clone(),
        }
    }

    fn facts(&self) -> Facts {
        let payload = self.effective_payload();
        Facts {
            crc: self.crc.unwrap_or_else(|| crc32(&self.data)),
            compressed_size: len32(&payload),
            uncompressed_size: self.uncompressed_size.unwrap_or_else(|| len32(&self.data)),
            payload,
        }
    }

    /// Length of the local file header alone (fixed part, name, extra).
    pub fn local_header_len(&self) -> u32 {
        let name = self.local_name.as_ref().unwrap_or(&self.name);
        30 + len32(name) + len32(self.local_extra.as_ref().unwrap_or(&self.extra))
    }

    /// Local file header + payload (+ data descriptor when flagged).
    pub fn local_record(&self) -> Vec<u8> {
        let f = self.facts();
        let flags = self.effective_flags();
        let descriptor = flags & FLAG_DESCRIPTOR != 0;
        let name = self.local_name.as_ref().unwrap_or(&self.name);
        let extra = self.local_extra.as_ref().unwrap_or(&self.extra);
        let mut out = Vec::new();
        put32(&mut out, LOCAL_SIG);
        put16(&mut out, VERSION_NEEDED);
        put16(&mut out, flags);
        put16(&mut out, self.local_method.unwrap_or(self.method));
        put16(&mut out, 0);
        put16(&mut out, DOS_DATE_1980_01_01);
        if descriptor && self.descriptor_local_sizes {
            put32(&mut out, 0);
            put32(&mut out, f.compressed_size);
            put32(&mut out, f.uncompressed_size);
        } else if descriptor {
            // APPNOTE 4.4.4 bit 3: CRC and sizes are zero here and follow the data.
            put32(&mut out, 0);
            put32(&mut out, 0);
            put32(&mut out, 0);
        } else {
            put32(&mut out, f.crc);
            put32(
                &mut out,
                self.local_compressed_size.unwrap_or(f.compressed_size),
            );
            put32(&mut out, f.uncompressed_size);
        }
        put16(&mut out, len16(name));
        put16(&mut out, len16(extra));
        out.extend_from_slice(name);
        out.extend_from_slice(extra);
        out.extend_from_slice(&f.payload);
        if descriptor {
            let [crc, cs, us] =
                self.descriptor
                    .unwrap_or([f.crc, f.compressed_size, f.uncompressed_size]);
            if !self.descriptor_unsigned {
                put32(&mut out, DESCRIPTOR_SIG);
            }
            put32(&mut out, crc);
            put32(&mut out, cs);
            put32(&mut out, us);
        }
        out
    }

    /// The central directory record for this entry, pointing at `offset`.
    pub fn central_record(&self, offset: u32) -> Vec<u8> {
        let f = self.facts();
        let mut out = Vec::new();
        put32(&mut out, CENTRAL_SIG);
        put16(
            &mut out,
            if self.mode.is_some() {
                MADE_BY_UNIX
            } else {
                VERSION_NEEDED
            },
        );
        put16(&mut out, VERSION_NEEDED);
        put16(&mut out, self.effective_flags());
        put16(&mut out, self.method);
        put16(&mut out, 0);
        put16(&mut out, DOS_DATE_1980_01_01);
        put32(&mut out, f.crc);
        put32(&mut out, f.compressed_size);
        put32(&mut out, f.uncompressed_size);
        put16(&mut out, len16(&self.name));
        put16(&mut out, len16(&self.extra));
        put16(&mut out, 0); // comment length
        put16(&mut out, 0); // disk number start
        put16(&mut out, 0); // internal attributes
        let dos_dir = if self.name.ends_with(b"/") { 0x10 } else { 0 };
        put32(&mut out, (self.mode.unwrap_or(0) << 16) | dos_dir);
        put32(&mut out, offset);
        out.extend_from_slice(&self.name);
        out.extend_from_slice(&self.extra);
        out
    }
}

struct Facts {
    crc: u32,
    compressed_size: u32,
    uncompressed_size: u32,
    payload: Vec<u8>,
}

/// An archive under construction: local records in order, then the central directory.
#[derive(Default)]
pub struct Zip {
    buf: Vec<u8>,
    central: Vec<u8>,
    count: u16,
}

/// How an archive ends: every field of the end records, including the wrong ones.
#[derive(Default, Clone)]
pub struct Finish {
    pub comment: Vec<u8>,
    /// Bytes after the end record that its comment length does not cover.
    pub trailing: Vec<u8>,
    /// Write a Zip64 end record and locator before the end record.
    pub zip64: bool,
    /// With `zip64`: leave the 32-bit copies in the end record instead of all ones.
    pub zip64_keep_32: bool,
    pub disk_entries: Option<u16>,
    pub total_entries: Option<u16>,
    pub cd_size: Option<u32>,
    pub cd_offset: Option<u32>,
    pub zip64_entries: Option<u64>,
    pub zip64_cd_offset: Option<u64>,
}

impl Zip {
    pub fn new() -> Self {
        Self::default()
    }

    /// An archive whose first bytes are `stub` (a self-extracting program); offsets count
    /// from the start of the file, i.e. they are adjusted for the stub.
    pub fn with_prefix(stub: &[u8]) -> Self {
        Self {
            buf: stub.to_vec(),
            ..Self::default()
        }
    }

    /// A local record no central record describes: only a streaming reader sees it.
    pub fn hidden(&mut self, e: &Entry) {
        self.buf.extend_from_slice(&e.local_record());
    }

    pub fn finish_with(self, f: &Finish) -> Vec<u8> {
        let mut out = self.buf;
        let cd_offset = len32(&out);
        out.extend_from_slice(&self.central);
        let cd_size = len32(&self.central);
        if f.zip64 {
            let z64_at = out.len() as u64;
            put32(&mut out, ZIP64_EOCD_SIG);
            out.extend_from_slice(&44u64.to_le_bytes());
            put16(&mut out, MADE_BY_UNIX);
            put16(&mut out, 45);
            put32(&mut out, 0);
            put32(&mut out, 0);
            let n = f.zip64_entries.unwrap_or(u64::from(self.count));
            out.extend_from_slice(&n.to_le_bytes());
            out.extend_from_slice(&n.to_le_bytes());
            out.extend_from_slice(&u64::from(cd_size).to_le_bytes());
            let off = f.zip64_cd_offset.unwrap_or(u64::from(cd_offset));
            out.extend_from_slice(&off.to_le_bytes());
            put32(&mut out, ZIP64_LOCATOR_SIG);
            put32(&mut out, 0);
            out.extend_from_slice(&z64_at.to_le_bytes());
            put32(&mut out, 1);
        }
        let wide = f.zip64 && !f.zip64_keep_32;
        let count = if wide { u16::MAX } else { self.count };
        put32(&mut out, EOCD_SIG);
        put16(&mut out, 0);
        put16(&mut out, 0);
        put16(
            &mut out,
            f.disk_entries.or(f.total_entries).unwrap_or(count),
        );
        put16(&mut out, f.total_entries.unwrap_or(count));
        put32(
            &mut out,
            f.cd_size.unwrap_or(if wide { u32::MAX } else { cd_size }),
        );
        put32(
            &mut out,
            f.cd_offset
                .unwrap_or(if wide { u32::MAX } else { cd_offset }),
        );
        put16(&mut out, len16(&f.comment));
        out.extend_from_slice(&f.comment);
        out.extend_from_slice(&f.trailing);
        out
    }

    pub fn offset(&self) -> u32 {
        len32(&self.buf)
    }

    /// Append the entry's local record and a central record pointing at it.
    pub fn add(&mut self, e: &Entry) -> u32 {
        let offset = self.offset();
        self.buf.extend_from_slice(&e.local_record());
        self.central_only(e, offset);
        offset
    }

    /// A central record only, pointing wherever the caller says.
    pub fn central_only(&mut self, e: &Entry, offset: u32) {
        self.central.extend_from_slice(&e.central_record(offset));
        self.count += 1;
    }

    pub fn finish(self) -> Vec<u8> {
        self.finish_with(&Finish::default())
    }
}

/// A zip of ordinary members, in order.
pub fn zip_of(entries: &[Entry]) -> Vec<u8> {
    let mut z = Zip::new();
    for e in entries {
        z.add(e);
    }
    z.finish()
}

fn put16(out: &mut Vec<u8>, v: u16) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn len16(b: &[u8]) -> u16 {
    u16::try_from(b.len()).unwrap_or(u16::MAX)
}

fn len32(b: &[u8]) -> u32 {
    u32::try_from(b.len()).unwrap_or(u32::MAX)
}
