//! Tar reader for plain, gzip- and zstd-compressed tarballs.
//!
//! Entries are read in the crate's raw mode so that GNU long names and PAX records are
//! handled here with hard bounds (the crate would read them whole into memory). A guard
//! between decoder and parser counts every decoded byte, headers and padding included, so a
//! bomb hidden in metadata, in skipped data or after the end marker is refused as early as
//! one hidden in file contents. Data after the end-of-archive marker must be zero padding.
//! Extension headers (PAX, GNU long names) belong to the member they precede: they are not
//! members of their own, and more than a few in a row describe nothing real.

use std::io::{self, BufRead, Cursor, Read, Seek, SeekFrom};

use super::Stop;
use super::detect::is_tar_header;
use super::input::{SeekBuf, Views};
use super::policy::Limits;
use super::sink::{RawEntry, RawKind, Sink, classify, reason_io};
use crate::reason::{Reason, ReasonCode, display_name};

/// Largest PAX extended header we read (paths are at most 4 KiB; this leaves room for the
/// harmless records real tools add).
const MAX_PAX_BYTES: u64 = 64 * 1024;

/// Most extension headers in a row before a member: GNU tar and pax writers emit at most a
/// global header, a PAX header and a long name and link.
const MAX_EXTENSION_RUN: u32 = 8;

/// Header and padding bytes allowed on top of file bytes: 1.5 KiB per member, 1 MiB besides.
fn overhead(limits: &Limits) -> u64 {
    limits
        .max_entries
        .saturating_mul(1536)
        .saturating_add(1024 * 1024)
}

/// Enforces the output budget and an absolute cap on decoded bytes, whatever they are used for.
struct DecodeGuard<R> {
    inner: R,
    decoded: u64,
    cap: u64,
    artifact_size: u64,
    limits: Limits,
}

impl<R: Read> Read for DecodeGuard<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.decoded += n as u64;
        if self.decoded > self.cap {
            return Err(reason_io(
                Reason::new(
                    ReasonCode::ExpandedSize,
                    "the compressed stream expands past the limit",
                )
                .limit(self.limits.max_expanded_bytes, self.decoded),
            ));
        }
        // The sink holds file bytes to the budget exactly; here headers and padding may come on
        // top, so a benign archive right at the budget passes while a metadata bomb does not.
        let metadata = self.decoded.saturating_sub(overhead(&self.limits));
        Sink::check_budget(&self.limits, metadata, self.artifact_size).map_err(reason_io)?;
        Ok(n)
    }
}

