//! The lifecycle commands over an open [`Store`]: install (and update), approve, deny,
//! rollback, withdraw, list, status, provenance, review, gc and verify. Each returns a report
//! the CLI prints; none prints.
//!
//! Every command that changes state holds the store lock, first finishes or undoes whatever an
//! interrupted command left ([`journal::recover`]), and changes the records in one transaction
//! per step, ordered with the filesystem steps as [`journal`] describes.

use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::{Value, json};
use url::Url;

use super::agents::{self, AgentArg};
use super::journal::{self, LinkChange};
use super::policy::{Decision, Facts, Policy};
use super::quarantine;
use super::records::{About, Event, HostRow, Install, Listed, State, Tx, Version};
use super::store::{self, Store};
use super::{Error, Kind, crash_point, now, redact_json, redact_message, redact_url};
use crate::digest::Sha256Digest;
use crate::extract::policy::Limits;
use crate::extract::{ArtifactType, Request};
use crate::fetch::FetchError;
use crate::fetch::acquire::{self, AcquireError, Provenance};
use crate::fetch::cache::Cache;
use crate::fetch::client::Client;
use crate::index::{self, EntryType, IndexError, IndexLimits};
use crate::intake::Outcome;
use crate::reason::Verdict;
use crate::sandbox::{Confined, SandboxError};
use crate::skill::diff;
use crate::skill::review::Review;
use crate::stop_point::stop_point;

/// The confined extraction path (the one `skillbox extract` uses).
pub type Engine<'a> = &'a dyn Fn(&File, BorrowedFd<'_>, &Request) -> Result<Confined, SandboxError>;

/// The network side for installs from an index.
pub struct Fetcher<'a> {
    pub client: &'a Client,
    pub index_limits: &'a IndexLimits,
}

/// Where an install takes its artifact from.
#[derive(Debug, Clone)]
pub enum Source {
    Index { url: String, skill: String },
    File { path: PathBuf, digest: Sha256Digest },
}

/// `SKILL@DIGEST`, the digest possibly a unique prefix (`sha256:` + at least 8 hex digits).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionRef {
    pub skill: String,
    pub digest: String,
}

impl std::str::FromStr for VersionRef {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (skill, digest) = s.split_once('@').ok_or_else(|| {
            format!(
                "{:?}: give SKILL@sha256:HEX",
                s.escape_default().to_string()
            )
        })?;
        index::check_name(skill).map_err(|e| format!("skill {e}"))?;
        let hex = digest
            .strip_prefix("sha256:")
            .ok_or_else(|| "the digest starts with sha256:".to_owned())?;
        if hex.len() < 8
            || hex.len() > 64
            || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        {
            return Err("the digest is sha256: followed by 8 to 64 lowercase hex digits".into());
        }
        Ok(VersionRef {
            skill: skill.to_owned(),
            digest: digest.to_owned(),
        })
    }
}

/// A skill name from the command line.
pub fn parse_skill(s: &str) -> Result<String, String> {
    index::check_name(s).map_err(|e| format!("skill {e}"))?;
    Ok(s.to_owned())
}

/// What happened to one agent.
#[derive(Debug, Clone, Serialize)]
pub struct AgentChange {
    pub agent: String,
    pub dir: String,
    pub from: Option<String>,
    pub to: Option<String>,
}

/// The answer of install, update and approve.
#[derive(Debug, Clone, Serialize)]
pub struct InstallReport {
    pub skill: String,
    pub digest: String,
    /// `new` (entered the store now), `known` (already recorded), `unchanged` (already active).
    pub intake: &'static str,
    pub decision: Decision,
    /// `first`, `content_only`, `needs_review`, `unchanged`.
    pub change: String,
    pub state: State,
    pub agents: Vec<AgentChange>,
    pub review_sha256: String,
    pub review_summary: String,
    #[serde(skip)]
    pub review: Option<Review>,
    #[serde(skip)]
    pub diff: Option<diff::Diff>,
    pub provenance: Value,
    pub recovered: Vec<String>,
    /// Links that could not be switched (an entry skillbox did not create).
    pub problems: Vec<String>,
}

/// Everything an install needs besides the store.
pub struct Intake<'a> {
    pub policy: &'a Policy,
    pub fetcher: Option<Fetcher<'a>>,
    pub engine: Engine<'a>,
    pub limits: Limits,
    /// The agents to activate for (empty: keep it in the store only).
    pub agents: Vec<AgentArg>,
    /// `install` or `update` (events and the crash hook).
    pub op: &'static str,
    /// `install --switch-index`: an agent whose version of the skill was taken from another
    /// index may be moved to this index's ([`refuse_index_switch`]).
    pub switch_index: bool,
}

fn acquire_error(e: AcquireError) -> Error {
    let (kind, detail) = match &e {
        AcquireError::Fetch(FetchError::Refused(r)) => (
            Kind::Refused,
            Some(json!({"kind": "refused", "rule": r.rule.as_str(), "hint": r.rule.hint()})),
        ),
        // Cut at the extraction limit during the download: the engine's `artifact_size`
        // rejection, made before the bytes arrived, and exit 3 as that rejection is.
        AcquireError::Fetch(FetchError::ArtifactTooLarge { .. }) => (Kind::Rejected, None),
        AcquireError::Fetch(_) | AcquireError::Offline(_) | AcquireError::Cache(_) => {
            (Kind::Operational, None)
        }
        AcquireError::Index(IndexError::UnrecognisedSchema { .. }) => (Kind::Schema, None),
        AcquireError::Index(_)
        | AcquireError::EntrySkipped(_)
        | AcquireError::NotInstallable { .. }
        | AcquireError::Unresolved { .. }
        | AcquireError::DigestMismatch { .. } => (Kind::Rejected, None),
        AcquireError::NotListed { .. } => (Kind::NotFound, None),
    };
    let mut err = Error::new(kind, redact_message(&e.to_string()));
    err.detail = detail;
    err
}

/// Resolve `--agent` arguments against the records and the presets.
fn resolve_agents(tx: &Tx<'_>, args: &[AgentArg]) -> Result<Vec<(String, String)>, Error> {
    let mut out: Vec<(String, String)> = Vec::new();
    for a in args {
        let recorded = tx.agent_dir(&a.name)?;
        let dir = match (&a.dir, recorded) {
            (Some(d), Some(r)) => {
                let d = agents::absolute(d)?.display().to_string();
                if d != r {
                    return Err(Error::new(
                        Kind::Usage,
                        format!(
                            "agent {} is recorded with {r}, not {d}; use another name",
                            a.name
                        ),
                    ));
                }
                d
            }
            (Some(d), None) => agents::absolute(d)?.display().to_string(),
            (None, Some(r)) => {
                // A preset typed alone names its directory as it is here: `project` run from a
                // second project is that project's `.agents/skills`, not the first one's. The
                // records hold one directory per agent, so the other is refused, saying which
                // is recorded and what to type (reusing it reported "already active" for a
                // directory that held nothing).
                if a.typed
                    && let Some(here) = agents::preset_dir(&a.name)?
                    && dir_identity(&here) != dir_identity(Path::new(&r))
                {
                    return Err(preset_elsewhere(&a.name, &r, &here));
                }
                r
            }
            (None, None) => match agents::preset_dir(&a.name)? {
                Some(d) => d.display().to_string(),
                None => {
                    return Err(Error::new(
                        Kind::NotFound,
                        format!(
                            "unknown agent {}: give --agent {}=DIR, or a preset ({})",
                            a.name,
                            a.name,
                            agents::PRESETS
                                .iter()
                                .map(|(n, _)| *n)
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    ));
                }
            },
        };
        if !out.iter().any(|(n, _)| *n == a.name) {
            out.push((a.name.clone(), dir));
        }
    }
    refuse_shared_dirs(tx, &out)?;
    Ok(out)
}

/// [`resolve_agents`], then remembered in the store ([`Store::remember_agents`]) before any
/// link is made for them: a command that cannot remember them changes nothing.
fn resolve_and_remember(
    store: &mut Store,
    args: &[AgentArg],
) -> Result<Vec<(String, String)>, Error> {
    let list = store.records.read(|tx| resolve_agents(tx, args))?;
    store.remember_agents(&list)?;
    Ok(list)
}

/// A preset typed alone whose directory here is not the one its agent is recorded with.
fn preset_elsewhere(name: &str, recorded: &str, here: &Path) -> Error {
    // A name for an agent of its own: the preset's, then the directory the preset is taken
    // from (`project-app` for `~/src/app/.agents/skills`), kept to the characters a name takes.
    let base = here
        .ancestors()
        .nth(2)
        .and_then(|p| p.file_name())
        .map(|n| {
            n.to_string_lossy()
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                        c
                    } else {
                        '-'
                    }
                })
                .collect::<String>()
        })
        .unwrap_or_default();
    let suggested: String = if base.is_empty() {
        format!("{name}-2")
    } else {
        format!("{name}-{base}")
    }
    .chars()
    .take(64)
    .collect();
    let here = here.display();
    Error::new(
        Kind::Usage,
        format!(
            "agent {name} is recorded with {recorded}, not {here} (the preset's directory here); an agent is one directory: for this one give it a name of its own, --agent {suggested}={here}, or name the recorded one with its directory, --agent {name}={recorded}"
        ),
    )
}

/// Which directory a skills directory is: its device and inode when it exists (so a symlinked
/// `~/.codex/skills -> ~/.claude/skills` is seen as one), else the canonical form of its
/// deepest existing ancestor followed by the rest of the path.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum DirId {
    Inode(u64, u64),
    Path(PathBuf),
}

fn dir_identity(dir: &Path) -> DirId {
    use std::os::unix::fs::MetadataExt;
    if let Ok(md) = std::fs::metadata(dir) {
        return DirId::Inode(md.dev(), md.ino());
    }
    let mut rest: Vec<&std::ffi::OsStr> = Vec::new();
    let mut cur = dir;
    loop {
        if let Ok(mut p) = std::fs::canonicalize(cur) {
            p.extend(rest.iter().rev());
            return DirId::Path(p);
        }
        match (cur.parent(), cur.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name);
                cur = parent;
            }
            _ => return DirId::Path(dir.to_owned()),
        }
    }
}

/// Refuse agents that would share one skills directory: two agents on one directory share one
/// link per skill, so the records would say each runs its own version while the link holds only
/// the last one written (and a withdrawal or `verify` would act on the wrong one). Checked among
/// the agents of this command, and each agent not yet recorded against every recorded one.
fn refuse_shared_dirs(tx: &Tx<'_>, resolved: &[(String, String)]) -> Result<(), Error> {
    if resolved.is_empty() {
        return Ok(());
    }
    let recorded = tx.agents()?;
    let is_new = |n: &str| !recorded.iter().any(|(r, _)| r == n);
    type Seen = std::collections::HashMap<DirId, (String, String)>;
    let mut outside: Seen = Default::default();
    if resolved.iter().any(|(n, _)| is_new(n)) {
        for (n, d) in &recorded {
            if !resolved.iter().any(|(r, _)| r == n) {
                outside
                    .entry(dir_identity(Path::new(d)))
                    .or_insert_with(|| (n.clone(), d.clone()));
            }
        }
    }
    let mut here: Seen = Default::default();
    for (n, d) in resolved {
        let id = dir_identity(Path::new(d));
        let clash = here
            .get(&id)
            .or_else(|| is_new(n).then(|| outside.get(&id)).flatten());
        if let Some((o, od)) = clash {
            return Err(Error::new(
                Kind::Usage,
                format!(
                    "agent {n}: its directory {d} is the same directory as agent {o}'s ({od}); two agents on one directory share one link per skill, so their records would disagree: use agent {o} for it, or give {n} a directory of its own"
                ),
            ));
        }
        here.insert(id, (n.clone(), d.clone()));
    }
    Ok(())
}

/// Check that each agent's entry is what the records say skillbox made, before any change. A
/// command that is not containment (install, approve, rollback) refuses up front, naming the
/// agent and what its entry is; a withdrawal never does (see [`move_off`]).
fn precheck(store: &Store, skill: &str, changes: &[LinkChange]) -> Result<(), Error> {
    for c in changes {
        let link = journal::link_path(&c.dir, skill);
        let now = agents::inspect(&link)?;
        let ok = match (&now, &c.from) {
            (agents::Entry::Absent, None) => true,
            (agents::Entry::Link(t), Some(d)) => *t == store.tree(d),
            (agents::Entry::Link(t), None) => c.to.as_deref().is_some_and(|d| *t == store.tree(d)),
            _ => false,
        };
        if ok {
            continue;
        }
        let recorded = match c.from.as_deref() {
            Some(d) => format!("skillbox recorded its link to {skill}@{d} there"),
            None => "skillbox recorded nothing there".to_owned(),
        };
        let message = match &now {
            // Nothing is there: saying "skillbox did not create it" would send the operator
            // looking for an entry that does not exist.
            agents::Entry::Absent => format!(
                "agent {}: {} is missing ({recorded}); nothing was changed: `skillbox verify` recreates it, then run the command again",
                c.agent,
                link.display()
            ),
            agents::Entry::Link(t) => format!(
                "agent {}: {} is a symlink to {} and skillbox did not create it ({recorded}); it was left untouched and nothing was changed (move it away, or install for another agent)",
                c.agent,
                link.display(),
                t.display()
            ),
            agents::Entry::Foreign => format!("agent {}: {}", c.agent, agents::not_ours(&link)),
        };
        return Err(Error::new(Kind::Operational, message));
    }
    Ok(())
}

fn review_sha(review: &Review) -> String {
    serde_json::to_vec(review)
        .map(|b| Sha256Digest::of_bytes(&b).to_string())
        .unwrap_or_default()
}

/// One line summing up what a package asks for.
pub fn review_summary(r: &Review) -> String {
    let c = &r.capabilities;
    let mut parts = vec![
        format!("{} script(s)", r.scripts.len()),
        format!("{} host(s)", c.hosts.len()),
        format!("{} tool(s)", r.tools.len()),
    ];
    for (n, what) in [
        (c.executables.len(), "executable(s)"),
        (c.downloads.len(), "download(s)"),
        (c.uploads.len(), "upload(s)"),
        (c.credentials.len(), "credential touch(es)"),
        (c.risky_commands.len(), "risky command(s)"),
    ] {
        if n > 0 {
            parts.push(format!("{n} {what}"));
        }
    }
    parts.push(format!("{} finding(s)", r.findings.len()));
    parts.push(if r.coverage.complete {
        "complete".into()
    } else {
        "INCOMPLETE".into()
    });
    parts.join(", ")
}

fn state_error(v: &Version) -> Option<Error> {
    let name = format!("{}@{}", v.skill, v.digest);
    match v.state {
        State::Withdrawn => Some(Error::new(
            Kind::Withdrawn,
            format!(
                "{name} was withdrawn ({}); it can never be activated again",
                v.withdrawn_reason
                    .as_deref()
                    .unwrap_or("no reason recorded")
            ),
        )),
        State::Denied => Some(Error::new(
            Kind::Denied,
            format!("{name} was denied by {}", v.decided_by),
        )),
        State::Pending => Some(Error::new(
            Kind::NeedsApproval,
            format!("{name} waits for a decision: skillbox review {name}, then approve or deny"),
        )),
        State::Approved => None,
    }
}

