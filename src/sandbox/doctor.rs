//! `skillbox doctor`: does confinement work on this host, as configured, right now?
//!
//! Nothing here is inferred from version numbers alone: the doctor starts real confined
//! children, reads their /proc status from outside, runs a real extraction through the engine,
//! and checks that a forbidden system call kills and that a path outside staging is refused.
//! It always asks for full enforcement; `--allow-unconfined` does not make it lenient.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::landlock;
use super::probe::{Base, Probe, ProbeResult};
use super::supervise::ProbeEnd;
use super::wire::{Enforcement, RlimitPlan};
use super::{Sandbox, SandboxConfig, StagingDir, seccomp, sys};
use crate::extract::Request;
use crate::extract::detect::ArtifactType;
use crate::extract::policy::Limits;
use crate::reason::Verdict;

/// Why one doctor check failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CheckFailed {
    /// The doctor could not set the check up (its own directories or files).
    #[error("cannot {action} {}: {source}", path.display())]
    Prepare {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The sandbox machinery itself failed (spawn, seal, profile).
    #[error(transparent)]
    Sandbox(#[from] super::SandboxError),
    /// A probe ended some other way than confinement makes it end.
    #[error("unexpected result: {0}")]
    Unexpected(String),
    /// The child's /proc status shows a step missing (the status line is the detail).
    #[error("{0}")]
    NotConfined(String),
    /// The child was never seen confined.
    #[error(transparent)]
    Status(#[from] SeccompWait),
    /// The trivial extraction did not come back as it must.
    #[error("{0}")]
    Extraction(String),
}

/// Why a child was never seen under its own seccomp filter.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SeccompWait {
    #[error("/proc/{pid}/status: {source}")]
    Read { pid: u32, source: std::io::Error },
    #[error("the child never installed its seccomp filter")]
    NeverInstalled { pid: u32, within: Duration },
}

/// Why an embedded profile does not compile for its own architecture.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EmbeddedProfileError {
    #[error("seccompiler does not know architecture {arch}: {message}")]
    UnknownArch { arch: &'static str, message: String },
    #[error(transparent)]
    Compile(#[from] seccomp::CompileError),
}

/// One finding.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub name: &'static str,
    pub ok: bool,
    pub detail: String,
}

/// Everything the doctor found; `ok` is false when confinement would fail.
#[derive(Debug, Clone, Serialize)]
pub struct DoctorReport {
    pub ok: bool,
    pub kernel: String,
    pub arch: &'static str,
    pub euid: u32,
    pub landlock_abi: i32,
    pub landlock_required_abi: i32,
    pub landlock_features: Vec<String>,
    pub seccomp_profile: Option<String>,
    pub seccomp_instructions: Option<usize>,
    /// uid/gid the child switches to (when we run as root).
    pub child_ids: Option<(u32, u32)>,
    pub timeout_ms: u128,
    /// The child's resource limits under the default extraction limits.
    pub limits: Option<RlimitPlan>,
    /// The binary the children were started from (absent when none could be used).
    pub child_binary: Option<super::ChildBinaryInfo>,
    pub checks: Vec<Check>,
    /// The filesystem under the temporary directory, where `extract` stages without `--out`
    /// (absent when it cannot be read); its warning does not make confinement fail.
    pub staging: Option<crate::staging_fs::StagingFs>,
}

const TINY_SKILL: &[u8] =
    b"---\nname: doctor\ndescription: skillbox doctor self-test\n---\nNothing to see.\n";

/// Run every check with `config` (its enforcement is forced to `Required`).
pub fn run(config: SandboxConfig) -> DoctorReport {
    run_checks(config, false)
}

/// [`run`], plus, when `config` execs its children, the `/proc` check on a child forked by a
/// zygote: what `skillbox doctor` runs, so it speaks for `serve`'s default path as well. (The
/// broker itself checks only the path it is configured to use.)
pub fn run_for_both_paths(config: SandboxConfig) -> DoctorReport {
    run_checks(config, true)
}

fn run_checks(mut config: SandboxConfig, both_paths: bool) -> DoctorReport {
    config.enforcement = Enforcement::Required;
    let mut checks = Vec::new();
    let mut push = |name, ok, detail: String| checks.push(Check { name, ok, detail });

    let (abi, hint) = landlock::kernel_abi();
    push(
        "landlock",
        hint.is_none(),
        hint.unwrap_or_else(|| format!("ABI {abi} (need {})", landlock::REQUIRED_ABI)),
    );

    let seccomp_ok = match sys::seccomp_mode() {
        Ok(_) => {
            let actions = std::fs::read_to_string("/proc/sys/kernel/seccomp/actions_avail")
                .unwrap_or_default();
            if actions.contains("kill_process") {
                (true, "filter mode with kill_process".to_owned())
            } else {
                (
                    false,
                    format!(
                        "the kernel does not offer kill_process (actions: {})",
                        actions.trim()
                    ),
                )
            }
        }
        Err(e) => (false, format!("seccomp is not available: {e}")),
    };
    push("seccomp", seccomp_ok.0, seccomp_ok.1);

    let mut report = DoctorReport {
        ok: false,
        kernel: nix::sys::utsname::uname()
            .map(|u| u.release().to_string_lossy().into_owned())
            .unwrap_or_default(),
        arch: std::env::consts::ARCH,
        euid: nix::unistd::geteuid().as_raw(),
        landlock_abi: abi,
        landlock_required_abi: landlock::REQUIRED_ABI,
        landlock_features: landlock::optional_features(abi),
        seccomp_profile: None,
        seccomp_instructions: None,
        child_ids: None,
        timeout_ms: config.timeout.as_millis(),
        limits: None,
        child_binary: None,
        checks: Vec::new(),
        staging: crate::staging_fs::describe(&std::env::temp_dir()).ok(),
    };

    // `serve` forks its children from a zygote by default; when the configuration at hand
    // execs them, the zygote's path is checked too, so doctor speaks for both.
    let zygote_config = (both_paths && config.zygote_max_forks == 0).then(|| SandboxConfig {
        zygote_max_forks: 1,
        ..config.clone()
    });
    match Sandbox::new(config) {
        Err(e @ super::SandboxError::ChildBinary(_)) => push("child binary", false, e.to_string()),
        Err(e) => push("profile", false, e.to_string()),
        Ok(sandbox) => {
            let binary = sandbox.child_binary().clone();
            push("child binary", true, binary.summary());
            report.child_binary = Some(binary);
            let (source, len) = sandbox.profile_summary();
            push("profile", true, format!("{source}: {len} BPF instructions"));
            report.seccomp_profile = Some(source);
            report.seccomp_instructions = Some(len);
            report.child_ids = sandbox.child_ids();
            report.limits = Some(sandbox.rlimit_plan(&Limits::default()));
            match tempfile::Builder::new()
                .prefix("skillbox-doctor-")
                .tempdir()
            {
                Err(e) => push(
                    "children",
                    false,
                    format!("cannot create a temporary directory: {e}"),
                ),
                Ok(tmp) => {
                    for (name, result) in child_checks(&sandbox, tmp.path()) {
                        match result {
                            Ok(detail) => push(name, true, detail),
                            Err(e) => push(name, false, e.to_string()),
                        }
                    }
                    if let Some(zc) = zygote_config {
                        let result = Sandbox::new(zc).map_err(CheckFailed::from).and_then(|z| {
                            let status = status_check(&z, &tmp.path().join("zygote"))?;
                            let stage = second_stage_check(&z, tmp.path())?;
                            Ok(format!("{status}; {stage}"))
                        });
                        match result {
                            Ok(detail) => push(
                                "zygote child",
                                true,
                                format!("forked by a zygote: {detail}"),
                            ),
                            Err(e) => push("zygote child", false, e.to_string()),
                        }
                    }
                }
            }
        }
    }
    report.ok = checks.iter().all(|c| c.ok);
    report.checks = checks;
    report
}

type Finding = (&'static str, Result<String, CheckFailed>);

fn child_checks(sandbox: &Sandbox, tmp: &Path) -> Vec<Finding> {
    let mut out = Vec::new();
    out.push(("confined child", status_check(sandbox, &tmp.join("status"))));
    out.push((
        "extraction",
        extraction_check(sandbox, &tmp.join("extract")),
    ));
    out.push((
        "seccomp enforced",
        probe_check(
            sandbox,
            &tmp.join("exec"),
            Probe::Exec {
                path: "/bin/sh".into(),
            },
            |end| {
                matches!(end, ProbeEnd::Signaled(libc::SIGSYS))
                    .then(|| "execve killed the child with SIGSYS".to_owned())
            },
        ),
    ));
    if sandbox.zygote().is_some() {
        out.push(("seccomp second stage", second_stage_check(sandbox, tmp)));
    }
    // A world-readable file outside staging: only Landlock stands between the child and it.
    let outside = tmp.join("outside.txt");
    let readable = std::fs::write(&outside, b"x").and_then(|()| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(tmp, std::fs::Permissions::from_mode(0o755))?;
        std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o644))
    });
    let landlock_probe = Probe::ReadFile {
        base: Base::Cwd,
        path: outside.display().to_string(),
    };
    let hash_thread_probe = Probe::OnHashThread(Box::new(landlock_probe.clone()));
    out.push((
        "landlock enforced",
        readable
            .map_err(|source| CheckFailed::Prepare {
                action: "prepare the probe file",
                path: outside.clone(),
                source,
            })
            .and_then(|()| {
                probe_check(sandbox, &tmp.join("landlock"), landlock_probe, |end| {
                    matches!(end, ProbeEnd::Reported(ProbeResult::Errno(libc::EACCES))).then(|| {
                        "reading a world-readable file outside staging was refused (EACCES)"
                            .to_owned()
                    })
                })
            }),
    ));
    // The child's second thread (it hashes files) enters the Landlock domain itself and shares
    // the filter: the same walls, probed from it.
    out.push((
        "hashing thread",
        probe_check(
            sandbox,
            &tmp.join("hash-landlock"),
            hash_thread_probe,
            |end| {
                matches!(end, ProbeEnd::Reported(ProbeResult::Errno(libc::EACCES)))
                    .then(|| "from the hashing thread too: read refused (EACCES)".to_owned())
            },
        )
        .and_then(|landlock| {
            let exec = Probe::OnHashThread(Box::new(Probe::Exec {
                path: "/bin/sh".into(),
            }));
            probe_check(sandbox, &tmp.join("hash-exec"), exec, |end| {
                matches!(end, ProbeEnd::Signaled(libc::SIGSYS))
                    .then(|| format!("{landlock}, execve killed the child (SIGSYS)"))
            })
        }),
    ));
    out
}

