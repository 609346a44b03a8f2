//! Format detection: magic bytes decide; media type and file extension are hints.
//!
//! The bytes are the truth. A hint is consulted in a fixed order (the media type, and the file
//! extension only when the media type is absent or generic) and may only agree with the bytes:
//! a disagreeing hint is `format_mismatch`, never a reason to parse the bytes differently.

use crate::reason::{Reason, ReasonCode};

/// What the declared type says the artifact is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ArtifactType {
    #[serde(rename = "skill-md")]
    SkillMd,
    #[serde(rename = "archive")]
    Archive,
}

/// A container format we can read, decided from the bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    SkillMd,
    Zip,
    Tar,
    TarGz,
    TarZst,
}

impl Format {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::SkillMd => "skill-md",
            Self::Zip => "zip",
            Self::Tar => "tar",
            Self::TarGz => "tar.gz",
            Self::TarZst => "tar.zst",
        }
    }
}

/// What the outermost bytes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Magic {
    Zip,
    Tar,
    Gzip,
    Zstd,
    OtherArchive(&'static str),
    Unknown,
}

/// What a hint claims.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Claim {
    Generic,
    Is(Format),
    Foreign,
}

const ZIP_LOCAL: &[u8] = b"PK\x03\x04";
const ZIP_EMPTY: &[u8] = b"PK\x05\x06";
const GZIP: &[u8] = b"\x1f\x8b";
const ZSTD: &[u8] = b"\x28\xb5\x2f\xfd";

/// A 512-byte block that is a plausible tar header: `ustar` magic, or a valid checksum (v7).
pub fn is_tar_header(block: &[u8]) -> bool {
    if block.len() < 512 {
        return false;
    }
    if &block[257..262] == b"ustar" {
        return true;
    }
    // v7 tar has no magic; accept a header whose checksum field matches its contents.
    let field = &block[148..156];
    let text: String = field
        .iter()
        .take_while(|b| **b != 0 && **b != b' ')
        .map(|b| *b as char)
        .collect();
    let Ok(stored) = u32::from_str_radix(text.trim(), 8) else {
        return false;
    };
    let sum: u32 = block[..512]
        .iter()
        .enumerate()
        .map(|(i, b)| {
            if (148..156).contains(&i) {
                u32::from(b' ')
            } else {
                u32::from(*b)
            }
        })
        .sum();
    stored == sum && block[0] != 0
}

/// A zstd skippable frame (magic 0x184D2A50 to 0x184D2A5F, little-endian): every zstd decoder
/// steps over it. `pzstd` starts its output with one (the size of the frame after it).
fn zstd_skippable(head: &[u8]) -> bool {
    head.len() >= 8 && head[0] & 0xf0 == 0x50 && head[1..4] == [0x2a, 0x4d, 0x18]
}

fn magic(head: &[u8]) -> Magic {
    if head.starts_with(ZIP_LOCAL) || head.starts_with(ZIP_EMPTY) {
        Magic::Zip
    } else if head.starts_with(GZIP) {
        Magic::Gzip
    } else if head.starts_with(ZSTD) || zstd_skippable(head) {
        Magic::Zstd
    } else if is_tar_header(head) {
        Magic::Tar
    } else if head.starts_with(b"BZh") {
        Magic::OtherArchive("bzip2")
    } else if head.starts_with(b"\xfd7zXZ\x00") {
        Magic::OtherArchive("xz")
    } else if head.starts_with(b"7z\xbc\xaf\x27\x1c") {
        Magic::OtherArchive("7z")
    } else if head.starts_with(b"Rar!\x1a\x07") {
        Magic::OtherArchive("rar")
    } else {
        Magic::Unknown
    }
}

/// True when the first bytes of a file look like any archive or compressed stream.
pub fn looks_like_archive(head: &[u8]) -> bool {
    !matches!(magic(head), Magic::Unknown)
}

