//! The child's Landlock domain: it may read, write, create and remove only beneath the staging
//! directory fd, and touch no other path at all (no read, no execute, no device ioctl).
//!
//! Rights are split in two. The filesystem rights of ABI 3 (everything through `truncate`) are
//! what our policy is written against: they are a hard requirement, and a kernel that cannot
//! enforce them fails the child closed (`sandbox_unavailable`). Newer features (device ioctls,
//! ABI 5; TCP bind/connect, ABI 4; signal and abstract-socket scoping, ABI 6) are taken when the
//! kernel offers them and reported; seccomp already denies sockets and signals to others, so
//! they are a second wall rather than the only one.
//!
//! This module never grants anything outside the staging fd and never downgrades a hard
//! requirement unless the operator asked to run unconfined.

use std::os::fd::BorrowedFd;

use ::landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, PathBeneath, Ruleset,
    RulesetAttr, RulesetCreatedAttr, RulesetError, RulesetStatus, Scope, make_bitflags,
};

use super::sys;
use super::wire::{Enforcement, LandlockStatus};

/// Lowest ABI whose filesystem rights we require (truncate arrived in ABI 3, Linux 6.2).
pub const REQUIRED_ABI: i32 = 3;
/// The newest ABI this code was written and tested against; newer kernels are used at this level.
const TESTED_ABI: ABI = ABI::V7;

/// What the staging directory grants. Everything else handled is denied everywhere.
fn staging_rights() -> BitFlags<AccessFs> {
    make_bitflags!(AccessFs::{
        ReadFile | ReadDir | WriteFile | MakeDir | MakeReg | MakeSym | RemoveDir | RemoveFile | Truncate
    })
}

/// The kernel's Landlock ABI (0 when absent) and a fix-it hint when it is below what we need.
pub fn kernel_abi() -> (i32, Option<String>) {
    match sys::landlock_abi() {
        Ok(abi) if abi >= REQUIRED_ABI => (abi, None),
        Ok(abi) => (
            abi,
            Some(format!(
                "the kernel offers Landlock ABI {abi}; skillbox needs ABI {REQUIRED_ABI} (Linux 6.2) or newer"
            )),
        ),
        Err(errno) if errno == libc::EOPNOTSUPP => (
            0,
            Some("Landlock is built into this kernel but disabled: add `landlock` to the `lsm=` boot parameter".into()),
        ),
        Err(_) => (
            0,
            Some("this kernel has no Landlock (CONFIG_SECURITY_LANDLOCK), or a container seccomp profile hides it".into()),
        ),
    }
}

/// Optional features in force for a kernel at `abi`, by name.
pub fn optional_features(abi: i32) -> Vec<String> {
    let mut out = Vec::new();
    if abi >= 4 {
        out.push("net_tcp".to_owned());
    }
    if abi >= 5 {
        out.push("ioctl_dev".to_owned());
    }
    if abi >= 6 {
        out.push("scope_signal".to_owned());
        out.push("scope_abstract_unix_socket".to_owned());
    }
    out
}

/// The result of [`restrict_to`].
pub struct Applied {
    pub abi: i32,
    pub status: LandlockStatus,
    pub features: Vec<String>,
}

/// Why Landlock could not be applied as required.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LandlockError {
    #[error("Landlock unavailable: {hint}")]
    Unavailable { hint: String },
    #[error("Landlock ruleset: {0}")]
    Ruleset(#[from] RulesetError),
    #[error("Landlock ruleset not enforced by this kernel")]
    NotEnforced,
}

/// Restrict the calling process (single-threaded) to the staging directory. Irreversible.
pub fn restrict_to(
    staging: BorrowedFd<'_>,
    enforcement: Enforcement,
) -> Result<Applied, LandlockError> {
    let (abi, hint) = kernel_abi();
    let required_level = match enforcement {
        Enforcement::Required => {
            if let Some(hint) = hint {
                return Err(LandlockError::Unavailable { hint });
            }
            CompatLevel::HardRequirement
        }
        Enforcement::AllowUnconfined => CompatLevel::BestEffort,
    };
    let required = AccessFs::from_all(ABI::V3);
    let status = Ruleset::default()
        .set_compatibility(required_level)
        .handle_access(required)?
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(TESTED_ABI) & !required)?
        .handle_access(AccessNet::from_all(TESTED_ABI))?
        .scope(Scope::from_all(TESTED_ABI))?
        .create()?
        .add_rule(PathBeneath::new(staging, staging_rights()))?
        .restrict_self()?;
    let status = match status.ruleset {
        // Partial means an optional feature is missing: the hard requirement above already
        // guaranteed the required rights (or the operator allowed running unconfined).
        RulesetStatus::FullyEnforced => LandlockStatus::FullyEnforced,
        RulesetStatus::PartiallyEnforced => LandlockStatus::PartiallyEnforced,
        RulesetStatus::NotEnforced => match enforcement {
            Enforcement::Required => return Err(LandlockError::NotEnforced),
            Enforcement::AllowUnconfined => LandlockStatus::NotEnforced,
        },
    };
    let features = if status == LandlockStatus::NotEnforced {
        Vec::new()
    } else {
        optional_features(abi)
    };
    Ok(Applied {
        abi,
        status,
        features,
    })
}