/// A compressed tarball: check the decoded bytes really are tar, then read it under a guard.
pub(crate) fn read_decoded<R: Read>(decoder: R, sink: &mut Sink<'_>) -> Result<(), Stop> {
    let limits = sink.limits().clone();
    let cap = limits.max_expanded_bytes.saturating_add(overhead(&limits));
    let mut guard = DecodeGuard {
        inner: decoder,
        decoded: 0,
        cap,
        artifact_size: sink.artifact_size(),
        limits,
    };
    let mut head = vec![0u8; 512];
    let mut filled = 0;
    while filled < head.len() {
        match guard.read(&mut head[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(classify(&e, None).into()),
        }
    }
    if filled == 0 {
        return Err(Reason::new(ReasonCode::Corrupt, "the compressed stream is empty").into());
    }
    if !is_tar_header(&head[..filled]) && head[..filled].iter().any(|b| *b != 0) {
        return Err(Reason::new(
            ReasonCode::UnsupportedFormat,
            "the compressed stream does not hold a tar archive",
        )
        .into());
    }
    head.truncate(filled);
    sink.set_decoding(true);
    read(Cursor::new(head).chain(guard), sink)
}

/// Parse PAX records we act on: `path`, `linkpath`, `size`. Other keys are ignored.
struct Pax {
    path: Option<Vec<u8>>,
    linkpath: Option<Vec<u8>>,
    size: Option<u64>,
}

impl Pax {
    /// Whether it holds a record we act on.
    fn acted_on(&self) -> bool {
        self.path.is_some() || self.linkpath.is_some() || self.size.is_some()
    }
}

fn parse_pax(data: &[u8]) -> Result<Pax, Reason> {
    let mut pax = Pax {
        path: None,
        linkpath: None,
        size: None,
    };
    for ext in tar::PaxExtensions::new(data) {
        let ext = ext
            .map_err(|e| Reason::new(ReasonCode::Corrupt, format!("malformed PAX record: {e}")))?;
        match ext.key_bytes() {
            b"path" => pax.path = Some(ext.value_bytes().to_vec()),
            b"linkpath" => pax.linkpath = Some(ext.value_bytes().to_vec()),
            // GNU sparse formats 0.x/1.0 ride on ordinary members via PAX records; honouring
            // them would stage different bytes than GNU tar, ignoring them stages the raw map.
            key if key.starts_with(b"GNU.sparse.") => {
                return Err(Reason::new(
                    ReasonCode::UnsupportedMethod,
                    "GNU sparse files are not accepted",
                ));
            }
            // bsdtar's (libarchive's) own sparse records, the same thing: `SCHILY.realsize`
            // sets the extracted size (a 35-byte `rm -rf /home/...` staged here is the 8-byte
            // `rm -rf /` there), `SUN.holesdata` places the data around holes.
            b"SCHILY.realsize" | b"SUN.holesdata" => {
                return Err(Reason::new(
                    ReasonCode::UnsupportedMethod,
                    format!(
                        "sparse files are not accepted (PAX record {:?}, which bsdtar honours)",
                        display_name(ext.key_bytes())
                    ),
                ));
            }
            // An ACL is a second copy of the permissions, which bsdtar restores (as root, by
            // default) and this engine does not: `user::rwx` on a 0644 header is an
            // executable there, an execute bit the review never saw.
            key if key.starts_with(b"SCHILY.acl.") => {
                return Err(Reason::new(
                    ReasonCode::HeaderMismatch,
                    format!(
                        "PAX record {:?} is an ACL, which bsdtar restores over the header's mode",
                        display_name(key)
                    ),
                ));
            }
            b"size" => {
                let v = std::str::from_utf8(ext.value_bytes())
                    .ok()
                    .and_then(|s| s.parse::<u64>().ok())
                    .ok_or_else(|| Reason::new(ReasonCode::Corrupt, "PAX size is not a number"))?;
                pax.size = Some(v);
            }
            _ => {}
        }
    }
    Ok(pax)
}

/// Refuse a header whose size or mode field is not a number every reader reads alike: octal
/// digits, optionally after spaces and before a NUL or space, or GNU's positive base-256.
/// The crate also takes a leading `+` (`+0000002000` is 1,024 bytes here, 0 to bsdtar, base-64
/// to GNU tar): the size frames the stream, so such a member's data is another member there.
fn check_numbers(header: &tar::Header) -> Result<(), Reason> {
    let bytes = header.as_bytes();
    for (field, what) in [(&bytes[124..136], "size"), (&bytes[100..108], "mode")] {
        if !plain_number(field) {
            return Err(Reason::new(
                ReasonCode::Corrupt,
                format!("the header's {what} field is not a plain octal or base-256 number"),
            ));
        }
    }
    Ok(())
}

fn plain_number(field: &[u8]) -> bool {
    // GNU base-256: the top bit of the first byte; a first byte of 0xff is negative there.
    if field.first().is_some_and(|b| b & 0x80 != 0) {
        return field[0] == 0x80;
    }
    let start = field.iter().position(|b| *b != b' ').unwrap_or(field.len());
    let digits = field[start..]
        .iter()
        .position(|b| !(b'0'..=b'7').contains(b))
        .map_or(field.len(), |i| start + i);
    field[digits..].iter().all(|b| matches!(b, 0 | b' '))
}

/// The permission bits of a header's mode field: octal as tar-rs reads it, or GNU's positive
/// base-256 (which [`check_numbers`] admits and tar-rs does not decode: GNU tar, bsdtar and
/// Python's tarfile do, so a base-256 `0755` is an executable there). `None` for a field with
/// no digits (all NULs or spaces), which those tools read as 0.
fn header_mode(header: &tar::Header) -> Result<Option<u32>, Reason> {
    let field = &header.as_bytes()[100..108];
    if field[0] == 0x80 {
        let value = field[1..]
            .iter()
            .fold(0u64, |v, b| (v << 8) | u64::from(*b));
        return u32::try_from(value).map(Some).map_err(|_| {
            Reason::new(
                ReasonCode::Corrupt,
                "the header's base-256 mode is out of range",
            )
        });
    }
    Ok(header.mode().ok())
}

/// Refuse a member whose header holds a ustar `prefix` (bytes 345..500) that tar-rs does not
/// apply: it joins prefix and name only under the POSIX magic `ustar\0` and version `00`.
/// GNU tar and bsdtar join them under `ustar\0` with any version, and Python's tarfile joins
/// them under any magic (GNU's, v7's none), so such a member is `docs/notes.txt` there and
/// `notes.txt` here (`../x` or `/x` there too). GNU tar writes times into that field of its own
/// headers with `--incremental`: tarfile reads those as a directory. A PAX `path` or GNU long
/// name replaces both fields in every tool, so only a member named by its header is checked.
fn check_prefix(header: &tar::Header) -> Result<(), Reason> {
    let b = header.as_bytes();
    let posix = &b[257..263] == b"ustar\0" && &b[263..265] == b"00";
    if posix || b[345] == 0 {
        return Ok(());
    }
    Err(Reason::new(
        ReasonCode::HeaderMismatch,
        format!(
            "the header's prefix field holds {:?}, which GNU tar, bsdtar or Python's tarfile put \
             before its name and this reader (the header is not POSIX ustar) does not",
            display_name(b[345..500].split(|c| *c == 0).next().unwrap_or_default())
        ),
    ))
}

/// Refuse a global PAX header carrying a record that changes what a member is: its name,
/// link, size (how the stream is framed) or a GNU sparse map.
fn check_global_pax(data: &[u8]) -> Result<(), Reason> {
    for ext in tar::PaxExtensions::new(data) {
        let ext = ext.map_err(|e| {
            Reason::new(
                ReasonCode::Corrupt,
                format!("malformed PAX global record: {e}"),
            )
        })?;
        let key = ext.key_bytes();
        if matches!(key, b"path" | b"linkpath" | b"size") || key.starts_with(b"GNU.sparse.") {
            return Err(Reason::new(
                ReasonCode::HeaderMismatch,
                format!(
                    "a PAX global header sets {:?} for every member after it, which GNU tar \
                     honours and the member headers contradict",
                    display_name(key)
                ),
            ));
        }
    }
    Ok(())
}

fn read_bounded(r: &mut dyn Read, max: u64, what: &str) -> Result<Vec<u8>, Stop> {
    let mut out = Vec::new();
    // GNU long names are stored NUL-terminated: read one byte of slack for the terminator and
    // one to detect an over-long value, and measure only after stripping the terminator.
    r.take(max + 2)
        .read_to_end(&mut out)
        .map_err(|e| Stop::Reject(classify(&e, None)))?;
    while out.last() == Some(&0) {
        out.pop();
    }
    if out.len() as u64 > max {
        return Err(Reason::new(
            ReasonCode::PathLength,
            format!("{what} is longer than the limit"),
        )
        .limit(max, out.len() as u64)
        .into());
    }
    Ok(out)
}

fn tar_error(e: &io::Error) -> Stop {
    let r = classify(e, None);
    // A tar header checksum is structural damage, not a data CRC.
    if r.code == ReasonCode::CrcMismatch && r.detail.contains("header checksum") {
        return Reason::new(ReasonCode::Corrupt, r.detail).into();
    }
    r.into()
}

/// Read a (decoded) tar stream entry by entry into the sink.
pub(crate) fn read<R: Read>(reader: R, sink: &mut Sink<'_>) -> Result<(), Stop> {
    let mut archive = tar::Archive::new(Forward::new(reader));
    let entries = archive.entries_with_seek().map_err(|e| tar_error(&e))?;
    members(entries, sink, None)?;
    trailer(archive.into_inner())
}

/// Bytes a [`Forward`] drops per read.
const SKIP_CHUNK: usize = 4096;

/// A stream the `tar` crate may seek forward in: what it skips (a member's padding, data no one
/// read) is read and dropped, as the crate itself would, but into one buffer for the whole
/// stream. Without a `Seek` the crate skips through a 32 KiB buffer it zeroes for every member,
/// even with nothing to skip (2-3 ms a request over 10,000 tiny members). The bytes read, their
/// order and the errors are the same either way.
struct Forward<R> {
    inner: R,
    /// Bytes read from `inner`: where the `tar` crate is, which a seek returns.
    pos: u64,
    /// Made on the first skip of anything.
    scratch: Vec<u8>,
}

impl<R> Forward<R> {
    fn new(inner: R) -> Self {
        Self {
            inner,
            pos: 0,
            scratch: Vec::new(),
        }
    }
}

impl<R: Read> Read for Forward<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl<R: Read> Seek for Forward<R> {
    /// Only forward from here (`SeekFrom::Current` of zero or more), which is all the `tar`
    /// crate asks.
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let mut left = match to {
            SeekFrom::Current(ahead) => u64::try_from(ahead).ok(),
            SeekFrom::Start(_) | SeekFrom::End(_) => None,
        }
        .ok_or_else(|| io::Error::new(io::ErrorKind::Unsupported, "a stream seeks forward only"))?;
        if left > 0 && self.scratch.is_empty() {
            self.scratch = vec![0; SKIP_CHUNK];
        }
        while left > 0 {
            let want = usize::try_from(left).map_or(SKIP_CHUNK, |l| l.min(SKIP_CHUNK));
            let n = self.inner.read(&mut self.scratch[..want])?;
            if n == 0 {
                // The `tar` crate's own words for it.
                return Err(io::Error::other("unexpected EOF during skip"));
            }
            self.pos += n as u64;
            left -= n as u64;
        }
        Ok(self.pos)
    }
}

