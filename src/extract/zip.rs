//! Zip reader: central directory via the `zip` crate, checked before a byte is inflated.
//!
//! Before any entry is extracted the whole archive is vetted: its raw records against each
//! other (`zip_records`: end record, Zip64 end record, central directory, local headers, data
//! descriptors, and no byte outside a record), duplicate central-directory names, entries whose
//! bytes overlap (a known bomb construction), and local headers that disagree with the central
//! directory or are missing from it (the views a zip offers, which tools trust differently). Only stored and deflated entries are read; the
//! crate checks each entry's CRC when its data ends, and the sink checks the produced size.

use std::io::{self, BufReader, Read, Seek, SeekFrom};

use zip::CompressionMethod;
use zip::result::ZipError;

use super::Stop;
use super::input::SeekBuf;
use super::sink::{RawEntry, RawKind, Sink, classify, reason_io};
use super::zip_records;
use crate::reason::{Reason, ReasonCode, display_name};

const S_IFMT: u32 = 0o170000;

fn zip_error(err: ZipError, entry: Option<&[u8]>) -> Stop {
    let with_entry = |r: Reason| match entry {
        Some(n) => r.entry(display_name(n)),
        None => r,
    };
    let reason = match err {
        ZipError::Io(e) => classify(&e, entry),
        ZipError::UnsupportedArchive(msg) => {
            let lower = msg.to_ascii_lowercase();
            let code = if lower.contains("password") || lower.contains("encrypt") {
                ReasonCode::Encrypted
            } else if lower.contains("compression") || lower.contains("method") {
                ReasonCode::UnsupportedMethod
            } else {
                ReasonCode::Corrupt
            };
            with_entry(Reason::new(code, display_name(msg.as_bytes())))
        }
        // Library messages may quote hostile names: escape them like every name we print.
        ZipError::InvalidArchive(msg) => with_entry(Reason::new(
            ReasonCode::Corrupt,
            display_name(msg.as_bytes()),
        )),
        other => with_entry(Reason::new(
            ReasonCode::Corrupt,
            display_name(other.to_string().as_bytes()),
        )),
    };
    Stop::Reject(reason)
}

/// A deflated member's data, inflated from its raw bytes: at the end of the stream, the CRC
/// must be the central directory's and the stream must have used every compressed byte. Bytes
/// after a deflate stream's end are never read by a reader that trusts the central directory's
/// size (the zip crate, unzip), but a streaming reader (Java's `ZipInputStream`, the zip
/// crate's own stream reader) takes the end of the stream for the end of the member and reads
/// them as the next records: a whole member hidden there is extracted by one and not the other.
struct Inflated<'r> {
    decoder: flate2::bufread::DeflateDecoder<BufReader<&'r mut dyn Read>>,
    crc: flate2::Crc,
    compressed: u64,
    expected_crc: u32,
    name: &'r [u8],
}

impl<'r> Inflated<'r> {
    fn new(raw: &'r mut dyn Read, compressed: u64, expected_crc: u32, name: &'r [u8]) -> Self {
        Self {
            decoder: flate2::bufread::DeflateDecoder::new(BufReader::with_capacity(64 * 1024, raw)),
            crc: flate2::Crc::new(),
            compressed,
            expected_crc,
            name,
        }
    }
}

impl Read for Inflated<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.decoder.read(buf)?;
        if n > 0 {
            self.crc.update(&buf[..n]);
            return Ok(n);
        }
        if buf.is_empty() {
            return Ok(0);
        }
        let used = self.decoder.total_in();
        if used != self.compressed {
            return Err(reason_io(
                Reason::new(
                    ReasonCode::Corrupt,
                    format!(
                        "the deflate stream ends after {used} of the member's {} compressed \
                         bytes (a streaming reader reads the rest as further records)",
                        self.compressed
                    ),
                )
                .entry(display_name(self.name)),
            ));
        }
        if self.crc.sum() != self.expected_crc {
            return Err(reason_io(
                Reason::new(
                    ReasonCode::CrcMismatch,
                    format!(
                        "CRC-32 of the data is {:#010x}, the central directory says {:#010x}",
                        self.crc.sum(),
                        self.expected_crc
                    ),
                )
                .entry(display_name(self.name)),
            ));
        }
        Ok(0)
    }
}