fn claim_from_media_type(media_type: &str) -> Claim {
    // RFC 9110: type/subtype are case-insensitive; parameters follow a `;`.
    let essence = media_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    match essence.as_str() {
        ""
        | "application/octet-stream"
        | "binary/octet-stream"
        | "application/x-binary"
        | "application/binary" => Claim::Generic,
        "application/zip" | "application/x-zip" | "application/x-zip-compressed" => {
            Claim::Is(Format::Zip)
        }
        "application/x-tar" | "application/tar" | "application/x-ustar" => Claim::Is(Format::Tar),
        "application/gzip"
        | "application/x-gzip"
        | "application/x-gtar"
        | "application/x-tgz"
        | "application/x-compressed-tar"
        | "application/tar+gzip" => Claim::Is(Format::TarGz),
        "application/zstd"
        | "application/x-zstd"
        | "application/x-zstd-compressed-tar"
        | "application/tar+zstd" => Claim::Is(Format::TarZst),
        "text/markdown" | "text/x-markdown" | "text/plain" => Claim::Is(Format::SkillMd),
        // RFC 6839 structured syntax suffix, e.g. application/vnd.example.skill+zip.
        other if other.ends_with("+zip") => Claim::Is(Format::Zip),
        _ => Claim::Foreign,
    }
}

fn claim_from_name(name: &str) -> Claim {
    let lower = name.rsplit('/').next().unwrap_or(name).to_ascii_lowercase();
    let ends = |s: &str| lower.ends_with(s);
    if ends(".tar.gz") || ends(".tgz") || ends(".gz") {
        Claim::Is(Format::TarGz)
    } else if ends(".tar.zst") || ends(".tzst") || ends(".zst") {
        Claim::Is(Format::TarZst)
    } else if ends(".tar") {
        Claim::Is(Format::Tar)
    } else if ends(".zip") {
        Claim::Is(Format::Zip)
    } else if ends(".md") || ends(".markdown") {
        Claim::Is(Format::SkillMd)
    } else {
        Claim::Generic
    }
}

/// Bytes needed at the end of an artifact to find a zip end record behind any comment.
pub const TAIL_BYTES: usize = 22 + 65_535;

/// Whether `tail` (the last bytes of the artifact) ends with a zip end record whose comment
/// reaches exactly the end. Self-extracting stubs put a program in front of a zip: the bytes
/// are a zip then, and the zip reader names what is wrong with them (the prefix), rather than
/// detection calling them unrecognised.
///
/// Every archive is asked this (a tar that also ends in a zip is refused), so the signature is
/// found with `memmem`'s vectorised forward search (any record ending exactly at the end will do,
/// so order does not matter): comparing at every one of 64 Ki offsets was 0.52 M
/// instructions a request, 1 % of the engine and review on the typical package; this is 31 K
/// (scripts/engine-ir.py).
fn ends_with_zip(tail: &[u8]) -> bool {
    memchr::memmem::find_iter(tail, ZIP_EMPTY).any(|i| {
        tail.get(i + 20..i + 22).is_some_and(|len| {
            i + 22 + usize::from(u16::from_le_bytes([len[0], len[1]])) == tail.len()
        })
    })
}