/// Read a plain tarball from the mapped artifact: the headers through `reader`, each file's data
/// in place through `views` (the parser seeks over it instead of copying it out).
pub(crate) fn read_mapped(
    reader: SeekBuf<'_>,
    mut views: Views<'_>,
    sink: &mut Sink<'_>,
) -> Result<(), Stop> {
    let mut archive = tar::Archive::new(reader);
    let entries = archive.entries_with_seek().map_err(|e| tar_error(&e))?;
    members(entries, sink, Some(&mut views))?;
    trailer(archive.into_inner())
}

/// Every member, into the sink; file data from `views` at the member's offset when given.
fn members<R: Read>(
    entries: tar::Entries<'_, R>,
    sink: &mut Sink<'_>,
    mut views: Option<&mut Views<'_>>,
) -> Result<(), Stop> {
    let limits = sink.limits().clone();
    {
        let entries = entries.raw(true);
        let mut long_name: Option<Vec<u8>> = None;
        let mut long_link: Option<Vec<u8>> = None;
        let mut pax: Option<Pax> = None;
        let mut run: u32 = 0;
        for entry in entries {
            let mut entry = entry.map_err(|e| tar_error(&e))?;
            check_numbers(entry.header())?;
            let ty = entry.header().entry_type();
            if ty.is_gnu_longname()
                || ty.is_gnu_longlink()
                || ty.is_pax_local_extensions()
                || ty.is_pax_global_extensions()
            {
                run += 1;
                if run > MAX_EXTENSION_RUN {
                    return Err(Reason::new(
                        ReasonCode::Corrupt,
                        "more extension headers in a row than any writer emits",
                    )
                    .limit(u64::from(MAX_EXTENSION_RUN), u64::from(run))
                    .into());
                }
                // One long name and one long link per member: with two, tools disagree on
                // which one counts (GNU tar and bsdtar take the last, Python's tarfile the
                // first), so one artifact would be two packages.
                let again = |what: &str| -> Stop {
                    Reason::new(
                        ReasonCode::HeaderMismatch,
                        format!(
                            "two {what} headers before one member: tools disagree on which counts"
                        ),
                    )
                    .into()
                };
                if ty.is_gnu_longname() {
                    if long_name.is_some() {
                        return Err(again("GNU long-name"));
                    }
                    long_name = Some(read_bounded(
                        &mut entry,
                        limits.max_path_bytes,
                        "GNU long name",
                    )?);
                } else if ty.is_gnu_longlink() {
                    if long_link.is_some() {
                        return Err(again("GNU long-link"));
                    }
                    long_link = Some(read_bounded(
                        &mut entry,
                        limits.max_path_bytes,
                        "GNU long link",
                    )?);
                } else if ty.is_pax_local_extensions() {
                    let data = read_bounded(&mut entry, MAX_PAX_BYTES, "PAX header")?;
                    let next = parse_pax(&data)?;
                    // A later PAX header replaces an earlier one here and in GNU tar, while
                    // Python's tarfile merges them: harmless for records we ignore, two
                    // packages when the earlier one names, links or sizes the member.
                    if pax.as_ref().is_some_and(Pax::acted_on) {
                        return Err(again("PAX"));
                    }
                    pax = Some(next);
                } else {
                    // A global PAX header is honoured by GNU tar and Python's tarfile for every
                    // member after it; we honour none of it, so it may carry nothing that
                    // changes a member's name, link or framing (`comment`, as `git archive`
                    // writes, is fine).
                    let data = read_bounded(&mut entry, MAX_PAX_BYTES, "PAX global header")?;
                    check_global_pax(&data)?;
                }
                continue;
            }
            run = 0;
            let pax_now = pax.take();
            let (pax_path, pax_link, pax_size) = match pax_now {
                Some(p) => (p.path, p.linkpath, p.size),
                None => (None, None, None),
            };
            // A PAX name and a GNU long name for one member: GNU tar takes the PAX one, bsdtar
            // and Python's tarfile the GNU one.
            if pax_path.is_some() && long_name.is_some()
                || pax_link.is_some() && long_link.is_some()
            {
                return Err(Reason::new(
                    ReasonCode::HeaderMismatch,
                    "a PAX header and a GNU long-name header both name one member: tools \
                     disagree on which counts",
                )
                .into());
            }
            let named_by_header = pax_path.is_none() && long_name.is_none();
            if named_by_header {
                check_prefix(entry.header())
                    .map_err(|r| r.entry(display_name(&entry.path_bytes())))?;
            }
            let name = pax_path
                .or_else(|| long_name.take())
                .unwrap_or_else(|| entry.path_bytes().into_owned());
            long_name = None;
            let link = pax_link
                .or_else(|| long_link.take())
                .or_else(|| entry.link_name_bytes().map(|c| c.into_owned()));
            long_link = None;
            if let Some(size) = pax_size
                && size != entry.size()
            {
                return Err(Reason::new(
                    ReasonCode::HeaderMismatch,
                    "PAX size disagrees with the header size",
                )
                .entry(display_name(&name))
                .into());
            }
            let mode = header_mode(entry.header())
                .map_err(|r| r.entry(display_name(&name)))?
                .unwrap_or(0o644);
            let link_or_empty = || link.clone().unwrap_or_default();
            let kind = match ty {
                // A v7 header (type NUL) whose own name ends in `/` is a directory to GNU tar,
                // bsdtar and tarfile alike (`bsdtar --format v7` writes directories so), and
                // its data, if any, their next headers: a directory, held to no data below.
                // Named by a PAX or GNU long-name record, or typed `0`, the tools disagree
                // (tarfile decides by the header's own name and type NUL only): the sink
                // refuses the trailing slash on a file.
                tar::EntryType::Regular
                    if named_by_header
                        && entry.header().as_bytes()[156] == 0
                        && name.ends_with(b"/") =>
                {
                    RawKind::Dir
                }
                tar::EntryType::Regular | tar::EntryType::Continuous => RawKind::File,
                tar::EntryType::Directory => RawKind::Dir,
                tar::EntryType::Symlink => RawKind::Symlink(link_or_empty()),
                tar::EntryType::Link => RawKind::HardLink(link_or_empty()),
                tar::EntryType::Char => RawKind::Special("character device"),
                tar::EntryType::Block => RawKind::Special("block device"),
                tar::EntryType::Fifo => RawKind::Special("FIFO"),
                tar::EntryType::GNUSparse => {
                    return Err(Reason::new(
                        ReasonCode::UnsupportedMethod,
                        "GNU sparse files are not accepted",
                    )
                    .entry(display_name(&name))
                    .into());
                }
                other => {
                    return Err(Reason::new(
                        ReasonCode::UnsupportedMethod,
                        format!(
                            "tar entry type {:?} is not accepted",
                            char::from(other.as_byte())
                        ),
                    )
                    .entry(display_name(&name))
                    .into());
                }
            };
            // Only a regular file's size may be non-zero: GNU tar, bsdtar and Python's tarfile
            // read the data of a directory or hard link (tarfile and bsdtar of a symlink too)
            // as the next headers, where tar-rs skips it, so members hidden there would be
            // extracted by every other tool and never seen here.
            if matches!(
                kind,
                RawKind::Dir | RawKind::Symlink(_) | RawKind::HardLink(_)
            ) && entry.size() != 0
            {
                return Err(Reason::new(
                    ReasonCode::Corrupt,
                    format!(
                        "a directory or link header declares {} bytes of data",
                        entry.size()
                    ),
                )
                .entry(display_name(&name))
                .into());
            }
            // The header's size frames the member: the data is exactly that long or the stream
            // is truncated, so the sink may refuse an oversized member before decoding it.
            let declared_size = matches!(kind, RawKind::File).then(|| entry.size());
            let raw = RawEntry {
                name: &name,
                kind,
                mode,
                declared_size,
            };
            match views.as_deref_mut() {
                // In the artifact as it is: `raw_file_position` is the data's offset in the
                // stream the parser reads, which here is the artifact itself.
                Some(v) => sink.add_mapped(raw, v, entry.raw_file_position())?,
                None => sink.add(raw, &mut entry)?,
            }
        }
        if long_name.is_some() || long_link.is_some() || pax.is_some() {
            return Err(Reason::new(
                ReasonCode::Corrupt,
                "archive ends with an extended header that describes nothing",
            )
            .into());
        }
    }
    Ok(())
}

