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

use std::io::{self, Read as _, Write};

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
        // record (deterministic), never PAX; see `header_path` for the header beside it.
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
                let dir = format!("{}/", e.path);
                let at = header_path(&mut b, &dir)?;
                b.append_data(&mut h, at, io::empty())?;
            }
            SourceKind::File { bytes, executable } => {
                h.set_entry_type(tar::EntryType::Regular);
                h.set_mode(mode_of(*executable));
                h.set_size(bytes.len() as u64);
                let at = header_path(&mut b, &e.path)?;
                b.append_data(&mut h, at, bytes.as_slice())?;
            }
            SourceKind::Symlink { target } => {
                h.set_entry_type(tar::EntryType::Symlink);
                h.set_mode(LINK_MODE);
                h.set_size(0);
                let at = header_path(&mut b, &e.path)?;
                // A target over the header's 100 bytes goes into a GNU long-link record, as
                // the crate's `append_link` writes it, but the header's `linkname` is left
                // empty, not holding whatever the crate's failed write got in: a reader that
                // skips the record then makes no link (an empty target is refused), rather
                // than one to a cut target, somewhere else.
                if let Err(e) = h.set_link_name(target) {
                    if target.len() < NAME_BYTES {
                        return Err(e);
                    }
                    h.as_old_mut().linkname = [0; NAME_BYTES];
                    long_record(&mut b, tar::EntryType::GNULongLink, target)?;
                }
                h.set_path(at)?;
                h.set_cksum();
                b.append(&h, io::empty())?;
            }
        }
    }
    b.into_inner()?.finish()
}

/// Bytes of a path the ustar header's `name` field holds.
const NAME_BYTES: usize = 100;

/// The path a tar reader that skips GNU long-name records reads for an entry packed at
/// `path`: `None` when the ustar header holds it whole (its `prefix` and `name` fields), else
/// the cut [`header_path`] gives the header's `name`: the first 100 bytes, cut back to a whole
/// UTF-8 character, and back to the component before when that leaves a `.`, a `..` or an
/// empty one last (the `tar` crate drops a `.` and refuses a `..`; readers drop empty ones), so
/// the cut is a plain relative path that every reader reads as written.
pub(super) fn ustar_cut(path: &str) -> Option<&str> {
    if path.len() <= NAME_BYTES || tar::Header::new_ustar().set_path(path).is_ok() {
        return None;
    }
    let mut end = NAME_BYTES;
    while !path.is_char_boundary(end) {
        end -= 1;
    }
    let mut cut = &path[..end];
    while let Some((before, last)) = cut.rsplit_once('/')
        && matches!(last, "" | "." | "..")
    {
        cut = before;
    }
    Some(cut)
}

/// The path to give an entry's header for `path`, after writing the GNU long-name record
/// that holds `path` whole when ustar cannot: then the cut [`ustar_cut`] names, which the
/// header's `name` holds alone, so its `prefix` stays empty. (`tar::Builder` would write the
/// record itself, but leave in `prefix` what its failed ustar split wrote there, so a reader
/// that skips the record, the `skills` npm CLI's, read `references/references/...`.)
fn header_path<'a, W: Write>(b: &mut tar::Builder<W>, path: &'a str) -> io::Result<&'a str> {
    let Some(cut) = ustar_cut(path) else {
        return Ok(path);
    };
    long_record(b, tar::EntryType::GNULongName, path)?;
    Ok(cut)
}

