//! What the stock `skills` npm CLI (1.7.4, pinned by tests/skills-cli) will not install of a
//! skill publish accepts: its reader is narrower than the draft, and it leaves such a skill out
//! of what it installs without a word. Publish does not refuse these (they are valid under the
//! draft, and a publisher's consumers may not use that CLI); it names them, per skill, so the
//! publisher learns before a user does. Each rule publish warns about, and its threshold, lives
//! here, and only here (docs/publish.md, *Stock consumers*, lists the rest of its differences).

use serde::Serialize;

use super::pack::{Format, ustar_cut};
use super::walk::{SourceKind, SourceTree};
use crate::index::EntryType;

/// The consumer these rules describe, as output names it.
pub const STOCK_CLI: &str = "the skills npm CLI 1.7.4";
/// Files it reads from one archive (`MAX_ARCHIVE_FILES`): a tar's regular files; every
/// central-directory entry of a zip, directories included.
pub const STOCK_MAX_FILES: u64 = 1_000;
/// Bytes of file content it unpacks from one archive (`MAX_ARCHIVE_UNPACKED_BYTES`, 50 MiB).
pub const STOCK_MAX_UNPACKED_BYTES: u64 = 50 * 1024 * 1024;
/// The description's length in its index reader, counted in UTF-16 code units (JavaScript's
/// `length`): a character outside the Basic Multilingual Plane counts twice.
pub const STOCK_MAX_DESCRIPTION_UTF16: u64 = 1_024;

/// Why the stock CLI leaves a skill out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StockCode {
    /// The archive holds a symlink: it refuses any link (`Archive links are not supported`).
    Symlink,
    /// More files than [`STOCK_MAX_FILES`].
    TooManyFiles,
    /// More unpacked bytes than [`STOCK_MAX_UNPACKED_BYTES`].
    TooLarge,
    /// A description over [`STOCK_MAX_DESCRIPTION_UTF16`] UTF-16 code units.
    DescriptionLength,
    /// A tar.gz path it cuts ([`StockChangeCode::PathCut`]) lands where another file needs a
    /// directory: it writes files one by one, fails at the second of the two (`EEXIST` or
    /// `EISDIR`), and leaves the skill's directory as far as it got (SKILL.md too, when it
    /// came first).
    PathConflict,
}

impl StockCode {
    /// Whether it leaves the skill out without a word. Only a path conflict is reported
    /// (`Failed to install`, yet it exits 0), and it leaves part of the skill installed.
    pub fn says_nothing(self) -> bool {
        self != StockCode::PathConflict
    }
}

/// One reason the stock CLI will not install a skill.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StockWarning {
    pub code: StockCode,
    /// The entry it trips on (the first symlink), when one does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Its limit and what this skill holds, for the counted rules.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed: Option<u64>,
    pub detail: String,
}