/// Decide the format from the declared type, the first bytes and the hints.
///
/// `head` should hold at least the first 512 bytes (fewer only if the artifact is shorter),
/// `tail` the last [`TAIL_BYTES`] (or the whole artifact if shorter).
pub fn decide(
    declared: ArtifactType,
    head: &[u8],
    tail: &[u8],
    media_type: Option<&str>,
    file_name: Option<&str>,
) -> Result<Format, Reason> {
    let found = match magic(head) {
        Magic::Unknown if declared == ArtifactType::Archive && ends_with_zip(tail) => Magic::Zip,
        m => m,
    };
    let from_bytes = match (declared, found) {
        (ArtifactType::SkillMd, Magic::Unknown) => Format::SkillMd,
        (ArtifactType::SkillMd, other) => {
            return Err(Reason::new(
                ReasonCode::FormatMismatch,
                format!(
                    "declared type skill-md, but the bytes are {}",
                    describe(other)
                ),
            ));
        }
        // Bytes that are a tar, tar.gz or tar.zst and also end with a zip end record whose
        // comment reaches the end: unzip and Python's zipfile open them as that zip (its prefix
        // taken for a self-extracting stub), another package than the one read here. A zstd
        // skippable frame holds one without a decoder noticing, a tar member's data too.
        (ArtifactType::Archive, Magic::Tar | Magic::Gzip | Magic::Zstd) if ends_with_zip(tail) => {
            return Err(Reason::new(
                ReasonCode::Corrupt,
                format!(
                    "the bytes are {} and also end with a zip end record: unzip and zipfile \
                     open them as that zip, another package",
                    describe(found)
                ),
            ));
        }
        (ArtifactType::Archive, Magic::Zip) => Format::Zip,
        (ArtifactType::Archive, Magic::Tar) => Format::Tar,
        (ArtifactType::Archive, Magic::Gzip) => Format::TarGz,
        (ArtifactType::Archive, Magic::Zstd) => Format::TarZst,
        (ArtifactType::Archive, Magic::OtherArchive(name)) => {
            return Err(Reason::new(
                ReasonCode::UnsupportedFormat,
                format!("{name} archives are not supported"),
            ));
        }
        (ArtifactType::Archive, Magic::Unknown) => {
            return Err(Reason::new(
                ReasonCode::UnsupportedFormat,
                "the bytes are not a zip, tar, tar.gz or tar.zst archive",
            ));
        }
    };
    let (claim, source) = match media_type.map(claim_from_media_type) {
        Some(Claim::Generic) | None => (
            file_name.map_or(Claim::Generic, claim_from_name),
            "file extension",
        ),
        Some(c) => (c, "media type"),
    };
    match claim {
        Claim::Generic => Ok(from_bytes),
        Claim::Is(f) if f == from_bytes => Ok(from_bytes),
        Claim::Is(f) => Err(Reason::new(
            ReasonCode::FormatMismatch,
            format!(
                "{source} says {}, but the bytes are {}",
                f.as_str(),
                from_bytes.as_str()
            ),
        )),
        Claim::Foreign => Err(Reason::new(
            ReasonCode::FormatMismatch,
            format!(
                "media type {:?} does not describe a {} artifact",
                crate::reason::display_name(media_type.unwrap_or("").as_bytes()),
                from_bytes.as_str()
            ),
        )),
    }
}

