//! The child's seccomp allow-list: loaded from `sandbox-profiles/<arch>.json` (embedded at build
//! time, replaceable by a path), checked against our rules for a profile, compiled to BPF once in
//! the parent, and installed by the child as the last confinement step.
//!
//! A profile is data, but not arbitrary data: [`check_profile`] refuses one whose default action
//! is not `kill_process`, whose match action is not `allow`, that lacks a `comment` on any rule,
//! that gives a call rules both with and without arguments (seccompiler would keep only the
//! former), or that allows a call from [`NEVER_ALLOWED`]. A replacement profile can tighten the
//! list, not reopen the walls the escape tests guard.

use std::io;
use std::path::Path;

use seccompiler::{BpfProgram, TargetArch};
use serde_json::Value;

use super::bpf_layout;

/// The filter's name inside a profile file.
pub const FILTER_NAME: &str = "skillbox_child";

/// Profiles compiled into the binary, by architecture.
pub const EMBEDDED: &[(&str, &str)] = &[
    ("x86_64", include_str!("../../sandbox-profiles/x86_64.json")),
    (
        "aarch64",
        include_str!("../../sandbox-profiles/aarch64.json"),
    ),
];

/// Calls no profile may allow, whatever its arguments: process creation, exec, networking,
/// tracing, device nodes, ownership changes, mounts and namespaces, credentials, signals to
/// others, path-based metadata changes that Landlock does not cover (docs/sandbox.md, trap 2), and
/// `openat2`, whose flags seccomp cannot see.
pub const NEVER_ALLOWED: &[&str] = &[
    "execve",
    "execveat",
    "fork",
    "vfork",
    "clone",
    "clone3",
    "socket",
    "socketpair",
    "connect",
    "bind",
    "listen",
    "accept",
    "accept4",
    "sendto",
    "sendmsg",
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "mknod",
    "mknodat",
    "chown",
    "fchown",
    "lchown",
    "fchownat",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "unshare",
    "setns",
    "open_tree",
    "move_mount",
    "fsopen",
    "fsmount",
    "setuid",
    "setgid",
    "setreuid",
    "setregid",
    "setresuid",
    "setresgid",
    "setgroups",
    "capset",
    "kill",
    "tkill",
    "rt_sigqueueinfo",
    "rt_tgsigqueueinfo",
    "pidfd_open",
    "pidfd_send_signal",
    "pidfd_getfd",
    "chmod",
    "fchmodat",
    "fchmodat2",
    "utimensat",
    "utimes",
    "futimesat",
    "setxattr",
    "lsetxattr",
    "fsetxattr",
    "removexattr",
    "lremovexattr",
    "fremovexattr",
    "link",
    "linkat",
    "rename",
    "renameat",
    "renameat2",
    "truncate",
    "openat2",
    "open",
    "creat",
    "name_to_handle_at",
    "open_by_handle_at",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "io_uring_setup",
    "keyctl",
    "add_key",
    "request_key",
    "init_module",
    "finit_module",
    "kexec_load",
    "reboot",
    "prctl",
    "seccomp",
    "landlock_create_ruleset",
    "landlock_add_rule",
    "landlock_restrict_self",
    "ioctl",
    "memfd_create",
];

/// A profile that cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProfileError {
    #[error("no embedded seccomp profile for architecture {0}; pass one with --seccomp-profile")]
    NoProfileForArch(String),
    #[error("cannot read seccomp profile {path}: {source}")]
    Read { path: String, source: io::Error },
    #[error("seccomp profile {path}: larger than {} MiB", limit_bytes >> 20)]
    TooLarge { path: String, limit_bytes: u64 },
    #[error("seccomp profile {source_name}: {problem}")]
    Invalid {
        source_name: String,
        #[source]
        problem: CompileError,
    },
}