/// Every reason [`STOCK_CLI`] will not install the skill walked as `tree`, published as `ty`
/// in `format`, whose index entry lists `description`. Empty: it installs it.
pub fn will_not_install(
    tree: &SourceTree,
    ty: EntryType,
    format: Format,
    description: &str,
) -> Vec<StockWarning> {
    let mut out = Vec::new();
    let units = description.encode_utf16().count() as u64;
    if units > STOCK_MAX_DESCRIPTION_UTF16 {
        out.push(StockWarning {
            code: StockCode::DescriptionLength,
            path: None,
            limit: Some(STOCK_MAX_DESCRIPTION_UTF16),
            observed: Some(units),
            detail: format!(
                "the description is {units} UTF-16 code units (it counts a character outside \
                 the Basic Multilingual Plane twice); it skips an index entry over \
                 {STOCK_MAX_DESCRIPTION_UTF16}"
            ),
        });
    }
    // A lone SKILL.md is served as itself, not unpacked: the archive rules do not apply.
    if ty != EntryType::Archive {
        return out;
    }
    if let Some(link) = tree
        .entries
        .iter()
        .find(|e| matches!(e.kind, SourceKind::Symlink { .. }))
    {
        out.push(StockWarning {
            code: StockCode::Symlink,
            path: Some(link.path.clone()),
            limit: None,
            observed: None,
            detail: format!(
                "the archive holds a symlink ({}); it refuses an archive holding any link",
                link.path
            ),
        });
    }
    let counted = tree
        .entries
        .iter()
        .filter(|e| match (&e.kind, format) {
            (SourceKind::File { .. }, _) => true,
            // Its zip reader counts the central directory's entries; its tar reader, files.
            (_, Format::Zip) => true,
            (_, Format::TarGz) => false,
        })
        .count() as u64;
    if counted > STOCK_MAX_FILES {
        let what = match format {
            Format::TarGz => "files",
            Format::Zip => "zip entries (directories included)",
        };
        out.push(StockWarning {
            code: StockCode::TooManyFiles,
            path: None,
            limit: Some(STOCK_MAX_FILES),
            observed: Some(counted),
            detail: format!(
                "the archive holds {counted} {what}; it reads at most {STOCK_MAX_FILES}"
            ),
        });
    }
    let installed = installed_paths(tree, format);
    // A file and a directory at one path: with whole paths only a cut can make one, by
    // landing on a directory another file needs (a cut's own ancestors are directories of
    // the tree). Whichever it writes first, writing the other fails.
    let conflict = installed.iter().enumerate().find_map(|(i, &(path, cut))| {
        let cut = cut?;
        let j = installed
            .iter()
            .position(|&(p, c)| is_under(c.unwrap_or(p), cut))?;
        Some((path, cut, installed[j].0, i.max(j)))
    });
    if let Some((path, cut, other, fails_at)) = conflict {
        // It writes in the archive's order, this one's (a path it meets twice keeps its
        // first place, the one each search above finds first).
        let kept = if installed[..fails_at].iter().any(|&(p, _)| p == "SKILL.md") {
            ", SKILL.md included"
        } else {
            ""
        };
        out.push(StockWarning {
            code: StockCode::PathConflict,
            path: Some(path.to_owned()),
            limit: None,
            observed: None,
            detail: format!(
                "it installs {path} as {cut} (the path cut to a tar header's 100 bytes), a \
                 directory it needs for {other}: it fails part way and leaves the files it \
                 wrote before{kept}"
            ),
        });
    }
    let bytes: u64 = tree
        .entries
        .iter()
        .map(|e| match &e.kind {
            SourceKind::File { bytes, .. } => bytes.len() as u64,
            _ => 0,
        })
        .sum();
    if bytes > STOCK_MAX_UNPACKED_BYTES {
        out.push(StockWarning {
            code: StockCode::TooLarge,
            path: None,
            limit: Some(STOCK_MAX_UNPACKED_BYTES),
            observed: Some(bytes),
            detail: format!(
                "the archive unpacks to {bytes} bytes; it unpacks at most {STOCK_MAX_UNPACKED_BYTES} (50 MiB)"
            ),
        });
    }
    out
}

/// Each file of `tree` with where its tar reader installs it when that is not its path:
/// a cut (tar.gz only: its zip reader reads whole names) is a plain relative path
/// ([`ustar_cut`]), taken as is.
fn installed_paths(tree: &SourceTree, format: Format) -> Vec<(&str, Option<&str>)> {
    tree.entries
        .iter()
        .filter(|e| matches!(e.kind, SourceKind::File { .. }))
        .map(|e| {
            let cut = (format == Format::TarGz)
                .then(|| ustar_cut(&e.path))
                .flatten();
            (e.path.as_str(), cut)
        })
        .collect()
}

/// Whether `path` lies inside the directory `dir`.
fn is_under(path: &str, dir: &str) -> bool {
    path.strip_prefix(dir)
        .is_some_and(|rest| rest.starts_with('/'))
}

/// How the stock CLI installs a skill otherwise than it was packed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StockChangeCode {
    /// A tar.gz path ustar cannot hold (over 255 bytes, or a last component over 100) is
    /// written with a GNU long-name record, which its reader skips: it installs the file at
    /// the header's `name`, the path cut to 100 bytes ([`super::pack::ustar_cut`]).
    PathCut,
    /// It writes every file it unpacks with the default mode (0644 under the usual umask):
    /// a file packed executable arrives without its executable bit.
    ExecutableBits,
}

/// One way [`STOCK_CLI`] installs a skill otherwise than it was packed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StockChange {
    pub code: StockChangeCode,
    /// The file it applies to (the first of them, for `executable_bits`).
    pub path: String,
    /// Where it installs `path` (`path_cut`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub installed_as: Option<String>,
    /// How many files it applies to (`executable_bits`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub count: Option<u64>,
    pub detail: String,
}

