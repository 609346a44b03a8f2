//! [`LimitOverrides`]: the one shape in which a caller changes [`Limits`], whether from a limits
//! file, the command line or a gRPC request header. Every limit can be overridden, each one is
//! optional, and applying overrides never validates or compares: the caller does that once
//! ([`Limits::validate`], and [`Limits::is_within`] where a request may only tighten).

use serde::{Deserialize, Deserializer, Serialize};

use super::policy::{HardlinkPolicy, Limits};

/// Some of the limits, each replacing the base value when set. Field names are the limits
/// file's keys; a key that is not a limit, or a null value, is refused.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitOverrides {
    #[serde(
        deserialize_with = "present_size",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_artifact_bytes: Option<u64>,
    #[serde(deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    pub max_entries: Option<u64>,
    #[serde(
        deserialize_with = "present_size",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_expanded_bytes: Option<u64>,
    #[serde(
        deserialize_with = "present_size",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_file_bytes: Option<u64>,
    #[serde(deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    pub max_ratio: Option<u64>,
    #[serde(
        deserialize_with = "present_size",
        skip_serializing_if = "Option::is_none"
    )]
    pub ratio_threshold_bytes: Option<u64>,
    #[serde(deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    pub max_path_depth: Option<u64>,
    #[serde(deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    pub max_path_bytes: Option<u64>,
    #[serde(deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    pub max_component_bytes: Option<u64>,
    #[serde(deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    pub zstd_window_log_max: Option<u32>,
    #[serde(deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    pub allow_symlinks: Option<bool>,
    #[serde(deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    pub hardlinks: Option<HardlinkPolicy>,
    #[serde(deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    pub require_skill_md: Option<bool>,
    #[serde(deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    pub accept_wrapper: Option<bool>,
}

/// A key that is present must carry a value: `null` is not "use the default".
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

/// A byte size: a number, or a string with the flags' `K`/`M`/`G` suffixes (`"64M"`).
fn present_size<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Size {
        Bytes(u64),
        Text(String),
    }
    match Size::deserialize(d) {
        Ok(Size::Bytes(n)) => Ok(Some(n)),
        Ok(Size::Text(t)) => super::policy::parse_size(&t)
            .map(Some)
            .map_err(serde::de::Error::custom),
        Err(_) => Err(serde::de::Error::custom(
            "expected a size: a number of bytes, or a string such as \"64M\" (K, M, G suffixes)",
        )),
    }
}

impl LimitOverrides {
    /// `base` with every set field replaced. Not validated: see the module documentation.
    pub fn apply(&self, base: &Limits) -> Limits {
        // Destructured without `..`: a new limit does not compile until it can be overridden.
        let Self {
            max_artifact_bytes,
            max_entries,
            max_expanded_bytes,
            max_file_bytes,
            max_ratio,
            ratio_threshold_bytes,
            max_path_depth,
            max_path_bytes,
            max_component_bytes,
            zstd_window_log_max,
            allow_symlinks,
            hardlinks,
            require_skill_md,
            accept_wrapper,
        } = self.clone();
        let b = base.clone();
        Limits {
            max_artifact_bytes: max_artifact_bytes.unwrap_or(b.max_artifact_bytes),
            max_entries: max_entries.unwrap_or(b.max_entries),
            max_expanded_bytes: max_expanded_bytes.unwrap_or(b.max_expanded_bytes),
            max_file_bytes: max_file_bytes.unwrap_or(b.max_file_bytes),
            max_ratio: max_ratio.unwrap_or(b.max_ratio),
            ratio_threshold_bytes: ratio_threshold_bytes.unwrap_or(b.ratio_threshold_bytes),
            max_path_depth: max_path_depth.unwrap_or(b.max_path_depth),
            max_path_bytes: max_path_bytes.unwrap_or(b.max_path_bytes),
            max_component_bytes: max_component_bytes.unwrap_or(b.max_component_bytes),
            zstd_window_log_max: zstd_window_log_max.unwrap_or(b.zstd_window_log_max),
            allow_symlinks: allow_symlinks.unwrap_or(b.allow_symlinks),
            hardlinks: hardlinks.unwrap_or(b.hardlinks),
            require_skill_md: require_skill_md.unwrap_or(b.require_skill_md),
            accept_wrapper: accept_wrapper.unwrap_or(b.accept_wrapper),
        }
    }