/// A gzip file as `gzip -d` reads it: its members one after another, as one stream (a tar split
/// over several members is one tar, as before), then optionally zero bytes, which gzip ("trailing
/// zero bytes ignored"), GNU tar, bsdtar and Python's tarfile all skip: tape-blocked `.tar.gz`
/// files are padded so. Anything else after the last member is refused as `corrupt`: a non-zero
/// byte is "trailing garbage" to gzip and fails GNU tar, and a member after zero padding is one
/// gzip never reads. The padding lies in the artifact, so its size bounds the scan.
pub(crate) struct GzMembers<R: BufRead> {
    state: GzState<R>,
}

enum GzState<R: BufRead> {
    Member(Box<flate2::bufread::GzDecoder<R>>),
    /// Between members, or in the padding after the last one (`true`).
    After(R, bool),
    Done,
}

impl<R: BufRead> GzMembers<R> {
    pub(crate) fn new(inner: R) -> Self {
        Self {
            state: GzState::Member(Box::new(flate2::bufread::GzDecoder::new(inner))),
        }
    }
}

fn after_gzip(detail: &str) -> io::Error {
    reason_io(Reason::new(ReasonCode::Corrupt, detail))
}

impl<R: BufRead> Read for GzMembers<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            match std::mem::replace(&mut self.state, GzState::Done) {
                GzState::Done => return Ok(0),
                GzState::Member(mut d) => match d.read(buf) {
                    Ok(0) => self.state = GzState::After((*d).into_inner(), false),
                    Ok(n) => {
                        self.state = GzState::Member(d);
                        return Ok(n);
                    }
                    Err(e) => {
                        self.state = GzState::Member(d);
                        return Err(e);
                    }
                },
                GzState::After(mut r, padding) => {
                    let rest = r.fill_buf()?;
                    let Some(&first) = rest.first() else {
                        return Ok(0);
                    };
                    if !padding && first == 0x1f {
                        self.state = GzState::Member(Box::new(flate2::bufread::GzDecoder::new(r)));
                        continue;
                    }
                    if let Some(i) = rest.iter().position(|b| *b != 0) {
                        return Err(after_gzip(if padding || i > 0 {
                            "data after the zero padding that ends the gzip stream"
                        } else {
                            "data after the gzip stream that is neither a gzip member nor zero \
                             padding"
                        }));
                    }
                    let n = rest.len();
                    r.consume(n);
                    self.state = GzState::After(r, true);
                }
            }
        }
    }
}

