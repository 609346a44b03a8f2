//! Resource limits the child sets on itself: the kernel's backstop behind the engine's own
//! counting. The engine stops a bomb by counting produced bytes; these limits stop a child that
//! no longer counts (a bug, or code an artifact managed to run) with a signal the parent maps
//! to `resource_limit`.
//!
//! This module computes the plan (parent side) and applies it (child side); it never raises a
//! limit above what the process already has.

use std::io;
use std::time::Duration;

use nix::sys::resource::{Resource, getrlimit, setrlimit};

use super::wire::RlimitPlan;
use crate::extract::policy::Limits;

/// Room above `max_file_bytes` before RLIMIT_FSIZE fires: the engine checks its own limit
/// first, so only a child that stopped checking ever reaches the kernel's.
const FILE_SIZE_SLACK: u64 = 1024 * 1024;
/// Default address-space ceiling. The engine streams; its largest buffers are a zstd window
/// (at most 2^31 by policy, 128 MiB by default: room for it is why this is 1 GiB) and the
/// inventory.
pub const DEFAULT_ADDRESS_SPACE_BYTES: u64 = 1024 * 1024 * 1024;
/// Open files: fds 0-4, plus the engine's open directory chain (at most ~35), plus headroom.
const OPEN_FILES: u64 = 64;

/// The plan for one request: file size from the extraction limits, CPU from the wall-clock
/// timeout (so a spinning child is stopped by whichever comes first).
pub fn plan(limits: &Limits, timeout: Duration, address_space_bytes: u64) -> RlimitPlan {
    let cpu = timeout
        .as_secs()
        .saturating_add(u64::from(timeout.subsec_nanos() > 0))
        .max(1);
    RlimitPlan {
        address_space_bytes,
        cpu_seconds: cpu,
        file_size_bytes: limits.max_file_bytes.saturating_add(FILE_SIZE_SLACK),
        open_files: OPEN_FILES,
    }
}

/// Apply `plan` to the calling process. Returns the name of the limit that failed.
pub fn apply(plan: &RlimitPlan) -> Result<(), (&'static str, io::Error)> {
    let set = |name: &'static str,
               res: Resource,
               soft: u64,
               hard: u64|
     -> Result<(), (&'static str, io::Error)> {
        // Never try to raise: an operator's tighter limit stays in force.
        let (_, cur_hard) = getrlimit(res).map_err(|e| (name, io::Error::from(e)))?;
        let hard = hard.min(cur_hard);
        let soft = soft.min(hard);
        setrlimit(res, soft, hard).map_err(|e| (name, io::Error::from(e)))
    };
    set("RLIMIT_CORE", Resource::RLIMIT_CORE, 0, 0)?;
    set(
        "RLIMIT_NOFILE",
        Resource::RLIMIT_NOFILE,
        plan.open_files,
        plan.open_files,
    )?;
    set(
        "RLIMIT_FSIZE",
        Resource::RLIMIT_FSIZE,
        plan.file_size_bytes,
        plan.file_size_bytes,
    )?;
    // SIGXCPU at the soft limit, SIGKILL one second later if it is ignored.
    set(
        "RLIMIT_CPU",
        Resource::RLIMIT_CPU,
        plan.cpu_seconds,
        plan.cpu_seconds.saturating_add(1),
    )?;
    set(
        "RLIMIT_AS",
        Resource::RLIMIT_AS,
        plan.address_space_bytes,
        plan.address_space_bytes,
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_follows_the_limits_and_the_timeout() {
        let limits = Limits {
            max_file_bytes: 10,
            ..Limits::default()
        };
        let p = plan(&limits, Duration::from_millis(2500), 1 << 30);
        assert_eq!(p.file_size_bytes, 10 + FILE_SIZE_SLACK);
        assert_eq!(p.cpu_seconds, 3);
        assert_eq!(plan(&limits, Duration::ZERO, 1).cpu_seconds, 1);
        assert!(p.open_files >= 64);
    }
}
