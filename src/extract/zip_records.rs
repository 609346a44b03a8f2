//! The raw records of a zip archive, read and held against each other before the zip crate
//! sees the bytes (APPNOTE.TXT 6.3.10, sections 4.3 and 4.4).
//!
//! A zip says everything twice: the end record and its Zip64 form, the central directory, each
//! local header and each data descriptor. Readers trust different copies (a streaming reader
//! walks local headers from the first byte, most tools start at the end record, some search
//! for it), so wherever two copies disagree, two tools see two different packages. The zip
//! crate papers over several of these differences (it finds a prefixed archive, ignores data
//! descriptors and trailing bytes). Here every copy must agree and every byte must belong to
//! exactly one record: nothing before the first local header, nothing between members,
//! nothing after the end record but its comment. This module only reads; it never decides
//! anything about names or contents.

use std::io::{self, Read, Seek, SeekFrom};

use crate::reason::{Reason, ReasonCode, display_name};

const LOCAL_SIG: u32 = 0x0403_4b50;
const CENTRAL_SIG: u32 = 0x0201_4b50;
const EOCD_SIG: u32 = 0x0605_4b50;
const ZIP64_EOCD_SIG: u32 = 0x0606_4b50;
const ZIP64_LOCATOR_SIG: u32 = 0x0706_4b50;
const DESCRIPTOR_SIG: u32 = 0x0807_4b50;
const UNICODE_PATH_ID: u16 = 0x7075;
const XL_ID: u16 = 0x6c78;
const EOCD_LEN: u64 = 22;
const ZIP64_LOCATOR_LEN: u64 = 20;
/// General-purpose flag bits both headers must agree on: encrypted (0), data descriptor (3),
/// UTF-8 names (11). The rest are compression hints.
const FLAGS_THAT_MATTER: u16 = 1 | (1 << 3) | (1 << 11);
const FLAG_DESCRIPTOR: u16 = 1 << 3;

/// What the central directory says about one member.
struct Central {
    name: Vec<u8>,
    flags: u16,
    method: u16,
    crc: u32,
    compressed: u64,
    uncompressed: u64,
    offset: u64,
    /// The system that made it (the high byte of "version made by"): how `external` is read.
    system: u8,
    /// External file attributes (a Unix made-by puts `st_mode` in the high half).
    external: u32,
}

fn corrupt(detail: impl Into<String>) -> Reason {
    Reason::new(ReasonCode::Corrupt, detail)
}

fn mismatch(name: &[u8], detail: impl Into<String>) -> Reason {
    Reason::new(ReasonCode::HeaderMismatch, detail).entry(display_name(name))
}

fn u16_at(b: &[u8], i: usize) -> u16 {
    u16::from_le_bytes([b[i], b[i + 1]])
}

fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

fn u64_at(b: &[u8], i: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[i..i + 8]);
    u64::from_le_bytes(a)
}

/// Reads `len` bytes at `at`, or says the archive is truncated there.
fn read_at<R: Read + Seek>(r: &mut R, at: u64, len: u64, size: u64) -> Result<Vec<u8>, Reason> {
    if at.checked_add(len).is_none_or(|end| end > size) {
        return Err(corrupt(format!(
            "truncated: a record at offset {at} runs past the end of the archive"
        )));
    }
    let len = usize::try_from(len).map_err(|_| corrupt("record too large"))?;
    let mut buf = vec![0u8; len];
    r.seek(SeekFrom::Start(at))
        .and_then(|_| r.read_exact(&mut buf))
        .map_err(|e| io_reason(&e))?;
    Ok(buf)
}

fn io_reason(e: &io::Error) -> Reason {
    corrupt(format!(
        "cannot read the archive: {}",
        display_name(e.to_string().as_bytes())
    ))
}

