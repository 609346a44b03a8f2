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
        if name.starts_with('/') {
            return Err(reject(ReasonCode::AbsolutePath, "name is an absolute path"));
        }
        // Windows reads `\x` as the root of the current drive and `\\host\share` as a UNC
        // name: both are absolute there, whatever a Unix reader makes of them.
        if name.starts_with('\\') {
            return Err(reject(
                ReasonCode::AbsolutePath,
                "name starts with a backslash (absolute or UNC on Windows)",
            ));
        }
        if drive_like(name) {
            return Err(reject(
                ReasonCode::AbsolutePath,
                "name starts with a drive letter",
            ));
        }
        if name.contains('\\') {
            // A backslash is a separator on Windows: `..\x` climbs out there.
            if name.split(['/', '\\']).any(|c| c == "..") {
                return Err(reject(
                    ReasonCode::PathTraversal,
                    "name contains a `..` component between backslashes (a separator on Windows)",
                ));
            }
            return Err(reject(ReasonCode::InvalidName, "name contains a backslash"));
        }
        if let Some((c, why)) = name.chars().find_map(|c| hidden_char(c).map(|w| (c, w))) {
            let detail = format!("name contains U+{:04X} ({why})", u32::from(c));
            return Err(reject(ReasonCode::InvalidName, &detail));
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
        if drive_like(&out) {
            return Err(reject(
                ReasonCode::AbsolutePath,
                "name starts with a drive letter",
            ));
        }
        if let Some(why) = out.split('/').find_map(windows_problem) {
            return Err(reject(ReasonCode::InvalidName, &why));
        }
        if let Some((code, why)) = out
            .split('/')
            .enumerate()
            .find_map(|(i, comp)| compatibility_problem(comp, i == 0))
        {
            return Err(reject(code, &why));
        }
        if out.is_empty() {
            return Ok(Parsed::Root);
        }
        Ok(Parsed::Path(SafeRelPath(out)))
    }
}

/// A Windows drive prefix (`C:`, `C:x`, `C:\\x`): absolute, or relative to another drive's
/// current directory, never beneath the package.
pub(crate) fn drive_like(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() >= 2 && b[0].is_ascii_alphabetic() && b[1] == b':'
}

/// Characters that show nothing, or reorder what is shown, in a name: a reviewer reading
/// `run\u{202E}hs.txt` sees `runtxt.sh`, and `SKILL\u{200B}.md` looks exactly like `SKILL.md`.
/// ZERO WIDTH (NON-)JOINER is kept between two non-ASCII characters, where emoji sequences and
/// Persian, Indic and other scripts need it; anywhere else it only hides a difference.
pub(crate) fn hidden_char(c: char) -> Option<&'static str> {
    Some(match c {
        '\u{061C}'
        | '\u{200E}'
        | '\u{200F}'
        | '\u{202A}'..='\u{202E}'
        | '\u{2066}'..='\u{2069}' => {
            "a bidirectional control: it reorders how the name is displayed"
        }
        '\u{2028}' | '\u{2029}' => "a line or paragraph separator",
        '\u{00AD}'
        | '\u{034F}'
        | '\u{115F}'
        | '\u{1160}'
        | '\u{17B4}'
        | '\u{17B5}'
        // MONGOLIAN VOWEL SEPARATOR only: the free variation selectors beside it are script.
        | '\u{180E}'
        | '\u{200B}'
        | '\u{2060}'..='\u{2064}'
        | '\u{206A}'..='\u{206F}'
        | '\u{3164}'
        | '\u{FEFF}'
        | '\u{FFA0}'
        | '\u{FFF0}'..='\u{FFF8}'
        | '\u{FFF9}'..='\u{FFFB}'
        | '\u{070F}'
        | '\u{13430}'..='\u{1343F}'
        | '\u{1BCA0}'..='\u{1BCA3}'
        | '\u{1D173}'..='\u{1D17A}'
        | '\u{E0000}'..='\u{E0FFF}' => "an invisible character: the name looks like another one",
        _ => return None,
    })
}

/// ZERO WIDTH (NON-)JOINER outside a run of non-ASCII text (see [`hidden_char`]).
fn stray_joiner(comp: &str) -> bool {
    // Most names hold neither joiner: asked of every component, so nothing is collected then.
    if !comp.contains(['\u{200C}', '\u{200D}']) {
        return false;
    }
    let chars: Vec<char> = comp.chars().collect();
    chars.iter().enumerate().any(|(i, c)| {
        let between_non_ascii =
            i > 0 && chars.get(i + 1).is_some_and(|n| !n.is_ascii()) && !chars[i - 1].is_ascii();
        matches!(c, '\u{200C}' | '\u{200D}') && !between_non_ascii
    })
}