/// Why a profile's text does not compile to a filter we accept.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CompileError {
    #[error(transparent)]
    Rules(#[from] RuleViolation),
    #[error("{0}")]
    Seccompiler(#[source] seccompiler::Error),
    #[error("no filter named `{}`", FILTER_NAME)]
    NoFilter,
    #[error("{instructions} BPF instructions; the kernel takes at most {limit}")]
    TooLong { instructions: usize, limit: usize },
    /// The built-in handover rules do not parse (a build defect, never the user's profile).
    #[error("handover: {0}")]
    Handover(#[source] serde_json::Error),
    /// Writing the calls' filters for seccompiler failed (a defect, never the user's profile).
    #[error("laying out the filter: {0}")]
    Layout(#[source] serde_json::Error),
}

/// The first rule of the module docs a profile breaks.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RuleViolation {
    #[error("not JSON: {0}")]
    NotJson(#[source] serde_json::Error),
    #[error("top level must be an object of filters")]
    NotAnObject,
    #[error("must hold exactly one filter, named `{}`", FILTER_NAME)]
    FilterCount,
    #[error("mismatch_action must be \"kill_process\"")]
    MismatchAction,
    #[error("match_action must be \"allow\"")]
    MatchAction,
    #[error("`filter` must be an array")]
    FilterNotArray,
    #[error("every rule needs a `syscall`")]
    RuleWithoutSyscall,
    #[error("`{syscall}` must never be allowed")]
    NeverAllowed { syscall: String },
    #[error("rule for `{syscall}` has no comment saying who needs it")]
    Uncommented { syscall: String },
    #[error(
        "`{syscall}` has rules both with and without `args`: seccompiler keeps only those with \
         arguments, so the rule without them would be ignored; keep one or the other"
    )]
    MixedRules { syscall: String },
}

/// The names of the filters compiled for the layout: no rules (its architecture check and
/// mismatch return frame the layout), and the calls allowed by number alone; the calls with
/// argument checks are `call 0`, `call 1`, ...
const EMPTY: &str = "empty";
const PLAIN: &str = "plain";

/// The most instructions the kernel loads in one filter.
const MAX_INSTRUCTIONS: usize = 4096;

/// The largest profile file read.
const MAX_PROFILE_BYTES: u64 = 1024 * 1024;

/// A compiled, checked profile.
#[derive(Debug, Clone)]
pub struct Profile {
    /// `embedded:<arch>` or the file path.
    pub source: String,
    pub program: BpfProgram,
    /// The profile's JSON, for [`Profile::stages`].
    text: String,
}

/// The calls a zygote's spare makes between installing the first stage of its filter (before
/// its order) and the second (its last confinement step): they are allowed by the first stage
/// and killed by the second, so the two together allow exactly what the profile allows. Each
/// is left out of both stages where the profile allows it already.
const HANDOVER: &str = r#"[
  { "syscall": "recvmsg", "comment": "spare: receiving its order, five fds, from the broker" },
  { "syscall": "prctl", "comment": "spare: renaming itself skillbox-child (PR_SET_NAME = 15)", "args": [ { "index": 0, "type": "dword", "op": "eq", "val": 15 } ] },
  { "syscall": "prctl", "comment": "the landlock crate and seccompiler set no_new_privs again before restricting (PR_SET_NO_NEW_PRIVS = 38)", "args": [ { "index": 0, "type": "dword", "op": "eq", "val": 38 } ] },
  { "syscall": "prlimit64", "comment": "rlimits: getrlimit and setrlimit on itself (pid 0) only", "args": [ { "index": 0, "type": "dword", "op": "eq", "val": 0 } ] },
  { "syscall": "landlock_create_ruleset", "comment": "Landlock: the ABI query and the ruleset" },
  { "syscall": "landlock_add_rule", "comment": "Landlock: the rule for the staging directory" },
  { "syscall": "landlock_restrict_self", "comment": "Landlock: enforcing the ruleset" },
  { "syscall": "seccomp", "comment": "installing the second stage" }
]"#;

