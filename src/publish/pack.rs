//! Writing a walked skill folder as a reproducible artifact: the same entries give the same
//! bytes, whatever the source's mtimes, owners, umask, creation order or host.
//!
//! Every varying field is fixed here, never taken from the file system: entries in path-byte
//! order (the walk sorts them), directories listed, one mtime for all (0, or
//! `SOURCE_DATE_EPOCH`), uid/gid 0 with empty owner names, modes 0644 / 0755 (only the
//! executable bit survives), ustar headers (GNU long-name records only for what ustar
//! cannot hold), no PAX records or extended attributes, a gzip header with no
//! name and mtime 0, and one compression level. This module only encodes; it never reads the
//! file system.

use std::io::{self, Write};

use super::walk::{SourceKind, SourceTree};

/// The archive format of published archives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    TarGz,
    Zip,
}

impl Format {
    /// The artifact file's extension (the consumer's format hint).
    pub fn extension(self) -> &'static str {
        match self {
            Self::TarGz => "tar.gz",
            Self::Zip => "zip",
        }
    }
}

/// The one compression level (gzip and zip's deflate): fixed, so the bytes are.
const LEVEL: u32 = 9;

const FILE_MODE: u32 = 0o644;
const EXEC_MODE: u32 = 0o755;
const DIR_MODE: u32 = 0o755;
const LINK_MODE: u32 = 0o777;

fn mode_of(executable: bool) -> u32 {
    if executable { EXEC_MODE } else { FILE_MODE }
}

/// Encode `tree` as `format` with every entry's mtime `mtime` (seconds since the epoch).
pub fn pack(tree: &SourceTree, format: Format, mtime: u64) -> io::Result<Vec<u8>> {
    match format {
        Format::TarGz => tar_gz(tree, mtime),
        Format::Zip => zip(tree, mtime),
    }
}

fn tar_gz(tree: &SourceTree, mtime: u64) -> io::Result<Vec<u8>> {
    // No file name, mtime 0, OS byte "unknown": nothing of this host in the gzip header.
    let gz = flate2::GzBuilder::new()
        .mtime(0)
        .operating_system(255)
        .write(Vec::new(), flate2::Compression::new(LEVEL));
    let mut b = tar::Builder::new(gz);
    b.mode(tar::HeaderMode::Deterministic);
    for e in &tree.entries {
        // POSIX ustar headers: a path of up to 255 bytes is split into the header's own
        // prefix and name fields, which every tar reader reads, so a consumer that skips
        // extension records it does not know (the `skills` npm CLI does) still installs each
        // file at its path, never at a path cut at 100 bytes. Only a path that cannot be
        // split so (over 255 bytes, or a last component over 100) takes a GNU long-name
        // record (deterministic), never PAX.
        let mut h = tar::Header::new_ustar();
        h.set_uid(0);
        h.set_gid(0);
        h.set_username("")?;
        h.set_groupname("")?;
        h.set_mtime(mtime);
        match &e.kind {
            SourceKind::Dir => {
                h.set_entry_type(tar::EntryType::Directory);
                h.set_mode(DIR_MODE);
                h.set_size(0);
                b.append_data(&mut h, format!("{}/", e.path), io::empty())?;
            }
            SourceKind::File { bytes, executable } => {
                h.set_entry_type(tar::EntryType::Regular);
                h.set_mode(mode_of(*executable));
                h.set_size(bytes.len() as u64);
                b.append_data(&mut h, &e.path, bytes.as_slice())?;
            }
            SourceKind::Symlink { target } => {
                h.set_entry_type(tar::EntryType::Symlink);
                h.set_mode(LINK_MODE);
                h.set_size(0);
                b.append_link(&mut h, &e.path, target)?;
            }
        }
    }
    b.into_inner()?.finish()
}