/// Whatever follows the end marker must be zero padding; draining it also makes the decoder
/// verify the gzip/zstd trailer checksum.
fn trailer<R: Read>(mut rest: R) -> Result<(), Stop> {
    // Small and on the stack: the padding is usually a few blocks, and a fresh 64 KiB heap
    // buffer cost a busy child about ten page faults, each dearer than a read call here.
    let mut buf = [0u8; 4096];
    loop {
        let n = match rest.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(tar_error(&e)),
        };
        if buf[..n].iter().any(|b| *b != 0) {
            return Err(
                Reason::new(ReasonCode::Corrupt, "data after the end-of-archive marker").into(),
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn gz(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        e.write_all(data).expect("compress");
        e.finish().expect("finish")
    }

    /// What [`GzMembers`] reads from `bytes`, or the reason it refuses them.
    fn members(bytes: &[u8]) -> Result<Vec<u8>, Reason> {
        let mut out = Vec::new();
        GzMembers::new(bytes)
            .read_to_end(&mut out)
            .map_err(|e| classify(&e, None))?;
        Ok(out)
    }

    /// A regular-file header named `notes.md` with `magic` (bytes 257..265) and `prefix`.
    fn header_with(magic: &[u8; 8], prefix: &[u8]) -> tar::Header {
        let mut h = tar::Header::new_old();
        h.set_path("notes.md").expect("name");
        h.set_size(0);
        h.set_mode(0o644);
        let b = h.as_mut_bytes();
        b[257..265].copy_from_slice(magic);
        b[345..345 + prefix.len()].copy_from_slice(prefix);
        h
    }

    #[test]
    fn a_prefix_this_parser_ignores_is_refused() {
        let code = |magic: &[u8; 8], prefix: &[u8]| check_prefix(&header_with(magic, prefix));
        // POSIX ustar: tar-rs joins prefix and name as every tool does.
        assert!(code(b"ustar\x0000", b"docs").is_ok());
        for magic in [b"ustar\0\0\0", b"ustar\0  ", b"ustar  \0", &[0u8; 8]] {
            assert!(code(magic, b"").is_ok(), "{magic:?} without a prefix");
            let r = code(magic, b"docs").expect_err("a prefix tar-rs ignores");
            assert_eq!(r.code, ReasonCode::HeaderMismatch, "{magic:?}");
        }
    }

    #[test]
    fn pax_records_only_bsdtar_acts_on_are_refused() {
        let code = |key: &str, value: &str| {
            let record = format!(" {key}={value}\n");
            let mut len = record.len() + 1;
            if format!("{len}{record}").len() != len {
                len += 1;
            }
            parse_pax(format!("{len}{record}").as_bytes()).map(|_| ())
        };
        for (key, value, expected) in [
            ("SCHILY.realsize", "8", ReasonCode::UnsupportedMethod),
            (
                "SUN.holesdata",
                " 0 10 20 12",
                ReasonCode::UnsupportedMethod,
            ),
            ("SCHILY.acl.access", "user::rwx", ReasonCode::HeaderMismatch),
            (
                "SCHILY.acl.ace",
                "owner@:rwx::allow",
                ReasonCode::HeaderMismatch,
            ),
        ] {
            let r = code(key, value).expect_err(key);
            assert_eq!(r.code, expected, "{key}");
        }
        assert!(code("SCHILY.xattr.user.note", "hi").is_ok());
        assert!(code("mtime", "1.5").is_ok());
    }

    #[test]
    fn a_base_256_mode_is_read_as_other_tools_read_it() {
        let mut h = header_with(b"ustar  \0", b"");
        h.as_mut_bytes()[100..108].copy_from_slice(&[0x80, 0, 0, 0, 0, 0, 0x01, 0xed]);
        assert_eq!(header_mode(&h).expect("in range"), Some(0o755));
        h.as_mut_bytes()[100..108].copy_from_slice(&[0x80, 0, 1, 0, 0, 0, 0, 0]);
        assert_eq!(
            header_mode(&h).map_err(|r| r.code),
            Err(ReasonCode::Corrupt)
        );
        h.as_mut_bytes()[100..108].copy_from_slice(b"0000755\0");
        assert_eq!(header_mode(&h).expect("octal"), Some(0o755));
    }

    #[test]
    fn zero_padding_after_the_last_member_is_skipped_and_nothing_else_is() {
        let one = gz(b"first ");
        let mut two = one.clone();
        two.extend(gz(b"second"));
        assert_eq!(members(&two).expect("two members"), b"first second");
        let mut padded = two.clone();
        padded.resize(padded.len() + 10_240, 0);
        assert_eq!(members(&padded).expect("padded"), b"first second");
        for (what, tail) in [
            ("garbage", b"x".to_vec()),
            ("zeros then garbage", [&[0u8; 100][..], b"x"].concat()),
            ("zeros then a member", [&[0u8; 512][..], &one].concat()),
        ] {
            let bytes = [&one[..], &tail].concat();
            let r = members(&bytes).expect_err(what);
            assert_eq!(r.code, ReasonCode::Corrupt, "{what}: {r:?}");
        }
    }

    /// A reader that hands out at most 7 bytes a call, as a decoder may.
    struct Dribble<'a>(&'a [u8]);

    impl Read for Dribble<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = buf.len().min(7).min(self.0.len());
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    #[test]
    fn a_stream_seeks_forward_only_and_by_reading() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        let mut f = Forward::new(Dribble(&data));
        let mut first = [0u8; 10];
        f.read_exact(&mut first).expect("read");
        assert_eq!(first[..], data[..10]);
        assert_eq!(f.stream_position().expect("nothing to skip"), 10);
        assert_eq!(f.seek(SeekFrom::Current(5_000)).expect("skip"), 5_010);
        let mut next = [0u8; 3];
        f.read_exact(&mut next).expect("read after the skip");
        assert_eq!(next[..], data[5_010..5_013]);
        for refused in [SeekFrom::Current(-1), SeekFrom::Start(0), SeekFrom::End(0)] {
            let e = f.seek(refused).expect_err("not forward");
            assert_eq!(e.kind(), io::ErrorKind::Unsupported, "{refused:?}");
        }
        let e = f.seek(SeekFrom::Current(5_000)).expect_err("past the end");
        assert_eq!(e.to_string(), "unexpected EOF during skip");
    }

    /// A tar of members whose sizes need padding; `cut` bytes taken off its end.
    fn padded_tar(cut: usize) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (name, len) in [("a.txt", 1usize), ("b.bin", 700), ("c.txt", 513)] {
            let mut h = tar::Header::new_gnu();
            h.set_size(len as u64);
            h.set_mode(0o644);
            h.set_cksum();
            b.append_data(&mut h, name, &vec![b'x'; len][..])
                .expect("append");
        }
        let mut bytes = b.into_inner().expect("finish");
        bytes.truncate(bytes.len() - cut);
        bytes
    }

    /// Every member's path and size, its data skipped unread.
    fn listed(entries: tar::Entries<'_, impl Read>) -> Result<Vec<(String, u64)>, String> {
        let mut out = Vec::new();
        for e in entries {
            let e = e.map_err(|e| e.to_string())?;
            let path = String::from_utf8_lossy(&e.path_bytes()).into_owned();
            out.push((path, e.size()));
        }
        Ok(out)
    }

    #[test]
    fn the_tar_crate_skips_through_a_forward_stream_as_through_its_own_reads() {
        let whole = padded_tar(0);
        let mut archive = tar::Archive::new(Forward::new(Dribble(&whole)));
        let seen = listed(archive.entries_with_seek().expect("entries")).expect("whole");
        let mut own = tar::Archive::new(Dribble(&whole));
        assert_eq!(
            seen,
            listed(own.entries().expect("entries")).expect("whole")
        );
        assert_eq!(seen.len(), 3);
        // Headers and padded data of three members, then the end marker's first block.
        assert_eq!(
            archive.into_inner().pos,
            3 * 512 + 512 + 1_024 + 1_024 + 512
        );
        // Cut inside the last member's data, which is skipped unread: the same error either way.
        let cut = padded_tar(1_024 + 100);
        let mut archive = tar::Archive::new(Forward::new(Dribble(&cut)));
        let mut own = tar::Archive::new(Dribble(&cut));
        let ours = listed(archive.entries_with_seek().expect("entries")).expect_err("cut");
        assert_eq!(ours, "unexpected EOF during skip");
        assert_eq!(
            ours,
            listed(own.entries().expect("entries")).expect_err("cut")
        );
    }
}