impl Profile {
    /// The profile split in two for a zygote's spare: the first stage allows what the profile
    /// allows plus the [`HANDOVER`] calls it does not, and is installed before the spare gets
    /// its order (installing a filter costs about 0.05 ms even laid out as a search: checking,
    /// JIT, the kernel's per-syscall cache); the second kills exactly those extra calls and
    /// nothing else (or is the whole profile, when the profile allows one of them only under
    /// conditions of its own), and is installed last, as the whole profile is on the exec path.
    /// Both stages stay in force.
    pub fn stages(&self) -> Result<(BpfProgram, BpfProgram), ProfileError> {
        let arch = host_arch()?;
        let (first, second) = self.stage_documents()?;
        let build = |v: &Value| compile_filter(v, arch).map_err(|e| self.invalid(e));
        Ok((build(&first)?, build(&second)?))
    }

    /// A profile from its text (`source` names it in errors), checked and compiled for `arch`.
    pub(super) fn from_text(
        source: String,
        text: String,
        arch: TargetArch,
    ) -> Result<Self, ProfileError> {
        match compile(&text, arch) {
            Ok(program) => Ok(Self {
                source,
                program,
                text,
            }),
            Err(problem) => Err(ProfileError::Invalid {
                source_name: source,
                problem,
            }),
        }
    }

    fn invalid(&self, problem: CompileError) -> ProfileError {
        ProfileError::Invalid {
            source_name: self.source.clone(),
            problem,
        }
    }

    /// The two stages' filters as profile documents.
    pub(super) fn stage_documents(&self) -> Result<(Value, Value), ProfileError> {
        let invalid = |problem: CompileError| self.invalid(problem);
        let profile: Value = serde_json::from_str(&self.text)
            .map_err(|e| invalid(RuleViolation::NotJson(e).into()))?;
        let handover: Vec<Value> =
            serde_json::from_str(HANDOVER).map_err(|e| invalid(CompileError::Handover(e)))?;
        let mut first = profile.clone();
        let rules = first[FILTER_NAME]["filter"]
            .as_array_mut()
            .ok_or_else(|| invalid(RuleViolation::FilterNotArray.into()))?;
        // A rule the profile already has (same call, same arguments, or the call without
        // arguments at all) needs neither stage.
        let same = |a: &Value, b: &Value| a["syscall"] == b["syscall"] && a["args"] == b["args"];
        let extra: Vec<Value> = handover
            .into_iter()
            .filter(|h| {
                !rules
                    .iter()
                    .any(|r| same(r, h) || (r["syscall"] == h["syscall"] && unconditional(r)))
            })
            .collect();
        // A handover call the profile allows only under conditions of its own (none of ours
        // does; a replacement profile may). In the first stage an extra rule without arguments
        // replaces the profile's rules for the call, which seccompiler would otherwise keep
        // instead of it. And no stage of "kill the extra rules" can take back exactly what the
        // profile does not allow of that call (the profile's conditions would have to be
        // negated), so the second stage is then the whole profile: with both in force, exactly
        // the profile is allowed, as on the exec path.
        let shared = extra
            .iter()
            .any(|h| rules.iter().any(|r| r["syscall"] == h["syscall"]));
        rules.retain(|r| {
            !extra
                .iter()
                .any(|h| h["syscall"] == r["syscall"] && unconditional(h))
        });
        rules.extend(extra.iter().cloned());
        let second = if shared {
            profile
        } else {
            serde_json::json!({
                FILTER_NAME: {
                    "mismatch_action": "allow",
                    "match_action": "kill_process",
                    "filter": extra,
                }
            })
        };
        Ok((first, second))
    }
}

/// The architecture this binary runs on, as seccompiler names it.
pub fn host_arch() -> Result<TargetArch, ProfileError> {
    TargetArch::try_from(std::env::consts::ARCH)
        .map_err(|_| ProfileError::NoProfileForArch(std::env::consts::ARCH.into()))
}

/// The text of the embedded profile for the architecture this binary runs on.
pub fn embedded_text() -> Option<&'static str> {
    EMBEDDED
        .iter()
        .find(|(a, _)| *a == std::env::consts::ARCH)
        .map(|(_, t)| *t)
}