/// Every way [`STOCK_CLI`] installs the skill walked as `tree`, published as `ty` in
/// `format`, otherwise than publish packed it. Empty: it installs it as packed (or not at
/// all: [`will_not_install`]).
pub fn installs_otherwise(tree: &SourceTree, ty: EntryType, format: Format) -> Vec<StockChange> {
    let mut out = Vec::new();
    if ty != EntryType::Archive {
        return out;
    }
    let installed = installed_paths(tree, format);
    for &(path, cut) in &installed {
        let Some(cut) = cut else {
            continue;
        };
        let mut detail = format!(
            "{path} is {} bytes, more than a tar header holds: it skips the long-name record \
             and installs the file as {cut}",
            path.len()
        );
        // Two files at one path: its map of the archive keeps the later.
        if let Some((other, _)) = installed
            .iter()
            .find(|&&(p, c)| p != path && c.unwrap_or(p) == cut)
        {
            detail.push_str(&format!(
                ", where it installs {other} too: one overwrites the other"
            ));
        }
        out.push(StockChange {
            code: StockChangeCode::PathCut,
            path: path.to_owned(),
            installed_as: Some(cut.to_owned()),
            count: None,
            detail,
        });
    }
    let executable: Vec<&str> = tree
        .entries
        .iter()
        .filter(|e| {
            matches!(
                e.kind,
                SourceKind::File {
                    executable: true,
                    ..
                }
            )
        })
        .map(|e| e.path.as_str())
        .collect();
    if let Some(first) = executable.first() {
        let n = executable.len();
        let listed = match n {
            1 => (*first).to_owned(),
            2 => format!("{first} and {}", executable[1]),
            _ => format!("{first}, {} and {} more", executable[1], n - 2),
        };
        out.push(StockChange {
            code: StockChangeCode::ExecutableBits,
            path: (*first).to_owned(),
            installed_as: None,
            count: Some(n as u64),
            detail: format!(
                "it drops every executable bit ({listed} here): ./{first} fails there with \
                 permission denied, a command that names the interpreter works"
            ),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::publish::walk::SourceEntry;

    fn file(path: &str, len: usize) -> SourceEntry {
        SourceEntry {
            path: path.into(),
            kind: SourceKind::File {
                bytes: vec![b'x'; len],
                executable: false,
            },
        }
    }

    fn dir(path: &str) -> SourceEntry {
        SourceEntry {
            path: path.into(),
            kind: SourceKind::Dir,
        }
    }

    fn tree(entries: Vec<SourceEntry>) -> SourceTree {
        SourceTree {
            entries,
            left_out: Vec::new(),
            left_out_unlisted: Default::default(),
            not_shared: Vec::new(),
        }
    }

    fn codes(t: &SourceTree, f: Format, description: &str) -> Vec<StockCode> {
        will_not_install(t, EntryType::Archive, f, description)
            .into_iter()
            .map(|w| w.code)
            .collect()
    }

    /// Its tar reader refuses the 1,001st file, not the 1,000th, and counts no directory; its
    /// zip reader counts every central-directory entry, directories included.
    #[test]
    fn file_count_is_its_tar_files_and_its_zip_entries() {
        let at_limit = |extra: Vec<SourceEntry>| {
            let mut e: Vec<SourceEntry> = (0..STOCK_MAX_FILES)
                .map(|i| file(&format!("f{i}"), 1))
                .collect();
            e.extend(extra);
            tree(e)
        };
        assert_eq!(codes(&at_limit(vec![]), Format::TarGz, "d"), vec![]);
        assert_eq!(codes(&at_limit(vec![]), Format::Zip, "d"), vec![]);
        assert_eq!(
            codes(&at_limit(vec![dir("refs")]), Format::TarGz, "d"),
            vec![]
        );
        assert_eq!(
            codes(&at_limit(vec![dir("refs")]), Format::Zip, "d"),
            vec![StockCode::TooManyFiles]
        );
        assert_eq!(
            codes(&at_limit(vec![file("one-more", 1)]), Format::TarGz, "d"),
            vec![StockCode::TooManyFiles]
        );
    }

    /// Exactly 50 MiB of file content installs there; one byte more does not.
    #[test]
    fn unpacked_bytes_over_fifty_mib() {
        let half = (STOCK_MAX_UNPACKED_BYTES / 2) as usize;
        let exact = tree(vec![file("a", half), file("b", half)]);
        assert_eq!(codes(&exact, Format::TarGz, "d"), vec![]);
        let over = tree(vec![file("a", half), file("b", half + 1)]);
        let w = will_not_install(&over, EntryType::Archive, Format::Zip, "d");
        assert_eq!(w.len(), 1, "{w:?}");
        assert_eq!(w[0].code, StockCode::TooLarge);
        assert_eq!(w[0].observed, Some(STOCK_MAX_UNPACKED_BYTES + 1));
    }

    /// UTF-16 code units, as JavaScript counts: 1,024 BMP characters pass, 512 emoji (1,024
    /// units) pass, 513 do not, though skillbox's 1,024-character limit takes them all. A lone
    /// SKILL.md (served as itself) meets the description rule, never the archive ones.
    #[test]
    fn description_counts_utf16_code_units_for_every_type() {
        let t = tree(vec![file("SKILL.md", 1)]);
        assert_eq!(codes(&t, Format::TarGz, &"é".repeat(1024)), vec![]);
        assert_eq!(codes(&t, Format::TarGz, &"\u{1F4DD}".repeat(512)), vec![]);
        assert_eq!(
            codes(&t, Format::TarGz, &"\u{1F4DD}".repeat(513)),
            vec![StockCode::DescriptionLength]
        );
        let linked = tree(vec![
            file("SKILL.md", 1),
            SourceEntry {
                path: "l".into(),
                kind: SourceKind::Symlink {
                    target: "SKILL.md".into(),
                },
            },
        ]);
        assert_eq!(codes(&linked, Format::Zip, "d"), vec![StockCode::Symlink]);
        let md = will_not_install(
            &t,
            EntryType::SkillMd,
            Format::TarGz,
            &"\u{1F4DD}".repeat(513),
        );
        assert_eq!(md.len(), 1, "{md:?}");
        assert_eq!(md[0].code, StockCode::DescriptionLength);
    }

    fn exe(path: &str) -> SourceEntry {
        SourceEntry {
            path: path.into(),
            kind: SourceKind::File {
                bytes: b"#!/bin/sh\n".to_vec(),
                executable: true,
            },
        }
    }

    /// A path ustar holds (255 bytes split at a `/`, a last component of 100) is read whole;
    /// one it does not is read as its first 100 bytes, cut back to a whole character.
    #[test]
    fn its_tar_reader_cuts_what_ustar_cannot_hold_to_100_bytes() {
        let held = format!("{}/{}", "d".repeat(154), "f".repeat(100));
        assert_eq!(held.len(), 255);
        assert_eq!(ustar_cut(&held), None);
        assert_eq!(ustar_cut(&"f".repeat(100)), None);
        let long_last = format!("refs/{}", "f".repeat(101));
        assert_eq!(ustar_cut(&long_last), Some(&long_last[..100]));
        // 99 ASCII bytes, then a two-byte character across the 100th byte.
        let wide = format!("refs/{}é{}", "g".repeat(94), "h".repeat(20));
        assert_eq!(ustar_cut(&wide), Some(&wide[..99]));
    }

    fn changes(t: &SourceTree, f: Format) -> Vec<StockChange> {
        installs_otherwise(t, EntryType::Archive, f)
    }

    /// A cut path is where it installs the file (tar.gz only: its zip reader reads whole
    /// names); a cut that lands on another file's path says one overwrites the other; a cut
    /// right after a `.` or `..` component ends at the directory before it.
    #[test]
    fn a_cut_path_is_named_with_where_it_lands() {
        let a = format!("refs/{}-one.md", "n".repeat(100));
        let b = format!("refs/{}-two.md", "n".repeat(100));
        let t = tree(vec![file("SKILL.md", 1), file(&a, 1), file(&b, 1)]);
        let c = changes(&t, Format::TarGz);
        assert_eq!(c.len(), 2, "{c:?}");
        assert_eq!(c[0].code, StockChangeCode::PathCut);
        assert_eq!(c[0].path, a);
        assert_eq!(c[0].installed_as.as_deref(), Some(&a[..100]));
        assert!(
            c[0].detail.contains(&format!("where it installs {b} too")),
            "{c:?}"
        );
        assert!(changes(&t, Format::Zip).is_empty());
        assert!(codes(&t, Format::TarGz, "d").is_empty());

        let alone = tree(vec![file("SKILL.md", 1), file(&a, 1)]);
        let c = changes(&alone, Format::TarGz);
        assert_eq!(c.len(), 1, "{c:?}");
        assert!(!c[0].detail.contains("overwrites"), "{c:?}");

        // Cut right after "/." or "/..": the cut ends at the directory before, a path every
        // reader reads as written.
        for dots in [".", ".."] {
            let hidden = format!("{}/{dots}{}", "d".repeat(99 - dots.len()), "x".repeat(200));
            assert_eq!(ustar_cut(&hidden), Some(&hidden[..99 - dots.len()]));
        }
        assert_eq!(
            ustar_cut(&format!("{}/{}", "d".repeat(99), "x".repeat(200))),
            Some(&*"d".repeat(99))
        );
    }

    /// A cut that lands on a directory another file needs is a skill it fails to install
    /// (tar.gz only), whichever of the two comes first, with whether SKILL.md was written
    /// before; a cut beside that directory, or a whole path, is not.
    #[test]
    fn a_cut_on_a_directory_another_file_needs_is_a_failed_install() {
        let dir = format!("refs/{}", "d".repeat(95));
        assert_eq!(dir.len(), 100);
        let long = format!("{dir}/{}", "e".repeat(120));
        let inside = format!("{dir}/x.md");
        assert_eq!(ustar_cut(&long), Some(dir.as_str()));
        let both = [file(&long, 1), file(&inside, 1)];
        for order in [[0, 1], [1, 0]] {
            let mut e = vec![file("SKILL.md", 1)];
            e.extend(order.map(|i| both[i].clone()));
            let t = tree(e);
            let w = will_not_install(&t, EntryType::Archive, Format::TarGz, "d");
            assert_eq!(w.len(), 1, "{w:?}");
            assert_eq!(w[0].code, StockCode::PathConflict);
            assert!(!w[0].code.says_nothing());
            assert_eq!(w[0].path.as_deref(), Some(long.as_str()));
            assert!(w[0].detail.contains(&format!("as {dir} ")), "{w:?}");
            assert!(
                w[0].detail.contains(&format!("needs for {inside}:")),
                "{w:?}"
            );
            assert!(w[0].detail.ends_with("SKILL.md included"), "{w:?}");
            assert!(codes(&t, Format::Zip, "d").is_empty());
        }
        // SKILL.md after both: written never.
        let upper = format!("A/{}", "d".repeat(97));
        let t = tree(vec![
            file(&format!("{upper}/{}", "e".repeat(120)), 1),
            file(&format!("{upper}/x.md"), 1),
            file("SKILL.md", 1),
        ]);
        let w = will_not_install(&t, EntryType::Archive, Format::TarGz, "d");
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].detail.ends_with("wrote before"), "{w:?}");
        // A cut beside the directory (a sibling whose name shares its first bytes) is no
        // conflict, and neither is a cut alone.
        let t = tree(vec![
            file("SKILL.md", 1),
            file(&long, 1),
            file(&format!("{dir}x/y.md"), 1),
        ]);
        assert!(codes(&t, Format::TarGz, "d").is_empty());
        assert!(
            codes(
                &tree(vec![file("SKILL.md", 1), file(&long, 1)]),
                Format::TarGz,
                "d"
            )
            .is_empty()
        );
        assert!(StockCode::Symlink.says_nothing());
    }

    /// Executable files are counted once per skill, whatever the format; a lone SKILL.md
    /// meets no archive rule.
    #[test]
    fn executable_bits_are_one_warning_with_a_count() {
        let t = tree(vec![
            file("SKILL.md", 1),
            exe("scripts/a.sh"),
            exe("scripts/b.sh"),
            exe("scripts/c.sh"),
        ]);
        for f in [Format::TarGz, Format::Zip] {
            let c = changes(&t, f);
            assert_eq!(c.len(), 1, "{c:?}");
            assert_eq!(c[0].code, StockChangeCode::ExecutableBits);
            assert_eq!((c[0].path.as_str(), c[0].count), ("scripts/a.sh", Some(3)));
            assert!(
                c[0].detail
                    .contains("scripts/a.sh, scripts/b.sh and 1 more"),
                "{c:?}"
            );
        }
        assert!(installs_otherwise(&t, EntryType::SkillMd, Format::TarGz).is_empty());
        assert!(changes(&tree(vec![file("SKILL.md", 1)]), Format::TarGz).is_empty());
    }
}