/// A spare's child ends its confinement with the second seccomp stage, which takes back the
/// calls the first stage let it make before its order. Probed with the Landlock ABI query, one
/// of those no profile may allow (`recvmsg`, which a replacement profile may allow, would fail
/// this check for a profile that is fine).
fn second_stage_check(sandbox: &Sandbox, tmp: &Path) -> Result<String, CheckFailed> {
    let probe = Probe::Syscall {
        nr: libc::SYS_landlock_create_ruleset,
        args: [0, 0, 1], // LANDLOCK_CREATE_RULESET_VERSION: harmless were it allowed
    };
    probe_check(sandbox, &tmp.join("second-stage"), probe, |end| {
        matches!(end, ProbeEnd::Signaled(libc::SIGSYS)).then(|| {
            "landlock_create_ruleset, allowed only before the order, killed the child with SIGSYS"
                .to_owned()
        })
    })
}

fn prepare(action: &'static str, dir: &Path) -> impl FnOnce(std::io::Error) -> CheckFailed {
    let path = dir.to_owned();
    move |source| CheckFailed::Prepare {
        action,
        path,
        source,
    }
}

fn fresh(dir: &Path, sandbox: &Sandbox) -> Result<StagingDir, CheckFailed> {
    std::fs::create_dir(dir).map_err(prepare("create", dir))?;
    StagingDir::prepare(dir, sandbox.child_ids()).map_err(prepare("prepare", dir))
}