/// Install (or update) one skill: intake, review, policy, promotion, activation.
pub fn install(
    store: &mut Store,
    intake: &Intake<'_>,
    source: &Source,
) -> Result<InstallReport, Error> {
    let mut recovered = prepare(store)?;
    let op = intake.op;
    let mut prov = Provenance {
        time: now(),
        ..Provenance::default()
    };
    // Stage 1: the bytes, verified against the digest they are listed with.
    let (artifact, artifact_type, listed_name, facts, req_base) = match source {
        Source::Index { url, skill } => {
            let fetcher = intake
                .fetcher
                .as_ref()
                .ok_or_else(|| Error::new(Kind::Usage, "no fetch settings"))?;
            // The typed-URL rule (`urls::check_typed`) for an update too: the URL it reads from
            // the records was typed once, and a record written by an older version (or by hand)
            // may hold `https://u:123/pw@h/i.json`, which taken as written is fetched from host
            // `u` with the password in the path.
            let index_url = crate::urls::parse_typed(url).map_err(|e| {
                // Refused text: masked to its last `@` (a password may hold a `/`).
                let shown = crate::urls::redact_refused(url);
                let message = if op == "update" {
                    format!(
                        "the index URL recorded at its install, {shown}: {e}; install it again from the index URL written so (skillbox install INDEX_URL {skill})"
                    )
                } else {
                    format!("{shown}: {e}")
                };
                Error::new(Kind::Usage, message)
            })?;
            prov.index_url = redact_url(index_url.as_str());
            // The index's own origin is the one the operator typed (or typed at install, for an
            // update): allowed for the index and same-origin artifacts, as `fetch` does.
            // Cross-origin artifacts and redirects still need the allow-list.
            let mut client = fetcher.client.clone();
            client.policy_mut().allow_index_origin(&index_url);
            let cache = Cache::open(&store.cache_root())
                .map_err(|e| Error::io("cannot open the store's cache", &e))?;
            // The network I/O (the index, the artifact) runs without the store lock
            // (`Store::without_lock`): an index that stalls for the whole fetch timeout must
            // not hold back a `withdraw` typed on this host meanwhile. Only bytes, verified
            // against their digest, come out of it; every decision is taken once the lock is
            // back, on the records as they are then.
            let (entry, mut acquired) = store.without_lock(|store| -> Result<_, Error> {
                // No index cache here: an index may list a URL with a password in it, and a
                // secret never reaches the store.
                let index = acquire::load_index(
                    &client,
                    None,
                    &index_url,
                    fetcher.index_limits,
                    false,
                    &mut prov,
                )
                .map_err(acquire_error)?;
                let entry = acquire::select(&index, skill).map_err(acquire_error)?;
                // A digest the records hold is decided without its bytes (an unchanged update
                // downloads nothing). Only a read: `known` decides under the lock below.
                let recorded = match entry.digest {
                    Some(d) => store
                        .records
                        .read(|tx| tx.version(&d.to_string()))?
                        .is_some(),
                    None => false,
                };
                let acquired = if recorded {
                    None
                } else {
                    Some(
                        acquire::artifact(&client, &cache, entry.clone(), false, &mut prov)
                            .map_err(acquire_error)?,
                    )
                };
                Ok((entry, acquired))
            })??;
            let acquired = loop {
                // The lock is held again, and anything may have happened meanwhile: finish what
                // a command killed meanwhile left, move this host's agents off what was
                // withdrawn meanwhile, and decide on the digest as the records say now (a
                // version withdrawn or denied meanwhile is refused here).
                recovered.extend(prepare(store)?);
                if let Some(d) = entry.digest
                    && let Some(report) = known(
                        store,
                        intake,
                        skill,
                        &d.to_string(),
                        Some(&prov.index_url),
                        &recovered,
                    )?
                {
                    return Ok(report);
                }
                if let Some(a) = acquired.take() {
                    break a;
                }
                // Recorded when looked at, but the intake must run after all (a version
                // collected, a policy's denial to re-evaluate): fetch the bytes, unlocked too.
                acquired = Some(store.without_lock(|_| {
                    acquire::artifact(&client, &cache, entry.clone(), false, &mut prov)
                        .map_err(acquire_error)
                })??);
            };
            // Fails closed: an artifact whose origin cannot be told would skip the policy's
            // origin rules, so a URL the parser does not read back is an error, not `None`.
            // A cache hit is judged by where this index pointed, not by where the bytes were
            // first downloaded for some other entry (`Provenance::artifact_url`).
            let fetched_from = prov
                .artifact_url()
                .ok_or_else(|| Error::new(Kind::Operational, "a fetched artifact with no URL"))?;
            let origin = Url::parse(fetched_from)
                .map(|u| Some(u.origin().ascii_serialization()))
                .map_err(|e| {
                    Error::new(
                        Kind::Operational,
                        format!("the artifact's URL does not parse back: {e}"),
                    )
                })?;
            let facts = Facts {
                origin,
                cross_origin: prov.cross_origin == Some(true),
            };
            let req = acquire::engine_request(&acquired, &prov, intake.limits.clone());
            (
                acquired.hit.file,
                acquired.artifact_type,
                Some(acquired.entry.name.clone()),
                facts,
                req,
            )
        }
        Source::File { path, digest } => {
            // A name with an `@` may be a mistyped URL with user information
            // (`user:pw@host/x`): its errors show it masked, as `index check` does.
            let lossy = path.to_string_lossy();
            let shown_path = crate::urls::redact_refused(&lossy);
            let file = File::open(path).map_err(|e| {
                Error::new(Kind::NotFound, format!("cannot open {shown_path}: {e}"))
            })?;
            if !file.metadata().map(|m| m.is_file()).unwrap_or(false) {
                return Err(Error::new(
                    Kind::Usage,
                    format!("{shown_path} is not a regular file"),
                ));
            }
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
            let is_md = name
                .as_deref()
                .is_some_and(|n| n.to_ascii_lowercase().ends_with(".md"));
            let ty = if is_md {
                ArtifactType::SkillMd
            } else {
                ArtifactType::Archive
            };
            let mut req = Request::new(ty, intake.limits.clone());
            req.file_name = name;
            req.expected_digest = Some(*digest);
            prov.index_url = String::new();
            prov.digest = Some(*digest);
            let shown = std::fs::canonicalize(path).unwrap_or_else(|_| path.clone());
            prov.final_url = Some(format!("file://{}", shown.display()));
            let entry_ty = if is_md {
                EntryType::SkillMd
            } else {
                EntryType::Archive
            };
            (file, entry_ty, None, Facts::default(), req)
        }
    };
    let _ = artifact_type;
    // Stage 2: confined extraction and review, into a staging directory of this command's own
    // inside the store (so promotion is one rename), made under the store lock and held by its
    // `flock` (`store::Staging`: recovery leaves it alone while this command lives, and removes
    // it once it is killed; dropped, it is removed). The extraction runs without the store
    // lock, as the download does: bounded, but seconds for a large package, and a `withdraw`
    // typed meanwhile must not wait for it. It changes nothing but that directory; everything
    // it yields is decided on once the lock is back, on the records as they are then.
    let staging = store.new_staging()?;
    let confined = store.without_lock(|_| {
        let tree = staging.tree();
        let confined = File::open(&tree)
            .map_err(|e| format!("cannot open {}: {e}", tree.display()))
            .and_then(|dir| {
                (intake.engine)(&artifact, dir.as_fd(), &req_base).map_err(|e| e.to_string())
            });
        extracted(op);
        confined
    })?;
    let outcome = match confined {
        Ok(c) => c.outcome,
        Err(m) => return Err(Error::new(Kind::Operational, m)),
    };
    let digest = match (outcome.verdict, outcome.artifact.digest) {
        (Verdict::Accepted, Some(d)) => d.to_string(),
        (Verdict::Accepted, None) | (Verdict::Rejected, _) => {
            let why = outcome
                .reason
                .as_ref()
                .map(|r| format!("{}: {}", r.code, r.detail))
                .unwrap_or_else(|| "rejected".into());
            return Err(Error::new(
                Kind::Rejected,
                format!("rejected by the engine: {why}"),
            ));
        }
    };
    // The lock is held again, and anything may have happened meanwhile (as after the
    // download): finish what a command killed meanwhile left, and move this host's agents off
    // what was withdrawn meanwhile.
    recovered.extend(prepare(store)?);
    // A version withdrawn on this host with --local is never promoted again (exit 9), even
    // when the records do not know it yet: its bytes would be a fresh tree agents could load.
    quarantine::refuse(store.root(), &digest)?;
    let Some(review) = outcome.review.clone() else {
        return Err(Error::new(Kind::Rejected, "the engine returned no review"));
    };
    let skill = match listed_name {
        Some(n) => n,
        None => {
            let name = review
                .frontmatter
                .as_ref()
                .map(|f| f.name.clone())
                .unwrap_or_default();
            if let Err(e) = index::check_name(&name) {
                return Err(Error::new(
                    Kind::Rejected,
                    format!("SKILL.md name {name:?}: {e}"),
                ));
            }
            name
        }
    };
    // Decided on the digest as the records say now: a version withdrawn, denied by a person or
    // waiting for one meanwhile is refused (exit 9, 7, 6), one installed meanwhile is activated
    // as recorded, exactly as after the download; the staged tree is then removed.
    let recorded_from = match source {
        Source::Index { .. } => Some(prov.index_url.as_str()),
        Source::File { .. } => None,
    };
    if let Some(report) = known(store, intake, &skill, &digest, recorded_from, &recovered)? {
        return Ok(report);
    }
    let answer =
        serde_json::to_vec(&outcome).map_err(|e| Error::new(Kind::Operational, e.to_string()))?;
    std::fs::write(staging.path().join("answer.json"), &answer)
        .map_err(|e| Error::io("cannot write the staged answer", &e))?;
    crash_point(op, "staged");

    // Stage 3: the decision, against the approved version this one updates.
    let agent_list = resolve_and_remember(store, &intake.agents)?;
    refuse_index_switch(store, intake, &skill, &agent_list, recorded_from)?;
    let base = base_version(store, &skill, &agent_list, recorded_from)?;
    let diff = match &base {
        Some(b) => {
            let old = store.answer(&b.digest)?;
            Some(
                diff::diff(&old.version(), &outcome.version())
                    .map_err(|e| Error::new(Kind::Operational, e.to_string()))?,
            )
        }
        None => None,
    };
    let root = store.root().to_owned();
    let past = store.records.read(|tx| withdrawn_last(tx, &root, &skill))?;
    let policy_decision = past_withdrawal(
        intake.policy.decide(&review, &facts, diff.as_ref()),
        past.as_ref(),
    );
    let review_sha256 = review_sha(&review);
    // The fleet's record of this digest, if another host (or an earlier intake) made one: a
    // person's decision holds here too, a policy's is this host's own.
    let recorded = store.records.read(|tx| tx.version(&digest))?;
    let merged = merge(recorded.as_ref(), &policy_decision, &review_sha256)?;
    crate::stop_point::stop_point(&format!("{op}:decided"));
    let change = diff
        .as_ref()
        .map_or("first", |d| d.change.as_str())
        .to_owned();
    let mut prov_json =
        serde_json::to_value(&prov).map_err(|e| Error::new(Kind::Operational, e.to_string()))?;
    redact_json(&mut prov_json);
    let time = now();
    let state = merged.state;
    let version = Version {
        digest: digest.clone(),
        skill: skill.clone(),
        state,
        stored: state != State::Denied,
        quarantined: false,
        decided_by: String::new(),
        rule: None,
        findings: Vec::new(),
        change: change.clone(),
        review_sha256: review_sha256.clone(),
        review_summary: review_summary(&review),
        agents: agent_list.iter().map(|(n, _)| n.clone()).collect(),
        provenance: prov_json.clone(),
        withdrawn_reason: None,
        seq: 0,
        created_at: time.clone(),
    };
    let mut report = InstallReport {
        skill: skill.clone(),
        digest: digest.clone(),
        intake: "new",
        decision: merged.decision.clone(),
        change,
        state,
        agents: Vec::new(),
        review_sha256: version.review_sha256.clone(),
        review_summary: version.review_summary.clone(),
        review: Some(review),
        diff,
        provenance: prov_json,
        recovered,
        problems: Vec::new(),
    };
    let event_kind = if base.is_some() {
        "updated"
    } else {
        "installed"
    };
    // Empty for a local file: `update` then looks at this host's older versions.
    let index_url = Some(prov.index_url.as_str());
    // The decision is redone inside the write transaction, against the record as it is there
    // (see `redecide`), and recorded from that fresh decision, never from the copy read above.
    let record = |tx: &Tx<'_>| -> Result<Merged, Error> {
        let (seen, m) = redecide(tx, &digest, &merged, &policy_decision, &review_sha256, op)?;
        // Security: taken again where it is written, as the decision is. A version of this
        // skill withdrawn on another host while this intake ran is not approved past.
        if past.is_none()
            && matches!(policy_decision, Decision::Approved { .. })
            && let Some(w) = withdrawn_last(tx, &root, &skill)?
        {
            return Err(Error::new(
                Kind::Operational,
                format!(
                    "{}@{} was withdrawn while this {op} ran, so {digest} needs a person's decision now; nothing was recorded (run the {op} again)",
                    w.skill, w.digest
                ),
            ));
        }
        let (rule, findings) = decision_fields(&m);
        let v = Version {
            decided_by: m.decided_by.clone(),
            rule,
            findings,
            ..version.clone()
        };
        match m.fleet {
            FleetWrite::Record => tx.upsert_version(&v, seen.as_ref())?,
            // This host's policy denies a version the fleet keeps: only this host refuses.
            FleetWrite::Keep if m.state == State::Denied => tx.set_stored(&digest, false)?,
            FleetWrite::Keep => tx.set_host_version(&digest, Some(&v.agents))?,
        }
        if m.state != State::Denied {
            tx.set_index_url(&digest, index_url)?;
            tx.event_about(
                &time,
                &skill,
                Some(&digest),
                event_kind,
                "skillbox",
                &format!("change: {}", v.change),
                About {
                    agent: None,
                    index_url,
                },
            )?;
        }
        tx.event(
            &time,
            &skill,
            Some(&digest),
            decision_kind(m.state),
            &m.actor,
            &decision_detail(&m.decision),
        )?;
        Ok(m)
    };
    if state == State::Denied {
        drop(staging);
        report.decision = store.records.write(|tx| record(tx))?.decision;
        return Ok(report);
    }
    // Stage 4: promotion (intent first), then the records and the new installations at once.
    let changes = if state == State::Approved {
        plan(store, &skill, &agent_list, &digest)?
    } else {
        Vec::new()
    };
    precheck(store, &skill, &changes)?;
    let promote = journal::begin_promote(store, staging.path(), &digest)?;
    crash_point(op, "promote-intent");
    store.promote(&staging, &digest)?;
    crash_point(op, "promoted");
    let written = store.records.write(|tx| {
        let m = record(tx)?;
        // The agents named are recorded now, so an approval (of a pending version) finds them.
        for (name, dir) in &agent_list {
            tx.add_agent(name, dir)?;
        }
        let seq = record_changes(
            tx,
            &skill,
            &changes,
            &time,
            "activated",
            &m.actor,
            Some(recorded_from.unwrap_or("")),
        )?;
        if m.state == State::Approved {
            record_sources(
                tx,
                &skill,
                &agent_list,
                recorded_from,
                &changes,
                &time,
                &m.actor,
            )?;
        }
        tx.remove_intent(promote)?;
        Ok((seq, m))
    });
    let (links, fresh) = match written {
        Ok(w) => w,
        Err(e) => {
            // Nothing was recorded and the promote intent still stands: undo the promotion now
            // (the tree the records never listed goes), as the next command's recovery would.
            let _ = journal::recover(store);
            return Err(e);
        }
    };
    report.decision = fresh.decision;
    crash_point(op, "recorded");
    // The report lists only the agents that did move; a failed switch is a problem line (and
    // the records keep that agent where its link still is).
    let failed = journal::switch_links(store, links, &skill, &changes, op)?;
    (report.agents, report.problems) = moved_and_failed(changes, failed);
    Ok(report)
}

/// The newest version of `skill` withdrawn (in the records, or on this host with `withdraw
/// --local`) when no version of it recorded after it is approved: the release after a
/// withdrawal. `None` when every withdrawal of it was followed by an approved version, or there
/// is none.
fn withdrawn_last(tx: &Tx<'_>, root: &Path, skill: &str) -> Result<Option<Version>, Error> {
    // Newest first: the first withdrawn one found before an approved one.
    for v in tx.versions_of(skill)?.into_iter().rev() {
        if v.state == State::Withdrawn || quarantine::withdrawn_here(root, &v.digest)? {
            return Ok(Some(v));
        }
        if v.state == State::Approved {
            return Ok(None);
        }
    }
    Ok(None)
}

/// A policy's decision on a new version of a skill whose last version was withdrawn (`past`,
/// see [`withdrawn_last`]): an approval becomes a question for a person, and a question names
/// the withdrawal too. Security: a withdrawal is of the bytes, and the index that served them
/// can serve the same files again under a new digest (re-compressed, one byte changed). With
/// nothing grown since the approved version the agents went back to (instructions in SKILL.md
/// grow no capability), `updates.content_only` would approve it, and every agent would be back
/// on what a person withdrew. So no policy approves past a withdrawal: a person decides the
/// release that follows it, and once a person approves one, the policy decides again.
fn past_withdrawal(policy: Decision, past: Option<&Version>) -> Decision {
    let Some(w) = past else {
        return policy;
    };
    let finding = format!(
        "{}@{} was withdrawn ({}) and no version of {} was approved since: a person decides the version after a withdrawal, whatever the policy approves",
        w.skill,
        w.digest,
        w.withdrawn_reason
            .as_deref()
            .unwrap_or("on this host, with --local"),
        w.skill
    );
    match policy {
        Decision::Approved { .. } => Decision::NeedsApproval {
            findings: vec![finding],
        },
        Decision::NeedsApproval { mut findings } => {
            findings.push(finding);
            Decision::NeedsApproval { findings }
        }
        d @ Decision::Denied { .. } => d,
    }
}

/// The event kind of a decision.
fn decision_kind(state: State) -> &'static str {
    match state {
        State::Approved => "approved",
        State::Pending => "needs_approval",
        State::Denied | State::Withdrawn => "denied",
    }
}

/// The event detail of a decision.
fn decision_detail(d: &Decision) -> String {
    match d {
        Decision::Approved { rule } | Decision::Denied { rule } => rule.clone(),
        Decision::NeedsApproval { findings } => findings.join("; "),
    }
}

/// The rule (a policy's approval or denial) and the findings (what waits for a person) a
/// decision records.
fn decision_fields(m: &Merged) -> (Option<String>, Vec<String>) {
    let rule = match &m.decision {
        Decision::Approved { rule } | Decision::Denied { rule } if m.decided_by == "policy" => {
            Some(rule.clone())
        }
        _ => None,
    };
    let findings = match &m.decision {
        Decision::NeedsApproval { findings } => findings.clone(),
        _ => Vec::new(),
    };
    (rule, findings)
}

/// Inside an intake's write transaction: read the fleet's record of `digest` again and redo
/// the decision against it. Security: the record read before staging may be stale (another
/// host withdrew the version, a person denied it, another host's policy asked about it since);
/// deciding from that copy would overwrite the newer decision and could activate a withdrawn
/// version. The staged work (promoted or not, links planned or not) was planned for `planned`:
/// a fresh decision of another state, or by someone else, fails saying what changed, and the
/// transaction records nothing. Returns the record as read here (for the conditional write)
/// and the fresh decision.
fn redecide(
    tx: &Tx<'_>,
    digest: &str,
    planned: &Merged,
    policy: &Decision,
    review_sha256: &str,
    op: &str,
) -> Result<(Option<Version>, Merged), Error> {
    let seen = tx.version(digest)?;
    let fresh = merge(seen.as_ref(), policy, review_sha256).map_err(|mut e| {
        e.message = format!(
            "{}; it changed while this {op} ran: nothing was recorded",
            e.message
        );
        e
    })?;
    if fresh.state != planned.state || fresh.decided_by != planned.decided_by {
        return Err(Error::new(
            Kind::Operational,
            format!(
                "the records of {digest} changed while this {op} ran: it was to be {} by {}, it is now {} by {}; nothing was recorded (run the {op} again)",
                planned.state.as_str(),
                planned.decided_by,
                fresh.state.as_str(),
                fresh.decided_by
            ),
        ));
    }
    Ok((seen, fresh))
}