/// Windows device names: opening `CON` or `nul.txt` anywhere reaches the device, not a file.
const DEVICES: [&str; 6] = ["CON", "PRN", "AUX", "NUL", "CONIN$", "CONOUT$"];

/// Why one component names something else on Windows (or hides itself), if it does.
fn windows_problem(comp: &str) -> Option<String> {
    if comp.ends_with('.') || comp.ends_with(' ') {
        return Some(format!(
            "{:?} ends with a dot or space, which Windows drops: it is another name's twin there",
            display_name(comp.as_bytes())
        ));
    }
    if comp.contains(':') {
        return Some(format!(
            "{:?} holds a colon: on Windows `a:b` writes the alternate data stream b of a",
            display_name(comp.as_bytes())
        ));
    }
    if stray_joiner(comp) {
        return Some(format!(
            "{:?} holds a zero-width joiner outside non-ASCII text: it looks like another name",
            display_name(comp.as_bytes())
        ));
    }
    // The device is named by what precedes the first dot, trailing spaces ignored, any case.
    // Compared in place, not on an upper-cased copy: every component of every path is asked.
    let stem = comp.split('.').next().unwrap_or(comp).trim_end_matches(' ');
    let numbered = |p: &str| {
        // `p` is ASCII: a stem that starts with it (any case) has a char boundary after it.
        stem.as_bytes()
            .get(..p.len())
            .is_some_and(|h| h.eq_ignore_ascii_case(p.as_bytes()))
            && {
                let mut it = stem[p.len()..].chars();
                matches!(
                    (it.next(), it.next()),
                    (Some('1'..='9' | '\u{B9}' | '\u{B2}' | '\u{B3}'), None)
                )
            }
    };
    if DEVICES.iter().any(|d| stem.eq_ignore_ascii_case(d)) || numbered("COM") || numbered("LPT") {
        return Some(format!(
            "{:?} is a Windows device name: opening it there reaches the device, not a file",
            display_name(comp.as_bytes())
        ));
    }
    None
}

/// Why one component is refused under compatibility normalisation (NFKC), if it is. The twin
/// checks key names by NFKC because tools that normalise names make such twins one file; the
/// same tools would make `a／b` (FULLWIDTH SOLIDUS) the path `a/b`, `℆` (CADA UNA) `c/u`, `‥`
/// (TWO DOT LEADER) the component `..`, `Ｃ：x` the drive path `C:x`, `ＣＯＮ` the device `CON`
/// and `notes…` the name `notes...` that Windows makes `notes`: a name that is harmless here
/// and is, there, one the parser refuses when an archive spells it in ASCII. `first`: the
/// component starts the (normalised) path, where a drive prefix is absolute.
///
/// The NFKC form is held to the parser's rules for one component, with the reason the ASCII
/// spelling gets, except for the limits on bytes (`max_component_bytes`, `max_path_bytes`):
/// those bound what this parser and the writer handle, the raw name, and NFKC lengthens some
/// accepted names (U+FDFA is 18 characters) without making them mean anything else. Depth
/// cannot change: a form with a separator is refused first.
fn compatibility_problem(comp: &str, first: bool) -> Option<(ReasonCode, String)> {
    // ASCII is its own NFKC form, and the parser has held it to every rule already.
    if comp.is_ascii() {
        return None;
    }
    let nfkc: String = comp.nfkc().collect();
    if nfkc == comp {
        return None;
    }
    let shown = display_name(comp.as_bytes());
    let normal = display_name(nfkc.as_bytes());
    // A separator or a dot component first, with the codes they have had since the rule began
    // (a form that also climbs, `‥／x`, or starts with a drive, `Ｃ：／x`, stays `invalid_name`).
    if nfkc.contains(['/', '\\']) {
        return Some((
            ReasonCode::InvalidName,
            format!(
                "{shown:?} holds a character that compatibility normalisation (NFKC) makes a path \
                 separator: {normal:?}"
            ),
        ));
    }
    match nfkc.as_str() {
        ".." => {
            return Some((
                ReasonCode::PathTraversal,
                format!("{shown:?} is `..` after compatibility normalisation (NFKC)"),
            ));
        }
        "." => {
            return Some((
                ReasonCode::InvalidName,
                format!("{shown:?} is `.` after compatibility normalisation (NFKC)"),
            ));
        }
        _ => {}
    }
    // Then the raw name's rules, in the parser's order. No compatibility mapping makes a control
    // or invisible character in today's tables; the check keeps the rule whole if one ever does.
    let (code, why) = if let Some(c) = nfkc
        .chars()
        .find(|c| c.is_control() || hidden_char(*c).is_some())
    {
        (
            ReasonCode::InvalidName,
            format!(
                "it holds U+{:04X}, a control or invisible character",
                u32::from(c)
            ),
        )
    } else if first && drive_like(&nfkc) {
        (
            ReasonCode::AbsolutePath,
            String::from("it starts with a drive letter"),
        )
    } else if let Some(why) = windows_problem(&nfkc) {
        (ReasonCode::InvalidName, why)
    } else {
        return None;
    };
    Some((
        code,
        format!("{shown:?} is {normal:?} after compatibility normalisation (NFKC): {why}"),
    ))
}