fn probe_check(
    sandbox: &Sandbox,
    dir: &Path,
    probe: Probe,
    judge: impl Fn(&ProbeEnd) -> Option<String>,
) -> Result<String, CheckFailed> {
    let staging = fresh(dir, sandbox)?;
    let end = sandbox.probe(probe, &staging);
    let _ = staging.discard();
    let end = end?;
    judge(&end).ok_or_else(|| CheckFailed::Unexpected(format!("{end:?}")))
}

/// A real, trivial extraction through the engine.
fn extraction_check(sandbox: &Sandbox, dir: &Path) -> Result<String, CheckFailed> {
    std::fs::create_dir(dir).map_err(prepare("create", dir))?;
    let mut req = Request::new(ArtifactType::SkillMd, Limits::default());
    req.file_name = Some("SKILL.md".into());
    req.expected_digest = Some(crate::digest::Sha256Digest::of_bytes(TINY_SKILL));
    let started = Instant::now();
    let confined = sandbox.run_job(
        super::Job::Extract(req.clone()),
        TINY_SKILL,
        dir,
        &req.limits,
        |_| {},
    )?;
    let took = started.elapsed();
    let staged = std::fs::read(dir.join("SKILL.md")).unwrap_or_default();
    let _ = std::fs::remove_file(dir.join("SKILL.md"));
    let _ = std::fs::remove_dir(dir);
    match (&confined.outcome.verdict, staged == TINY_SKILL) {
        (Verdict::Accepted, true) => Ok(format!(
            "a SKILL.md was staged and re-checked in {:.2} ms",
            took.as_secs_f64() * 1e3
        )),
        (Verdict::Accepted, false) => Err(CheckFailed::Extraction(
            "accepted, but the staged file differs".into(),
        )),
        (Verdict::Rejected, _) => Err(CheckFailed::Extraction(format!(
            "rejected: {}",
            confined
                .outcome
                .reason
                .map(|r| format!("{}: {}", r.code, r.detail))
                .unwrap_or_default()
        ))),
    }
}