/// Whether an intake writes its decision into the fleet's record of the version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FleetWrite {
    /// Record (or re-record) the version with this intake's decision.
    Record,
    /// Keep the fleet's record as it is; only this host's store changes.
    Keep,
}

/// The decision of one intake on this host, given what the fleet recorded.
#[derive(Debug, Clone)]
struct Merged {
    decision: Decision,
    state: State,
    /// `policy` or the recorded `person:NAME`.
    decided_by: String,
    /// Who the decision event names.
    actor: String,
    fleet: FleetWrite,
}

/// Combine this host's policy decision with the fleet's record of the same digest:
/// - nothing recorded, or a policy's denial (re-evaluated, as on one host): this decision.
/// - a person's approval, and this host's review is the one they approved: approved, without
///   asking again; with another review, the decision is not applied silently: it waits for a
///   person again (fleet-wide, failing closed), saying why.
/// - a policy's approval or a pending version: this host's policy cannot approve for others
///   (another host's laxer policy must not activate what a stricter one asked about); it may
///   ask (the version waits, fleet-wide) or deny (here only).
/// - a person's denial, a withdrawal: refused.
fn merge(
    recorded: Option<&Version>,
    policy: &Decision,
    review_sha256: &str,
) -> Result<Merged, Error> {
    let own = |fleet| {
        let state = match policy {
            Decision::Approved { .. } => State::Approved,
            Decision::NeedsApproval { .. } => State::Pending,
            Decision::Denied { .. } => State::Denied,
        };
        Merged {
            decision: policy.clone(),
            state,
            decided_by: "policy".into(),
            actor: "policy".into(),
            fleet,
        }
    };
    let Some(r) = recorded else {
        return Ok(own(FleetWrite::Record));
    };
    let by_person = r.decided_by.starts_with("person:");
    match (r.state, policy) {
        (State::Withdrawn, _) => {
            Err(state_error(r).unwrap_or_else(|| Error::new(Kind::Withdrawn, "withdrawn")))
        }
        (State::Denied, _) if by_person => {
            Err(state_error(r).unwrap_or_else(|| Error::new(Kind::Denied, "denied")))
        }
        (State::Denied, _) => Ok(own(FleetWrite::Record)),
        (_, Decision::Denied { .. }) => Ok(own(FleetWrite::Keep)),
        (State::Approved, _) if by_person && r.review_sha256 != review_sha256 => {
            let mut findings = vec![format!(
                "review differs: this host's review {review_sha256} is not the one {} approved ({})",
                r.decided_by, r.review_sha256
            )];
            if let Decision::NeedsApproval { findings: f } = policy {
                findings.extend(f.iter().cloned());
            }
            Ok(Merged {
                decision: Decision::NeedsApproval { findings },
                state: State::Pending,
                decided_by: "policy".into(),
                actor: "policy".into(),
                fleet: FleetWrite::Record,
            })
        }
        (State::Approved, _) if by_person => Ok(Merged {
            decision: Decision::Approved {
                rule: format!(
                    "recorded decision: approved by {}; this host's review is the one approved",
                    r.decided_by
                ),
            },
            state: State::Approved,
            decided_by: r.decided_by.clone(),
            actor: "skillbox".into(),
            fleet: FleetWrite::Keep,
        }),
        (State::Approved, Decision::Approved { .. }) => Ok(own(FleetWrite::Keep)),
        (State::Approved, Decision::NeedsApproval { .. }) => Ok(own(FleetWrite::Record)),
        (State::Pending, _) => {
            let mut findings = r.findings.clone();
            if let Decision::NeedsApproval { findings: f } = policy {
                findings.extend(f.iter().filter(|x| !r.findings.contains(x)).cloned());
            }
            Ok(Merged {
                decision: Decision::NeedsApproval { findings },
                state: State::Pending,
                decided_by: "policy".into(),
                actor: "policy".into(),
                fleet: FleetWrite::Keep,
            })
        }
    }
}

fn agent_change(c: LinkChange) -> AgentChange {
    AgentChange {
        agent: c.agent,
        dir: c.dir,
        from: c.from,
        to: c.to,
    }
}

/// The version an update is compared with: what the first named agent runs, else the newest
/// approved stored version; for an intake from an index (`index_url`), only one taken from
/// that same index.
fn base_version(
    store: &mut Store,
    skill: &str,
    agents: &[(String, String)],
    index_url: Option<&str>,
) -> Result<Option<Version>, Error> {
    let root = store.root().to_owned();
    store.records.read(|tx| {
        // Security: a version of the same name from another index is another publisher's
        // skill, not an earlier version of this one. Compared with it, a package asking for
        // what a person approved of the other's would be a `content_only` update, approved by
        // `updates.content_only` without anyone asked about the capabilities of this one.
        let same_index = |i: &Install| -> Result<bool, Error> {
            Ok(match (index_url, tx.source_of(i)?) {
                (Some(u), Some(from)) => u == from,
                _ => true,
            })
        };
        for (a, _) in agents {
            // Security: only an approved version is a base. An agent can stay recorded on a
            // withdrawn one (an entry its withdrawal could not move); a diff against it would
            // call a new version carrying the withdrawn capabilities `content_only`, and the
            // policy's `updates.content_only` would approve what a person withdrew.
            if let Some(i) = tx.installs_of(skill)?.into_iter().find(|i| i.agent == *a)
                && same_index(&i)?
                && let Some(v) = tx.version(&i.digest)?
                && v.stored
                && v.state == State::Approved
            {
                return Ok(Some(v));
            }
        }
        let Some(v) = previous_to_go_to(tx, &root, skill, i64::MAX)? else {
            return Ok(None);
        };
        let as_installed = Install {
            agent: String::new(),
            skill: skill.to_owned(),
            digest: v.digest.clone(),
            index_url: None,
        };
        Ok(same_index(&as_installed)?.then_some(v))
    })
}

/// Refuse (exit 2, nothing changed) to move an agent whose version of `skill` was taken from
/// another index than `index_url` onto this one's, unless `--switch-index`: two publishers may
/// list skills of one name, and one must never silently replace the other in an agent's
/// directory. `None` (a local file) is not checked: the operator names its bytes.
fn refuse_index_switch(
    store: &mut Store,
    intake: &Intake<'_>,
    skill: &str,
    agents: &[(String, String)],
    index_url: Option<&str>,
) -> Result<(), Error> {
    let Some(url) = index_url.filter(|u| !u.is_empty()) else {
        return Ok(());
    };
    if intake.switch_index {
        return Ok(());
    }
    let mut lines = Vec::new();
    store.records.read(|tx| {
        for i in tx.installs_of(skill)? {
            if !agents.iter().any(|(a, _)| *a == i.agent) {
                continue;
            }
            if let Some(from) = tx.source_of(&i)?
                && from != url
            {
                lines.push(format!(
                    "agent {} runs {skill}@{} taken from {from}",
                    i.agent, i.digest
                ));
            }
        }
        Ok(())
    })?;
    if lines.is_empty() {
        return Ok(());
    }
    Err(Error::new(
        Kind::Usage,
        format!(
            "{}; {url} lists a {skill} of its own, and another index's skill of the same name (another publisher's, or a mirror's) never replaces one silently: nothing was changed. To move these agents to this index, add --switch-index; to keep both, install it for an agent of its own",
            lines.join("; ")
        ),
    ))
}

/// After an intake from `index_url` (`None`: a local file) put `agents` on `skill`: each
/// installation records that index as the one `update` re-reads for it. An agent that stays on
/// its bytes (not in `moved`, whose events name the index they arrive from) but now takes them
/// from another index (`--switch-index` onto a mirror of the same bytes) gets an
/// `index_switched` event: the index `update` reads for it changed, and provenance shows when
/// and by whom.
#[allow(clippy::too_many_arguments)]
fn record_sources(
    tx: &Tx<'_>,
    skill: &str,
    agents: &[(String, String)],
    index_url: Option<&str>,
    moved: &[LinkChange],
    time: &str,
    actor: &str,
) -> Result<(), Error> {
    let url = index_url.unwrap_or("");
    for (a, _) in agents {
        let before = match moved.iter().any(|c| c.agent == *a) {
            true => None,
            false => tx
                .install(a, skill)?
                .zip(tx.index_of_agent(a, skill)?)
                .filter(|(_, was)| was != url),
        };
        tx.set_install_source(a, skill, url)?;
        if let Some((digest, was)) = before {
            let shown = |u: &str| {
                if u.is_empty() {
                    "a local file".to_owned()
                } else {
                    u.to_owned()
                }
            };
            tx.event_about(
                time,
                skill,
                Some(&digest),
                "index_switched",
                actor,
                &format!(
                    "agent {a}: {skill}@{digest} from {} -> {}",
                    shown(&was),
                    shown(url)
                ),
                About {
                    agent: Some(a),
                    index_url: Some(url),
                },
            )?;
        }
    }
    Ok(())
}

/// The link changes that put every agent in `agents` on `digest`.
fn plan(
    store: &mut Store,
    skill: &str,
    agents: &[(String, String)],
    digest: &str,
) -> Result<Vec<LinkChange>, Error> {
    store.records.read(|tx| {
        let mut out = Vec::new();
        for (a, dir) in agents {
            let from = tx.install(a, skill)?;
            if from.as_deref() != Some(digest) {
                out.push(LinkChange {
                    agent: a.clone(),
                    dir: dir.clone(),
                    from,
                    to: Some(digest.to_owned()),
                });
            }
        }
        Ok(out)
    })
}

/// Inside a transaction: record each agent's new installation, its event, and the links intent.
/// `source`: the index the agents moved onto their version take it from (an intake's, `""` for
/// a local file; an approval's: the one its install read); `None`: each keeps its own (a
/// rollback, a withdrawal's move). Each event names its agent and the index that agent took
/// the version from (the one it leaves, the one it arrives on), so `provenance` shows index ->
/// version -> agent for every move.
fn record_changes(
    tx: &Tx<'_>,
    skill: &str,
    changes: &[LinkChange],
    time: &str,
    kind: &str,
    actor: &str,
    source: Option<&str>,
) -> Result<Option<i64>, Error> {
    // Security: checked inside the writing transaction (write transactions serialise
    // fleet-wide): once a withdrawal or a person's denial is committed on any host, no host
    // records an agent moving onto the version; only an approved version is ever activated.
    let mut checked: Vec<&str> = Vec::new();
    for to in changes.iter().filter_map(|c| c.to.as_deref()) {
        if checked.contains(&to) {
            continue;
        }
        checked.push(to);
        match tx.version(to)? {
            Some(v) if v.state == State::Approved => {}
            Some(v) => {
                return Err(state_error(&v)
                    .unwrap_or_else(|| Error::new(Kind::Operational, "not approved")));
            }
            None => {
                return Err(Error::new(
                    Kind::NotFound,
                    format!("{skill}@{to} is not in the records"),
                ));
            }
        }
    }
    for c in changes {
        let left_from = match c.from {
            Some(_) => tx.index_of_agent(&c.agent, skill)?,
            None => None,
        };
        tx.add_agent(&c.agent, &c.dir)?;
        tx.set_install(&c.agent, skill, c.to.as_deref())?;
        if let (Some(s), Some(_)) = (source, c.to.as_deref()) {
            tx.set_install_source(&c.agent, skill, s)?;
        }
        let arrived_from = match c.to {
            Some(_) => tx.index_of_agent(&c.agent, skill)?,
            None => None,
        };
        let detail = format!(
            "agent {}: {} -> {}",
            c.agent,
            c.from.as_deref().unwrap_or("none"),
            c.to.as_deref().unwrap_or("none")
        );
        // Each version's history says both who left it and who arrived.
        if let (Some(from), false) = (c.from.as_deref(), kind == "activated") {
            tx.event_about(
                time,
                skill,
                Some(from),
                kind,
                actor,
                &detail,
                About {
                    agent: Some(&c.agent),
                    index_url: left_from.as_deref(),
                },
            )?;
        }
        if let Some(to) = c.to.as_deref() {
            tx.event_about(
                time,
                skill,
                Some(to),
                "activated",
                actor,
                &format!("{kind}: {detail}"),
                About {
                    agent: Some(&c.agent),
                    index_url: arrived_from.as_deref(),
                },
            )?;
        }
    }
    journal::add_links(tx, skill, changes)
}

/// An already-recorded digest: activate it if approved, else say why not. `None` when the
/// digest is unknown (or known but collected: the intake runs again).
fn known(
    store: &mut Store,
    intake: &Intake<'_>,
    skill: &str,
    digest: &str,
    index_url: Option<&str>,
    recovered: &[String],
) -> Result<Option<InstallReport>, Error> {
    // Withdrawn here with --local, before or whatever the records say (exit 9).
    quarantine::refuse(store.root(), digest)?;
    let Some(v) = store.records.read(|tx| tx.version(digest))? else {
        return Ok(None);
    };
    // A withdrawal is of the bytes, under any name: the same artifact listed under another
    // skill name is the withdrawn version offered again, and says so (exit 9).
    if v.skill != skill
        && v.state == State::Withdrawn
        && let Some(e) = state_error(&v)
    {
        return Err(Error::new(
            e.kind,
            format!("{}; the index lists it as skill {skill}", e.message),
        ));
    }
    if v.skill != skill {
        return Err(Error::new(
            Kind::Rejected,
            format!("{digest} is recorded as skill {}, not {skill}", v.skill),
        ));
    }
    // A policy's denial is re-evaluated (the policy may have changed); a person's stands.
    if v.state == State::Denied && v.decided_by == "policy" {
        return Ok(None);
    }
    if let Some(e) = state_error(&v) {
        return Err(e);
    }
    if !v.stored {
        return Ok(None);
    }
    let agent_list = resolve_and_remember(store, &intake.agents)?;
    refuse_index_switch(store, intake, skill, &agent_list, index_url)?;
    let changes = plan(store, skill, &agent_list, digest)?;
    precheck(store, skill, &changes)?;
    if changes.iter().any(|c| c.to.is_some()) {
        check_intact(store, skill, digest)?;
    }
    let time = now();
    let links = store.records.write(|tx| {
        if index_url.is_some() {
            tx.set_index_url(digest, index_url)?;
        }
        let seq = record_changes(
            tx,
            skill,
            &changes,
            &time,
            "activated",
            "skillbox",
            Some(index_url.unwrap_or("")),
        )?;
        record_sources(
            tx,
            skill,
            &agent_list,
            index_url,
            &changes,
            &time,
            "skillbox",
        )?;
        Ok(seq)
    })?;
    crash_point(intake.op, "recorded");
    let intake_kind = if changes.is_empty() {
        "unchanged"
    } else {
        "known"
    };
    let failed = journal::switch_links(store, links, skill, &changes, intake.op)?;
    let (agents, problems) = moved_and_failed(changes, failed);
    Ok(Some(InstallReport {
        skill: skill.to_owned(),
        digest: digest.to_owned(),
        intake: intake_kind,
        decision: Decision::Approved {
            rule: format!("recorded decision by {}", v.decided_by),
        },
        change: "unchanged".into(),
        state: v.state,
        agents,
        review_sha256: v.review_sha256,
        review_summary: v.review_summary,
        review: None,
        diff: None,
        provenance: v.provenance,
        recovered: recovered.to_vec(),
        problems,
    }))
}

/// Refuse to point an agent at a stored tree that is no longer what was reviewed: re-hashed
/// against its inventory (`verify`'s check). Security: the store is immutable by convention
/// only (write bits removed); the user it belongs to, or an agent running as that user, can
/// change a tree after its review (a version waiting for a person, an older one a rollback or
/// a withdrawal goes back to), and the agent would load bytes nobody reviewed.
fn check_intact(store: &Store, skill: &str, digest: &str) -> Result<(), Error> {
    let answer = store.answer(digest)?;
    let problems = store::check_tree(&store.tree(digest), &answer);
    if problems.is_empty() {
        return Ok(());
    }
    let shown: Vec<&str> = problems.iter().take(3).map(String::as_str).collect();
    Err(Error::new(
        Kind::Operational,
        format!(
            "{skill}@{digest}: its stored tree is not what was reviewed ({}{}); no agent was pointed at it (`skillbox verify` lists every difference)",
            shown.join("; "),
            if problems.len() > shown.len() {
                "; ..."
            } else {
                ""
            }
        ),
    ))
}

/// Why `v` cannot be approved: it is not pending.
fn not_pending(v: &Version) -> Error {
    state_error(v).unwrap_or_else(|| {
        Error::new(
            Kind::Usage,
            format!("{}@{} is already approved", v.skill, v.digest),
        )
    })
}

/// Find the version `r` names (a unique digest prefix of that skill).
pub fn find_version(store: &mut Store, r: &VersionRef) -> Result<Version, Error> {
    let found = store
        .records
        .read(|tx| tx.versions_matching(&r.skill, &r.digest))?;
    match found.len() {
        1 => Ok(found
            .into_iter()
            .next()
            .ok_or_else(|| Error::new(Kind::NotFound, "vanished"))?),
        0 => Err(Error::new(
            Kind::NotFound,
            format!(
                "no version {}@{} in the records (see skillbox list)",
                r.skill, r.digest
            ),
        )),
        n => Err(Error::new(
            Kind::Usage,
            format!(
                "{}@{} matches {n} versions; give more of the digest",
                r.skill, r.digest
            ),
        )),
    }
}

