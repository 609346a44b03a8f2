//! `Limits`: every extraction limit, with its default, defined in exactly one place.
//!
//! A `Limits` value is built once at the boundary (defaults, then a limits file, then flags)
//! and is immutable afterwards. Limits can be tightened per request but never loosened beyond
//! what the operator configured (see [`Limits::is_within`]).

use serde::{Deserialize, Serialize};

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;
const GIB: u64 = 1024 * MIB;

/// What to do with hard-link entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum HardlinkPolicy {
    /// Reject the artifact (`hardlink`).
    #[default]
    Reject,
    /// A hard link to a regular file extracted earlier in the same archive becomes an
    /// independent copy; any other hard link is still rejected.
    CopyInternal,
}

/// Extraction limits. Field names are the keys of the limits file (TOML or JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Largest artifact accepted, in bytes, before any decoding (`artifact_size`).
    pub max_artifact_bytes: u64,
    /// Most archive members (`entry_count`): headers that describe a file, directory or link.
    /// Tar extension headers (PAX, GNU long names) belong to the member they precede. Parent
    /// directories the archive never lists (implicit ones) are not members; they are counted
    /// apart and bounded by this same number, so a tree never holds more than twice it.
    pub max_entries: u64,
    /// Most bytes produced in total (`expanded_size`).
    pub max_expanded_bytes: u64,
    /// Most bytes produced for one file (`file_size`).
    pub max_file_bytes: u64,
    /// Expansion budget (`ratio`): bytes produced may not pass `max_ratio` x the artifact's
    /// size. The size is known before decoding starts, so the budget is fixed up front and the
    /// verdict never depends on member order ...
    pub max_ratio: u64,
    /// ... enforced once this many bytes have been produced (small packages compress well).
    pub ratio_threshold_bytes: u64,
    /// Most path components (`path_depth`).
    pub max_path_depth: u64,
    /// Longest entry name in bytes (`path_length`).
    pub max_path_bytes: u64,
    /// Longest single path component in bytes (`path_length`).
    pub max_component_bytes: u64,
    /// Largest zstd window accepted, as log2 bytes (bounds decoder memory; `resource_limit`
    /// past it). 27 (128 MiB) is what `zstd --long` and `--ultra -22` write and what the zstd
    /// tool itself decodes by default.
    pub zstd_window_log_max: u32,
    /// Whether relative symlinks that stay inside the package are kept (else `link_escape`).
    pub allow_symlinks: bool,
    /// Hard-link entries: reject, or copy internal ones.
    pub hardlinks: HardlinkPolicy,
    /// Whether an archive must have `SKILL.md` at its root (`missing_skill_md`).
    pub require_skill_md: bool,
    /// Accept the `.skill` packager's layout: one top-level directory `<name>/SKILL.md` that
    /// holds everything, reported without it (its name must be the skill's name). Off by
    /// default: an index artifact's root is the skill directory.
    pub accept_wrapper: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_artifact_bytes: 256 * MIB,
            max_entries: 10_000,
            max_expanded_bytes: 256 * MIB,
            max_file_bytes: 64 * MIB,
            max_ratio: 200,
            ratio_threshold_bytes: MIB,
            max_path_depth: 32,
            max_path_bytes: 1024,
            max_component_bytes: 255,
            zstd_window_log_max: 27,
            allow_symlinks: true,
            hardlinks: HardlinkPolicy::Reject,
            require_skill_md: true,
            accept_wrapper: false,
        }
    }
}

/// A limits file or override that cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LimitsError {
    #[error("cannot read limits file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("limits file {path}: {message}")]
    Parse { path: String, message: String },
    #[error("limits file {path}: unknown extension (use .toml or .json)")]
    UnknownFormat { path: String },
    #[error("limit `{field}` = {value} is out of range ({rule})")]
    OutOfRange {
        field: &'static str,
        value: u64,
        rule: &'static str,
    },
}

