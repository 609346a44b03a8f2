//! `sha256:<64 lowercase hex>` digests: strict parsing, streaming hashing, comparison.
//!
//! A digest proves the bytes are the indexed artifact, nothing more. It is always computed on
//! the exact bytes received, before any parsing or decompression.

use std::fmt;
use std::io::{self, Read};
use std::str::FromStr;

use sha2::{Digest as _, Sha256};

/// A parsed SHA-256 digest. Cannot hold an invalid value.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Sha256Digest([u8; 32]);

/// Why a digest string was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum DigestParseError {
    #[error("digest must start with `sha256:` (got {0:?})")]
    MissingPrefix(String),
    #[error("digest must have exactly 64 hex characters after `sha256:` (got {0})")]
    WrongLength(usize),
    #[error("digest must be lowercase hex (0-9, a-f); found {0:?}")]
    NotLowercaseHex(char),
}

impl Sha256Digest {
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// Hash everything `reader` yields; returns the digest and the byte count.
    pub fn of_reader(mut reader: impl Read) -> io::Result<(Self, u64)> {
        let mut hasher = Hasher::new();
        let mut buf = vec![0u8; 256 * 1024];
        loop {
            let n = match reader.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            hasher.update(&buf[..n]);
        }
        Ok(hasher.finish())
    }

    pub fn of_bytes(bytes: &[u8]) -> Self {
        Self(Sha256::digest(bytes).into())
    }

    /// Lowercase hex without prefix.
    pub fn hex(&self) -> String {
        hex::encode(self.0)
    }
}

impl FromStr for Sha256Digest {
    type Err = DigestParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let Some(hex_part) = s.strip_prefix(PREFIX) else {
            let shown: String = s.chars().take(16).collect();
            return Err(DigestParseError::MissingPrefix(shown));
        };
        // The usual case, 64 digits, decoded through a table with no branch on the digits;
        // anything else (or a byte that is not a digit) is told apart below.
        if let Ok(digits) = <&[u8; 64]>::try_from(hex_part.as_bytes()) {
            let mut out = [0u8; 32];
            let mut seen = 0u8;
            for (byte, pair) in out.iter_mut().zip(digits.chunks_exact(2)) {
                let (high, low) = (HEX[usize::from(pair[0])], HEX[usize::from(pair[1])]);
                seen |= high | low;
                *byte = (high << 4) | low;
            }
            if seen & NOT_HEX == 0 {
                return Ok(Self(out));
            }
        }
        // Byte by byte: every byte before the first bad one is ASCII, so it starts a char.
        if let Some(at) = hex_part
            .bytes()
            .position(|b| HEX[usize::from(b)] == NOT_HEX)
        {
            let bad = hex_part[at..].chars().next().unwrap_or('\0');
            return Err(DigestParseError::NotLowercaseHex(bad));
        }
        Err(DigestParseError::WrongLength(hex_part.len()))
    }
}

/// Marks a byte that is no lowercase hex digit in [`HEX`].
const NOT_HEX: u8 = 0x80;

/// Each byte's value as a lowercase hex digit, or [`NOT_HEX`]. A table, not a branch on digit
/// or letter: `hex`'s decoder branches on it, and those branches, random over digests, made
/// parsing the 10,000 digests of a child's answer about 3 ms of the parent's time. The table
/// parses them in a third of the instructions of the branch-free arithmetic that came between
/// (bench-results/throughput.md).
static HEX: [u8; 256] = {
    let mut t = [NOT_HEX; 256];
    let mut i = 0;
    while i < 16 {
        let digit = if i < 10 { b'0' + i } else { b'a' + i - 10 };
        t[digit as usize] = i;
        i += 1;
    }
    t
};

const PREFIX: &str = "sha256:";
/// `sha256:` and 64 hex digits.
const TEXT_LEN: usize = PREFIX.len() + 64;

impl Sha256Digest {
    /// The text form in a buffer of its own: inventories print and parse thousands of these, so
    /// neither direction allocates.
    fn text(&self) -> [u8; TEXT_LEN] {
        let mut out = [0u8; TEXT_LEN];
        out[..PREFIX.len()].copy_from_slice(PREFIX.as_bytes());
        // 64 bytes for 32: cannot fail.
        let _ = hex::encode_to_slice(self.0, &mut out[PREFIX.len()..]);
        out
    }

    fn with_text<R>(&self, f: impl FnOnce(&str) -> R) -> R {
        let text = self.text();
        // ASCII by construction.
        f(std::str::from_utf8(&text).unwrap_or_default())
    }
}

impl fmt::Display for Sha256Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.with_text(|t| f.write_str(t))
    }
}

impl fmt::Debug for Sha256Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl serde::Serialize for Sha256Digest {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.with_text(|t| s.serialize_str(t))
    }
}