/// A GNU long-name (`kind` `L`) or long-link (`K`) record holding `text`, as `tar::Builder`
/// writes it: `././@LongLink`, mode 0644, owner 0, mtime 0, the text and a NUL.
fn long_record<W: Write>(
    b: &mut tar::Builder<W>,
    kind: tar::EntryType,
    text: &str,
) -> io::Result<()> {
    let mut long = tar::Header::new_gnu();
    let name = b"././@LongLink";
    if let Some(gnu) = long.as_gnu_mut() {
        gnu.name[..name.len()].copy_from_slice(name);
    }
    long.set_mode(FILE_MODE);
    long.set_uid(0);
    long.set_gid(0);
    long.set_mtime(0);
    long.set_size(text.len() as u64 + 1);
    long.set_entry_type(kind);
    long.set_cksum();
    b.append(&long, text.as_bytes().chain(&[0u8][..]))
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

    /// A symlink packs as the crate's `append_link` packs it, byte for byte, but for a target
    /// over 100 bytes: the same long-link record, and a header whose `linkname` is empty where
    /// the crate's holds a part of the target. The crate's reader reads the whole target.
    #[test]
    fn a_long_link_target_has_the_crates_record_and_an_empty_linkname() {
        use std::io::Read as _;
        let tar_of = |target: &str| {
            let tree = SourceTree {
                entries: vec![super::super::walk::SourceEntry {
                    path: "refs/l".into(),
                    kind: SourceKind::Symlink {
                        target: target.into(),
                    },
                }],
                left_out: Vec::new(),
                left_out_unlisted: Default::default(),
                not_shared: Vec::new(),
            };
            let mut tar = Vec::new();
            flate2::read::GzDecoder::new(&pack(&tree, Format::TarGz, 0).expect("pack")[..])
                .read_to_end(&mut tar)
                .expect("gunzip");
            tar
        };
        let crate_way = |target: &str| {
            let mut b = tar::Builder::new(Vec::new());
            b.mode(tar::HeaderMode::Deterministic);
            let mut h = tar::Header::new_ustar();
            h.set_uid(0);
            h.set_gid(0);
            h.set_username("").expect("user");
            h.set_groupname("").expect("group");
            h.set_mtime(0);
            h.set_entry_type(tar::EntryType::Symlink);
            h.set_mode(LINK_MODE);
            h.set_size(0);
            b.append_link(&mut h, "refs/l", target).expect("append");
            b.into_inner().expect("tar")
        };
        let linkname = |h: &[u8]| h[157..257].to_vec();
        let read = |tar: &[u8]| -> Vec<String> {
            tar::Archive::new(tar)
                .entries()
                .expect("entries")
                .map(|e| {
                    let e = e.expect("entry");
                    e.link_name()
                        .expect("link")
                        .expect("a link")
                        .display()
                        .to_string()
                })
                .collect()
        };
        // A target of up to 100 bytes fits the header.
        for fits in ["../SKILL.md".to_owned(), format!("{}.md", "n".repeat(97))] {
            assert_eq!(tar_of(&fits), crate_way(&fits));
        }
        for target in [
            format!("../references/{}.md", "n".repeat(120)),
            format!("a/{}.md", "n".repeat(96)),
        ] {
            assert!(target.len() > NAME_BYTES);
            let (ours, theirs) = (tar_of(&target), crate_way(&target));
            assert_eq!(ours[..1024], theirs[..1024]);
            assert_eq!(linkname(&ours[1024..1536]), vec![0; NAME_BYTES]);
            assert_ne!(linkname(&theirs[1024..1536]), vec![0; NAME_BYTES]);
            assert_eq!(read(&ours), std::slice::from_ref(&target));
            assert_eq!(read(&theirs), [target]);
        }
    }

    /// A path ustar cannot hold: the long-name record is byte for byte the `tar` crate's, and
    /// the header beside it holds the cut in `name` with an empty `prefix` (the crate's own
    /// `append_data` leaves `references` there), so a reader that skips the record reads the
    /// cut; the crate's reader reads the whole path.
    #[test]
    fn a_long_path_has_the_crates_record_and_a_header_holding_its_cut() {
        use std::io::Read as _;
        let path = format!("references/{}.md", "n".repeat(120));
        let tree = SourceTree {
            entries: vec![super::super::walk::SourceEntry {
                path: path.clone(),
                kind: SourceKind::File {
                    bytes: b"x\n".to_vec(),
                    executable: false,
                },
            }],
            left_out: Vec::new(),
            left_out_unlisted: Default::default(),
            not_shared: Vec::new(),
        };
        let packed = |tree: &SourceTree| {
            let mut tar = Vec::new();
            flate2::read::GzDecoder::new(&pack(tree, Format::TarGz, 0).expect("pack")[..])
                .read_to_end(&mut tar)
                .expect("gunzip");
            tar
        };
        let read = |tar: &[u8]| -> Vec<String> {
            tar::Archive::new(tar)
                .entries()
                .expect("entries")
                .map(|e| {
                    e.expect("entry")
                        .path()
                        .expect("path")
                        .display()
                        .to_string()
                })
                .collect()
        };
        let ours = packed(&tree);
        let mut crate_way = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_ustar();
        h.set_mode(FILE_MODE);
        h.set_size(2);
        crate_way
            .append_data(&mut h, &path, &b"x\n"[..])
            .expect("append");
        let crate_way = crate_way.into_inner().expect("tar");
        // The record: its header and one 512-byte block of name.
        assert_eq!(ours[..1024], crate_way[..1024]);
        let (header, theirs) = (&ours[1024..1536], &crate_way[1024..1536]);
        let field = |h: &[u8], at: usize, len: usize| {
            let f = &h[at..at + len];
            f[..f.iter().position(|&b| b == 0).unwrap_or(len)].to_vec()
        };
        assert_eq!(field(header, 0, 100), path.as_bytes()[..100].to_vec());
        assert_eq!(field(header, 345, 155), b"".to_vec());
        assert_eq!(field(theirs, 345, 155), b"references".to_vec());
        assert_eq!(read(&ours), [path]);

        // A cut that would end in `..` (which the crate refuses in a header) ends before it.
        let dots = format!("{}/..{}", "d".repeat(97), "x".repeat(200));
        let mut tree = tree;
        tree.entries[0].path = dots.clone();
        let ours = packed(&tree);
        assert_eq!(field(&ours[1024..1536], 0, 100), dots.as_bytes()[..97]);
        assert_eq!(read(&ours), [dots]);
    }
}