/// A byte count on the command line or in a `SKILLBOX_*` variable that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SizeError {
    #[error("unknown size suffix {suffix:?} (use K, M or G)")]
    UnknownSuffix { suffix: String },
    #[error("{input:?} is not a size")]
    NotANumber { input: String },
    #[error("{input:?} is too large")]
    TooLarge { input: String },
}

/// A byte count: decimal digits, optionally followed by a K, M or G suffix (powers of 1024;
/// `KiB`/`KB` and the like mean the same, in any case). Surrounding whitespace is ignored.
/// Every size flag (`extract`, `fetch`, `serve`) takes this syntax.
pub fn parse_size(s: &str) -> Result<u64, SizeError> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, suffix) = t.split_at(split);
    let unit = match suffix.to_ascii_lowercase().as_str() {
        "" => 1,
        "k" | "kib" | "kb" => KIB,
        "m" | "mib" | "mb" => MIB,
        "g" | "gib" | "gb" => GIB,
        other => {
            return Err(SizeError::UnknownSuffix {
                suffix: other.to_owned(),
            });
        }
    };
    let n: u64 = digits.parse().map_err(|_| SizeError::NotANumber {
        input: s.to_owned(),
    })?;
    n.checked_mul(unit).ok_or_else(|| SizeError::TooLarge {
        input: s.to_owned(),
    })
}

/// A limit's name, how to read it, its largest accepted value, and the rule as errors state it.
pub type Ceiling = (&'static str, fn(&Limits) -> u64, u64, &'static str);

/// The largest value each numeric limit accepts.
pub const CEILINGS: [Ceiling; 8] = [
    (
        "max_artifact_bytes",
        |l| l.max_artifact_bytes,
        4 * GIB,
        "at most 4G",
    ),
    (
        "max_entries",
        |l| l.max_entries,
        1_000_000,
        "at most 1000000",
    ),
    (
        "max_expanded_bytes",
        |l| l.max_expanded_bytes,
        64 * GIB,
        "at most 64G",
    ),
    (
        "max_file_bytes",
        |l| l.max_file_bytes,
        16 * GIB,
        "at most 16G",
    ),
    ("max_ratio", |l| l.max_ratio, 100_000, "at most 100000"),
    (
        "ratio_threshold_bytes",
        |l| l.ratio_threshold_bytes,
        64 * GIB,
        "at most 64G",
    ),
    ("max_path_depth", |l| l.max_path_depth, 2048, "at most 2048"),
    (
        "max_path_bytes",
        |l| l.max_path_bytes,
        4095,
        "at most 4095, below the Linux PATH_MAX",
    ),
];

impl Limits {
    /// Parse a limits file: `.toml` or `.json`, keys as the field names, unknown keys refused.
    /// Keys not present keep their defaults.
    pub fn from_file(path: &std::path::Path) -> Result<Self, LimitsError> {
        let shown = path.display().to_string();
        // Bounded read: a limits file is tiny; refuse anything that is not.
        let meta = std::fs::metadata(path).map_err(|source| LimitsError::Read {
            path: shown.clone(),
            source,
        })?;
        if meta.len() > 64 * KIB {
            return Err(LimitsError::Parse {
                path: shown,
                message: "larger than 64 KiB".into(),
            });
        }
        let text = std::fs::read_to_string(path).map_err(|source| LimitsError::Read {
            path: shown.clone(),
            source,
        })?;
        let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
        let overrides: super::overrides::LimitOverrides = match ext {
            "toml" => toml::from_str(&text).map_err(|e| LimitsError::Parse {
                path: shown.clone(),
                message: e.to_string(),
            })?,
            "json" => serde_json::from_str(&text).map_err(|e| LimitsError::Parse {
                path: shown.clone(),
                message: e.to_string(),
            })?,
            _ => return Err(LimitsError::UnknownFormat { path: shown }),
        };
        let limits = overrides.apply(&Limits::default());
        limits.validate()?;
        Ok(limits)
    }

