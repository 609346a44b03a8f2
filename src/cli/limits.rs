//! The extraction-limit flags of `extract`: one flag per limit, all thirteen, turned into the
//! library's [`LimitOverrides`] (the same type the limits file and the gRPC header use).

use clap::{Args, ValueEnum};

use skillbox::extract::overrides::LimitOverrides;
use skillbox::extract::policy::{HardlinkPolicy, Limits, parse_size};

use super::exit::Failure;

/// Per-limit overrides, applied over the limits file. Sizes accept K, M, G suffixes (powers of
/// 1024).
#[derive(Args, Debug, Default, Clone)]
pub struct LimitFlags {
    /// Largest artifact in bytes: the extraction limit, checked on the whole file before any
    /// decoding (rejected, artifact_size, exit 3). For fetch, install and update it bounds the
    /// cached copy extracted and the download too: one past it is cut there (the same
    /// rejection, nothing cached), as one past --max-bytes is when that is lower
    /// [default: 256M].
    #[arg(long, value_parser = parse_size, value_name = "BYTES")]
    max_artifact_bytes: Option<u64>,
    /// Most entries [default: 10000].
    #[arg(long, value_name = "N")]
    max_entries: Option<u64>,
    /// Most bytes produced in total [default: 256M].
    #[arg(long, value_parser = parse_size, value_name = "BYTES")]
    max_expanded_bytes: Option<u64>,
    /// Most bytes produced for one file [default: 64M].
    #[arg(long, value_parser = parse_size, value_name = "BYTES")]
    max_file_bytes: Option<u64>,
    /// Output budget: bytes produced may not pass N x the artifact's size, once past the
    /// threshold [default: 200, at most 100000].
    #[arg(long, value_name = "N")]
    max_ratio: Option<u64>,
    /// Bytes produced before the output budget applies [default: 1M, at most 64G].
    #[arg(long, value_parser = parse_size, value_name = "BYTES")]
    ratio_threshold_bytes: Option<u64>,
    /// Most path components [default: 32].
    #[arg(long, value_name = "N")]
    max_path_depth: Option<u64>,
    /// Longest entry name in bytes [default: 1024].
    #[arg(long, value_name = "N")]
    max_path_bytes: Option<u64>,
    /// Longest single path component in bytes, at most 255 [default: 255].
    #[arg(long, value_name = "N")]
    max_component_bytes: Option<u64>,
    /// Largest zstd window as log2 bytes, 10 to 31; bounds decoder memory [default: 27].
    #[arg(long, value_name = "LOG2")]
    zstd_window_log_max: Option<u32>,
    /// Keep relative symlinks that stay inside the package (false: every symlink rejects with
    /// `link_escape`) [default: true].
    #[arg(long, value_name = "BOOL", action = clap::ArgAction::Set)]
    allow_symlinks: Option<bool>,
    /// Hard-link entries: reject them, or copy internal ones [default: reject].
    #[arg(long, value_enum, value_name = "POLICY")]
    hardlinks: Option<HardlinkArg>,
    /// Require SKILL.md at an archive's root (`missing_skill_md`) [default: true].
    #[arg(long, value_name = "BOOL", action = clap::ArgAction::Set)]
    require_skill_md: Option<bool>,
    /// Accept the `.skill` packager's layout: one top-level directory `<name>/SKILL.md` holding
    /// everything, reported without it; its name must be the skill's name and anything outside
    /// it is refused. On by default for a local `*.skill` file; limits-file key `accept_wrapper`.
    #[arg(long)]
    accept_wrapper: bool,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum HardlinkArg {
    /// Reject the artifact (`hardlink`).
    Reject,
    /// A hard link to a file extracted earlier becomes an independent copy.
    CopyInternal,
}

impl LimitFlags {
    /// The overrides these flags set.
    pub fn overrides(&self) -> LimitOverrides {
        // Destructured without `..`: a new flag does not compile until it is passed on.
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
        LimitOverrides {
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
            hardlinks: hardlinks.map(|h| match h {
                HardlinkArg::Reject => HardlinkPolicy::Reject,
                HardlinkArg::CopyInternal => HardlinkPolicy::CopyInternal,
            }),
            require_skill_md,
            accept_wrapper: accept_wrapper.then_some(true),
        }
    }
}

/// Defaults, then the limits file, then the flags; validated once.
pub fn build(file: Option<&std::path::Path>, flags: &LimitFlags) -> Result<Limits, Failure> {
    let base = match file {
        Some(path) => Limits::from_file(path).map_err(|e| Failure::usage(e.to_string()))?,
        None => Limits::default(),
    };
    let limits = flags.overrides().apply(&base);
    limits
        .validate()
        .map_err(|e| Failure::usage(e.to_string()))?;
    Ok(limits)
}