/// The Zip64 extended-information extra field (id 1): the 64-bit values of the fields whose
/// 32-bit copies hold the sentinel, in APPNOTE order. `local` headers carry both sizes.
fn zip64_values(extra: &[u8], wanted: &[bool; 3], local: bool) -> Option<[Option<u64>; 3]> {
    let mut i = 0;
    while i + 4 <= extra.len() {
        let id = u16_at(extra, i);
        let len = usize::from(u16_at(extra, i + 2));
        let body = extra.get(i + 4..i + 4 + len)?;
        if id == 1 {
            let mut out = [None; 3];
            let mut at = 0;
            for (k, want) in wanted.iter().enumerate() {
                let present = *want || (local && k < 2 && body.len() >= 16);
                if present {
                    out[k] = Some(u64_at(body.get(at..at + 8)?, 0));
                    at += 8;
                }
            }
            return Some(out);
        }
        i += 4 + len;
    }
    None
}

fn has_zip64_extra(extra: &[u8]) -> bool {
    let mut i = 0;
    while i + 4 <= extra.len() {
        if u16_at(extra, i) == 1 {
            return true;
        }
        i += 4 + usize::from(u16_at(extra, i + 2));
    }
    false
}

/// The Info-ZIP Unicode Path extra field (id 0x7075: version, CRC-32 of the header's name, a
/// UTF-8 name). A reader that honours it extracts the member under that name, and readers
/// differ on whether they do: unzip, bsdtar, Python 3.12's zipfile and the zip crate take it
/// when its CRC matches the header's name (each with its own further conditions: the version,
/// UTF-8, the crate's "plausible transliteration" rules), Python 3.11's zipfile never does. So
/// a field naming anything but the header's own name makes one member two names (`notes.txt`
/// to one tool, `run.sh` to another; `S~1.MD` and `SKILL.md`), whatever its CRC says: the one
/// such a field may carry is the header's name itself (a UTF-8 name given twice).
fn unicode_path_agrees(name: &[u8], extra: &[u8]) -> Result<(), Reason> {
    let mut i = 0;
    while i + 4 <= extra.len() {
        let len = usize::from(u16_at(extra, i + 2));
        if u16_at(extra, i) == UNICODE_PATH_ID {
            let named = extra.get(i + 4..i + 4 + len).and_then(|b| b.get(5..));
            if named != Some(name) {
                return Err(mismatch(
                    name,
                    format!(
                        "its Unicode Path extra field (0x7075) names {:?}, not the header's \
                         name: unzip and bsdtar extract the member under that name when the \
                         field's CRC matches, Python 3.11's zipfile never",
                        display_name(named.unwrap_or_default())
                    ),
                ));
            }
        }
        i += 4 + len;
    }
    Ok(())
}

/// libarchive's experimental `xl` extra field (0x6c78): a bitmap, then the "version made by"
/// (bit 0), internal (bit 1) and external (bit 2) attributes, so that a local header can carry
/// the type and mode a streaming reader otherwise lacks. bsdtar takes the local header's copy
/// over the central directory's even when it reads the directory: a regular file here with an
/// `xl` mode of S_IFLNK is a symlink there (`lnk -> ../../../etc/passwd`), a 0644 one with 0755
/// an executable. So what the field says must be what the central record says: the same
/// system (`system`, the one libarchive reads the attributes by when the field names none) and
/// the same attributes as the central record's (`central_system`, `external`).
fn attributes_agree(
    name: &[u8],
    extra: &[u8],
    system: u8,
    central_system: u8,
    external: u32,
) -> Result<(), Reason> {
    let disagree = |what: &str| {
        mismatch(
            name,
            format!(
                "its xl extra field (0x6c78) {what}: bsdtar takes the member's type and mode from \
                 it"
            ),
        )
    };
    let mut i = 0;
    while i + 4 <= extra.len() {
        let len = usize::from(u16_at(extra, i + 2));
        if u16_at(extra, i) == XL_ID {
            let Some(body) = extra.get(i + 4..i + 4 + len) else {
                return Err(disagree("is cut short"));
            };
            if let Some((&bitmap, mut rest)) = body.split_first() {
                let mut system = system;
                if bitmap & 1 != 0 {
                    let Some(([_, made_by], tail)) = rest.split_first_chunk::<2>() else {
                        return Err(disagree("is cut short"));
                    };
                    system = *made_by;
                    rest = tail;
                }
                if bitmap & 2 != 0 {
                    let Some((_, tail)) = rest.split_first_chunk::<2>() else {
                        return Err(disagree("is cut short"));
                    };
                    rest = tail;
                }
                if bitmap & 4 != 0 {
                    let Some((attrs, _)) = rest.split_first_chunk::<4>() else {
                        return Err(disagree("is cut short"));
                    };
                    if u32::from_le_bytes(*attrs) != external || system != central_system {
                        return Err(disagree(&format!(
                            "gives attributes {:#010x} made by system {system}, the central \
                             directory {external:#010x} made by system {central_system}",
                            u32::from_le_bytes(*attrs)
                        )));
                    }
                } else if bitmap & 1 != 0 && system != central_system {
                    return Err(disagree(&format!(
                        "names system {system}, the central directory {central_system}"
                    )));
                }
            }
        }
        i += 4 + len;
    }
    Ok(())
}