impl std::fmt::Display for SafeRelPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Key under which canonical Unicode twins collide (NFC; `é` precomposed vs decomposed).
pub fn nfc_key(path: &str) -> String {
    // ASCII has no decompositions and nothing composes with it: NFC, NFKC and the folds below
    // are the identity (or ASCII lowercase) there, and most names are ASCII.
    if path.is_ascii() {
        return path.to_owned();
    }
    path.nfc().collect()
}

/// Key under which compatibility twins collide (NFKC: the ligature `ﬁ` and `fi`, fullwidth
/// `ＳＫＩＬＬ.md` and `SKILL.md`): different bytes, the same text to a reader, and the same file
/// to tools that normalise names (HFS+, some sync and packaging tools).
pub fn nfkc_key(path: &str) -> String {
    if path.is_ascii() {
        return path.to_owned();
    }
    path.nfkc().collect()
}

/// Key under which case-fold twins collide on case-insensitive filesystems (macOS, Windows).
///
/// Unicode's compatibility caseless match (Unicode 16 section 3.13, D146), with full case
/// folding: `ß` and `ss`, final `ς` and medial `σ`, the KELVIN SIGN and `k` all collide, not
/// just ASCII letters. The result is NFC so the key reads like a name.
pub fn fold_key(path: &str) -> String {
    // The full case fold of an ASCII string is its ASCII lowercase. (Letters that fold to
    // ASCII from outside it, KELVIN SIGN or long s, make the name non-ASCII: the Unicode path.)
    if path.is_ascii() {
        return path.to_ascii_lowercase();
    }
    fold_key_unicode(path)
}