/// `approve`: a person's decision for a pending version; activates it for the agents named
/// (by default those the install asked for).
pub fn approve(
    store: &mut Store,
    r: &VersionRef,
    who: &str,
    agent_args: &[AgentArg],
) -> Result<InstallReport, Error> {
    let recovered = prepare(store)?;
    let v = find_version(store, r)?;
    quarantine::refuse(store.root(), &v.digest)?;
    if v.state != State::Pending {
        return Err(not_pending(&v));
    }
    if !v.stored {
        return Err(Error::new(
            Kind::NotFound,
            format!(
                "{}@{} is not in this host's store (install it here first, or approve it on a host that has it: `skillbox review` there shows the review)",
                v.skill, v.digest
            ),
        ));
    }
    let args: Vec<AgentArg> = if agent_args.is_empty() {
        v.agents
            .iter()
            .map(|n| AgentArg::recorded(n.clone()))
            .collect()
    } else {
        agent_args.to_vec()
    };
    let agent_list = resolve_and_remember(store, &args)?;
    let changes = plan(store, &v.skill, &agent_list, &v.digest)?;
    precheck(store, &v.skill, &changes)?;
    // The person approves the review; the bytes activated must be the ones it was made of.
    check_intact(store, &v.skill, &v.digest)?;
    // The person decides on the review this host made (`skillbox review` shows it here); in a
    // fleet another host's review of the same digest may differ, so the approval records this one.
    let answer = store.answer(&v.digest)?;
    let review = answer.review.as_ref().ok_or_else(|| {
        Error::new(
            Kind::Operational,
            "corrupt store: the stored answer has no review",
        )
    })?;
    let (sha, summary) = (review_sha(review), review_summary(review));
    let time = now();
    let actor = format!("person:{who}");
    let links = store.records.write(|tx| {
        // Security: decided again on the record as it is inside this transaction (writes
        // serialise fleet-wide): a withdrawal or a denial committed since the read above stands,
        // and nothing is recorded.
        let seen = tx.version(&v.digest)?.ok_or_else(|| {
            Error::new(Kind::NotFound, format!("{}@{} vanished", v.skill, v.digest))
        })?;
        if seen.state != State::Pending {
            let mut e = not_pending(&seen);
            e.message = format!(
                "{}; it changed since approve read it: nothing was recorded",
                e.message
            );
            return Err(e);
        }
        tx.set_state(&seen, State::Approved, &actor, None)?;
        if sha != seen.review_sha256 {
            tx.set_review(&v.digest, &sha, &summary)?;
        }
        let covered = format!("covers: {} (review {sha})", seen.findings.join("; "));
        tx.event(
            &time,
            &v.skill,
            Some(&v.digest),
            "approved",
            &actor,
            &covered,
        )?;
        // The agents activated now take the skill from the index this host took the version
        // from (an `install --switch-index` that waited for this approval moves them to it).
        let from = tx.source_of(&Install {
            agent: String::new(),
            skill: v.skill.clone(),
            digest: v.digest.clone(),
            index_url: None,
        })?;
        record_changes(
            tx,
            &v.skill,
            &changes,
            &time,
            "activated",
            &actor,
            Some(from.as_deref().unwrap_or("")),
        )
    })?;
    crash_point("approve", "recorded");
    let failed = journal::switch_links(store, links, &v.skill, &changes, "approve")?;
    let (agents, problems) = moved_and_failed(changes, failed);
    Ok(InstallReport {
        skill: v.skill.clone(),
        digest: v.digest.clone(),
        intake: "known",
        decision: Decision::Approved {
            rule: format!("approved by {actor}"),
        },
        change: v.change.clone(),
        state: State::Approved,
        agents,
        review_sha256: sha,
        review_summary: summary,
        review: None,
        diff: None,
        provenance: v.provenance,
        recovered,
        problems,
    })
}

/// `deny`: a person refuses a pending (or an approved, unused) version; its tree leaves the store.
pub fn deny(store: &mut Store, r: &VersionRef, who: &str, reason: &str) -> Result<Version, Error> {
    prepare(store)?;
    let v = find_version(store, r)?;
    if v.state == State::Withdrawn || v.state == State::Denied {
        return Err(state_error(&v).unwrap_or_else(|| Error::new(Kind::Denied, "denied")));
    }
    let actor = format!("person:{who}");
    let time = now();
    store.records.write(|tx| {
        // Security: checked inside the writing transaction (writes serialise fleet-wide), so an
        // activation or a withdrawal committed since the read above is seen.
        let seen = tx
            .version(&v.digest)?
            .ok_or_else(|| Error::new(Kind::NotFound, format!("{}@{} vanished", v.skill, v.digest)))?;
        if let Some(e) = state_error(&seen).filter(|_| matches!(seen.state, State::Withdrawn | State::Denied)) {
            return Err(e);
        }
        // Any host's agents: a denial is the fleet's, and an active version is withdrawn instead.
        let users = tx.fleet_installs_using(&v.digest)?;
        if !users.is_empty() {
            return Err(Error::new(
                Kind::Usage,
                format!(
                    "{}@{} is active for {} agent(s); withdraw it instead (skillbox withdraw {}@{} --reason ...)",
                    v.skill,
                    v.digest,
                    users.len(),
                    v.skill,
                    v.digest
                ),
            ));
        }
        tx.set_state(&seen, State::Denied, &actor, None)?;
        tx.set_stored(&v.digest, false)?;
        tx.event(&time, &v.skill, Some(&v.digest), "denied", &actor, reason)
    })?;
    // The records no longer back the tree: recovery would remove it too.
    store::remove_tree(&store.version_dir(&v.digest))?;
    find_version(store, r)
}

/// The answer of rollback and withdraw.
#[derive(Debug, Clone, Serialize)]
pub struct MoveReport {
    pub skill: String,
    pub digest: Option<String>,
    pub agents: Vec<AgentChange>,
    pub problems: Vec<String>,
    pub recovered: Vec<String>,
    /// After a withdrawal: the agents, on any host sharing the records, still on the version.
    pub still_on: Vec<HostAgent>,
    /// `withdraw` of a version withdrawn before (on this host or another): the withdrawal that
    /// stands. The command then only moves this host's agents off it, as `sync` does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub already_withdrawn: Option<Withdrawal>,
}

/// A recorded withdrawal: who, when, on which host, and why.
#[derive(Debug, Clone, Serialize)]
pub struct Withdrawal {
    pub by: String,
    pub time: String,
    pub host: Option<String>,
    pub reason: Option<String>,
}

/// `rollback`: every named agent (all by default) back to the previous approved,
/// non-withdrawn version, or to `--to`.
pub fn rollback(
    store: &mut Store,
    skill: &str,
    agent_args: &[AgentArg],
    to: Option<&VersionRef>,
    who: &str,
) -> Result<MoveReport, Error> {
    let recovered = prepare(store)?;
    let target = match to {
        Some(r) => {
            if r.skill != skill {
                return Err(Error::new(
                    Kind::Usage,
                    format!("--to names skill {}, not {skill}", r.skill),
                ));
            }
            let v = find_version(store, r)?;
            if let Some(e) = state_error(&v) {
                return Err(e);
            }
            quarantine::refuse(store.root(), &v.digest)?;
            if !v.stored {
                return Err(Error::new(
                    Kind::NotFound,
                    format!("{skill}@{} is no longer in the store", v.digest),
                ));
            }
            Some(v)
        }
        None => None,
    };
    let installs = store.records.read(|tx| tx.installs_of(skill))?;
    if installs.is_empty() {
        return Err(Error::new(
            Kind::NotFound,
            format!("{skill} is not installed for any agent"),
        ));
    }
    let wanted = resolve_and_remember(store, agent_args)?;
    let mut changes = Vec::new();
    for i in &installs {
        if !wanted.is_empty() && !wanted.iter().any(|(n, _)| *n == i.agent) {
            continue;
        }
        let to_digest = match &target {
            Some(t) => t.digest.clone(),
            None => {
                let root = store.root().to_owned();
                let prev = store.records.read(|tx| match tx.version(&i.digest)? {
                    Some(c) => previous_from(tx, &root, skill, c.seq, tx.source_of(i)?.as_deref()),
                    None => Ok(None),
                })?;
                match prev {
                    Some(p) => p.digest,
                    None => {
                        return Err(Error::new(
                            Kind::NotFound,
                            format!(
                                "agent {}: no approved version of {skill} older than {} to roll back to",
                                i.agent, i.digest
                            ),
                        ));
                    }
                }
            }
        };
        if to_digest != i.digest {
            let dir = store
                .records
                .read(|tx| tx.agent_dir(&i.agent))?
                .unwrap_or_default();
            changes.push(LinkChange {
                agent: i.agent.clone(),
                dir,
                from: Some(i.digest.clone()),
                to: Some(to_digest),
            });
        }
    }
    for (n, _) in &wanted {
        if !installs.iter().any(|i| i.agent == *n) {
            return Err(Error::new(
                Kind::NotFound,
                format!("agent {n} has no installation of {skill}"),
            ));
        }
    }
    precheck(store, skill, &changes)?;
    let mut targets: Vec<&str> = changes.iter().filter_map(|c| c.to.as_deref()).collect();
    targets.sort_unstable();
    targets.dedup();
    for d in targets {
        check_intact(store, skill, d)?;
    }
    let time = now();
    let links = store.records.write(|tx| {
        record_changes(
            tx,
            skill,
            &changes,
            &time,
            "rolled_back",
            &format!("person:{who}"),
            None,
        )
    })?;
    crash_point("rollback", "recorded");
    let failed = journal::switch_links(store, links, skill, &changes, "rollback")?;
    let (agents, problems) = moved_and_failed(changes, failed);
    Ok(MoveReport {
        skill: skill.to_owned(),
        digest: target.map(|t| t.digest),
        agents,
        problems,
        recovered,
        still_on: Vec::new(),
        already_withdrawn: None,
    })
}

/// The newest approved version of `skill` in this host's store older than `before` (store
/// order) that an agent may go to: a withdrawn one is never approved in the records, and one
/// withdrawn on this host with `withdraw --local` (its tree quarantined, or its withdrawal
/// waiting for the records) is skipped the same way, to the one before it.
fn previous_to_go_to(
    tx: &Tx<'_>,
    root: &Path,
    skill: &str,
    before: i64,
) -> Result<Option<Version>, Error> {
    let mut before = before;
    loop {
        match tx.previous_approved(skill, before)? {
            Some(p) if quarantine::withdrawn_here(root, &p.digest)? => before = p.seq,
            found => return Ok(found),
        }
    }
}

/// [`previous_to_go_to`] for an agent whose version was taken from `source` (an index URL;
/// `None`: a local file, or not known): a version this host took from another index is another
/// publisher's skill of the same name (or a mirror's), skipped. One whose index is not known
/// here (a local file) is taken, as before.
fn previous_from(
    tx: &Tx<'_>,
    root: &Path,
    skill: &str,
    before: i64,
    source: Option<&str>,
) -> Result<Option<Version>, Error> {
    let mut before = before;
    loop {
        let Some(p) = previous_to_go_to(tx, root, skill, before)? else {
            return Ok(None);
        };
        let theirs = tx.source_of(&Install {
            agent: String::new(),
            skill: skill.to_owned(),
            digest: p.digest.clone(),
            index_url: None,
        })?;
        match (source, theirs) {
            (Some(mine), Some(theirs)) if mine != theirs => before = p.seq,
            _ => return Ok(Some(p)),
        }
    }
}

/// The agents a journaled move did move, and one line per switch that failed (the records keep
/// those agents where they were: [`journal::switch_links`]).
fn moved_and_failed(
    changes: Vec<LinkChange>,
    failed: Vec<journal::Failed>,
) -> (Vec<AgentChange>, Vec<String>) {
    let agents = changes
        .into_iter()
        .enumerate()
        .filter(|(i, _)| !failed.iter().any(|f| f.index == *i))
        .map(|(_, c)| agent_change(c))
        .collect();
    (agents, failed.into_iter().map(|f| f.message).collect())
}

/// `withdraw`: the version can never be activated again, on any host sharing the records;
/// every agent of this host using it moves to its previous approved version, or loses the skill
/// where there is none; the hosts and agents still on it elsewhere are listed (`skillbox sync`
/// there moves them). Withdrawing an already withdrawn version (here or on another host, even at
/// the same moment) succeeds: the first withdrawal stands (`already_withdrawn` names it) and
/// this host's agents are moved off it as `sync` moves them.
pub fn withdraw(
    store: &mut Store,
    r: &VersionRef,
    reason: &str,
    who: &str,
) -> Result<MoveReport, Error> {
    // Containment does not wait on housekeeping: a recovery that fails (an intent it cannot
    // finish, a tree it cannot remove) is a problem line of this withdrawal, not its end.
    let (recovered, unrecovered) = match journal::recover(store) {
        Ok(r) => (r, None),
        Err(e) => (
            Vec::new(),
            Some(format!(
                "recovery of an earlier interrupted command failed ({e}); the withdrawal went ahead: run `skillbox verify`"
            )),
        ),
    };
    let mut v = match find_version(store, r) {
        Ok(v) => v,
        // A withdrawal is of the bytes: a full digest the records know under another skill
        // than the one typed (in a hurry, from an advisory naming it otherwise) is withdrawn
        // under the records' name, which the report shows, as `withdraw --local` does.
        Err(e) if e.kind == Kind::NotFound && r.digest.len() == "sha256:".len() + 64 => {
            store.records.read(|tx| tx.version(&r.digest))?.ok_or(e)?
        }
        Err(e) => return Err(e),
    };
    let actor = format!("person:{who}");
    // The withdrawal is committed first, in a transaction of its own, unless one stands. The
    // write is conditional on the record (not on the copy read above): a withdrawal another
    // host committed between that read and this write stands, and this one reports it as a
    // withdrawal found standing, exactly as when it was read so.
    let withdrew = v.state != State::Withdrawn && {
        stop_point("withdraw:decided");
        let time = now();
        let wrote = store.records.write(|tx| {
            let wrote = tx.withdraw(&v.digest, reason)?;
            if wrote {
                tx.event(
                    &time,
                    &v.skill,
                    Some(&v.digest),
                    "withdrawn",
                    &actor,
                    reason,
                )?;
            }
            Ok(wrote)
        })?;
        crash_point("withdraw", "withdrawn");
        stop_point("withdraw:withdrawn");
        wrote
    };
    let mut report = if withdrew {
        // The withdrawal stands fleet-wide from its commit: a command stopped after it (the
        // connection lost while this host's agents are moved) says so, not only that it
        // stopped, so nobody takes the version for still in use everywhere.
        move_off(store, &v, &actor, "withdraw").map_err(|mut e| {
            if e.message.starts_with(super::records::LOST) {
                e.message = format!(
                    "{}; the withdrawal itself was recorded before that: {}@{} is withdrawn fleet-wide (every other host moves its agents off it at its next command), and this host's agents were not all moved off it yet",
                    e.message, v.skill, v.digest
                );
            }
            e
        })?
    } else {
        // Withdrawn before (a runbook runs the same withdraw on every host), or meanwhile by
        // another host: the state it asks for holds, so this is no failure. It says whose
        // withdrawal stands (this reason is not recorded over it) and moves this host's agents
        // off it as `sync` does, a link of ours the records lost included.
        if v.state != State::Withdrawn {
            v = store
                .records
                .read(|tx| tx.version(&v.digest))?
                .ok_or_else(|| {
                    Error::new(
                        Kind::Operational,
                        format!("{}@{} vanished from the records", v.skill, v.digest),
                    )
                })?;
        }
        let host = store.records.host().to_owned();
        let earlier = store.records.read(|tx| tx.events_of(&v.skill, &v.digest))?;
        let earlier = earlier.into_iter().rev().find(|e| e.kind == "withdrawn");
        let found =
            found_on_withdrawn(store, &format!("skillbox:withdraw@{host}"), Some(&v.digest));
        let mut report = move_off(store, &v, &actor, "withdraw")?;
        if let Err(e) = found {
            report.problems.push(format!(
                "looking for links to it the records lost failed ({e}): run `skillbox sync`"
            ));
        }
        report.already_withdrawn = Some(Withdrawal {
            by: earlier
                .as_ref()
                .map_or_else(|| "unknown".into(), |e| e.actor.clone()),
            time: earlier
                .as_ref()
                .map_or_else(|| "unknown".into(), |e| e.time.clone()),
            host: earlier.and_then(|e| e.host),
            reason: v.withdrawn_reason.clone(),
        });
        report
    };
    report.recovered = recovered;
    report.problems.extend(unrecovered);
    Ok(report)
}

/// The pause `install:extracted` / `update:extracted` ([`crate::stop_point`]): the confined
/// extraction is done, the store lock not yet taken again. The point's name is only made in a
/// debug build.
fn extracted(op: &str) {
    #[cfg(debug_assertions)]
    stop_point(&format!("{op}:extracted"));
    #[cfg(not(debug_assertions))]
    let _ = op;
}