/// Find the end record: the one whose comment reaches exactly the end of the file.
fn find_eocd<R: Read + Seek>(r: &mut R, size: u64) -> Result<(u64, Vec<u8>), Reason> {
    let tail_len = size.min(EOCD_LEN + u64::from(u16::MAX));
    if tail_len < EOCD_LEN {
        return Err(corrupt("too short to be a zip archive"));
    }
    let tail = read_at(r, size - tail_len, tail_len, size)?;
    let base = size - tail_len;
    let mut seen_any = false;
    let mut i = tail.len() - EOCD_LEN as usize + 1;
    while i > 0 {
        i -= 1;
        if u32_at(&tail, i) != EOCD_SIG {
            continue;
        }
        seen_any = true;
        let comment = u64::from(u16_at(&tail, i + 20));
        let end = i as u64 + EOCD_LEN + comment;
        if end == tail.len() as u64 {
            let record = tail[i..].to_vec();
            // A second signature inside the comment is a second end record to a reader that
            // takes the last signature it finds.
            let text = &record[EOCD_LEN as usize..];
            if text
                .windows(4)
                .any(|w| matches!(u32_at(w, 0), EOCD_SIG | ZIP64_LOCATOR_SIG | CENTRAL_SIG))
            {
                return Err(corrupt(
                    "the archive comment holds another zip record signature (a second end record)",
                ));
            }
            return Ok((base + i as u64, record));
        }
    }
    Err(if seen_any {
        corrupt(
            "bytes after the end-of-central-directory record that its comment length does not cover",
        )
    } else {
        corrupt("no end-of-central-directory record: not a complete zip archive")
    })
}

/// Check every record of the archive against every other. `max_entries` bounds the work
/// before a single member record is read.
pub(crate) fn check<R: Read + Seek>(r: &mut R, size: u64, max_entries: u64) -> Result<(), Reason> {
    let (eocd_at, eocd) = find_eocd(r, size)?;
    let disk = u16_at(&eocd, 4);
    let cd_disk = u16_at(&eocd, 6);
    let on_disk = u16_at(&eocd, 8);
    let total = u16_at(&eocd, 10);
    let cd_size32 = u32_at(&eocd, 12);
    let cd_offset32 = u32_at(&eocd, 16);
    if disk != 0 || cd_disk != 0 {
        return Err(corrupt("multi-disk (spanned) archives are not accepted"));
    }
    if on_disk != total {
        return Err(corrupt(format!(
            "the end record counts {on_disk} members on this disk but {total} in total"
        )));
    }
    let (members, cd_size, cd_offset, cd_end) = match zip64_end(r, eocd_at, size)? {
        None => (
            u64::from(total),
            u64::from(cd_size32),
            u64::from(cd_offset32),
            eocd_at,
        ),
        Some(z) => {
            // The 32-bit copies either defer to Zip64 (all ones) or say the same thing.
            let agree = (total == u16::MAX || u64::from(total) == z.members)
                && (cd_size32 == u32::MAX || u64::from(cd_size32) == z.cd_size)
                && (cd_offset32 == u32::MAX || u64::from(cd_offset32) == z.cd_offset);
            if !agree {
                return Err(corrupt(format!(
                    "the end record ({total} members, central directory of {cd_size32} bytes at \
                     {cd_offset32}) and its Zip64 form ({} members, {} bytes at {}) disagree",
                    z.members, z.cd_size, z.cd_offset
                )));
            }
            (z.members, z.cd_size, z.cd_offset, z.record_at)
        }
    };
    if members > max_entries {
        return Err(Reason::new(
            ReasonCode::EntryCount,
            "too many members in the central directory",
        )
        .limit(max_entries, members));
    }
    if cd_offset.checked_add(cd_size) != Some(cd_end) {
        let detail = match cd_end.checked_sub(cd_size) {
            Some(real) if real > cd_offset => format!(
                "the central directory ends {} bytes before the end record; with offsets that \
                 ignore {} bytes of prefix (a self-extracting stub?)",
                cd_end - cd_offset - cd_size,
                real - cd_offset
            ),
            _ => format!(
                "the end record puts a {cd_size}-byte central directory at offset {cd_offset}, \
                 which does not end where the end record begins ({cd_end})"
            ),
        };
        return Err(corrupt(detail));
    }
    let centrals = central_directory(r, cd_offset, cd_size, members)?;
    local_records(r, centrals, cd_offset)
}