fn zip(tree: &SourceTree, mtime: u64) -> io::Result<Vec<u8>> {
    use zip::write::SimpleFileOptions;
    let when = dos_time(mtime);
    let base = SimpleFileOptions::default()
        .last_modified_time(when)
        .large_file(false);
    let mut w = zip::ZipWriter::new(io::Cursor::new(Vec::new()));
    for e in &tree.entries {
        match &e.kind {
            SourceKind::Dir => {
                let o = base
                    .compression_method(zip::CompressionMethod::Stored)
                    .unix_permissions(DIR_MODE);
                w.add_directory(format!("{}/", e.path), o)
                    .map_err(io::Error::other)?;
            }
            SourceKind::File { bytes, executable } => {
                let o = base
                    .compression_method(zip::CompressionMethod::Deflated)
                    .compression_level(Some(i64::from(LEVEL)))
                    .unix_permissions(mode_of(*executable));
                w.start_file(e.path.as_str(), o).map_err(io::Error::other)?;
                w.write_all(bytes)?;
            }
            SourceKind::Symlink { target } => {
                let o = base
                    .compression_method(zip::CompressionMethod::Stored)
                    .unix_permissions(LINK_MODE);
                w.add_symlink(e.path.as_str(), target.as_str(), o)
                    .map_err(io::Error::other)?;
            }
        }
    }
    Ok(w.finish().map_err(io::Error::other)?.into_inner())
}

/// The MS-DOS date and time of `secs` (UTC). DOS time starts in 1980 and ends in 2107: earlier
/// times (0 among them) are written as 1980-01-01 00:00:00, later ones as the last it holds.
fn dos_time(secs: u64) -> zip::DateTime {
    const DOS_EPOCH: u64 = 315_532_800; // 1980-01-01T00:00:00Z
    if secs <= DOS_EPOCH {
        return zip::DateTime::default();
    }
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let (y, m, d) = crate::fetch::civil_from_days(days);
    let (hour, minute, second) = (rem / 3600, rem % 3600 / 60, rem % 60);
    let fields = (
        u16::try_from(y),
        u8::try_from(m),
        u8::try_from(d),
        u8::try_from(hour),
        u8::try_from(minute),
        u8::try_from(second),
    );
    if let (Ok(y), Ok(m), Ok(d), Ok(h), Ok(mi), Ok(s)) = fields
        && let Ok(t) = zip::DateTime::from_date_and_time(y, m, d, h, mi, s)
    {
        return t;
    }
    zip::DateTime::from_date_and_time(2107, 12, 31, 23, 59, 58).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates() {
        assert_eq!(crate::fetch::civil_from_days(0), (1970, 1, 1));
        assert_eq!(crate::fetch::civil_from_days(3652), (1980, 1, 1));
        assert_eq!(crate::fetch::civil_from_days(19_723), (2024, 1, 1));
        assert_eq!(crate::fetch::civil_from_days(19_782), (2024, 2, 29));
        let t = zip::DateTime::from_date_and_time(2023, 11, 14, 22, 13, 20).expect("time");
        assert_eq!(dos_time(1_700_000_000), t);
        assert_eq!(dos_time(0), zip::DateTime::default());
    }

    #[test]
    fn gzip_header_has_no_name_and_no_time() {
        let tree = SourceTree {
            entries: vec![super::super::walk::SourceEntry {
                path: "SKILL.md".into(),
                kind: SourceKind::File {
                    bytes: b"x".to_vec(),
                    executable: false,
                },
            }],
            left_out: Vec::new(),
            left_out_unlisted: Default::default(),
            not_shared: Vec::new(),
        };
        let a = pack(&tree, Format::TarGz, 1_700_000_000).expect("pack");
        // ID1 ID2 CM FLG MTIME(4) XFL OS
        assert_eq!(&a[..4], &[0x1f, 0x8b, 8, 0]);
        assert_eq!(&a[4..8], &[0, 0, 0, 0]);
        assert_eq!(a[9], 255);
        assert_eq!(pack(&tree, Format::TarGz, 1_700_000_000).expect("pack"), a);
        assert_ne!(pack(&tree, Format::TarGz, 0).expect("pack"), a);
    }
}