/// Move this host's agents off `v` (to the previous approved version in this host's store, or
/// to nothing), then switch the links (journaled, as every move).
///
/// The withdrawal is its own transaction, committed (by [`withdraw`], or found standing) before
/// anything about the moves is read:
/// what the moves need (the version they go to) may change under them on another host, and a
/// move that cannot be recorded is then a problem line that `sync` (and every command's
/// `prepare`) retries, never a withdrawal that did not happen.
///
/// A withdrawal is containment: it is always committed, whatever state one agent's entry is in,
/// so the version stops being installable on every host at once and every agent that can move
/// does. An agent whose entry skillbox cannot move (a directory or a link it did not make) is
/// left untouched and stays recorded on the withdrawn version, so `status` lists it, `gc`
/// keeps the tree and `sync` tries again; each one is a problem naming the agent and what to
/// do. An agent whose link is missing runs nothing of it: it moves like the others.
fn move_off(store: &mut Store, v: &Version, actor: &str, op: &str) -> Result<MoveReport, Error> {
    let root = store.root().to_owned();
    // Per agent, the previous version from the index its own version was taken from: the
    // same bytes may have reached two agents from two indexes (a mirror), and a withdrawal
    // never hands an agent to another publisher's skill of the same name.
    let users = store.records.read(|tx| {
        tx.installs_using(&v.digest)?
            .into_iter()
            .map(|i| {
                let source = tx.source_of(&i)?;
                let prev = previous_from(tx, &root, &v.skill, v.seq, source.as_deref())?;
                Ok((i, prev))
            })
            .collect::<Result<Vec<_>, Error>>()
    })?;
    let dirs: std::collections::HashMap<String, String> =
        store.records.read(|tx| tx.agents())?.into_iter().collect();
    let mut problems: Vec<String> = Vec::new();
    // Containment first: agents whose previous version's tree is not what was reviewed lose
    // the skill rather than go to it.
    let mut intact: Vec<(String, bool)> = Vec::new();
    let mut changes: Vec<LinkChange> = Vec::new();
    for (i, prev) in &users {
        let to = match prev {
            Some(p) => {
                let ok = match intact.iter().find(|(d, _)| *d == p.digest) {
                    Some((_, ok)) => *ok,
                    None => {
                        let ok = match check_intact(store, &p.skill, &p.digest) {
                            Ok(()) => true,
                            Err(e) => {
                                problems.push(format!(
                                    "{}; the agents leaving withdrawn {}@{} for it lose the skill instead",
                                    e.message, v.skill, v.digest
                                ));
                                false
                            }
                        };
                        intact.push((p.digest.clone(), ok));
                        ok
                    }
                };
                ok.then(|| p.digest.clone())
            }
            None => None,
        };
        let dir = dirs
            .get(&i.agent)
            .filter(|d| Path::new(d.as_str()).is_absolute());
        let Some(dir) = dir else {
            problems.push(format!(
                "agent {}: no directory is recorded for it, so its link cannot be found; it stays recorded on withdrawn {}@{}",
                i.agent, v.skill, v.digest
            ));
            continue;
        };
        let change = LinkChange {
            agent: i.agent.clone(),
            dir: dir.clone(),
            from: Some(v.digest.clone()),
            to: to.clone(),
        };
        if let Some(p) = unmovable(store, v, &change)? {
            problems.push(p);
        } else {
            changes.push(change);
        }
    }
    let time = now();
    let recorded = store.records.write(|tx| {
        record_changes(
            tx,
            &v.skill,
            &changes,
            &time,
            "moved_by_withdrawal",
            actor,
            None,
        )
    });
    let agents = match recorded {
        Ok(links) => {
            crash_point(op, "recorded");
            let failed = journal::switch_links(store, links, &v.skill, &changes, op)?;
            let (agents, failed) = moved_and_failed(changes, failed);
            problems.extend(failed);
            agents
        }
        // E.g. the version they were to move to was denied or withdrawn meanwhile on another
        // host: nothing moved, the agents stay recorded on `v`, and `sync` picks anew.
        Err(e) => {
            problems.push(format!(
                "{}@{}: its agents here were not moved ({e}); run `skillbox sync` to move them",
                v.skill, v.digest
            ));
            Vec::new()
        }
    };
    let still_on = store
        .records
        .read(|tx| fleet_users(tx, &v.skill, &v.digest))?;
    Ok(MoveReport {
        skill: v.skill.clone(),
        digest: Some(v.digest.clone()),
        agents,
        problems,
        recovered: Vec::new(),
        still_on,
        already_withdrawn: None,
    })
}

/// Why `c` (an agent on withdrawn `v`) cannot be moved off it, or `None` when its entry is the
/// link skillbox made (to `v`, or already to where it moves), or nothing.
fn unmovable(store: &Store, v: &Version, c: &LinkChange) -> Result<Option<String>, Error> {
    let link = journal::link_path(&c.dir, &v.skill);
    let withdrawn = store.tree(&v.digest);
    // Security: a missing agent directory is never recreated by a move off a withdrawn
    // version. It was most likely removed on purpose, or is on a filesystem not mounted now:
    // a directory made there (as root, owned by root) may be one the agent never reads, or be
    // hidden under the mount when it comes back, with skillbox's link to the withdrawn tree on
    // it. So the agent stays recorded on the withdrawn version (`status`: STILL ON; `gc` keeps
    // its tree, so the link works as before if it comes back) until its directory is back and
    // `sync` moves it.
    if let Ok(true) = agents::dir_missing(Path::new(&c.dir)) {
        return Ok(Some(journal::missing_dir_line(
            &c.agent, &c.dir, &v.skill, &v.digest,
        )));
    }
    let (what, todo) = match agents::inspect(&link) {
        Ok(agents::Entry::Absent) => return Ok(None),
        Ok(agents::Entry::Link(t))
            if t == withdrawn || c.to.as_deref().is_some_and(|d| t == store.tree(d)) =>
        {
            return Ok(None);
        }
        Ok(agents::Entry::Link(t)) => {
            let same = std::fs::canonicalize(&link)
                .ok()
                .is_some_and(|r| std::fs::canonicalize(&withdrawn).ok() == Some(r));
            if same {
                (
                    format!(
                        "is a symlink to {}, the withdrawn tree by another path (the agent still runs it), and skillbox did not create it",
                        t.display()
                    ),
                    format!("remove it (rm {})", link.display()),
                )
            } else {
                (
                    format!(
                        "is a symlink to {} and skillbox did not create it",
                        t.display()
                    ),
                    "check what it points at and move it away".to_owned(),
                )
            }
        }
        Ok(agents::Entry::Foreign) => (
            "exists (a directory or a file) and skillbox did not create it".to_owned(),
            "check it holds nothing of the withdrawn version and move it away".to_owned(),
        ),
        // A directory refused as given (reached through a link another user could change)
        // needs its real directory recorded; anything else is an I/O problem to fix.
        // Removing the entry by hand does not help: the directory is never looked into
        // through such a link, so skillbox cannot see that the entry is gone.
        Err(e) if e.kind == Kind::Usage => (
            format!("cannot be used ({e})"),
            format!(
                "make {} reachable without a link another user could change (until then skillbox does not look into it, so removing the entry by hand does not clear this)",
                c.dir
            ),
        ),
        Err(e) => (
            format!("cannot be inspected ({e})"),
            "make it readable".to_owned(),
        ),
    };
    Ok(Some(format!(
        "agent {}: {} {what}; it was left untouched and {} stays recorded on withdrawn {}@{}: {todo}, then run `skillbox sync` to move it",
        c.agent,
        link.display(),
        c.agent,
        v.skill,
        v.digest
    )))
}

/// One agent on one host.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct HostAgent {
    pub host: String,
    pub agent: String,
}

/// The answer of `sync`.
#[derive(Debug, Clone, Serialize)]
pub struct SyncReport {
    pub host: String,
    /// One entry per withdrawn version this host's agents were moved off.
    pub moved: Vec<MoveReport>,
    /// Versions whose agents could not be moved (an entry skillbox did not create, ...).
    pub problems: Vec<String>,
    pub recovered: Vec<String>,
}

/// Apply the fleet's withdrawals to this host: every agent here on a withdrawn version moves
/// off it exactly as a local `withdraw` moves it. A version that cannot be moved (an entry
/// skillbox did not create) is reported and the others still move.
fn apply_withdrawals(store: &mut Store) -> Result<(Vec<MoveReport>, Vec<String>), Error> {
    let host = store.records.host().to_owned();
    let stale: Vec<String> = {
        let mut d: Vec<String> = store
            .records
            .read(|tx| tx.fleet_installs_of_withdrawn())?
            .into_iter()
            .filter(|i| i.host == host)
            .map(|i| i.digest)
            .collect();
        d.dedup();
        d
    };
    let mut moved = Vec::new();
    let mut problems = Vec::new();
    for digest in stale {
        let Some(v) = store.records.read(|tx| tx.version(&digest))? else {
            continue;
        };
        match move_off(store, &v, &format!("skillbox:sync@{host}"), "sync") {
            Ok(r) => {
                problems.extend(r.problems.iter().cloned());
                moved.push(r);
            }
            Err(e) => problems.push(format!("{}@{}: {e}", v.skill, v.digest)),
        }
    }
    Ok((moved, problems))
}

/// Record again every agent of this host whose link runs a withdrawn version the records do
/// not put it on, so the moves that follow take it off: the records said it moved while its
/// directory was out of the command's sight (a private /tmp, a home not mounted then, a skills
/// directory restored from a backup), and `status` shows it still on the version. Only a link
/// into this store to a stored withdrawn version of that skill is taken (the links skillbox
/// makes), looked at as `verify` does; anything else is `verify`'s to report. `only`: that
/// version alone (the one a `withdraw` moves agents off), else every withdrawn one.
fn found_on_withdrawn(store: &mut Store, actor: &str, only: Option<&str>) -> Result<(), Error> {
    let (withdrawn, agents, installs) = store.records.read(|tx| {
        let w: Vec<(String, String)> = tx
            .version_list()?
            .into_iter()
            .filter(|v| v.state == State::Withdrawn && v.stored)
            .filter(|v| only.is_none_or(|d| d == v.digest))
            .map(|v| (v.skill, v.digest))
            .collect();
        Ok((w, tx.agents()?, tx.installs()?))
    })?;
    let time = now();
    for (skill, digest) in &withdrawn {
        let tree = store.tree(digest);
        for (agent, dir) in &agents {
            if !Path::new(dir).is_absolute()
                || installs
                    .iter()
                    .any(|i| i.agent == *agent && i.skill == *skill && i.digest == *digest)
            {
                continue;
            }
            let link = journal::link_path(dir, skill);
            // A quarantined tree (`withdraw --local`) is still this version's: its links dangle
            // and are moved off like the others.
            if !matches!(agents::inspect(&link), Ok(agents::Entry::Link(t)) if t == tree)
                || !(tree.is_dir() || quarantine::is_quarantined(store.root(), digest))
            {
                continue;
            }
            let detail = format!(
                "agent {agent}: its link points at this withdrawn version but the records had it elsewhere; recorded by sync"
            );
            store
                .records
                .write(|tx| record_found(tx, &time, agent, skill, digest, actor, &detail))?;
        }
    }
    Ok(())
}

/// Inside a transaction: record `agent` on `digest` again, its link having been found there
/// (`link_found`), with the index it took that version from as the event of its arrival there
/// says (a move made while its directory was out of sight, or a records' copy that lost the
/// installation but not the events). Not known (no such event: recorded before schema 7, or
/// lost with the installation): none of its own, so its host's index for the version applies
/// ([`Tx::source_of`]), and the event names none. Security: a guess recorded as the agent's own
/// would send a withdrawal's move, a rollback and `update` to another publisher's skill of the
/// same name (the host's index is the last one this host installed those bytes from, a mirror
/// or another publisher's index for another agent).
fn record_found(
    tx: &Tx<'_>,
    time: &str,
    agent: &str,
    skill: &str,
    digest: &str,
    actor: &str,
    detail: &str,
) -> Result<(), Error> {
    let host = tx.host().to_owned();
    let index = tx.index_in_events(&host, agent, digest)?;
    tx.set_install(agent, skill, Some(digest))?;
    tx.set_install_index(agent, skill, index.as_deref())?;
    tx.event_about(
        time,
        skill,
        Some(digest),
        "link_found",
        actor,
        detail,
        About {
            agent: Some(agent),
            index_url: index.as_deref(),
        },
    )
}

/// Apply the withdrawals made on this host with `withdraw --local` while the records could not
/// be reached, now that they can: each is recorded exactly as `withdraw` records it (fleet-wide,
/// with its own reason, who and when; a version withdrawn there already keeps the standing
/// withdrawal), then its pending entry is moved to `applied-withdrawals/` (kept for good:
/// [`reinstate_withdrawals`]), then this host's agents are moved off it as
/// `withdraw` moves them (their links, to the quarantined tree, dangle: they are still
/// skillbox's links to the withdrawn version, and move). A digest the records know under
/// another skill than the one typed is withdrawn all the same (a withdrawal is of the bytes).
/// A pending entry whose digest the records do not know (no host recorded the version) stays
/// pending (this host keeps refusing it) and is reported. Run by every command that opens the
/// records under the store lock, before anything else (a reading command takes the lock for it
/// only when [`withdrawals_due`]). Returns one line per thing done.
pub fn apply_pending(store: &mut Store) -> Result<Vec<String>, Error> {
    let pending = quarantine::pending(store.root())?;
    if pending.is_empty() {
        return Ok(Vec::new());
    }
    let mut lines = journal::recover(store)?;
    let mut applied: Vec<(Version, String)> = Vec::new();
    for p in pending {
        // Finish the local step a crash may have cut short (entry written, tree not moved).
        quarantine::contain(store.root(), &p.digest)?;
        let name = format!("{}@{}", p.skill, p.digest);
        let actor = format!("person:{}", p.by);
        let Some(v) = store.records.read(|tx| tx.version(&p.digest))? else {
            lines.push(format!(
                "local withdrawal of {name} (by {}, {}) stays pending: the records do not know this version; this host refuses it meanwhile",
                p.by, p.time
            ));
            continue;
        };
        // A withdrawal is of the bytes, under any name (as `install` refuses a withdrawn
        // artifact listed under another name): a skill mistyped with --local, in an incident,
        // must not leave the digest approved in the records while its tree is quarantined.
        let renamed = if v.skill == p.skill {
            String::new()
        } else {
            format!(
                " (the records know {} as skill {}; withdrawn under that name)",
                p.digest, v.skill
            )
        };
        // Decided inside the write transaction, on the record as it is there: a withdrawal
        // that stands (made on another host meanwhile) is kept, never written over.
        let wrote = store.records.write(|tx| {
            let fresh = tx.version(&p.digest)?;
            if fresh.as_ref().is_some_and(|f| f.state == State::Withdrawn) {
                return Ok(false);
            }
            if !tx.withdraw(&p.digest, &p.reason)? {
                return Ok(false);
            }
            tx.event(
                &p.time,
                &v.skill,
                Some(&p.digest),
                "withdrawn",
                &actor,
                &p.reason,
            )?;
            Ok(true)
        })?;
        crash_point("apply-local", "withdrawn");
        quarantine::mark_applied(store.root(), &p.digest)?;
        lines.push(if wrote {
            format!(
                "local withdrawal of {name} (by {}, {} on {}: {}) recorded in the records{renamed}",
                p.by, p.time, p.host, p.reason
            )
        } else {
            format!(
                "local withdrawal of {name} (by {}, {}): already withdrawn in the records; that withdrawal stands{renamed}",
                p.by, p.time
            )
        });
        applied.push((v, actor));
    }
    for (v, actor) in applied {
        let Some(v) = store.records.read(|tx| tx.version(&v.digest))? else {
            continue;
        };
        match move_off(store, &v, &actor, "withdraw") {
            Ok(r) => {
                for a in &r.agents {
                    lines.push(format!(
                        "agent {} moved off withdrawn {}@{} (to {})",
                        a.agent,
                        v.skill,
                        v.digest,
                        a.to.as_deref().unwrap_or("none")
                    ));
                }
                lines.extend(r.problems);
            }
            Err(e) => lines.push(format!("{}@{}: {e}", v.skill, v.digest)),
        }
    }
    Ok(lines)
}

/// The local withdrawals this host had recorded in the records (`applied-withdrawals/`) that the
/// records no longer hold although they know the version, each with what they call it now. A
/// withdrawal is final (no command takes one back), so this means the records were restored
/// from a backup taken before it (or lost it otherwise). An entry whose version the records do
/// not know at all (the backup predates the version's recording) is not here: nothing can be
/// recorded of it yet ([`waiting_withdrawals`]). Only reads.
pub fn undone_withdrawals(store: &mut Store) -> Result<Vec<(quarantine::Pending, State)>, Error> {
    let applied = quarantine::applied(store.root())?;
    if applied.is_empty() {
        return Ok(Vec::new());
    }
    store.records.read(|tx| {
        let mut out = Vec::new();
        for p in applied {
            match tx.version(&p.digest)?.map(|v| v.state) {
                Some(State::Withdrawn) | None => {}
                Some(state) => out.push((p, state)),
            }
        }
        Ok(out)
    })
}

/// The local withdrawals the records cannot hold yet because they do not know the version:
/// pending ones (`false`: never recorded) and applied ones (`true`: recorded once, lost with
/// the version by records restored from a backup taken before the version was recorded). This
/// host refuses each digest by its entry alone meanwhile ([`quarantine::refuse`]); the first
/// command that opens the records once any host recorded the version records the withdrawal
/// ([`withdrawals_due`]). Oldest first. Only reads.
pub fn waiting_withdrawals(store: &mut Store) -> Result<Vec<(quarantine::Pending, bool)>, Error> {
    let mut entries: Vec<(quarantine::Pending, bool)> = quarantine::pending(store.root())?
        .into_iter()
        .map(|p| (p, false))
        .collect();
    entries.extend(
        quarantine::applied(store.root())?
            .into_iter()
            .map(|p| (p, true)),
    );
    if entries.is_empty() {
        return Ok(entries);
    }
    let mut waiting = store.records.read(|tx| {
        let mut out = Vec::new();
        for e in entries {
            if tx.version(&e.0.digest)?.is_none() {
                out.push(e);
            }
        }
        Ok(out)
    })?;
    waiting.sort_by(|a, b| (&a.0.time, &a.0.digest).cmp(&(&b.0.time, &b.0.digest)));
    Ok(waiting)
}

/// What `verify` says of a withdrawal waiting for its version ([`waiting_withdrawals`]).
fn waiting_line(p: &quarantine::Pending, applied: bool) -> String {
    let why = if applied {
        "the records held it once and were restored from before the version was recorded"
    } else {
        "not in the records yet"
    };
    format!(
        "local withdrawal of {}@{} (by {}, {}: {}) waits for the records to know the version ({why}); this host refuses it meanwhile, and it is recorded once any host records the version",
        p.skill, p.digest, p.by, p.time, p.reason
    )
}

