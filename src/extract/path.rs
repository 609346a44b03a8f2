//! Entry-name validation, normalisation and collision keys.
//!
//! Archive names are hostile input. [`SafeRelPath::parse`] is the only way to obtain a path the
//! writer will accept: UTF-8, relative, no `..`, no backslash, no control characters, within
//! the length and depth limits, with `.` and empty components (`a//b`, `./a`) removed. We never
//! rely on an archive library's "safe name" helper: zip's `enclosed_name()` strips an absolute
//! prefix instead of refusing it.

use unicode_normalization::UnicodeNormalization;

use super::policy::Limits;
use crate::reason::{Reason, ReasonCode, display_name};

/// A validated, normalised relative path: non-empty components joined by `/`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SafeRelPath(String);

/// The result of parsing a name: a path, or the archive root itself (`./`, `/`-free empty).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    Root,
    Path(SafeRelPath),
}

impl SafeRelPath {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn components(&self) -> impl Iterator<Item = &str> {
        self.0.split('/')
    }

    /// Parent path, or `None` for a top-level name.
    pub fn parent(&self) -> Option<&str> {
        self.0.rfind('/').map(|i| &self.0[..i])
    }

    pub fn file_name(&self) -> &str {
        self.0
            .rfind('/')
            .map_or(self.0.as_str(), |i| &self.0[i + 1..])
    }

    /// Validate a raw entry name against the policy and normalise it.
    pub fn parse(raw: &[u8], limits: &Limits) -> Result<Parsed, Reason> {
        let reject =
            |code: ReasonCode, detail: &str| Reason::new(code, detail).entry(display_name(raw));
        let name = std::str::from_utf8(raw)
            .map_err(|_| reject(ReasonCode::InvalidName, "name is not valid UTF-8"))?;
        if let Some(c) = name.chars().find(|c| c.is_control()) {
            let detail = format!("name contains control character U+{:04X}", u32::from(c));
            return Err(reject(ReasonCode::InvalidName, &detail));
        }
        if name.contains('\\') {
            // A backslash is a separator on Windows: `..\x` would traverse there.
            return Err(reject(ReasonCode::InvalidName, "name contains a backslash"));
        }
        if name.starts_with('/') {
            return Err(reject(ReasonCode::AbsolutePath, "name is an absolute path"));
        }
        let b = name.as_bytes();
        if b.len() >= 2 && b[0].is_ascii_alphabetic() && b[1] == b':' {
            return Err(reject(
                ReasonCode::AbsolutePath,
                "name starts with a drive letter",
            ));
        }
        if raw.len() as u64 > limits.max_path_bytes {
            return Err(reject(ReasonCode::PathLength, "name is too long")
                .limit(limits.max_path_bytes, raw.len() as u64));
        }
        let mut out = String::with_capacity(name.len());
        let mut depth: u64 = 0;
        for comp in name.split('/') {
            match comp {
                "" | "." => continue,
                ".." => {
                    return Err(reject(
                        ReasonCode::PathTraversal,
                        "name contains a `..` component",
                    ));
                }
                _ => {}
            }
            if comp.len() as u64 > limits.max_component_bytes {
                return Err(
                    reject(ReasonCode::PathLength, "a path component is too long")
                        .limit(limits.max_component_bytes, comp.len() as u64),
                );
            }
            depth += 1;
            if !out.is_empty() {
                out.push('/');
            }
            out.push_str(comp);
        }
        if depth > limits.max_path_depth {
            return Err(reject(ReasonCode::PathDepth, "path is too deep")
                .limit(limits.max_path_depth, depth));
        }
        // Checked again after normalisation: `./C:/x` must not become the drive path `C:/x`.
        let o = out.as_bytes();
        if o.len() >= 2 && o[0].is_ascii_alphabetic() && o[1] == b':' {
            return Err(reject(
                ReasonCode::AbsolutePath,
                "name starts with a drive letter",
            ));
        }
        if out.is_empty() {
            return Ok(Parsed::Root);
        }
        Ok(Parsed::Path(SafeRelPath(out)))
    }
}

