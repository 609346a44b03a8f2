//! What the stock `skills` npm CLI (1.7.4, pinned by tests/skills-cli) will not install of a
//! skill publish accepts: its reader is narrower than the draft, and it leaves such a skill out
//! of what it installs without a word. Publish does not refuse these (they are valid under the
//! draft, and a publisher's consumers may not use that CLI); it names them, per skill, so the
//! publisher learns before a user does. Each rule publish warns about, and its threshold, lives
//! here, and only here (docs/publish.md, *Stock consumers*, lists the rest of its differences).

use serde::Serialize;

use super::pack::Format;
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
}