pub(crate) fn read(mut reader: SeekBuf<'_>, sink: &mut Sink<'_>) -> Result<(), Stop> {
    let limits = sink.limits().clone();
    let size = reader
        .seek(SeekFrom::End(0))
        .map_err(|e| Stop::Reject(classify(&e, None)))?;
    zip_records::check(&mut reader, size, limits.max_entries)?;
    let mut archive = zip::ZipArchive::new(reader).map_err(|e| zip_error(e, None))?;
    if archive.len() as u64 > limits.max_entries {
        return Err(Reason::new(
            ReasonCode::EntryCount,
            "too many entries in the central directory",
        )
        .limit(limits.max_entries, archive.len() as u64)
        .into());
    }
    if archive.has_duplicate_names() {
        return Err(Reason::new(
            ReasonCode::DuplicatePath,
            "the central directory lists the same name twice",
        )
        .into());
    }
    if archive
        .has_overlapping_entries()
        .map_err(|e| zip_error(e, None))?
    {
        return Err(Reason::new(
            ReasonCode::OverlappingEntries,
            "two entries share bytes of the archive (overlapping-file bomb construction)",
        )
        .into());
    }
    if let Err(e) = archive.validate_header_consistency() {
        return Err(match e {
            ZipError::InvalidArchive(msg) => {
                let msg = display_name(msg.as_bytes());
                Reason::new(
                    ReasonCode::HeaderMismatch,
                    format!("local and central headers disagree: {msg}"),
                )
                .into()
            }
            other => zip_error(other, None),
        });
    }
    for i in 0..archive.len() {
        let (name, kind_bits, mode, size, method, encrypted, compressed, crc) = {
            let meta = archive.by_index_data(i).map_err(|e| zip_error(e, None))?;
            let unix = meta.unix_mode();
            (
                meta.name_raw().to_vec(),
                unix.map(|m| m & S_IFMT),
                unix.map(|m| m & 0o7777),
                meta.size(),
                meta.compression(),
                meta.encrypted(),
                meta.compressed_size(),
                meta.crc32(),
            )
        };
        let shown = display_name(&name);
        if encrypted {
            return Err(Reason::new(ReasonCode::Encrypted, "entry is encrypted")
                .entry(shown)
                .into());
        }
        if !matches!(
            method,
            CompressionMethod::Stored | CompressionMethod::Deflated
        ) {
            return Err(Reason::new(
                ReasonCode::UnsupportedMethod,
                format!("compression method {method:?} is not accepted"),
            )
            .entry(shown)
            .into());
        }
        // A deflated member is inflated here, from its raw bytes, so that the stream is held to
        // end exactly where the member does (`Inflated`).
        let deflated = method == CompressionMethod::Deflated;
        let mut file = if deflated {
            archive.by_index_raw(i)
        } else {
            archive.by_index(i)
        }
        .map_err(|e| zip_error(e, Some(&name)))?;
        let mut inflated;
        let file: &mut dyn Read = if deflated {
            inflated = Inflated::new(&mut file, compressed, crc, &name);
            &mut inflated
        } else {
            &mut file
        };
        let trailing_slash = name.ends_with(b"/");
        let kind = match kind_bits {
            Some(0o120000) => {
                // A zip symlink stores its target as the entry's data.
                let mut target = Vec::new();
                file.take(limits.max_path_bytes + 1)
                    .read_to_end(&mut target)
                    .map_err(|e| Stop::Reject(classify(&e, Some(&name))))?;
                RawKind::Symlink(target)
            }
            Some(0o020000) => RawKind::Special("character device"),
            Some(0o060000) => RawKind::Special("block device"),
            Some(0o010000) => RawKind::Special("FIFO"),
            Some(0o140000) => RawKind::Special("socket"),
            // unzip and Python's zipfile take an entry for a directory by its trailing slash
            // alone, and extract one without it as a file with its data: a directory is both,
            // and holds no data, or the tree staged here is not theirs.
            Some(0o040000) | Some(0o100000) | Some(0) | None if trailing_slash => {
                if size != 0 {
                    return Err(
                        Reason::new(ReasonCode::Corrupt, "directory entry carries data")
                            .entry(shown)
                            .into(),
                    );
                }
                RawKind::Dir
            }
            Some(0o040000) => {
                return Err(Reason::new(
                    ReasonCode::Corrupt,
                    "the mode says directory, but the name does not end in / (other tools \
                     extract it as a file)",
                )
                .entry(shown)
                .into());
            }
            Some(0o100000) | Some(0) | None => RawKind::File,
            Some(other) => RawKind::Special(if other == 0o160000 {
                "whiteout"
            } else {
                "unknown-type"
            }),
        };
        let is_file = matches!(kind, RawKind::File);
        let default_mode = if matches!(kind, RawKind::Dir) {
            0o755
        } else {
            0o644
        };
        let raw = RawEntry {
            name: &name,
            kind,
            mode: mode.unwrap_or(default_mode),
            declared_size: if is_file { Some(size) } else { None },
        };
        sink.set_decoding(method == CompressionMethod::Deflated);
        sink.add(raw, file)?;
    }
    Ok(())
}