/// Load the embedded profile for this architecture, or `path` when given.
pub fn load(path: Option<&Path>) -> Result<Profile, ProfileError> {
    let arch = host_arch()?;
    let (source, text) = match path {
        Some(p) => {
            let shown = p.display().to_string();
            let meta = std::fs::metadata(p).map_err(|source| ProfileError::Read {
                path: shown.clone(),
                source,
            })?;
            if meta.len() > MAX_PROFILE_BYTES {
                return Err(ProfileError::TooLarge {
                    path: shown,
                    limit_bytes: MAX_PROFILE_BYTES,
                });
            }
            let text = std::fs::read_to_string(p).map_err(|source| ProfileError::Read {
                path: shown.clone(),
                source,
            })?;
            (shown, text)
        }
        None => {
            let arch_name = std::env::consts::ARCH;
            let text =
                embedded_text().ok_or_else(|| ProfileError::NoProfileForArch(arch_name.into()))?;
            (format!("embedded:{arch_name}"), text.to_owned())
        }
    };
    Profile::from_text(source, text, arch)
}

/// Check a profile against our rules, then compile its filter for `arch`.
pub fn compile(text: &str, arch: TargetArch) -> Result<BpfProgram, CompileError> {
    let doc: Value = serde_json::from_str(text).map_err(RuleViolation::NotJson)?;
    check_document(&doc)?;
    compile_filter(&doc, arch)
}

/// Compile the filter of `doc` (a checked profile's JSON) with seccompiler, laid out as a search
/// over call numbers ([`bpf_layout`]). In one call seccompiler compiles the filter with no
/// rules, the calls allowed by number alone together, and every call with argument checks on
/// its own; where its output is not in the shape the layout relies on, the program is
/// seccompiler's own chain for the whole filter.
fn compile_filter(doc: &Value, arch: TargetArch) -> Result<BpfProgram, CompileError> {
    let filter = &doc[FILTER_NAME];
    let rules = filter["filter"]
        .as_array()
        .ok_or(RuleViolation::FilterNotArray)?;
    // The rules grouped by call, in the profile's order, so that seccompiler decides how one
    // call's rules combine (each allows the call when all its conditions hold).
    let mut calls: Vec<(&Value, Vec<WithoutComment>)> = Vec::new();
    for rule in rules {
        let name = &rule["syscall"];
        match calls.iter_mut().find(|(n, _)| *n == name) {
            Some((_, group)) => group.push(WithoutComment(rule)),
            None => calls.push((name, vec![WithoutComment(rule)])),
        }
    }
    let (checked, plain): (Vec<_>, Vec<_>) = calls
        .into_iter()
        .partition(|(_, group)| group.iter().any(|rule| !unconditional(rule.0)));
    let (mismatch_action, match_action) = (&filter["mismatch_action"], &filter["match_action"]);
    let job = |filter| Job {
        mismatch_action,
        match_action,
        filter,
    };
    let mut jobs = std::collections::BTreeMap::new();
    jobs.insert(EMPTY.to_owned(), job(Vec::new()));
    jobs.insert(
        PLAIN.to_owned(),
        job(plain.into_iter().flat_map(|(_, g)| g).collect()),
    );
    let count = checked.len();
    for (i, (_, group)) in checked.into_iter().enumerate() {
        jobs.insert(format!("call {i}"), job(group));
    }
    let text = serde_json::to_string(&jobs).map_err(CompileError::Layout)?;
    let mut map =
        seccompiler::compile_from_json(text.as_bytes(), arch).map_err(CompileError::Seccompiler)?;
    let mut take = |name: &str| map.remove(name).ok_or(CompileError::NoFilter);
    let empty = take(EMPTY)?;
    let plain = take(PLAIN)?;
    let checked = (0..count)
        .map(|i| take(&format!("call {i}")))
        .collect::<Result<Vec<_>, _>>()?;
    let program = match bpf_layout::compact(&empty, &plain, &checked) {
        Some(program) => program,
        None => {
            let whole = serde_json::json!({ FILTER_NAME: filter });
            let mut map = seccompiler::compile_from_json(whole.to_string().as_bytes(), arch)
                .map_err(CompileError::Seccompiler)?;
            map.remove(FILTER_NAME).ok_or(CompileError::NoFilter)?
        }
    };
    if program.len() > MAX_INSTRUCTIONS {
        return Err(CompileError::TooLong {
            instructions: program.len(),
            limit: MAX_INSTRUCTIONS,
        });
    }
    Ok(program)
}