impl std::fmt::Display for SafeRelPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Key under which Unicode-normalisation twins collide (NFC; `é` precomposed vs decomposed).
pub fn nfc_key(path: &str) -> String {
    path.nfc().collect()
}

/// Key under which case-fold twins collide on case-insensitive filesystems (macOS, Windows).
pub fn fold_key(path: &str) -> String {
    let lower: String = path.nfc().collect::<String>().to_lowercase();
    lower.nfc().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(raw: &str) -> String {
        match SafeRelPath::parse(raw.as_bytes(), &Limits::default()) {
            Ok(Parsed::Path(p)) => p.to_string(),
            Ok(Parsed::Root) => String::from("<root>"),
            Err(r) => panic!("{raw:?} rejected: {r:?}"),
        }
    }

    fn code(raw: &[u8]) -> ReasonCode {
        match SafeRelPath::parse(raw, &Limits::default()) {
            Ok(p) => panic!("{raw:?} accepted as {p:?}"),
            Err(r) => r.code,
        }
    }

    #[test]
    fn normalises_harmless_spellings() {
        assert_eq!(ok("./a/b"), "a/b");
        assert_eq!(ok("a//b/"), "a/b");
        assert_eq!(ok("a/./b"), "a/b");
        assert_eq!(ok("./"), "<root>");
        assert_eq!(ok("ünï/ćødé.md"), "ünï/ćødé.md");
    }

    #[test]
    fn refuses_hostile_names() {
        assert_eq!(code(b"../x"), ReasonCode::PathTraversal);
        assert_eq!(code(b"a/../../x"), ReasonCode::PathTraversal);
        assert_eq!(code(b"a/.."), ReasonCode::PathTraversal);
        assert_eq!(code(b"/etc/passwd"), ReasonCode::AbsolutePath);
        assert_eq!(code(b"C:/x"), ReasonCode::AbsolutePath);
        assert_eq!(code(b"./w:Cndows"), ReasonCode::AbsolutePath);
        assert_eq!(code(b".//C:/Windows/evil.txt"), ReasonCode::AbsolutePath);
        assert_eq!(code(b"a\\..\\x"), ReasonCode::InvalidName);
        assert_eq!(code(b"a\0b"), ReasonCode::InvalidName);
        assert_eq!(code(b"a\x1bb"), ReasonCode::InvalidName);
        assert_eq!(code(b"a\xffb"), ReasonCode::InvalidName);
        assert_eq!(code("a\u{85}b".as_bytes()), ReasonCode::InvalidName);
    }

    #[test]
    fn limits_hold_at_the_boundary_and_fail_one_past() {
        let l = Limits::default();
        let deep_ok = vec!["d"; 32].join("/");
        let deep_bad = vec!["d"; 33].join("/");
        assert!(SafeRelPath::parse(deep_ok.as_bytes(), &l).is_ok());
        assert_eq!(code(deep_bad.as_bytes()), ReasonCode::PathDepth);
        let comp_ok = "c".repeat(255);
        let comp_bad = "c".repeat(256);
        assert!(SafeRelPath::parse(comp_ok.as_bytes(), &l).is_ok());
        assert_eq!(code(comp_bad.as_bytes()), ReasonCode::PathLength);
        let long_ok = format!(
            "{}/{}/{}/{}/{}",
            "a".repeat(200),
            "b".repeat(200),
            "c".repeat(200),
            "d".repeat(200),
            "e".repeat(220)
        );
        assert_eq!(long_ok.len(), 1024);
        assert!(SafeRelPath::parse(long_ok.as_bytes(), &l).is_ok());
        assert_eq!(
            code(format!("{long_ok}e").as_bytes()),
            ReasonCode::PathLength
        );
    }

    #[test]
    fn collision_keys() {
        assert_eq!(nfc_key("e\u{301}"), nfc_key("\u{e9}"));
        assert_ne!("e\u{301}", "\u{e9}");
        assert_eq!(fold_key("README.md"), fold_key("readme.MD"));
        assert_eq!(fold_key("\u{c9}"), fold_key("e\u{301}"));
    }
}