struct Zip64End {
    members: u64,
    cd_size: u64,
    cd_offset: u64,
    record_at: u64,
}

/// The Zip64 end record, when a locator sits right before the end record.
fn zip64_end<R: Read + Seek>(
    r: &mut R,
    eocd_at: u64,
    size: u64,
) -> Result<Option<Zip64End>, Reason> {
    let Some(loc_at) = eocd_at.checked_sub(ZIP64_LOCATOR_LEN) else {
        return Ok(None);
    };
    let loc = read_at(r, loc_at, ZIP64_LOCATOR_LEN, size)?;
    if u32_at(&loc, 0) != ZIP64_LOCATOR_SIG {
        return Ok(None);
    }
    let disk = u32_at(&loc, 4);
    let at = u64_at(&loc, 8);
    let disks = u32_at(&loc, 16);
    if disk != 0 || disks > 1 {
        return Err(corrupt("multi-disk (spanned) archives are not accepted"));
    }
    let head = read_at(r, at, 56, size)?;
    if u32_at(&head, 0) != ZIP64_EOCD_SIG {
        return Err(corrupt(format!(
            "the Zip64 locator points at offset {at}, where there is no Zip64 end record"
        )));
    }
    let record_end = u64_at(&head, 4).checked_add(at + 12);
    if record_end != Some(loc_at) {
        return Err(corrupt(
            "the Zip64 end record does not end where its locator begins",
        ));
    }
    if u32_at(&head, 16) != 0 || u32_at(&head, 20) != 0 {
        return Err(corrupt("multi-disk (spanned) archives are not accepted"));
    }
    let on_disk = u64_at(&head, 24);
    let members = u64_at(&head, 32);
    if on_disk != members {
        return Err(corrupt(format!(
            "the Zip64 end record counts {on_disk} members on this disk but {members} in total"
        )));
    }
    Ok(Some(Zip64End {
        members,
        cd_size: u64_at(&head, 40),
        cd_offset: u64_at(&head, 48),
        record_at: at,
    }))
}