    /// Reject values that would make the engine meaningless or dangerous.
    ///
    /// Each numeric limit must be at least 1 and at most its ceiling in [`CEILINGS`].
    pub fn validate(&self) -> Result<(), LimitsError> {
        let positive: [(&'static str, u64); 8] = [
            ("max_artifact_bytes", self.max_artifact_bytes),
            ("max_entries", self.max_entries),
            ("max_expanded_bytes", self.max_expanded_bytes),
            ("max_file_bytes", self.max_file_bytes),
            ("max_ratio", self.max_ratio),
            ("max_path_depth", self.max_path_depth),
            ("max_path_bytes", self.max_path_bytes),
            ("max_component_bytes", self.max_component_bytes),
        ];
        for (field, value) in positive {
            if value == 0 {
                return Err(LimitsError::OutOfRange {
                    field,
                    value,
                    rule: "must be at least 1",
                });
            }
        }
        // Every limit has a ceiling: a limit is a bound, and a value past these is a typo or an
        // attempt to switch the bound off (a u64::MAX `max_file_bytes` would make the child's
        // RLIMIT_FSIZE unlimited). The ceilings are documented in docs/limits.md.
        for (field, value, max, rule) in
            CEILINGS.map(|(f, get, max, rule)| (f, get(self), max, rule))
        {
            if value > max {
                return Err(LimitsError::OutOfRange { field, value, rule });
            }
        }
        if self.max_component_bytes > 255 {
            return Err(LimitsError::OutOfRange {
                field: "max_component_bytes",
                value: self.max_component_bytes,
                rule: "at most 255, the Linux NAME_MAX",
            });
        }
        if self.max_path_bytes > 4095 {
            return Err(LimitsError::OutOfRange {
                field: "max_path_bytes",
                value: self.max_path_bytes,
                rule: "at most 4095, below the Linux PATH_MAX",
            });
        }
        if !(10..=31).contains(&self.zstd_window_log_max) {
            return Err(LimitsError::OutOfRange {
                field: "zstd_window_log_max",
                value: u64::from(self.zstd_window_log_max),
                rule: "between 10 and 31",
            });
        }
        Ok(())
    }

    /// True when every limit in `self` is at least as strict as in `outer`. A request may
    /// tighten the server's limits, never loosen them.
    pub fn is_within(&self, outer: &Limits) -> Result<(), &'static str> {
        let pairs: [(&'static str, u64, u64); 10] = [
            (
                "max_artifact_bytes",
                self.max_artifact_bytes,
                outer.max_artifact_bytes,
            ),
            ("max_entries", self.max_entries, outer.max_entries),
            (
                "max_expanded_bytes",
                self.max_expanded_bytes,
                outer.max_expanded_bytes,
            ),
            ("max_file_bytes", self.max_file_bytes, outer.max_file_bytes),
            ("max_ratio", self.max_ratio, outer.max_ratio),
            ("max_path_depth", self.max_path_depth, outer.max_path_depth),
            ("max_path_bytes", self.max_path_bytes, outer.max_path_bytes),
            (
                "max_component_bytes",
                self.max_component_bytes,
                outer.max_component_bytes,
            ),
            (
                "zstd_window_log_max",
                u64::from(self.zstd_window_log_max),
                u64::from(outer.zstd_window_log_max),
            ),
            // A larger threshold postpones the ratio check, so it is looser.
            (
                "ratio_threshold_bytes",
                self.ratio_threshold_bytes,
                outer.ratio_threshold_bytes,
            ),
        ];
        for (field, inner, outer) in pairs {
            if inner > outer {
                return Err(field);
            }
        }
        if self.accept_wrapper && !outer.accept_wrapper {
            return Err("accept_wrapper");
        }
        if self.allow_symlinks && !outer.allow_symlinks {
            return Err("allow_symlinks");
        }
        if self.hardlinks == HardlinkPolicy::CopyInternal
            && outer.hardlinks == HardlinkPolicy::Reject
        {
            return Err("hardlinks");
        }
        if !self.require_skill_md && outer.require_skill_md {
            return Err("require_skill_md");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_the_design() {
        let l = Limits::default();
        assert_eq!(l.max_entries, 10_000);
        assert_eq!(l.max_expanded_bytes, 256 * 1024 * 1024);
        assert_eq!(l.max_file_bytes, 64 * 1024 * 1024);
        assert_eq!((l.max_ratio, l.ratio_threshold_bytes), (200, 1024 * 1024));
        assert_eq!(l.zstd_window_log_max, 27);
        assert_eq!(
            (l.max_path_depth, l.max_path_bytes, l.max_component_bytes),
            (32, 1024, 255)
        );
        assert!(l.validate().is_ok());
    }

    #[test]
    fn partial_files_keep_defaults_and_unknown_keys_fail() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let toml_path = dir.path().join("l.toml");
        std::fs::write(&toml_path, "max_entries = 5\n").unwrap_or_else(|e| panic!("{e}"));
        let l = Limits::from_file(&toml_path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(l.max_entries, 5);
        assert_eq!(l.max_file_bytes, Limits::default().max_file_bytes);

        let json_path = dir.path().join("l.json");
        std::fs::write(&json_path, r#"{"max_entrys": 5}"#).unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(
            Limits::from_file(&json_path),
            Err(LimitsError::Parse { .. })
        ));
    }

    #[test]
    fn sizes_take_every_unit_spelling() {
        for (text, want) in [
            ("0", 0),
            ("4096", 4096),
            ("64K", 64 << 10),
            ("64k", 64 << 10),
            ("64KiB", 64 << 10),
            ("64kb", 64 << 10),
            ("1M", 1 << 20),
            ("64MiB", 64 << 20),
            ("3mb", 3 << 20),
            ("1G", 1 << 30),
            ("2GiB", 2 << 30),
            ("1gb", 1 << 30),
            (" 7M\n", 7 << 20),
        ] {
            assert_eq!(parse_size(text), Ok(want), "{text:?}");
        }
    }

    #[test]
    fn sizes_at_and_past_u64() {
        assert_eq!(parse_size("18446744073709551615"), Ok(u64::MAX));
        let too_many_digits = "18446744073709551616";
        assert_eq!(
            parse_size(too_many_digits),
            Err(SizeError::NotANumber {
                input: too_many_digits.into()
            })
        );
        // 2^34 GiB = 2^64 bytes: the multiplication overflows, one less does not.
        assert_eq!(parse_size("17179869183G"), Ok(17_179_869_183 << 30));
        let e = parse_size("17179869184G");
        assert_eq!(
            e,
            Err(SizeError::TooLarge {
                input: "17179869184G".into()
            })
        );
        assert_eq!(
            e.map_err(|e| e.to_string()),
            Err("\"17179869184G\" is too large".to_owned())
        );
    }

    #[test]
    fn garbage_and_empty_sizes_are_refused_with_their_message() {
        let message = |s: &str| {
            parse_size(s)
                .map_err(|e| e.to_string())
                .err()
                .unwrap_or_default()
        };
        assert_eq!(message("1T"), "unknown size suffix \"t\" (use K, M or G)");
        assert_eq!(
            message("1.5G"),
            "unknown size suffix \".5g\" (use K, M or G)"
        );
        assert_eq!(message("1 G"), "unknown size suffix \" g\" (use K, M or G)");
        assert_eq!(message("-1"), "unknown size suffix \"-1\" (use K, M or G)");
        assert_eq!(
            message("ten"),
            "unknown size suffix \"ten\" (use K, M or G)"
        );
        assert_eq!(message("K"), "\"K\" is not a size");
        assert_eq!(message(""), "\"\" is not a size");
        assert_eq!(message("  "), "\"  \" is not a size");
    }

    #[test]
    fn tighter_is_within_looser_is_not() {
        let outer = Limits::default();
        let tighter = Limits {
            max_entries: 10,
            ..Limits::default()
        };
        assert!(tighter.is_within(&outer).is_ok());
        let looser = Limits {
            max_file_bytes: outer.max_file_bytes + 1,
            ..Limits::default()
        };
        assert_eq!(looser.is_within(&outer), Err("max_file_bytes"));
    }
}