/// Start a spinning confined child and read its /proc status from outside.
fn status_check(sandbox: &Sandbox, dir: &Path) -> Result<String, CheckFailed> {
    let staging = fresh(dir, sandbox)?;
    let result = (|| {
        let sealed = super::SealedArtifact::copy_from(&b"x"[..], 1)
            .map_err(|e| CheckFailed::Sandbox(super::SandboxError::Artifact(e)))?;
        let running = sandbox.spawn(
            super::Job::Probe(Probe::Spin),
            &sealed,
            &staging,
            &Limits::default(),
        )?;
        let status = wait_for_seccomp(
            running.pid(),
            sandbox.seccomp_stages(),
            Duration::from_secs(5),
        );
        let _ = running.kill();
        let _ = running.wait(Duration::from_secs(5), 1024);
        let status = status?;
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| {
                    l.strip_prefix(name)
                        .map(|v| v.split_whitespace().collect::<Vec<_>>().join(" "))
                })
                .unwrap_or_default()
        };
        let (nnp, seccomp, cap_eff, cap_prm, uid) = (
            field("NoNewPrivs:"),
            field("Seccomp:"),
            field("CapEff:"),
            field("CapPrm:"),
            field("Uid:"),
        );
        let zero = "0000000000000000";
        let uid_ok = sandbox
            .child_ids()
            .is_none_or(|(u, _)| uid.split(' ').all(|x| x == u.to_string()));
        let summary = format!(
            "NoNewPrivs {nnp}, Seccomp {seccomp}, CapEff {cap_eff}, CapPrm {cap_prm}, Uid {uid}"
        );
        if nnp == "1" && seccomp == "2" && cap_eff == zero && cap_prm == zero && uid_ok {
            Ok(summary)
        } else {
            Err(CheckFailed::NotConfined(summary))
        }
    })();
    let _ = staging.discard();
    result
}