    /// Later overrides win: `self` with every field `later` sets replaced.
    pub fn then(&self, later: &LimitOverrides) -> LimitOverrides {
        let l = later.clone();
        let s = self.clone();
        LimitOverrides {
            max_artifact_bytes: l.max_artifact_bytes.or(s.max_artifact_bytes),
            max_entries: l.max_entries.or(s.max_entries),
            max_expanded_bytes: l.max_expanded_bytes.or(s.max_expanded_bytes),
            max_file_bytes: l.max_file_bytes.or(s.max_file_bytes),
            max_ratio: l.max_ratio.or(s.max_ratio),
            ratio_threshold_bytes: l.ratio_threshold_bytes.or(s.ratio_threshold_bytes),
            max_path_depth: l.max_path_depth.or(s.max_path_depth),
            max_path_bytes: l.max_path_bytes.or(s.max_path_bytes),
            max_component_bytes: l.max_component_bytes.or(s.max_component_bytes),
            zstd_window_log_max: l.zstd_window_log_max.or(s.zstd_window_log_max),
            allow_symlinks: l.allow_symlinks.or(s.allow_symlinks),
            hardlinks: l.hardlinks.or(s.hardlinks),
            require_skill_md: l.require_skill_md.or(s.require_skill_md),
            accept_wrapper: l.accept_wrapper.or(s.accept_wrapper),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_fields_keep_the_base() {
        let base = Limits::default();
        assert_eq!(LimitOverrides::default().apply(&base), base);
        let o = LimitOverrides {
            max_entries: Some(7),
            hardlinks: Some(HardlinkPolicy::CopyInternal),
            ..LimitOverrides::default()
        };
        let l = o.apply(&base);
        assert_eq!(l.max_entries, 7);
        assert_eq!(l.hardlinks, HardlinkPolicy::CopyInternal);
        assert_eq!(l.max_file_bytes, base.max_file_bytes);
    }

    #[test]
    fn file_keys_are_checked() {
        let o: LimitOverrides = toml::from_str("max_entries = 3").unwrap_or_default();
        assert_eq!(o.max_entries, Some(3));
        assert!(toml::from_str::<LimitOverrides>("max_entires = 3").is_err());
        assert!(serde_json::from_str::<LimitOverrides>(r#"{"max_entries": null}"#).is_err());
    }

    #[test]
    fn sizes_in_a_file_take_the_flags_suffixes() {
        let o: LimitOverrides =
            toml::from_str("max_file_bytes = \"64M\"\nmax_artifact_bytes = 1024").expect("toml");
        assert_eq!(o.max_file_bytes, Some(64 * 1024 * 1024));
        assert_eq!(o.max_artifact_bytes, Some(1024));
        let o: LimitOverrides =
            serde_json::from_str(r#"{"max_expanded_bytes": "2G"}"#).expect("json");
        assert_eq!(o.max_expanded_bytes, Some(2 * 1024 * 1024 * 1024));
        let bad = toml::from_str::<LimitOverrides>("max_file_bytes = \"64Q\"");
        assert!(bad.is_err());
        let bad = toml::from_str::<LimitOverrides>("max_file_bytes = -1");
        assert!(bad.is_err());
    }

    #[test]
    fn every_limit_has_a_ceiling() {
        let base = Limits::default();
        for (field, _, max, _) in crate::extract::policy::CEILINGS {
            let set = |v: u64| {
                let text = format!("{field} = {v}");
                let o: LimitOverrides = toml::from_str(&text).expect("toml");
                o.apply(&base).validate()
            };
            assert!(set(max).is_ok(), "{field} at its ceiling {max}");
            match set(max + 1) {
                Err(crate::extract::policy::LimitsError::OutOfRange { field: f, .. }) => {
                    assert_eq!(f, field);
                }
                other => panic!("{field} one past its ceiling: {other:?}"),
            }
        }
        let o = LimitOverrides {
            max_file_bytes: Some(u64::MAX),
            ..LimitOverrides::default()
        };
        assert!(o.apply(&base).validate().is_err());
    }

    #[test]
    fn later_wins() {
        let a = LimitOverrides {
            max_entries: Some(1),
            max_ratio: Some(5),
            ..LimitOverrides::default()
        };
        let b = LimitOverrides {
            max_entries: Some(2),
            ..LimitOverrides::default()
        };
        let c = a.then(&b);
        assert_eq!((c.max_entries, c.max_ratio), (Some(2), Some(5)));
    }
}