/// Every central directory record, which must fill the directory exactly and number `members`.
fn central_directory<R: Read + Seek>(
    r: &mut R,
    cd_offset: u64,
    cd_size: u64,
    members: u64,
) -> Result<Vec<Central>, Reason> {
    let mut out = Vec::new();
    let mut at = cd_offset;
    let end = cd_offset + cd_size;
    while at < end {
        if out.len() as u64 == members {
            return Err(corrupt(format!(
                "the end record counts {members} members, the central directory holds more"
            )));
        }
        let fixed = read_at(r, at, 46, end)?;
        if u32_at(&fixed, 0) != CENTRAL_SIG {
            return Err(corrupt(format!(
                "no central directory record at offset {at} (the end record counts {members}, \
                 {} found)",
                out.len()
            )));
        }
        let name_len = u64::from(u16_at(&fixed, 28));
        let extra_len = u64::from(u16_at(&fixed, 30));
        let comment_len = u64::from(u16_at(&fixed, 32));
        let var = read_at(r, at + 46, name_len + extra_len, end)?;
        let (name, extra) = var.split_at(name_len as usize);
        unicode_path_agrees(name, extra)?;
        attributes_agree(name, extra, fixed[5], fixed[5], u32_at(&fixed, 38))?;
        let c32 = u32_at(&fixed, 20);
        let u32_ = u32_at(&fixed, 24);
        let off32 = u32_at(&fixed, 42);
        let disk = u16_at(&fixed, 34);
        let wanted = [u32_ == u32::MAX, c32 == u32::MAX, off32 == u32::MAX];
        let z = if wanted.iter().any(|w| *w) {
            zip64_values(extra, &wanted, false).ok_or_else(|| {
                mismatch(
                    name,
                    "a 32-bit field defers to a Zip64 extra field that is missing",
                )
            })?
        } else {
            [None; 3]
        };
        if disk != 0 && disk != u16::MAX {
            return Err(corrupt("multi-disk (spanned) archives are not accepted"));
        }
        out.push(Central {
            name: name.to_vec(),
            flags: u16_at(&fixed, 8),
            method: u16_at(&fixed, 10),
            crc: u32_at(&fixed, 16),
            uncompressed: z[0].unwrap_or(u64::from(u32_)),
            compressed: z[1].unwrap_or(u64::from(c32)),
            offset: z[2].unwrap_or(u64::from(off32)),
            system: fixed[5],
            external: u32_at(&fixed, 38),
        });
        at += 46 + name_len + extra_len + comment_len;
    }
    if at != end {
        return Err(corrupt(
            "the last central directory record runs past the size the end record gives",
        ));
    }
    if out.len() as u64 != members {
        return Err(corrupt(format!(
            "the end record counts {members} members, the central directory holds {}",
            out.len()
        )));
    }
    Ok(out)
}

/// Walk the local records in file order: each must start where the previous one ended (from
/// offset 0), agree with its central record, and the last must end where the directory starts.
fn local_records<R: Read + Seek>(
    r: &mut R,
    mut centrals: Vec<Central>,
    cd_offset: u64,
) -> Result<(), Reason> {
    centrals.sort_by_key(|c| c.offset);
    let mut expected = 0u64;
    for c in &centrals {
        if c.offset < expected {
            return Err(Reason::new(
                ReasonCode::OverlappingEntries,
                "two entries share bytes of the archive (overlapping-file bomb construction)",
            )
            .entry(display_name(&c.name)));
        }
        if c.offset > expected {
            let gap = c.offset - expected;
            return Err(corrupt(if expected == 0 {
                format!(
                    "{gap} bytes before the first local header (a self-extracting stub, or a \
                     member only a streaming reader sees)"
                )
            } else {
                format!(
                    "{gap} bytes between members that no central directory record describes \
                     (a member only a streaming reader sees)"
                )
            }));
        }
        expected = local_record(r, c, cd_offset)?;
    }
    if expected != cd_offset {
        return Err(corrupt(format!(
            "{} bytes between the last member and the central directory that no record \
             describes",
            cd_offset - expected
        )));
    }
    Ok(())
}