fn describe(m: Magic) -> &'static str {
    match m {
        Magic::Zip => "a zip archive",
        Magic::Tar => "a tar archive",
        Magic::Gzip => "gzip-compressed",
        Magic::Zstd => "zstd-compressed",
        Magic::OtherArchive(name) => name,
        Magic::Unknown => "unrecognised",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(
        t: ArtifactType,
        head: &[u8],
        mt: Option<&str>,
        name: Option<&str>,
    ) -> Result<Format, ReasonCode> {
        decide(t, head, head, mt, name).map_err(|r| r.code)
    }

    #[test]
    fn magic_decides_and_hints_must_agree() {
        use ArtifactType::*;
        assert_eq!(d(Archive, b"PK\x03\x04....", None, None), Ok(Format::Zip));
        assert_eq!(
            d(
                Archive,
                b"\x1f\x8b\x08",
                Some("application/gzip"),
                Some("x.zip")
            ),
            Ok(Format::TarGz)
        );
        assert_eq!(
            d(
                Archive,
                b"\x1f\x8b\x08",
                Some("application/octet-stream"),
                Some("x.zip")
            ),
            Err(ReasonCode::FormatMismatch)
        );
        assert_eq!(
            d(
                Archive,
                b"\x1f\x8b\x08",
                Some("Application/GZIP; q=1"),
                None
            ),
            Ok(Format::TarGz)
        );
        assert_eq!(
            d(Archive, b"\x28\xb5\x2f\xfd", None, Some("skill.tar.zst")),
            Ok(Format::TarZst)
        );
        assert_eq!(
            d(Archive, b"\x28\xb5\x2f\xfd", Some("application/zip"), None),
            Err(ReasonCode::FormatMismatch)
        );
        assert_eq!(
            d(Archive, b"# hello", None, None),
            Err(ReasonCode::UnsupportedFormat)
        );
        assert_eq!(
            d(Archive, b"BZh91AY", None, None),
            Err(ReasonCode::UnsupportedFormat)
        );
        assert_eq!(
            d(Archive, b"PK\x03\x04", Some("image/png"), None),
            Err(ReasonCode::FormatMismatch)
        );
        assert_eq!(
            d(SkillMd, b"---\nname: x\n", Some("text/markdown"), None),
            Ok(Format::SkillMd)
        );
        assert_eq!(
            d(SkillMd, b"PK\x03\x04", None, None),
            Err(ReasonCode::FormatMismatch)
        );
        assert_eq!(
            d(SkillMd, b"---\n", None, Some("x.tgz")),
            Err(ReasonCode::FormatMismatch)
        );
    }

    #[test]
    fn a_skippable_frame_starts_a_zstd_stream_and_a_trailing_zip_is_refused() {
        use ArtifactType::*;
        // pzstd: a skippable frame holding the next frame's size, then the frame.
        let pzstd = b"\x50\x2a\x4d\x18\x04\x00\x00\x00\x8f\x01\x00\x00\x28\xb5\x2f\xfd";
        assert_eq!(
            d(Archive, pzstd, None, Some("x.tar.zst")),
            Ok(Format::TarZst)
        );
        assert_eq!(
            d(Archive, &pzstd[..6], None, None),
            Err(ReasonCode::UnsupportedFormat)
        );
        // A zstd frame, then a zip (its end record last): a zip to unzip, a tar.zst here.
        let mut poly = b"\x28\xb5\x2f\xfd....PK\x03\x04....".to_vec();
        poly.extend_from_slice(b"PK\x05\x06");
        poly.extend_from_slice(&[0; 18]);
        assert_eq!(
            decide(Archive, &poly, &poly, None, None).map_err(|r| r.code),
            Err(ReasonCode::Corrupt)
        );
    }

    #[test]
    fn a_zip_end_record_counts_only_when_its_comment_reaches_the_end() {
        let end = |comment: &[u8]| {
            let mut e = b"PK\x05\x06".to_vec();
            e.extend_from_slice(&[0; 16]);
            e.extend_from_slice(&u16::try_from(comment.len()).unwrap_or(0).to_le_bytes());
            e.extend_from_slice(comment);
            e
        };
        assert!(ends_with_zip(&end(b"")));
        assert!(ends_with_zip(
            &[b"tar bytes".as_slice(), &end(b"hi")].concat()
        ));
        // A record quoted inside the comment of the real one: the outer one is found.
        assert!(ends_with_zip(&end(&end(b"x")[..20])));
        // One whose comment stops short of the end, or runs past it.
        assert!(!ends_with_zip(&[end(b"hi").as_slice(), b"!"].concat()));
        assert!(!ends_with_zip(&end(b"hi")[..23]));
        // The signature in the last 21 bytes: too short for a record, and no panic.
        for cut in 4..22 {
            assert!(!ends_with_zip(&end(b"")[..cut]));
        }
        assert!(!ends_with_zip(b""));
    }

    #[test]
    fn tar_detection_by_magic_and_checksum() {
        let mut block = [0u8; 512];
        block[..4].copy_from_slice(b"file");
        block[257..262].copy_from_slice(b"ustar");
        assert!(is_tar_header(&block));
        block[257..262].copy_from_slice(&[0; 5]);
        assert!(!is_tar_header(&block));
        let sum: u32 = block
            .iter()
            .enumerate()
            .map(|(i, b)| {
                if (148..156).contains(&i) {
                    32
                } else {
                    u32::from(*b)
                }
            })
            .sum();
        let field = format!("{sum:06o}\0 ");
        block[148..156].copy_from_slice(field.as_bytes());
        assert!(is_tar_header(&block));
    }
}