/// Whether a local withdrawal has something to be done under the store lock now: a pending
/// entry whose tree a crash left in `versions/` (its rename to finish), or whose version the
/// records know (to record, or to mark applied), or an applied one the records lost while
/// knowing the version ([`undone_withdrawals`]). Entries only waiting for the records to know
/// their version ([`waiting_withdrawals`]) are not: a command that only reads does not take
/// the store lock (nor write) for them, each time, until some host records the version. Only
/// reads.
pub fn withdrawals_due(store: &mut Store) -> Result<bool, Error> {
    let pending = quarantine::pending(store.root())?;
    if pending
        .iter()
        .any(|p| std::fs::symlink_metadata(store.version_dir(&p.digest)).is_ok())
    {
        return Ok(true);
    }
    if !pending.is_empty() {
        let known = store.records.read(|tx| {
            for p in &pending {
                if tx.version(&p.digest)?.is_some() {
                    return Ok(true);
                }
            }
            Ok(false)
        })?;
        if known {
            return Ok(true);
        }
    }
    Ok(!undone_withdrawals(store)?.is_empty())
}

/// Record again, fleet-wide, each local withdrawal the records lost ([`undone_withdrawals`]):
/// its entry goes back among the pending ones, and [`apply_pending`] (run next) records it
/// with its original reason, who and when, and moves this host's agents off the version, as
/// the first time. An entry whose version the records do not know stays where it is, applied
/// ([`waiting_withdrawals`]: said by `status` and `verify`), until they know it. Security:
/// containment is never undone by a restore; the tree stays in quarantine throughout, and the
/// digest stays refused here. Run by every command that opens the records under the store
/// lock, before [`apply_pending`]. Returns one line per disagreement found, to be said loudly.
pub fn reinstate_withdrawals(store: &mut Store) -> Result<Vec<String>, Error> {
    let mut lines = Vec::new();
    for (p, state) in undone_withdrawals(store)? {
        lines.push(format!(
            "the records call it {}, but this host withdrew {}@{} with --local (by {}, {} on {}: {}) and the records held that withdrawal: they were restored from before it; recording it again",
            state.as_str(),
            p.skill,
            p.digest,
            p.by,
            p.time,
            p.host,
            p.reason
        ));
        quarantine::reopen(store.root(), &p.digest)?;
    }
    Ok(lines)
}

/// The agents this store remembers ([`Store::remember_agents`]) that the records do not know
/// on this host, each with the stored versions its links into this store run: a version of
/// the link's skill that the records call approved or withdrawn (a quarantined tree's
/// dangling link included). An agent with no such link (named by a command that has not
/// linked it yet, or whose links are gone) is left out: nothing of it is out of sight.
fn forgotten_agents(
    store: &mut Store,
    recorded: &[(String, String)],
) -> Result<Vec<(String, String, Vec<Listed>)>, Error> {
    let mut remembered = store.remembered_agents()?;
    remembered.retain(|(agent, _)| !recorded.iter().any(|(r, _)| r == agent));
    if remembered.is_empty() {
        return Ok(Vec::new());
    }
    let versions = store.records.read(|tx| tx.version_list())?;
    let versions_root = store.versions_root();
    let skills: std::collections::BTreeSet<&str> =
        versions.iter().map(|v| v.skill.as_str()).collect();
    let mut out = Vec::new();
    for (agent, dir) in remembered {
        let mut found = Vec::new();
        for skill in &skills {
            let Ok(agents::Entry::Link(t)) = agents::inspect(&journal::link_path(&dir, skill))
            else {
                continue;
            };
            let Some(digest) = linked_version(&versions_root, &t) else {
                continue;
            };
            if let Some(v) = versions.iter().find(|v| {
                v.digest == digest
                    && v.skill == *skill
                    && v.stored
                    && matches!(v.state, State::Approved | State::Withdrawn)
            }) {
                found.push(v.clone());
            }
        }
        if !found.is_empty() {
            out.push((agent, dir, found));
        }
    }
    Ok(out)
}

/// The digest of the stored version whose tree a link's target `t` is
/// (`versions/<hex>/tree`); `None` for any other target.
fn linked_version(versions_root: &Path, t: &Path) -> Option<String> {
    let rest = t.strip_prefix(versions_root).ok()?;
    match rest.components().collect::<Vec<_>>().as_slice() {
        [hex, tree] if tree.as_os_str() == "tree" => {
            Some(format!("sha256:{}", hex.as_os_str().to_string_lossy()))
        }
        _ => None,
    }
}

/// Whether [`reinstate_agents`] has anything to do: an agent this store linked into, with a
/// link it runs, is unknown to the records (restored from a backup taken before it was first
/// used). Only reads.
pub fn agents_due(store: &mut Store) -> Result<bool, Error> {
    if !store.remembers_agents() {
        return Ok(false);
    }
    let recorded = store.records.read(|tx| tx.agents())?;
    Ok(!forgotten_agents(store, &recorded)?.is_empty())
}

/// Record again each agent this store linked into that the records do not know on this host
/// (records restored from a backup taken before the agent was first used, or a fleet's
/// database that lost it), with each link of it into this store that runs a stored version
/// ([`forgotten_agents`]: a `link_found` event each, as `verify` records a link whose
/// installation was lost). Security: without this, such an agent is out of sight: a
/// withdrawal does not move it off the version its link runs, `status` calls that version
/// contained, and `gc` may take a tree it runs. Run by every command that opens the records
/// under the store lock, before the local withdrawals are reinstated and applied, so their
/// moves see the agent. Then the records' agents this store does not remember yet (recorded
/// before it kept its own list) are remembered. Returns one line per agent recorded again, to
/// be said loudly.
pub fn reinstate_agents(store: &mut Store) -> Result<Vec<String>, Error> {
    let mut lines = Vec::new();
    let time = now();
    let actor = format!("skillbox@{}", store.records.host());
    let recorded = store.records.read(|tx| tx.agents())?;
    for (agent, dir, found) in forgotten_agents(store, &recorded)? {
        let detail = format!(
            "agent {agent}: its link pointed here but the records did not know the agent (restored from before it was first used?); recorded again"
        );
        store.records.write(|tx| {
            tx.add_agent(&agent, &dir)?;
            for v in &found {
                record_found(tx, &time, &agent, &v.skill, &v.digest, &actor, &detail)?;
            }
            Ok(())
        })?;
        let on: Vec<String> = found
            .iter()
            .map(|v| {
                let withdrawn = if v.state == State::Withdrawn {
                    " (withdrawn)"
                } else {
                    ""
                };
                format!("{}@{}{withdrawn}", v.skill, v.digest)
            })
            .collect();
        lines.push(format!(
            "the records did not know agent {agent} ({dir}), whose link this store made: they were restored from a backup taken before it was first used, or lost it; recorded it again, on {}",
            on.join(", ")
        ));
    }
    // Those recorded again are remembered already.
    store.remember_agents(&recorded)?;
    Ok(lines)
}

/// What every command that changes state does first: finish or undo what an interrupted
/// command left, then move this host's agents off versions the fleet withdrew.
fn prepare(store: &mut Store) -> Result<Vec<String>, Error> {
    let mut done = journal::recover(store)?;
    let (moved, problems) = apply_withdrawals(store)?;
    for m in &moved {
        for a in &m.agents {
            done.push(format!(
                "sync: agent {} moved off withdrawn {}@{} (to {})",
                a.agent,
                m.skill,
                a.from.as_deref().unwrap_or("none"),
                a.to.as_deref().unwrap_or("none")
            ));
        }
    }
    done.extend(problems.into_iter().map(|p| format!("sync: {p}")));
    Ok(done)
}

/// `sync`: apply the fleet's decisions to this host (see [`apply_withdrawals`]) and note when.
pub fn sync(store: &mut Store) -> Result<SyncReport, Error> {
    let recovered = journal::recover(store)?;
    // What `status` counts as still on a withdrawn version, sync moves: the periodic run
    // converges without a person running `verify` first.
    let host = store.records.host().to_owned();
    found_on_withdrawn(store, &format!("skillbox:sync@{host}"), None)?;
    let (moved, problems) = apply_withdrawals(store)?;
    let time = now();
    store.records.write(|tx| tx.set_last_sync(&time))?;
    Ok(SyncReport {
        host: store.records.host().to_owned(),
        moved,
        problems,
        recovered,
    })
}

/// How recently a host must have shown itself in the records (its last sync, its newest event,
/// its registration) for `forget-host` to take it as alive and refuse it: three runs of the
/// shipped sync timer (every five minutes, [`sync`]) missed in a row.
pub const FORGET_AFTER: std::time::Duration = std::time::Duration::from_secs(15 * 60);