/// Check one local header (and data descriptor) against its central record; returns the
/// offset just past the member.
fn local_record<R: Read + Seek>(r: &mut R, c: &Central, cd_offset: u64) -> Result<u64, Reason> {
    let name = &c.name;
    let fixed = read_at(r, c.offset, 30, cd_offset)?;
    if u32_at(&fixed, 0) != LOCAL_SIG {
        return Err(mismatch(
            name,
            format!("no local header at offset {}", c.offset),
        ));
    }
    let flags = u16_at(&fixed, 6);
    let method = u16_at(&fixed, 8);
    let crc = u32_at(&fixed, 14);
    let c32 = u32_at(&fixed, 18);
    let u32_ = u32_at(&fixed, 22);
    let name_len = u64::from(u16_at(&fixed, 26));
    let extra_len = u64::from(u16_at(&fixed, 28));
    let var = read_at(r, c.offset + 30, name_len + extra_len, cd_offset)?;
    let (local_name, extra) = var.split_at(name_len as usize);
    if local_name != name.as_slice() {
        return Err(mismatch(
            name,
            format!(
                "the local header names {:?}, the central directory {:?}",
                display_name(local_name),
                display_name(name)
            ),
        ));
    }
    if method != c.method || flags & FLAGS_THAT_MATTER != c.flags & FLAGS_THAT_MATTER {
        return Err(mismatch(
            name,
            format!(
                "local header (method {method}, flags {flags:#06x}) and central directory \
                 (method {}, flags {:#06x}) disagree",
                c.method, c.flags
            ),
        ));
    }
    // The local header's copy too: a streaming reader sees only this one.
    unicode_path_agrees(local_name, extra)?;
    // libarchive reads a local `xl` field's attributes by the system in the local header's
    // "version needed" (its high byte) unless the field names one.
    attributes_agree(name, extra, fixed[5], c.system, c.external)?;
    let zip64 = has_zip64_extra(extra);
    let wanted = [u32_ == u32::MAX, c32 == u32::MAX, false];
    let z = if zip64 {
        zip64_values(extra, &wanted, true).unwrap_or([None; 3])
    } else {
        [None; 3]
    };
    let local_u = z[0].unwrap_or(u64::from(u32_));
    let local_c = z[1].unwrap_or(u64::from(c32));
    let descriptor = flags & FLAG_DESCRIPTOR != 0;
    // With a data descriptor the local copies may be zero (APPNOTE 4.4.4: the descriptor after
    // the data holds them, and must agree too); each one that is set counts. libarchive's
    // writer (bsdtar) sets the sizes it knows before the data and leaves the CRC zero.
    let agrees = |local: u64, central: u64| local == central || descriptor && local == 0;
    if !(agrees(u64::from(crc), u64::from(c.crc))
        && agrees(local_c, c.compressed)
        && agrees(local_u, c.uncompressed))
    {
        return Err(mismatch(
            name,
            format!(
                "local header (CRC {crc:#010x}, {local_c} -> {local_u} bytes) and central \
                 directory (CRC {:#010x}, {} -> {} bytes) disagree",
                c.crc, c.compressed, c.uncompressed
            ),
        ));
    }
    let data_end = (c.offset + 30 + name_len + extra_len)
        .checked_add(c.compressed)
        .filter(|end| *end <= cd_offset)
        .ok_or_else(|| mismatch(name, "member data runs into the central directory"))?;
    if !descriptor {
        return Ok(data_end);
    }
    let wide = zip64 || c.compressed > u64::from(u32::MAX) || c.uncompressed > u64::from(u32::MAX);
    let sizes = if wide { 16 } else { 8 };
    let room = cd_offset - data_end;
    let raw = read_at(r, data_end, room.min(4 + 4 + sizes), cd_offset)?;
    let parse = |b: &[u8]| -> Option<(u32, u64, u64)> {
        if b.len() < 4 + sizes as usize {
            return None;
        }
        let (cs, us) = if wide {
            (u64_at(b, 4), u64_at(b, 12))
        } else {
            (u64::from(u32_at(b, 4)), u64::from(u32_at(b, 8)))
        };
        Some((u32_at(b, 0), cs, us))
    };
    let matches = |d: Option<(u32, u64, u64)>| d == Some((c.crc, c.compressed, c.uncompressed));
    // The descriptor's signature is optional (APPNOTE 4.3.9.3); a CRC equal to the signature
    // value is read both ways.
    let signed = raw.len() >= 4 && u32_at(&raw, 0) == DESCRIPTOR_SIG;
    if signed && matches(parse(&raw[4..])) {
        return Ok(data_end + 4 + 4 + sizes);
    }
    let unsigned = parse(&raw);
    if matches(unsigned) {
        return Ok(data_end + 4 + sizes);
    }
    let said = if signed { parse(&raw[4..]) } else { unsigned };
    Err(mismatch(
        name,
        match said {
            Some((dc, ds, du)) => format!(
                "data descriptor (CRC {dc:#010x}, {ds} -> {du} bytes) and central directory \
                 (CRC {:#010x}, {} -> {} bytes) disagree",
                c.crc, c.compressed, c.uncompressed
            ),
            None => "the data descriptor is missing or cut short".to_owned(),
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Cursor, Write};
    use zip::write::SimpleFileOptions;

    fn check_bytes(bytes: &[u8]) -> Result<(), ReasonCode> {
        check(&mut Cursor::new(bytes), bytes.len() as u64, 10_000).map_err(|r| r.code)
    }

    fn library_zip(stream: bool, zip64: bool, comment: &str) -> Vec<u8> {
        let opts = SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated)
            .large_file(zip64);
        let files: [(&str, &[u8]); 2] = [("SKILL.md", b"---\nname: x\n---\n"), ("a/b.txt", b"b")];
        if stream {
            let mut w = zip::ZipWriter::new_stream(Vec::new());
            for (name, data) in files {
                w.start_file(name, opts).unwrap_or_else(|e| panic!("{e}"));
                w.write_all(data).unwrap_or_else(|e| panic!("{e}"));
            }
            w.set_comment(comment).unwrap_or_else(|e| panic!("{e}"));
            w.finish().unwrap_or_else(|e| panic!("{e}")).into_inner()
        } else {
            let mut w = zip::ZipWriter::new(Cursor::new(Vec::new()));
            for (name, data) in files {
                w.start_file(name, opts).unwrap_or_else(|e| panic!("{e}"));
                w.write_all(data).unwrap_or_else(|e| panic!("{e}"));
            }
            w.set_comment(comment).unwrap_or_else(|e| panic!("{e}"));
            w.finish().unwrap_or_else(|e| panic!("{e}")).into_inner()
        }
    }

    #[test]
    fn what_a_real_writer_produces_passes() {
        for stream in [false, true] {
            for zip64 in [false, true] {
                for comment in ["", "release 1"] {
                    let z = library_zip(stream, zip64, comment);
                    assert_eq!(check_bytes(&z), Ok(()), "stream {stream} zip64 {zip64}");
                }
            }
        }
    }

    #[test]
    fn every_byte_outside_a_record_is_refused() {
        let z = library_zip(true, false, "");
        let mut trailing = z.clone();
        trailing.extend_from_slice(b"junk");
        assert_eq!(check_bytes(&trailing), Err(ReasonCode::Corrupt));
        let mut prefixed = b"MZ stub".to_vec();
        prefixed.extend_from_slice(&z);
        assert_eq!(check_bytes(&prefixed), Err(ReasonCode::Corrupt));
        assert_eq!(check_bytes(&z[..z.len() - 1]), Err(ReasonCode::Corrupt));
        assert_eq!(check_bytes(b"PK\x05\x06"), Err(ReasonCode::Corrupt));
        let mut empty = vec![0u8; 22];
        empty[..4].copy_from_slice(b"PK\x05\x06");
        assert_eq!(check_bytes(&empty), Ok(()));
    }

    #[test]
    fn a_unicode_path_field_may_only_repeat_the_header_name() {
        let field = |named: &[u8], crc: u32| -> Vec<u8> {
            let mut body = vec![1u8];
            body.extend_from_slice(&crc.to_le_bytes());
            body.extend_from_slice(named);
            let mut out = UNICODE_PATH_ID.to_le_bytes().to_vec();
            out.extend_from_slice(&(body.len() as u16).to_le_bytes());
            out.extend_from_slice(&body);
            out
        };
        let name = "caf\u{e9}.md".as_bytes();
        let mut crc = flate2::Crc::new();
        crc.update(name);
        let crc = crc.sum();
        let code = |extra: &[u8]| unicode_path_agrees(name, extra).map_err(|r| r.code);
        assert_eq!(code(&field(name, crc)), Ok(()));
        assert_eq!(code(b""), Ok(()));
        for (what, extra) in [
            ("an ASCII spelling", field(b"cafe.md", crc)),
            ("another case", field("CAF\u{c9}.md".as_bytes(), crc)),
            ("a stale CRC", field(b"run.sh", crc ^ 1)),
            ("no name at all", field(b"", crc)),
            ("a field cut short", field(name, crc)[..7].to_vec()),
        ] {
            assert_eq!(code(&extra), Err(ReasonCode::HeaderMismatch), "{what}");
        }
    }

    #[test]
    fn an_xl_field_must_repeat_the_central_type_and_mode() {
        let xl = |bitmap: u8, system: u8, external: u32| -> Vec<u8> {
            let mut body = vec![bitmap];
            if bitmap & 1 != 0 {
                body.extend_from_slice(&[10, system]);
            }
            if bitmap & 2 != 0 {
                body.extend_from_slice(&[0, 0]);
            }
            if bitmap & 4 != 0 {
                body.extend_from_slice(&external.to_le_bytes());
            }
            let mut out = XL_ID.to_le_bytes().to_vec();
            out.extend_from_slice(&(body.len() as u16).to_le_bytes());
            out.extend_from_slice(&body);
            out
        };
        let file = 0o100_644 << 16;
        // Local header made by DOS (0), central record by Unix (3), as a real writer may.
        let code = |extra: &[u8], local_system: u8| {
            attributes_agree(b"f", extra, local_system, 3, file).map_err(|r| r.code)
        };
        assert_eq!(code(&xl(0b111, 3, file), 0), Ok(()), "libarchive's own");
        assert_eq!(code(&xl(0b100, 3, file), 3), Ok(()));
        assert_eq!(code(&xl(0b001, 3, 0), 0), Ok(()));
        for (what, extra, local_system) in [
            ("a symlink", xl(0b101, 3, 0o120_777 << 16), 0),
            ("an executable", xl(0b100, 3, 0o100_755 << 16), 3),
            ("read by another system", xl(0b100, 0, file), 0),
            ("another system named", xl(0b001, 0, 0), 3),
            ("cut short", xl(0b101, 3, file)[..7].to_vec(), 3),
        ] {
            let r = code(&extra, local_system);
            assert_eq!(r, Err(ReasonCode::HeaderMismatch), "{what}");
        }
    }

    #[test]
    fn local_copies_left_zero_under_a_descriptor_may_be_some_of_them() {
        // The zip crate's streaming writer: a signed descriptor after each member, zeros before.
        let z = library_zip(true, false, "");
        assert_eq!(check_bytes(&z), Ok(()));
        // libarchive's writer sets the local sizes and leaves only the CRC zero.
        let at = 0;
        assert_eq!(u16_at(&z, at + 6) & FLAG_DESCRIPTOR, FLAG_DESCRIPTOR);
        let end = z
            .windows(4)
            .position(|w| w == DESCRIPTOR_SIG.to_le_bytes())
            .unwrap_or_else(|| panic!("no data descriptor written"));
        let sizes = z[end + 8..end + 16].to_vec();
        let mut sized = z.clone();
        sized[at + 18..at + 26].copy_from_slice(&sizes);
        assert_eq!(check_bytes(&sized), Ok(()));
        // A set copy still counts: one byte off is a mismatch.
        sized[at + 22] ^= 1;
        assert_eq!(check_bytes(&sized), Err(ReasonCode::HeaderMismatch));
    }

    #[test]
    fn a_descriptor_that_disagrees_is_a_header_mismatch() {
        let z = library_zip(true, false, "");
        // The streaming writer puts a signed descriptor after each member's data.
        let at = z
            .windows(4)
            .position(|w| w == DESCRIPTOR_SIG.to_le_bytes())
            .unwrap_or_else(|| panic!("no data descriptor written"));
        let mut bad = z.clone();
        bad[at + 4] ^= 0xff;
        assert_eq!(check_bytes(&bad), Err(ReasonCode::HeaderMismatch));
        let mut bad = z;
        bad[at + 12] ^= 0x01;
        assert_eq!(check_bytes(&bad), Err(ReasonCode::HeaderMismatch));
    }
}