/// One filter for seccompiler, borrowing the profile's values.
#[derive(serde::Serialize)]
struct Job<'a> {
    mismatch_action: &'a Value,
    match_action: &'a Value,
    filter: Vec<WithoutComment<'a>>,
}

/// A rule as seccompiler reads it: without its `comment`, which was checked already, is most of
/// a profile's text, and which seccompiler parses byte by byte.
struct WithoutComment<'a>(&'a Value);

impl serde::Serialize for WithoutComment<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let Some(fields) = self.0.as_object() else {
            return self.0.serialize(serializer);
        };
        let kept = fields.iter().filter(|(k, _)| *k != "comment");
        let mut map = serializer.serialize_map(None)?;
        for (k, v) in kept {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

/// The rules every profile must follow (see the module docs). Returns the first violation.
pub fn check_profile(text: &str) -> Result<(), RuleViolation> {
    check_document(&serde_json::from_str(text).map_err(RuleViolation::NotJson)?)
}

/// [`check_profile`] on the parsed profile.
fn check_document(v: &Value) -> Result<(), RuleViolation> {
    let obj = v.as_object().ok_or(RuleViolation::NotAnObject)?;
    if obj.len() != 1 || !obj.contains_key(FILTER_NAME) {
        return Err(RuleViolation::FilterCount);
    }
    let filter = &obj[FILTER_NAME];
    if filter["mismatch_action"] != "kill_process" {
        return Err(RuleViolation::MismatchAction);
    }
    if filter["match_action"] != "allow" {
        return Err(RuleViolation::MatchAction);
    }
    let rules = filter["filter"]
        .as_array()
        .ok_or(RuleViolation::FilterNotArray)?;
    for rule in rules {
        let name = rule["syscall"]
            .as_str()
            .ok_or(RuleViolation::RuleWithoutSyscall)?;
        if NEVER_ALLOWED.contains(&name) {
            return Err(RuleViolation::NeverAllowed {
                syscall: name.to_owned(),
            });
        }
        if rule["comment"].as_str().is_none_or(|c| c.trim().is_empty()) {
            return Err(RuleViolation::Uncommented {
                syscall: name.to_owned(),
            });
        }
        // seccompiler drops a call's rule without arguments when the call also has rules with
        // them: the profile would allow less than it says, and differently once its rules are
        // split into a spare's two stages.
        let same_call = |r: &&Value| r["syscall"] == rule["syscall"];
        if unconditional(rule) && rules.iter().filter(same_call).any(|r| !unconditional(r)) {
            return Err(RuleViolation::MixedRules {
                syscall: name.to_owned(),
            });
        }
    }
    Ok(())
}

/// A rule that allows its call whatever the arguments (no `args`, or `null`).
fn unconditional(rule: &Value) -> bool {
    rule.get("args").is_none_or(Value::is_null)
}

/// The program as bytes for the request pipe (native layout: code u16, jt u8, jf u8, k u32).
pub fn to_bytes(program: &[seccompiler::sock_filter]) -> Vec<u8> {
    let mut out = Vec::with_capacity(program.len() * 8);
    for ins in program {
        out.extend_from_slice(&ins.code.to_ne_bytes());
        out.push(ins.jt);
        out.push(ins.jf);
        out.extend_from_slice(&ins.k.to_ne_bytes());
    }
    out
}

/// Inverse of [`to_bytes`].
pub fn from_bytes(bytes: &[u8]) -> Option<BpfProgram> {
    if bytes.is_empty() || !bytes.len().is_multiple_of(8) {
        return None;
    }
    Some(
        bytes
            .chunks_exact(8)
            .map(|c| seccompiler::sock_filter {
                code: u16::from_ne_bytes([c[0], c[1]]),
                jt: c[2],
                jf: c[3],
                k: u32::from_ne_bytes([c[4], c[5], c[6], c[7]]),
            })
            .collect(),
    )
}

/// Install `program` on every thread of the process (`SECCOMP_FILTER_FLAG_TSYNC`): the child's
/// hashing thread exists before the filter, and must be under it too. Irreversible.
pub fn install(program: &[seccompiler::sock_filter]) -> Result<(), seccompiler::Error> {
    seccompiler::apply_filter_all_threads(program)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_two_stages_add_and_take_back_exactly_the_handover_calls() {
        let profile = load(None).expect("load");
        let (first, second) = profile.stages().expect("stages");
        let handover: Vec<Value> = serde_json::from_str(HANDOVER).expect("from_str");
        // The embedded profiles allow none of the handover calls, so the first stage is longer
        // than the profile and the second kills every one of them.
        assert!(first.len() > profile.program.len());
        assert!(!second.is_empty());
        for rule in &handover {
            let name = rule["syscall"].as_str().unwrap_or_default();
            assert!(
                NEVER_ALLOWED.contains(&name) || name == "recvmsg" || name == "prlimit64",
                "{name}: a handover call the profile rules do not forbid needs a look"
            );
        }
        // A profile that allows a handover call itself keeps it out of both stages.
        let mut v: Value = serde_json::from_str(&profile.text).expect("from_str");
        if let Some(rules) = v[FILTER_NAME]["filter"].as_array_mut() {
            rules.push(serde_json::json!({ "syscall": "recvmsg", "comment": "test" }));
        }
        let widened = Profile {
            source: "test".into(),
            program: profile.program.clone(),
            text: v.to_string(),
        };
        let (_, second_widened) = widened.stages().expect("stages");
        assert!(second_widened.len() < second.len());
    }

    #[test]
    fn bytes_round_trip() {
        let p = load(None).expect("load");
        assert_eq!(from_bytes(&to_bytes(&p.program)), Some(p.program));
        assert_eq!(from_bytes(&[0; 7]), None);
    }

    #[test]
    fn rules_are_enforced() {
        let ok = r#"{"skillbox_child":{"mismatch_action":"kill_process","match_action":"allow","filter":[{"syscall":"read","comment":"x"}]}}"#;
        assert!(check_profile(ok).is_ok());
        assert!(check_profile(&ok.replace("kill_process", "allow\",\"x\":\"")).is_err());
        assert!(check_profile(&ok.replace("\"read\"", "\"execve\"")).is_err());
        assert!(check_profile(&ok.replace(",\"comment\":\"x\"", "")).is_err());
        assert!(check_profile(&ok.replace("skillbox_child", "other")).is_err());
        // One call with rules both with and without arguments: seccompiler would keep only the
        // former. Either kind alone, or twice, is a profile.
        let conditioned = r#"{"syscall":"read","comment":"y","args":[{"index":0,"type":"dword","op":"eq","val":0}]}"#;
        let plain = r#"{"syscall":"read","comment":"x"}"#;
        let with = |rules: &[&str]| ok.replace(plain, &rules.join(","));
        for mixed in [[plain, conditioned], [conditioned, plain]] {
            match check_profile(&with(&mixed)) {
                Err(RuleViolation::MixedRules { syscall }) => assert_eq!(syscall, "read"),
                other => panic!("a mixed profile was not refused as mixed: {other:?}"),
            }
        }
        assert!(check_profile(&with(&[conditioned, conditioned])).is_ok());
        assert!(check_profile(&with(&[plain, plain])).is_ok());
    }
}