/// Poll /proc/PID/status until the child has installed its whole filter, `stages` filters more
/// than this process holds ([`Sandbox::seccomp_stages`]: a zygote's spare installs its profile
/// in two, the first before its order), so confinement is complete. Waiting for the first
/// alone would read a spare between its stages, before its Landlock step and last filter.
pub fn wait_for_seccomp(pid: u32, stages: u64, within: Duration) -> Result<String, SeccompWait> {
    // Filters are inherited: under a container's seccomp policy the child shows `Seccomp: 2`
    // before it has confined itself. Its own filters are the ones beyond ours.
    let filters = |status: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix("Seccomp_filters:"))
            .and_then(|n| n.trim().parse::<u64>().ok())
    };
    let ours = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| filters(&s))
        .unwrap_or(0);
    let deadline = Instant::now() + within;
    loop {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .map_err(|source| SeccompWait::Read { pid, source })?;
        let mode2 = status
            .lines()
            .any(|l| l.starts_with("Seccomp:") && l.trim_end().ends_with('2'));
        // Kernels before 5.9 lack the count; there, mode 2 is all there is to go by.
        if mode2 && filters(&status).is_none_or(|n| n >= ours + stages) {
            return Ok(status);
        }
        if Instant::now() > deadline {
            return Err(SeccompWait::NeverInstalled { pid, within });
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

impl DoctorReport {
    /// Human-readable form.
    pub fn render(&self) -> String {
        let mut s = format!(
            "skillbox doctor: {}\n  kernel {} ({}), euid {}\n  landlock ABI {} (need {}), features: {}\n",
            if self.ok {
                "confinement works"
            } else {
                "CONFINEMENT WOULD FAIL"
            },
            self.kernel,
            self.arch,
            self.euid,
            self.landlock_abi,
            self.landlock_required_abi,
            if self.landlock_features.is_empty() {
                "none".to_owned()
            } else {
                self.landlock_features.join(", ")
            },
        );
        if let Some((u, g)) = self.child_ids {
            s.push_str(&format!("  child runs as uid {u} gid {g}\n"));
        }
        if let Some(l) = &self.limits {
            s.push_str(&format!(
                "  child limits: address space {} MiB, cpu {} s, file size {} MiB, open files {}; timeout {} ms\n",
                l.address_space_bytes >> 20,
                l.cpu_seconds,
                l.file_size_bytes >> 20,
                l.open_files,
                self.timeout_ms
            ));
        }
        for c in &self.checks {
            s.push_str(&format!(
                "  [{}] {}: {}\n",
                if c.ok { " ok " } else { "FAIL" },
                c.name,
                c.detail
            ));
        }
        if let Some(st) = &self.staging {
            match &st.warning {
                Some(w) => s.push_str(&format!("  [warn] staging under {}: {w}\n", st.path)),
                None => s.push_str(&format!(
                    "  [ ok ] staging under {}: {}\n",
                    st.path,
                    st.filesystem.label()
                )),
            }
        }
        s
    }
}

/// Compile every embedded profile for its own architecture (used by tests and CI).
pub fn compile_embedded() -> Vec<(&'static str, Result<usize, EmbeddedProfileError>)> {
    seccomp::EMBEDDED
        .iter()
        .map(|(arch, text)| {
            let r = seccompiler::TargetArch::try_from(*arch)
                .map_err(|e| EmbeddedProfileError::UnknownArch {
                    arch,
                    message: e.to_string(),
                })
                .and_then(|a| Ok(seccomp::compile(text, a)?))
                .map(|p| p.len());
            (*arch, r)
        })
        .collect()
}