/// The answer of `forget-host`.
#[derive(Debug, Clone, Serialize)]
pub struct ForgetReport {
    pub host: String,
    pub reason: String,
    pub by: String,
    /// The newest of its registration, last sync and last event.
    pub last_seen: String,
    pub last_sync: Option<String>,
    /// Its agents and the versions each was recorded on.
    pub agents: Vec<ForgottenAgent>,
    /// Versions recorded in its store.
    pub stored_versions: usize,
    /// Its unfinished steps, dropped with it.
    pub unfinished_steps: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct ForgottenAgent {
    pub agent: String,
    pub dir: String,
    pub versions: Vec<ForgottenInstall>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ForgottenInstall {
    pub skill: String,
    pub digest: String,
    pub withdrawn: bool,
    /// The host recorded a switch of this agent off this version and had not made it (killed
    /// half-way): its link may still run it, as `status` counted it until now.
    pub unfinished_switch: bool,
}

/// `forget-host`: remove host `name` (gone: decommissioned, reimaged, lost) from the records,
/// so its agents stop counting as still on a withdrawn version. Refused for this store's own
/// host (exit 2), an unknown host (exit 8), and a host seen in the records within
/// [`FORGET_AFTER`] unless `even_if_recent` (a live host forgotten would hide its agents from
/// containment until it registers again). One transaction: every row keyed by that host goes,
/// events stay, and a `host_forgotten` event (who, why, from which host) keeps the removed rows,
/// which the same store gets back if it ever returns (it registers again).
pub fn forget_host(
    store: &mut Store,
    name: &str,
    reason: &str,
    who: &str,
    even_if_recent: bool,
) -> Result<ForgetReport, Error> {
    let here = store.records.host().to_owned();
    if name == here {
        // A store's own records.db has no other host to run it from: say so, rather than
        // send the operator to a fleet there is not.
        let instead = if store.records.is_shared() {
            "run forget-host on another host of the fleet"
        } else {
            "these are the store's own records (records.db), which serve this host alone: forget-host is for records a fleet shares (--records postgres://...)"
        };
        return Err(Error::new(
            Kind::Usage,
            format!(
                "{name} is this store's host: a host cannot forget itself (its store is bound to that name in the records); {instead}"
            ),
        ));
    }
    let time = now();
    let since = crate::fetch::rfc3339_of(std::time::SystemTime::now() - FORGET_AFTER);
    let actor = format!("person:{who}");
    store.records.write(|tx| {
        let Some(super::records::HostActivity {
            first_seen,
            last_sync,
            last_event,
            ..
        }) = tx.host_activity(name)?
        else {
            return Err(Error::new(
                Kind::NotFound,
                format!("no host {name} in the records (status lists the hosts)"),
            ));
        };
        // Every time is RFC 3339 UTC at second precision, so they compare as text.
        let last_seen = [Some(first_seen), last_sync.clone(), last_event]
            .into_iter()
            .flatten()
            .max()
            .unwrap_or_default();
        if last_seen >= since && !even_if_recent {
            return Err(Error::new(
                Kind::Usage,
                format!(
                    "host {name} was seen in the records at {last_seen} (last sync {}), less than {} minutes ago: it may be alive, and forgetting a live host hides its agents from containment; make sure it is gone, or give --even-if-recent",
                    last_sync.as_deref().unwrap_or("never"),
                    FORGET_AFTER.as_secs() / 60
                ),
            ));
        }
        let Some(snap) = tx.forget_host(name)? else {
            return Err(Error::new(Kind::NotFound, format!("no host {name} in the records")));
        };
        let mut agents: Vec<ForgottenAgent> = Vec::new();
        let mut by_digest: std::collections::BTreeMap<(String, String), Vec<String>> =
            std::collections::BTreeMap::new();
        // The switches its unfinished steps still had to make: until now every host counted
        // those agents on the version each leaves (its link may still run it), so the report
        // and that version's history say they were there too.
        let unfinished: Vec<(String, String, String)> = snap
            .intents
            .iter()
            .filter_map(|(seq, payload, created_at)| {
                Some(super::records::Intent {
                    seq: *seq,
                    payload: serde_json::from_str(payload).ok()?,
                    created_at: created_at.clone(),
                })
            })
            .flat_map(|i| outstanding_links(std::slice::from_ref(&i)))
            .collect();
        for (agent, dir) in &snap.agents {
            let mut versions: Vec<ForgottenInstall> = Vec::new();
            let recorded = snap
                .installs
                .iter()
                .filter(|i| i.agent == *agent)
                .map(|i| (&i.skill, &i.digest, false));
            let leaving = unfinished
                .iter()
                .filter(|(_, a, _)| a == agent)
                .map(|(skill, _, from)| (skill, from, true));
            for (skill, digest, switch) in recorded.chain(leaving) {
                if let Some(v) = versions
                    .iter_mut()
                    .find(|v| v.skill == *skill && v.digest == *digest)
                {
                    v.unfinished_switch |= switch;
                    continue;
                }
                let withdrawn = tx
                    .version(digest)?
                    .is_some_and(|v| v.state == State::Withdrawn);
                versions.push(ForgottenInstall {
                    skill: skill.clone(),
                    digest: digest.clone(),
                    withdrawn,
                    unfinished_switch: switch,
                });
                by_digest
                    .entry((skill.clone(), digest.clone()))
                    .or_default()
                    .push(agent.clone());
            }
            agents.push(ForgottenAgent {
                agent: agent.clone(),
                dir: dir.clone(),
                versions,
            });
        }
        // Each version's history says the host's agents left its records, and why.
        for ((skill, digest), names) in &by_digest {
            tx.event(
                &time,
                skill,
                Some(digest),
                "host_forgotten",
                &actor,
                &format!(
                    "host {name} forgotten (its agents {} were recorded on this version, or had a switch off it not yet made): {reason}",
                    names.join(", ")
                ),
            )?;
        }
        let detail = json!({"host": name, "reason": reason, "snapshot": &snap});
        tx.event(&time, "", None, "host_forgotten", &actor, &detail.to_string())?;
        Ok(ForgetReport {
            host: name.to_owned(),
            reason: reason.to_owned(),
            by: actor.clone(),
            last_seen,
            last_sync,
            agents,
            stored_versions: snap.versions.len(),
            unfinished_steps: snap.intents.len(),
        })
    })
}

/// The answer of `list`.
#[derive(Debug, Clone, Serialize)]
pub struct Listing {
    pub skills: Vec<SkillListing>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SkillListing {
    pub skill: String,
    /// agent -> active digest.
    pub active: std::collections::BTreeMap<String, String>,
    pub versions: Vec<Listed>,
}

pub fn list(store: &mut Store) -> Result<Listing, Error> {
    let (versions, installs) = store
        .records
        .read(|tx| Ok((tx.version_list()?, tx.installs()?)))?;
    let mut skills: Vec<SkillListing> = Vec::new();
    for v in versions {
        if skills.last().is_none_or(|s| s.skill != v.skill) {
            skills.push(SkillListing {
                skill: v.skill.clone(),
                active: Default::default(),
                versions: Vec::new(),
            });
        }
        if let Some(s) = skills.last_mut() {
            s.versions.push(v);
        }
    }
    for Install {
        agent,
        skill,
        digest,
        ..
    } in installs
    {
        if let Some(s) = skills.iter_mut().find(|s| s.skill == skill) {
            s.active.insert(agent, digest);
        }
    }
    // A tree `withdraw --local` moved into quarantine is no longer a stored version here (no
    // agent can load it) whatever the records' row says until `gc` removes it.
    let quarantined = quarantine::quarantined(store.root());
    if !quarantined.is_empty() {
        for v in skills.iter_mut().flat_map(|s| s.versions.iter_mut()) {
            if quarantined.contains(&v.digest) {
                v.stored = false;
                v.quarantined = true;
            }
        }
    }
    Ok(Listing { skills })
}

/// The answer of `status`.
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    pub store: String,
    /// Where the records are (never a password).
    pub records: String,
    /// This host, as the records know it.
    pub host: String,
    pub skills: usize,
    pub versions: usize,
    pub pending: Vec<String>,
    pub withdrawn: Vec<String>,
    /// Per withdrawn version, the hosts and agents still on it (empty: contained).
    pub withdrawn_in_use: Vec<WithdrawnUse>,
    /// This host's agents and installations.
    pub agents: Vec<(String, String)>,
    pub installs: Vec<Install>,
    /// Every host sharing the records, with its last `sync`.
    pub hosts: Vec<HostRow>,
    /// Steps an interrupted command left; the next command that changes state finishes them.
    pub interrupted: usize,
    /// Versions whose tree `withdraw --local` moved into this host's `quarantine/` (until `gc`
    /// removes it): not stored versions any more, no agent can load them.
    pub quarantined: Vec<String>,
    /// Withdrawals made here with `withdraw --local` that the records do not hold yet (they do
    /// not know the version); this host refuses the digest meanwhile.
    pub pending_local_withdrawals: Vec<String>,
    /// Withdrawals made here with `withdraw --local` that the records held once and lost with
    /// the version itself (restored from a backup taken before the version was recorded): each
    /// `SKILL@DIGEST`. Nothing can be recorded of them yet; this host refuses the digest by its
    /// entry alone, and the first command that opens the records once any host recorded the
    /// version records the withdrawal again ([`waiting_withdrawals`]). Not a failure: `status`
    /// exits 0 for them.
    pub withdrawals_waiting_for_version: Vec<String>,
    /// Versions quarantined here whose withdrawal the records lost (they call them approved or
    /// pending again) with no entry left on this host to record it again from (a store whose
    /// entries an older skillbox removed once applied): [`lost_withdrawals`]. Not contained
    /// fleet-wide: `status` exits 9.
    pub withdrawals_lost: Vec<String>,
    /// Versions a `withdraw --local` quarantined here whose withdrawal it could not write (the
    /// store's filesystem was full: it failed, exit 1), while the records call them anything but
    /// withdrawn: no records ever held the withdrawal, and the same `withdraw --local` run again
    /// once there is room writes it. Not contained fleet-wide: `status` exits 9.
    pub withdrawals_unwritten: Vec<String>,
    /// This host's agents still on a withdrawn version because their directory is missing
    /// (a withdrawal does not recreate it): one line each, naming what to do.
    pub agent_dirs_missing: Vec<String>,
}

/// Each version quarantined on this host that the records call anything but withdrawn and
/// that no local entry (pending, or applied: [`reinstate_withdrawals`] records those again)
/// withdraws: the records lost its withdrawal, and this host cannot record it again by itself
/// (it has no reason, who or when). Said as a line naming the fix.
///
/// The first list is those; the second, the versions a `withdraw --local` quarantined but could
/// not write the withdrawal of (a full filesystem: [`quarantine::is_unwritten`]): no records
/// ever held it, and the fix is that same command again once there is room.
fn lost_withdrawals(root: &Path, versions: &[Listed]) -> Result<(Vec<String>, Vec<String>), Error> {
    let (mut lost, mut unwritten) = (Vec::new(), Vec::new());
    for d in quarantine::quarantined(root) {
        let Some(v) = versions.iter().find(|v| v.digest == d) else {
            continue;
        };
        if v.state == State::Withdrawn
            || quarantine::pending_of(root, &d)?.is_some()
            || quarantine::applied_of(root, &d)?.is_some()
        {
            continue;
        }
        if quarantine::is_unwritten(root, &d) {
            unwritten.push(format!(
                "{}@{}: quarantined on this host by a `withdraw --local` that could not write its withdrawal (reason, who, when: the store's filesystem was full), so the records still call it {} and other hosts may run it; once the store's filesystem has room, run the same command again: skillbox withdraw {}@{} --reason TEXT --local",
                v.skill,
                v.digest,
                v.state.as_str(),
                v.skill,
                v.digest
            ));
            continue;
        }
        lost.push(format!(
            "{}@{}: quarantined on this host (withdraw --local) but the records call it {}: they lost its withdrawal (restored from a backup taken before it?), so other hosts may run it; withdraw it again: skillbox withdraw {}@{} --reason TEXT",
            v.skill,
            v.digest,
            v.state.as_str(),
            v.skill,
            v.digest
        ));
    }
    Ok((lost, unwritten))
}

/// A withdrawn version and who still runs it.
#[derive(Debug, Clone, Serialize)]
pub struct WithdrawnUse {
    pub version: String,
    pub still_on: Vec<HostAgent>,
}

pub fn status(store: &mut Store) -> Result<Status, Error> {
    let root = store.root().display().to_string();
    let records = store.records.location().to_owned();
    let host = store.records.host().to_owned();
    let versions_root = store.versions_root();
    let in_quarantine = quarantine::quarantined(store.root());
    let pending_local = quarantine::pending(store.root())?;
    let applied_local = quarantine::applied(store.root())?;
    let root_path = store.root().to_owned();
    let (mut status, withdrawn, outstanding) = store.records.read(|tx| {
        let versions = tx.version_list()?;
        // Named as the records name it, else as the local entry typed it.
        let quarantined = in_quarantine
            .iter()
            .map(|d| {
                let skill = versions
                    .iter()
                    .find(|v| v.digest == *d)
                    .map(|v| v.skill.as_str())
                    .or_else(|| {
                        pending_local
                            .iter()
                            .chain(&applied_local)
                            .find(|p| p.digest == *d)
                            .map(|p| p.skill.as_str())
                    })
                    .unwrap_or("?");
                format!("{skill}@{d}")
            })
            .collect();
        let mut skills: Vec<&str> = versions.iter().map(|v| v.skill.as_str()).collect();
        skills.dedup();
        let at = |v: &Listed| format!("{}@{}", v.skill, v.digest);
        let stale = tx.fleet_installs_of_withdrawn()?;
        let withdrawn_versions: Vec<(String, String)> = versions
            .iter()
            .filter(|v| v.state == State::Withdrawn)
            .map(|v| (v.skill.clone(), v.digest.clone()))
            .collect();
        let withdrawn: Vec<String> = versions
            .iter()
            .filter(|v| v.state == State::Withdrawn)
            .map(at)
            .collect();
        let withdrawn_in_use = withdrawn
            .iter()
            .map(|w| WithdrawnUse {
                version: w.clone(),
                still_on: stale
                    .iter()
                    .filter(|i| format!("{}@{}", i.skill, i.digest) == *w)
                    .map(|i| HostAgent {
                        host: i.host.clone(),
                        agent: i.agent.clone(),
                    })
                    .collect(),
            })
            .collect();
        let intents = tx.intents()?;
        let (withdrawals_lost, withdrawals_unwritten) = lost_withdrawals(&root_path, &versions)?;
        // Every host's: a switch off a withdrawn version that another host recorded and has
        // not made yet (killed, or its directory refused) leaves that host's link on the
        // withdrawn tree while the installs already say it moved.
        let outstanding = fleet_outstanding(tx)?;
        Ok((
            Status {
                store: root,
                records,
                host: host.clone(),
                skills: skills.len(),
                versions: versions.len(),
                pending: versions
                    .iter()
                    .filter(|v| v.state == State::Pending)
                    .map(at)
                    .collect(),
                withdrawn,
                withdrawn_in_use,
                agents: tx.agents()?,
                // Each with the index it is taken from, as `update` reads it.
                installs: tx
                    .installs()?
                    .into_iter()
                    .map(|mut i| {
                        i.index_url = Some(tx.source_of(&i)?.unwrap_or_default());
                        Ok(i)
                    })
                    .collect::<Result<_, Error>>()?,
                hosts: tx.hosts()?,
                interrupted: intents.len(),
                quarantined,
                pending_local_withdrawals: pending_local
                    .iter()
                    .map(|p| format!("{}@{}", p.skill, p.digest))
                    .collect(),
                withdrawals_waiting_for_version: applied_local
                    .iter()
                    .filter(|p| !versions.iter().any(|v| v.digest == p.digest))
                    .map(|p| format!("{}@{}", p.skill, p.digest))
                    .collect(),
                withdrawals_lost,
                withdrawals_unwritten,
                agent_dirs_missing: Vec::new(),
            },
            withdrawn_versions,
            outstanding,
        ))
    })?;
    // The records say what skillbox moved; this host's own links and unfinished switches say
    // what its agents run now. A withdrawn version is not called contained while an agent here
    // still has a link to its tree, or a switch off it is still to be made.
    let trees = |skill: &str| -> Vec<(PathBuf, String)> {
        withdrawn
            .iter()
            .filter(|(s, _)| s == skill)
            .map(|(_, d)| (versions_root.join(store::hex_of(d)).join("tree"), d.clone()))
            .collect()
    };
    let mut found: Vec<(String, String, String)> = Vec::new(); // (host, skill@digest, agent)
    let mut skills: Vec<&str> = withdrawn.iter().map(|(s, _)| s.as_str()).collect();
    skills.dedup();
    for skill in skills {
        let trees = trees(skill);
        for (agent, dir) in &status.agents {
            if let Ok(t) = std::fs::read_link(journal::link_path(dir, skill))
                && let Some((_, d)) = trees.iter().find(|(tree, _)| *tree == t)
            {
                found.push((host.clone(), format!("{skill}@{d}"), agent.clone()));
            }
        }
    }
    for (on, skill, agent, from) in outstanding {
        if withdrawn.iter().any(|(s, d)| *s == skill && *d == from) {
            found.push((on, format!("{skill}@{from}"), agent));
        }
    }
    for (on, version, agent) in found {
        if let Some(w) = status
            .withdrawn_in_use
            .iter_mut()
            .find(|w| w.version == version)
            && !w.still_on.iter().any(|h| h.host == on && h.agent == agent)
        {
            w.still_on.push(HostAgent { host: on, agent });
            w.still_on
                .sort_by(|a, b| (&a.host, &a.agent).cmp(&(&b.host, &b.agent)));
        }
    }
    // Why an agent of this host is still on a withdrawn version when it is its directory that
    // is gone (a withdrawal does not recreate it: [`unmovable`]).
    let mut missing = Vec::new();
    for w in &status.withdrawn_in_use {
        let Some((skill, digest)) = w.version.split_once('@') else {
            continue;
        };
        for h in w.still_on.iter().filter(|h| h.host == host) {
            if let Some((_, dir)) = status.agents.iter().find(|(a, _)| *a == h.agent)
                && Path::new(dir).is_absolute()
                && matches!(agents::dir_missing(Path::new(dir)), Ok(true))
            {
                missing.push(journal::missing_dir_line(&h.agent, dir, skill, digest));
            }
        }
    }
    status.agent_dirs_missing = missing;
    Ok(status)
}

/// Every host's switches still to be made: (host, skill, agent, the version its link leaves).
fn fleet_outstanding(tx: &Tx<'_>) -> Result<Vec<(String, String, String, String)>, Error> {
    Ok(tx
        .fleet_intents()?
        .into_iter()
        .flat_map(|(h, i)| {
            outstanding_links(std::slice::from_ref(&i))
                .into_iter()
                .map(move |(skill, agent, from)| (h.clone(), skill, agent, from))
        })
        .collect())
}

/// Every host's agents on `digest`: the installs recorded on it, and the agents whose switch
/// off it was recorded but not made yet (their host was killed half-way: its link still runs
/// the version), sorted by host and agent.
fn fleet_users(tx: &Tx<'_>, skill: &str, digest: &str) -> Result<Vec<HostAgent>, Error> {
    let mut out: Vec<HostAgent> = tx
        .fleet_installs_using(digest)?
        .into_iter()
        .map(|i| HostAgent {
            host: i.host,
            agent: i.agent,
        })
        .collect();
    for (host, s, agent, from) in fleet_outstanding(tx)? {
        let h = HostAgent { host, agent };
        if s == skill && from == digest && !out.contains(&h) {
            out.push(h);
        }
    }
    out.sort_by(|a, b| (&a.host, &a.agent).cmp(&(&b.host, &b.agent)));
    Ok(out)
}

/// The switches unfinished `links` intents still have to make: (skill, agent, the version its
/// link leaves).
fn outstanding_links(intents: &[super::records::Intent]) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for row in intents {
        if let Ok(journal::Intent::Links { skill, changes }) =
            serde_json::from_value::<journal::Intent>(row.payload.clone())
        {
            for c in changes {
                if let Some(from) = c.from {
                    out.push((skill.clone(), c.agent, from));
                }
            }
        }
    }
    out
}

/// The answer of `provenance`.
#[derive(Debug, Clone, Serialize)]
pub struct ProvenanceReport {
    pub version: Version,
    /// This host's agents using it.
    pub agents: Vec<String>,
    /// Every host's agents using it.
    pub hosts: Vec<HostAgent>,
    /// Every host's agents on it, each with the index it took it from (the same bytes may come
    /// from two indexes: a mirror); `index_url` empty: a local file, or not known.
    pub taken_from: Vec<TakenFrom>,
    pub events: Vec<Event>,
}

/// One agent on a version, and the index it took the version from.
#[derive(Debug, Clone, Serialize)]
pub struct TakenFrom {
    pub host: String,
    pub agent: String,
    pub index_url: String,
}

/// `provenance SKILL[@DIGEST]`: without a digest, the version most agents run, else the newest.
pub fn provenance(
    store: &mut Store,
    skill: &str,
    digest: Option<&VersionRef>,
) -> Result<ProvenanceReport, Error> {
    let v = match digest {
        Some(r) => find_version(store, r)?,
        None => store.records.read(|tx| {
            let installs = tx.installs_of(skill)?;
            let d = match installs.first() {
                Some(i) => Some(i.digest.clone()),
                None => tx.latest_digest(skill)?,
            };
            match d {
                Some(d) => tx
                    .version(&d)?
                    .ok_or_else(|| Error::new(Kind::NotFound, "vanished")),
                None => Err(Error::new(
                    Kind::NotFound,
                    format!("no skill {skill} in the records (see skillbox list)"),
                )),
            }
        })?,
    };
    let mut v = v;
    if quarantine::is_quarantined(store.root(), &v.digest) {
        v.stored = false;
        v.quarantined = true;
    }
    let (agents, hosts, taken_from, events) = store.records.read(|tx| {
        Ok((
            tx.installs_using(&v.digest)?
                .into_iter()
                .map(|i| i.agent)
                .collect(),
            fleet_users(tx, &v.skill, &v.digest)?,
            tx.fleet_sources_of(&v.digest)?
                .into_iter()
                .map(|(host, agent, index_url)| TakenFrom {
                    host,
                    agent,
                    index_url,
                })
                .collect(),
            tx.events_of(&v.skill, &v.digest)?,
        ))
    })?;
    Ok(ProvenanceReport {
        version: v,
        agents,
        hosts,
        taken_from,
        events,
    })
}

/// `review SKILL@DIGEST`: the stored answer's review plus the recorded decision.
pub fn review(store: &mut Store, r: &VersionRef) -> Result<(Version, Review), Error> {
    let v = find_version(store, r)?;
    if !v.stored {
        return Err(Error::new(
            Kind::NotFound,
            format!(
                "{}@{} is not in the store ({}); its review left with it",
                v.skill,
                v.digest,
                v.state.as_str()
            ),
        ));
    }
    // A tree `withdraw --local` quarantined keeps its answer beside it: its review is what an
    // incident wants to read, and reading our own answer file loads nothing of the package.
    let answer: Outcome = if quarantine::is_quarantined(store.root(), &v.digest) {
        store::read_answer(
            &quarantine::quarantine_dir(store.root(), &v.digest).join("answer.json"),
        )?
    } else {
        store.answer(&v.digest)?
    };
    let review = answer.review.ok_or_else(|| {
        Error::new(
            Kind::Operational,
            "corrupt store: the stored answer has no review",
        )
    })?;
    Ok((v, review))
}

/// The answer of `gc`.
#[derive(Debug, Clone, Serialize)]
pub struct GcReport {
    pub removed: Vec<String>,
    pub kept: usize,
    pub recovered: Vec<String>,
}

/// `gc`: remove trees no agent uses beyond the `keep` newest approved ones per skill; withdrawn
/// and denied trees go too. Records stay (provenance outlives the bytes).
pub fn gc(store: &mut Store, keep: usize) -> Result<GcReport, Error> {
    let recovered = prepare(store)?;
    let (versions, installs) = store
        .records
        .read(|tx| Ok((tx.version_list()?, tx.installs()?)))?;
    let used: std::collections::HashSet<&str> =
        installs.iter().map(|i| i.digest.as_str()).collect();
    let mut removed = Vec::new();
    let mut kept = 0;
    let mut per_skill: std::collections::HashMap<&str, usize> = Default::default();
    for v in versions.iter().rev().filter(|v| v.stored) {
        let drop = match v.state {
            State::Pending => false,
            State::Withdrawn | State::Denied => !used.contains(v.digest.as_str()),
            State::Approved if used.contains(v.digest.as_str()) => false,
            State::Approved => {
                let n = per_skill.entry(v.skill.as_str()).or_default();
                *n += 1;
                *n > keep
            }
        };
        if drop {
            removed.push(format!("{}@{}", v.skill, v.digest));
        } else {
            kept += 1;
        }
    }
    // Never a tree a link on this host still points at, or an unfinished switch names, whatever
    // the records say: removing it would leave an agent on a dangling link (or, for a withdrawn
    // version, hide that an agent still runs it).
    let (agents_here, intents) = store.records.read(|tx| Ok((tx.agents()?, tx.intents()?)))?;
    let mut held: std::collections::HashSet<PathBuf> = Default::default();
    for row in &intents {
        if let Ok(journal::Intent::Links { changes, .. }) =
            serde_json::from_value::<journal::Intent>(row.payload.clone())
        {
            for d in changes.iter().flat_map(|c| [&c.from, &c.to]).flatten() {
                held.insert(store.tree(d));
            }
        }
    }
    let mut skills: Vec<&str> = removed
        .iter()
        .filter_map(|r| r.split_once('@').map(|(s, _)| s))
        .collect();
    skills.sort_unstable();
    skills.dedup();
    for skill in skills {
        for (_, dir) in &agents_here {
            if let Ok(t) = std::fs::read_link(journal::link_path(dir, skill)) {
                held.insert(t);
            }
        }
    }
    removed.retain(|r| {
        let keep = r
            .split_once('@')
            .is_some_and(|(_, d)| held.contains(&store.tree(d)));
        kept += usize::from(keep);
        !keep
    });
    let time = now();
    store.records.write(|tx| {
        for r in &removed {
            if let Some((skill, digest)) = r.split_once('@') {
                tx.set_stored(digest, false)?;
                tx.event(
                    &time,
                    skill,
                    Some(digest),
                    "collected",
                    "skillbox",
                    "gc removed its tree",
                )?;
            }
        }
        Ok(())
    })?;
    crash_point("gc", "recorded");
    for r in &removed {
        if let Some((_, digest)) = r.split_once('@') {
            store::remove_tree(&store.version_dir(digest))?;
            // A tree quarantined by `withdraw --local` goes only once the records say
            // withdrawn and no pending withdrawal of it remains to reach them.
            let withdrawn = versions
                .iter()
                .any(|v| v.digest == digest && v.state == State::Withdrawn);
            if withdrawn && quarantine::pending_of(store.root(), digest)?.is_none() {
                store::remove_tree(&quarantine::quarantine_dir(store.root(), digest))?;
                quarantine::clear_unwritten(store.root(), digest)?;
            }
        }
    }
    Ok(GcReport {
        removed,
        kept,
        recovered,
    })
}

/// The answer of `verify`.
#[derive(Debug, Clone, Serialize)]
pub struct VerifyReport {
    pub ok: bool,
    pub versions_checked: usize,
    pub links_checked: usize,
    pub problems: Vec<String>,
    pub repaired: Vec<String>,
    /// Local withdrawals (`withdraw --local`) the records cannot hold yet, as they do not know
    /// the version: one line each ([`waiting_withdrawals`]). Not a problem: this host refuses
    /// the digest meanwhile, and the withdrawal is recorded once any host records the version.
    pub waiting: Vec<String>,
}

/// `verify`: re-hash every stored tree against its inventory and check every agent link;
/// repair what is safe (finish interrupted steps, recreate a missing link of ours, re-point a
/// link of ours at its recorded version, forget a tree that vanished and no agent uses).
pub fn verify(store: &mut Store) -> Result<VerifyReport, Error> {
    let mut repaired = journal::recover(store)?;
    let mut problems = Vec::new();
    let (versions, installs, dirs) = store
        .records
        .read(|tx| Ok((tx.version_list()?, tx.installs()?, tx.agents()?)))?;
    let dirs: std::collections::HashMap<String, String> = dirs.into_iter().collect();
    let used: std::collections::HashSet<&str> =
        installs.iter().map(|i| i.digest.as_str()).collect();
    let mut checked = 0;
    for v in versions.iter().filter(|v| v.stored) {
        checked += 1;
        let dir = store.version_dir(&v.digest);
        // Withdrawn here with --local: its tree was moved to quarantine on purpose. Neither
        // corruption nor something to repair or re-extract; `gc` removes it once the records
        // say withdrawn.
        if !dir.exists() && quarantine::is_quarantined(store.root(), &v.digest) {
            continue;
        }
        if !dir.exists() {
            if used.contains(v.digest.as_str()) {
                problems.push(format!(
                    "{}@{}: its tree is missing and agents use it",
                    v.skill, v.digest
                ));
            } else {
                store.records.write(|tx| tx.set_stored(&v.digest, false))?;
                repaired.push(format!(
                    "{}@{}: tree missing; recorded as no longer stored",
                    v.skill, v.digest
                ));
            }
            continue;
        }
        match store.answer(&v.digest) {
            Ok(answer) => {
                for p in store::check_tree(&store.tree(&v.digest), &answer) {
                    problems.push(format!("{}@{}: {p}", v.skill, v.digest));
                }
            }
            Err(e) => problems.push(format!("{}@{}: {e}", v.skill, v.digest)),
        }
    }
    for i in &installs {
        if !dirs.contains_key(&i.agent) {
            problems.push(format!(
                "agent {} has installations but no directory",
                i.agent
            ));
        }
    }
    let links_checked = check_links(
        store,
        &versions,
        &installs,
        &dirs,
        &mut problems,
        &mut repaired,
    )?;
    let (lost, unwritten) = lost_withdrawals(store.root(), &versions)?;
    problems.extend(lost);
    problems.extend(unwritten);
    let waiting = waiting_withdrawals(store)?
        .into_iter()
        .map(|(p, applied)| waiting_line(&p, applied))
        .collect();
    Ok(VerifyReport {
        ok: problems.is_empty(),
        versions_checked: checked,
        links_checked,
        problems,
        repaired,
        waiting,
    })
}

/// `verify`'s look at the skills directories: `<dir>/<skill>` for every agent of this host and
/// every skill the records know, against the records (not only the recorded installations: a
/// link the records lost still runs what it points at). Returns how many entries it looked at.
fn check_links(
    store: &mut Store,
    versions: &[Listed],
    installs: &[Install],
    dirs: &std::collections::HashMap<String, String>,
    problems: &mut Vec<String>,
    repaired: &mut Vec<String>,
) -> Result<usize, Error> {
    use std::collections::{BTreeMap, BTreeSet, HashMap};
    let versions_root = store.versions_root();
    let by_digest: HashMap<&str, &Listed> =
        versions.iter().map(|v| (v.digest.as_str(), v)).collect();
    let recorded: HashMap<(&str, &str), &str> = installs
        .iter()
        .map(|i| ((i.agent.as_str(), i.skill.as_str()), i.digest.as_str()))
        .collect();
    let skills: BTreeSet<&str> = versions
        .iter()
        .map(|v| v.skill.as_str())
        .chain(installs.iter().map(|i| i.skill.as_str()))
        .collect();
    // Agents sharing one directory share one link per skill: their records cannot all be right,
    // and repairing one agent's link would break the other's. Reported, not touched.
    let mut by_dir: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    let mut ids: HashMap<DirId, String> = HashMap::new();
    let mut agents_sorted: Vec<(&String, &String)> = dirs.iter().collect();
    agents_sorted.sort();
    for (agent, dir) in &agents_sorted {
        let key = ids
            .entry(dir_identity(Path::new(dir.as_str())))
            .or_insert_with(|| (*dir).clone())
            .clone();
        by_dir.entry(key).or_default().push(agent.as_str());
    }
    let mut shared: BTreeSet<&str> = BTreeSet::new();
    for (dir, names) in &by_dir {
        if names.len() > 1 {
            problems.push(format!(
                "agents {} use one directory ({dir}): they share one link per skill, so the records cannot say what each runs; left untouched (record one agent per directory)",
                names.join(", ")
            ));
            shared.extend(names.iter().copied());
        }
    }
    let time = now();
    let mut checked = 0;
    for (agent, dir) in agents_sorted {
        if shared.contains(agent.as_str()) || !Path::new(dir.as_str()).is_absolute() {
            continue;
        }
        for skill in &skills {
            checked += 1;
            let link = journal::link_path(dir, skill);
            let now = match agents::inspect(&link) {
                Ok(n) => n,
                Err(e) => {
                    problems.push(format!("agent {agent}: {e}"));
                    continue;
                }
            };
            let Some(digest) = recorded.get(&(agent.as_str(), *skill)).copied() else {
                lost_link(
                    store,
                    &versions_root,
                    &by_digest,
                    agent,
                    skill,
                    &link,
                    now,
                    &time,
                    problems,
                    repaired,
                )?;
                continue;
            };
            let want = store.tree(digest);
            let withdrawn = by_digest
                .get(digest)
                .is_some_and(|v| v.state == State::Withdrawn);
            match now {
                agents::Entry::Link(t) if t == want && withdrawn => problems.push(format!(
                    "agent {agent}: {} still points at withdrawn {skill}@{digest}: `skillbox sync` moves it off",
                    link.display()
                )),
                agents::Entry::Link(t) if t == want => {}
                // A directory that is gone is said to be gone: `sync` does not recreate it.
                agents::Entry::Absent
                    if withdrawn && matches!(agents::dir_missing(Path::new(dir)), Ok(true)) =>
                {
                    problems.push(journal::missing_dir_line(agent, dir, skill, digest))
                }
                // Never re-point or recreate a link onto a withdrawn version: moving the agent
                // off it is `sync`'s step, and reported here.
                _ if withdrawn => problems.push(format!(
                    "agent {agent}: recorded on withdrawn {skill}@{digest} and {} is not its link: `skillbox sync` moves it off (and names what is in the way)",
                    link.display()
                )),
                agents::Entry::Link(t) if t.starts_with(&versions_root) => {
                    match agents::switch(&link, Some(&t), Some(&want)) {
                        Ok(()) => {
                            repaired.push(format!("{}: re-pointed at {digest}", link.display()))
                        }
                        Err(e) => problems.push(e.to_string()),
                    }
                }
                agents::Entry::Absent => match agents::switch(&link, None, Some(&want)) {
                    Ok(()) => repaired.push(format!("{}: recreated (-> {digest})", link.display())),
                    Err(e) => problems.push(e.to_string()),
                },
                agents::Entry::Link(_) | agents::Entry::Foreign => problems.push(format!(
                    "{}: recorded as {skill}@{digest} but replaced by something skillbox did not create; left untouched",
                    link.display(),
                )),
            }
        }
    }
    Ok(checked)
}

/// An entry of an agent with no recorded installation of `skill`. Nothing, or anything that is
/// not a link into this store, is the operator's own and not looked at. A link into the store
/// is one skillbox made whose record was lost (a power loss can drop the newest commits): it
/// runs what it points at, so the records take it back (and `sync`, `status` and `gc` see it)
/// when that is a stored version of this skill that was approved or withdrawn; otherwise it is
/// reported.
#[allow(clippy::too_many_arguments)]
fn lost_link(
    store: &mut Store,
    versions_root: &Path,
    by_digest: &std::collections::HashMap<&str, &Listed>,
    agent: &str,
    skill: &str,
    link: &Path,
    now: agents::Entry,
    time: &str,
    problems: &mut Vec<String>,
    repaired: &mut Vec<String>,
) -> Result<(), Error> {
    let agents::Entry::Link(t) = now else {
        return Ok(());
    };
    if !t.starts_with(versions_root) {
        return Ok(());
    }
    let digest = linked_version(versions_root, &t).unwrap_or_default();
    let v = by_digest.get(digest.as_str()).filter(|v| {
        v.skill == skill
            && v.stored
            && (t.is_dir() || quarantine::is_quarantined(store.root(), &digest))
    });
    let Some(v) = v else {
        problems.push(format!(
            "agent {agent}: {} points at {}, which this store does not hold as a version of {skill}, and the records have no installation there: remove it (rm {})",
            link.display(),
            t.display(),
            link.display()
        ));
        return Ok(());
    };
    match v.state {
        State::Approved | State::Withdrawn => {
            let detail = format!(
                "agent {agent}: its link pointed here but the records had no installation; recorded by verify"
            );
            store.records.write(|tx| {
                record_found(tx, time, agent, skill, &v.digest, "skillbox", &detail)
            })?;
            repaired.push(format!(
                "{}: points at {skill}@{} with no installation recorded; recorded",
                link.display(),
                v.digest
            ));
            if v.state == State::Withdrawn {
                problems.push(format!(
                    "agent {agent}: {} points at withdrawn {skill}@{}: `skillbox sync` moves it off",
                    link.display(),
                    v.digest
                ));
            }
        }
        State::Pending | State::Denied => problems.push(format!(
            "agent {agent}: {} points at {skill}@{}, which is {} and never linked, and the records have no installation there: remove it (rm {})",
            link.display(),
            v.digest,
            v.state.as_str(),
            link.display()
        )),
    }
    Ok(())
}

/// What `update` re-reads: per skill, one index URL per index its agents' versions were taken
/// from on this host, each with those agents (`only`: just these agents; one of them that runs
/// no version of the skill is added with the index this host last installed the skill from).
/// Security: this host's own choice of index, never the one another host of the fleet
/// installed the newest version from, and each agent's own, never another agent's.
pub fn update_targets(
    store: &mut Store,
    skill: Option<&str>,
    only: &[String],
) -> Result<Vec<(String, String, Vec<String>)>, Error> {
    store.records.read(|tx| {
        let installs = tx.installs()?;
        let mut skills: Vec<String> = match skill {
            Some(s) => vec![s.to_owned()],
            None => installs.iter().map(|i| i.skill.clone()).collect(),
        };
        skills.dedup();
        let mut out: Vec<(String, String, Vec<String>)> = Vec::new();
        for s in skills {
            // Security: per agent, the index its own version was taken from. Two publishers'
            // skills of one name on this host (one agent's from one index, another's from
            // another) are two updates, each from its own index: never the newest index of the
            // name for every agent, which would hand one publisher's agents to the other.
            let mut any = false;
            for i in installs
                .iter()
                .filter(|i| i.skill == s && (only.is_empty() || only.contains(&i.agent)))
            {
                any = true;
                let Some(url) = tx.source_of(i)? else {
                    continue; // a local file: nothing to re-read
                };
                match out.iter_mut().find(|(k, u, _)| *k == s && *u == url) {
                    Some((_, _, agents)) => agents.push(i.agent.clone()),
                    None => out.push((s.clone(), url, vec![i.agent.clone()])),
                }
            }
            // Agents named that run no version of it here are added from the index this host
            // last installed a version of it from, as when no agent here runs it (stored only,
            // or waiting for a person).
            let added: Vec<String> = only
                .iter()
                .filter(|a| !installs.iter().any(|i| i.skill == s && i.agent == **a))
                .cloned()
                .collect();
            if any && added.is_empty() {
                continue;
            }
            let Some(url) = tx.host_index_url(&s)? else {
                if tx.versions_of(&s)?.is_empty() {
                    return Err(Error::new(
                        Kind::NotFound,
                        format!("no skill {s} in the records (see skillbox list)"),
                    ));
                }
                continue; // installed here from a local file: nothing to re-read
            };
            match out.iter_mut().find(|(k, u, _)| *k == s && *u == url) {
                Some((_, _, agents)) => agents.extend(added),
                None => out.push((s, url, added)),
            }
        }
        Ok(out)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lifecycle::fleet::{HostChoice, Location};
    use crate::lifecycle::records::Records;
    use crate::lifecycle::records::tests::version;

    fn open(path: &Path) -> Records {
        Records::open_at(
            &Location::Sqlite,
            path,
            &HostChoice {
                name: "h1".into(),
                explicit: true,
            },
            "0123456789abcdef0123456789abcdef",
        )
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn approve_all() -> Decision {
        Decision::Approved { rule: "lax".into() }
    }

    /// An intake decided on a record another handle changed before the intake's write: the
    /// decision redone inside the write transaction sees the change and nothing is recorded;
    /// a change that does not alter the outcome (another host's policy recorded the same
    /// approval) lets it through.
    #[test]
    fn an_intake_redecides_inside_its_write_transaction() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("records.db");
        let (mut one, mut two) = (open(&path), open(&path));
        // Planned from the copy read before staging: a policy's denial is re-evaluated, and
        // this host's laxer policy approves (and would record it).
        let planned_on_a_denial = |one: &mut Records, d: &str| {
            one.write(|tx| tx.insert_version(&version(d, State::Denied, "policy")))
                .unwrap_or_else(|e| panic!("{e}"));
            let stale = one
                .read(|tx| tx.version(d))
                .unwrap_or_else(|e| panic!("{e}"));
            merge(stale.as_ref(), &approve_all(), "sha256:r").unwrap_or_else(|e| panic!("{e}"))
        };
        let d = "sha256:aa";
        let planned = planned_on_a_denial(&mut one, d);
        assert_eq!(
            (planned.state, planned.fleet),
            (State::Approved, FleetWrite::Record)
        );
        two.write(|tx| tx.withdraw(d, "exfiltrates"))
            .unwrap_or_else(|e| panic!("{e}"));
        let e = one
            .write(|tx| redecide(tx, d, &planned, &approve_all(), "sha256:r", "install"))
            .err()
            .unwrap_or_else(|| panic!("decided on the stale record"));
        assert_eq!(e.kind, Kind::Withdrawn, "{e}");
        assert!(e.message.contains("changed while this install ran"), "{e}");

        // Pending by another host's policy since: this host's approval cannot stand.
        let d = "sha256:bb";
        let planned = planned_on_a_denial(&mut one, d);
        let seen = two
            .read(|tx| tx.version(d))
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_else(|| panic!("bb"));
        two.write(|tx| tx.set_state(&seen, State::Pending, "policy", None))
            .unwrap_or_else(|e| panic!("{e}"));
        let e = one
            .write(|tx| redecide(tx, d, &planned, &approve_all(), "sha256:r", "install"))
            .err()
            .unwrap_or_else(|| panic!("approved what another host's policy asked about"));
        assert!(e.message.contains("it is now pending by policy"), "{e}");

        // Approved by another host's policy since: the same outcome, kept as recorded.
        let d = "sha256:cc";
        let planned = merge(None, &approve_all(), "sha256:r").unwrap_or_else(|e| panic!("{e}"));
        two.write(|tx| tx.insert_version(&version(d, State::Approved, "policy")))
            .unwrap_or_else(|e| panic!("{e}"));
        let (seen, fresh) = one
            .write(|tx| redecide(tx, d, &planned, &approve_all(), "sha256:r", "install"))
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(seen.is_some());
        assert_eq!(
            (fresh.state, fresh.fleet),
            (State::Approved, FleetWrite::Keep)
        );
    }

    /// Only an approved version is ever activated: a denied or pending target is refused inside
    /// the transaction that would record the move, and nothing is recorded.
    #[test]
    fn record_changes_activates_only_approved_versions() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("records.db");
        let mut r = open(&path);
        for (d, state, by) in [
            ("sha256:aa", State::Denied, "person:bo"),
            ("sha256:bb", State::Pending, "policy"),
            ("sha256:cc", State::Approved, "policy"),
        ] {
            r.write(|tx| tx.insert_version(&version(d, state, by)))
                .unwrap_or_else(|e| panic!("{e}"));
        }
        let change = |to: &str| LinkChange {
            agent: "alpha".into(),
            dir: "/agents/alpha".into(),
            from: None,
            to: Some(to.into()),
        };
        for (d, kind) in [
            ("sha256:aa", Kind::Denied),
            ("sha256:bb", Kind::NeedsApproval),
        ] {
            let e = r
                .write(|tx| record_changes(tx, "demo", &[change(d)], "t", "activated", "x", None))
                .err()
                .unwrap_or_else(|| panic!("{d} activated"));
            assert_eq!(e.kind, kind, "{e}");
        }
        let installs = r.read(|tx| tx.installs()).unwrap_or_else(|e| panic!("{e}"));
        assert!(installs.is_empty(), "{installs:?}");
        r.write(|tx| {
            record_changes(
                tx,
                "demo",
                &[change("sha256:cc")],
                "t",
                "activated",
                "x",
                None,
            )
        })
        .unwrap_or_else(|e| panic!("{e}"));
        let installs = r.read(|tx| tx.installs()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(installs.len(), 1);
    }
}