impl<'de> serde::Deserialize<'de> for Sha256Digest {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Text;
        impl serde::de::Visitor<'_> for Text {
            type Value = Sha256Digest;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a `sha256:<64 lowercase hex>` digest")
            }
            // Parsed where it lies (a borrowed or a scratch str): no String per digest.
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Sha256Digest, E> {
                v.parse().map_err(E::custom)
            }
        }
        d.deserialize_str(Text)
    }
}

/// Incremental SHA-256 (uses the CPU's SHA extensions when present, via `sha2`).
#[derive(Clone, Default)]
pub struct Hasher {
    inner: Sha256,
    len: u64,
}

impl Hasher {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn update(&mut self, bytes: &[u8]) {
        self.inner.update(bytes);
        self.len += bytes.len() as u64;
    }

    /// Bytes hashed so far.
    pub fn bytes_hashed(&self) -> u64 {
        self.len
    }

    pub fn finish(self) -> (Sha256Digest, u64) {
        (Sha256Digest(self.inner.finalize().into()), self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EMPTY: &str = "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

    #[test]
    fn parses_and_round_trips() {
        let d: Sha256Digest = EMPTY.parse().expect("parse");
        assert_eq!(d.to_string(), EMPTY);
        assert_eq!(Sha256Digest::of_bytes(b""), d);
    }

    #[test]
    fn refuses_sloppy_spellings() {
        let upper = EMPTY.replace("e3b0", "E3B0");
        assert_eq!(
            upper.parse::<Sha256Digest>(),
            Err(DigestParseError::NotLowercaseHex('E'))
        );
        assert!(matches!(
            EMPTY.trim_start_matches("sha256:").parse::<Sha256Digest>(),
            Err(DigestParseError::MissingPrefix(_))
        ));
        assert_eq!(
            EMPTY[..EMPTY.len() - 1].parse::<Sha256Digest>(),
            Err(DigestParseError::WrongLength(63))
        );
        assert_eq!(
            format!("{EMPTY}0").parse::<Sha256Digest>(),
            Err(DigestParseError::WrongLength(65))
        );
        assert!(matches!(
            EMPTY.replace("sha256:", "SHA256:").parse::<Sha256Digest>(),
            Err(DigestParseError::MissingPrefix(_))
        ));
        assert!(matches!(
            format!("{EMPTY} ").parse::<Sha256Digest>(),
            Err(DigestParseError::NotLowercaseHex(' '))
        ));
    }

    #[test]
    fn every_ascii_byte_in_every_place_is_a_digit_or_refused() {
        let digits = &EMPTY["sha256:".len()..];
        for at in 0..64 {
            for b in 0u8..128 {
                let mut text = digits.as_bytes().to_vec();
                text[at] = b;
                let text = String::from_utf8(text).expect("ascii");
                let parsed = format!("sha256:{text}").parse::<Sha256Digest>();
                if b.is_ascii_digit() || (b'a'..=b'f').contains(&b) {
                    let want = hex::decode(&text).expect("hex");
                    assert_eq!(parsed.map(|d| d.as_bytes().to_vec()), Ok(want));
                } else {
                    assert_eq!(
                        parsed,
                        Err(DigestParseError::NotLowercaseHex(char::from(b))),
                        "{b:#x} at {at}"
                    );
                }
            }
        }
    }

    #[test]
    fn text_and_json_forms_agree_with_the_hex_crate() {
        for seed in 0u8..=255 {
            let d = Sha256Digest::of_bytes(&[seed; 3]);
            let text = format!("sha256:{}", hex::encode(d.as_bytes()));
            assert_eq!(d.to_string(), text);
            assert_eq!(text.parse::<Sha256Digest>(), Ok(d));
            let json = serde_json::to_string(&d).expect("serialize");
            assert_eq!(json, format!("\"{text}\""));
            assert_eq!(
                serde_json::from_str::<Sha256Digest>(&json).expect("borrowed"),
                d
            );
            // An escape makes serde_json hand over a scratch copy instead of a borrowed str.
            let escaped = json.replacen("sha", "\\u0073ha", 1);
            assert_eq!(
                serde_json::from_str::<Sha256Digest>(&escaped).expect("escaped"),
                d
            );
            let owned: serde_json::Value = serde_json::from_str(&json).expect("value");
            assert_eq!(
                serde_json::from_value::<Sha256Digest>(owned).expect("owned"),
                d
            );
        }
        let every_digit = format!("sha256:{}", "0123456789abcdef".repeat(4));
        let d: Sha256Digest = every_digit.parse().expect("every digit");
        assert_eq!(
            d.as_bytes()[..8],
            [0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef]
        );
        assert_eq!(d.to_string(), every_digit);
        let accented = EMPTY.replacen('e', "\u{e9}", 2);
        assert_eq!(
            accented.parse::<Sha256Digest>(),
            Err(DigestParseError::NotLowercaseHex('\u{e9}'))
        );
        assert!(serde_json::from_str::<Sha256Digest>("42").is_err());
        assert!(serde_json::from_str::<Sha256Digest>("\"sha256:00\"").is_err());
    }
}