fn fold_key_unicode(path: &str) -> String {
    let fold = |s: &str| unicase::UniCase::unicode(s).to_folded_case();
    let once: String = fold(&path.nfd().collect::<String>()).nfkd().collect();
    let twice: String = fold(&once).nfkd().collect();
    twice.nfc().collect()
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

    /// Names that compatibility normalisation (NFKC) turns into separators or dot components
    /// are refused; compatibility characters that stay one plain component are not.
    #[test]
    fn refuses_what_nfkc_makes_a_separator_or_a_dot_component() {
        for raw in [
            "a\u{FF0F}b",         // FULLWIDTH SOLIDUS
            "docs/c\u{2106}u.md", // CADA UNA: c/u
            "\u{2100}",           // ACCOUNT OF: a/c
            "x\u{FF3C}y",         // FULLWIDTH REVERSE SOLIDUS
            "x\u{FE68}y",         // SMALL REVERSE SOLIDUS
            "\u{FF0E}",           // FULLWIDTH FULL STOP alone: `.`
        ] {
            assert_eq!(code(raw.as_bytes()), ReasonCode::InvalidName, "{raw:?}");
        }
        for raw in ["\u{2025}/x", "a/\u{FF0E}\u{FF0E}/b", "a/.\u{FF0E}"] {
            assert_eq!(code(raw.as_bytes()), ReasonCode::PathTraversal, "{raw:?}");
        }
        for raw in [
            "\u{FB01}le.md",
            "\u{FF33}\u{FF2B}\u{FF29}\u{FF2C}\u{FF2C}.md",
            "a\u{2026}b",
            "\u{00BD}",
        ] {
            assert_eq!(ok(raw), raw, "{raw:?}");
        }
    }

    /// A name whose NFKC form breaks one of the parser's rules for a component is refused with
    /// the reason the ASCII spelling gets; the limits on bytes are the raw name's alone.
    #[test]
    fn refuses_what_the_parser_refuses_once_nfkc_normalised() {
        for raw in [
            "\u{FF23}\u{FF1A}x",    // FULLWIDTH C, FULLWIDTH COLON: `C:x`
            "C\u{FF1A}/x",          // `C:`
            "./\u{FF43}\u{FE55}/x", // SMALL COLON, first once `./` is dropped
            "\u{2102}\u{FE13}x",    // DOUBLE-STRUCK C, vertical COLON
        ] {
            assert_eq!(code(raw.as_bytes()), ReasonCode::AbsolutePath, "{raw:?}");
        }
        for raw in [
            "a/\u{FF23}\u{FF1A}x",               // `C:x` further down: a colon
            "SKILL.md\u{FF1A}evil",              // an alternate data stream
            "a/x\u{2A74}y",                      // `::=`
            "\u{FF23}\u{FF2F}\u{FF2E}",          // `CON`
            "docs/\u{FF4E}\u{FF55}\u{FF4C}.txt", // `nul.txt`
            "\u{FF23}\u{FF2F}\u{FF2D}\u{FF11}",  // `COM1`
            "COM\u{2460}",                       // CIRCLED DIGIT ONE: `COM1`
            "lpt\u{2468}.log",                   // `lpt9.log`
            "guide.md\u{FF0E}",                  // a trailing dot
            "notes\u{2026}",                     // `notes...`
            "step\u{2488}",                      // DIGIT ONE FULL STOP: `step1.`
            "\u{2026}",                          // `...`
            "x\u{3000}",                         // IDEOGRAPHIC SPACE: a trailing space
            "dir\u{A0}/x",                       // NO-BREAK SPACE
            "\u{FB01}\u{200D}\u{FB01}",          // `fi` ZWJ `fi`: the joiner between ASCII
        ] {
            assert_eq!(code(raw.as_bytes()), ReasonCode::InvalidName, "{raw:?}");
        }
        let r = SafeRelPath::parse("\u{FF23}\u{FF1A}x".as_bytes(), &Limits::default())
            .expect_err("a drive after NFKC");
        assert_eq!(
            r.detail,
            "\"\u{FF23}\u{FF1A}x\" is \"C:x\" after compatibility normalisation (NFKC): it \
             starts with a drive letter"
        );
        // Plain after NFKC, and a form longer than the raw name's byte limits: accepted.
        let wide = "\u{FDFA}".repeat(80);
        let deep = vec!["\u{FDFA}\u{FDFA}"; 32].join("/");
        for raw in [
            "\u{FF23}\u{FF2F}\u{FF2E}\u{FF33}\u{FF2F}\u{FF2C}\u{FF25}.md", // `CONSOLE.md`
            "\u{FF23}\u{FF2F}\u{FF2D}\u{FF10}",                            // `COM0`
            "\u{2460}.md",
            "\u{2488} intro.md",
            "\u{A0}x",
            "\u{2026}md",
            "a/\u{FF43}",
            wide.as_str(),
            deep.as_str(),
        ] {
            assert_eq!(ok(raw), raw, "{raw:?}");
        }
        assert!(nfkc_key(&wide).len() as u64 > Limits::default().max_component_bytes);
        assert!(nfkc_key(&deep).len() as u64 > Limits::default().max_path_bytes);
    }

    /// Every accepted name of one non-ASCII character, alone or beside a letter, has an NFKC
    /// form the parser accepts as it is (byte limits aside): a tool that normalises names
    /// writes only names the parser would have taken.
    #[test]
    fn the_nfkc_form_of_every_accepted_name_is_accepted() {
        let relaxed = Limits {
            max_path_bytes: u64::MAX,
            max_component_bytes: u64::MAX,
            ..Limits::default()
        };
        // Compatibility decompositions end below U+32400 (see fold_key's test).
        for c in (0x80..0x32400_u32).filter_map(char::from_u32) {
            for raw in [
                c.to_string(),
                format!("a{c}"),
                format!("{c}a"),
                format!("a/{c}"),
            ] {
                let Ok(Parsed::Path(p)) = SafeRelPath::parse(raw.as_bytes(), &Limits::default())
                else {
                    continue;
                };
                let nfkc = nfkc_key(p.as_str());
                match SafeRelPath::parse(nfkc.as_bytes(), &relaxed) {
                    Ok(Parsed::Path(q)) if q.as_str() == nfkc => {}
                    other => panic!("{raw:?} accepted, its NFKC form {nfkc:?}: {other:?}"),
                }
            }
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
        assert_eq!(code(b"a\\..\\x"), ReasonCode::PathTraversal);
        assert_eq!(code(b"..\\..\\x"), ReasonCode::PathTraversal);
        assert_eq!(code(b"a\\b"), ReasonCode::InvalidName);
        assert_eq!(code(b"C:\\x"), ReasonCode::AbsolutePath);
        assert_eq!(code(b"C:x"), ReasonCode::AbsolutePath);
        assert_eq!(code(b"\\\\host\\share\\x"), ReasonCode::AbsolutePath);
        assert_eq!(code(b"\\x"), ReasonCode::AbsolutePath);
        assert_eq!(code(b"a\0b"), ReasonCode::InvalidName);
        assert_eq!(code(b"a\x1bb"), ReasonCode::InvalidName);
        assert_eq!(code(b"a\xffb"), ReasonCode::InvalidName);
        assert_eq!(code("a\u{85}b".as_bytes()), ReasonCode::InvalidName);
    }

    #[test]
    fn names_windows_or_a_reader_would_misread() {
        for bad in [
            "references/guide.md.",
            "references/guide.md ",
            "dir./x",
            "CON",
            "assets/nul.txt",
            "aux.tar.gz",
            "Com1",
            "lpt9.log",
            "COM\u{b9}",
            "CON .txt",
            "conin$",
            "cOnOuT$.log",
            "lPt\u{b3}.txt",
            "PrN",
            "SKILL.md:evil",
            "ab:c/d",
            "scripts/run\u{202e}hs.txt",
            "SKILL\u{200b}.md",
            "\u{feff}SKILL.md",
            "tag\u{e0041}",
            "x\u{2066}y",
            "ab\u{200d}c",
            "\u{200c}x",
        ] {
            assert_eq!(code(bad.as_bytes()), ReasonCode::InvalidName, "{bad:?}");
        }
        for good in [
            "console.md",
            "nullable.txt",
            "com10.txt",
            "com\u{b9}0",
            "lpt.md",
            "comx",
            "a.b.c",
            ".hidden",
            "\u{1f468}\u{200d}\u{1f469}.txt",
            "\u{645}\u{6cc}\u{200c}\u{62e}\u{648}\u{627}\u{647}\u{645}.md",
        ] {
            assert_eq!(ok(good), good, "{good:?}");
        }
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
        // Full folding, not lowercasing: sharp s, final and medial sigma, KELVIN SIGN.
        assert_eq!(fold_key("stra\u{df}e.md"), fold_key("STRASSE.md"));
        assert_eq!(
            fold_key("\u{3bf}\u{3b4}\u{3bf}\u{3c2}"),
            fold_key("\u{3bf}\u{3b4}\u{3bf}\u{3c3}")
        );
        assert_eq!(fold_key("\u{212a}elvin"), fold_key("kelvin"));
        assert_eq!(nfkc_key("\u{fb01}le"), nfkc_key("file"));
        assert_ne!(nfc_key("\u{fb01}le"), nfc_key("file"));
        assert_eq!(nfkc_key("\u{ff33}KILL.md"), "SKILL.md");
    }

    #[test]
    fn the_ascii_shortcut_agrees_with_the_unicode_path() {
        let every: String = (0..0x80_u8).map(char::from).collect();
        for s in [
            every.as_str(),
            "SKILL.md",
            "Scripts/RUN.PY",
            "a/B/c",
            "~$[]{}",
        ] {
            assert_eq!(fold_key(s), fold_key_unicode(s), "{s:?}");
            assert_eq!(nfc_key(s), s.nfc().collect::<String>(), "{s:?}");
            assert_eq!(nfkc_key(s), s.nfkc().collect::<String>(), "{s:?}");
        }
        for b in 0..0x80_u8 {
            let s = char::from(b).to_string();
            assert_eq!(fold_key(&s), fold_key_unicode(&s), "{s:?}");
        }
    }

    #[test]
    fn fold_key_is_idempotent_on_every_code_point() {
        // Every assigned code point lives below U+32400 but the tags, private use and noncharacters.
        for c in (0..0x32400_u32).filter_map(char::from_u32) {
            for s in [c.to_string(), format!("{c}\u{301}")] {
                let f = fold_key(&s);
                assert_eq!(fold_key(&f), f, "{:?}", s);
                assert_eq!(fold_key(&nfc_key(&s)), f, "{:?}", s);
                assert_eq!(fold_key(&nfkc_key(&s)), f, "{:?}", s);
            }
        }
    }
}
