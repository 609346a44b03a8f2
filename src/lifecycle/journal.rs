//! Crash safety: every change of state is a records transaction ordered with its filesystem
//! steps, and an intent row says what a step was about to do, so the next command can finish or
//! undo it.
//!
//! Two kinds of intent:
//! - `promote`: written (and committed) before a staged intake is renamed into `versions/`.
//!   The transaction that records the version deletes it. A surviving one means the version was
//!   never recorded: its tree (when this intake created it) and its staging are removed (undo).
//! - `links`: committed in the same transaction as the new installations. The records are then
//!   the new state; the links follow. A surviving one is finished (roll forward): each link is
//!   switched from its recorded old target to its new one, which is idempotent. A switch that
//!   cannot be made (an entry that is not ours, a directory that refuses writes) is not
//!   forgotten: the transaction that drops the intent puts that agent's installation back on the
//!   version its link still points at, so the records never say an agent moved when it did not.
//!
//! Intents belong to the host that wrote them (in records a fleet shares, each host reads and
//! finishes only its own: the steps are on its filesystem).
//!
//! Recovery also reaps what no record backs: staging directories no running command holds
//! (an intake holds a `flock` on its own from its creation, made under the store lock as
//! recovery runs, while it extracts without that lock: `store::Staging`) and version trees
//! whose version is not recorded as stored. It never touches an entry in a skills directory it
//! did not make.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::records::Tx;
use super::store::{self, Store};
use super::{Error, Kind, agents, crash_point, now};

/// One link to move: `<dir>/<skill>` from one stored version (or nothing) to another.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkChange {
    pub agent: String,
    pub dir: String,
    pub from: Option<String>,
    pub to: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Intent {
    Promote {
        staging: String,
        digest: String,
        /// `versions/<hex>` existed before this intake (then it is never removed on undo).
        existed: bool,
    },
    Links {
        skill: String,
        changes: Vec<LinkChange>,
    },
}

fn to_value(i: &Intent) -> Result<Value, Error> {
    serde_json::to_value(i).map_err(|e| Error::new(Kind::Operational, e.to_string()))
}

/// Record a `promote` intent in its own transaction; returns its sequence number.
pub fn begin_promote(store: &mut Store, staging: &Path, digest: &str) -> Result<i64, Error> {
    let name = staging
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let existed = store.version_dir(digest).exists();
    let intent = to_value(&Intent::Promote {
        staging: name,
        digest: digest.to_owned(),
        existed,
    })?;
    store.records.write(|tx| tx.add_intent(&intent, &now()))
}

/// Inside a transaction: add the `links` intent for `changes` (none when nothing moves).
pub fn add_links(tx: &Tx<'_>, skill: &str, changes: &[LinkChange]) -> Result<Option<i64>, Error> {
    if changes.is_empty() {
        return Ok(None);
    }
    let intent = to_value(&Intent::Links {
        skill: skill.to_owned(),
        changes: changes.to_vec(),
    })?;
    tx.add_intent(&intent, &now()).map(Some)
}

/// Threads switching links when many agents move at once.
const SWITCH_THREADS: usize = 16;

/// The path of one agent's link.
pub fn link_path(dir: &str, skill: &str) -> PathBuf {
    Path::new(dir).join(skill)
}

/// One switch of a `links` intent that could not be made: which change (its index in the
/// intent) and why, as a line for the operator.
#[derive(Debug, Clone)]
pub struct Failed {
    pub index: usize,
    pub message: String,
    /// The move was off a withdrawn version and could not be made, so the agent's link to the
    /// withdrawn tree was removed instead: the agent runs nothing of the skill now.
    pub removed: bool,
}

/// Switch every link of a committed `links` intent, then drop the intent. `op` names the
/// command for the crash hook. Returns one line per link that could not be switched.
pub fn finish_links(
    store: &mut Store,
    seq: Option<i64>,
    skill: &str,
    changes: &[LinkChange],
    op: &str,
) -> Result<Vec<String>, Error> {
    Ok(switch_links(store, seq, skill, changes, op)?
        .into_iter()
        .map(|f| f.message)
        .collect())
}

/// [`finish_links`], saying which changes failed.
///
/// A switch that fails is not forgotten: in the transaction that drops the intent, the agent's
/// installation goes back to the version its link still points at (`from`), with a
/// `switch_failed` event. The records then say what the agent runs, so everything that reads
/// them sees it: `status` does not call a withdrawn version contained while an agent here still
/// runs it, `sync` (and every command that changes state) moves it off again, `gc` keeps its
/// tree, and `verify` checks its link.
pub fn switch_links(
    store: &mut Store,
    seq: Option<i64>,
    skill: &str,
    changes: &[LinkChange],
    op: &str,
) -> Result<Vec<Failed>, Error> {
    let Some(seq) = seq else {
        return Ok(Vec::new());
    };
    let versions = store.versions_root();
    let tree = |d: &str| versions.join(store::hex_of(d)).join("tree");
    // Security: a withdrawal committed since this intent was recorded (on any host: another
    // host may withdraw between a killed command and the recovery that finishes it) is never
    // undone on disk. A link is not switched onto a version withdrawn now; the change counts as
    // failed, so the records put the agent back where its link still is, and `sync` moves it
    // on from there. Without this, the recovery `verify` runs would point an agent that still
    // ran the old version at the withdrawn one, and leave it there.
    let root = store.root().to_owned();
    let withdrawn_now = |tx: &Tx<'_>, d: &str| -> Result<bool, Error> {
        Ok(tx
            .version(d)?
            .is_some_and(|v| v.state == super::records::State::Withdrawn)
            || super::quarantine::withdrawn_here(&root, d)?)
    };
    let (withdrawn, leaving): (Vec<String>, Vec<String>) = store.records.read(|tx| {
        let (mut onto, mut off): (Vec<String>, Vec<String>) = (Vec::new(), Vec::new());
        for c in changes {
            for (d, out) in [(c.to.as_deref(), &mut onto), (c.from.as_deref(), &mut off)] {
                if let Some(d) = d
                    && !out.iter().any(|x| x == d)
                    && withdrawn_now(tx, d)?
                {
                    out.push(d.to_owned());
                }
            }
        }
        Ok((onto, off))
    })?;
    let switch = |(index, c): (usize, &LinkChange)| -> Option<Failed> {
        // Security: a move off a withdrawn version never recreates a missing agent directory
        // (a directory that went between the move's check and now, or a recovery finishing
        // it): the switch is not made, and the records keep the agent on the withdrawn
        // version, so `status` and `sync` still see it. Never the removal fallback below
        // either: with the directory missing there is nothing it could remove, and its link
        // may come back with the directory.
        if let Some(from) = c.from.as_deref().filter(|f| leaving.iter().any(|d| d == f))
            && Path::new(&c.dir).is_absolute()
            && matches!(agents::dir_missing(Path::new(&c.dir)), Ok(true))
        {
            return Some(Failed {
                index,
                message: missing_dir_line(&c.agent, &c.dir, skill, from),
                removed: false,
            });
        }
        if let Some(to) = c.to.as_deref().filter(|t| withdrawn.iter().any(|d| d == t)) {
            return onto_withdrawn(c, skill, to, &tree(to)).map(|message| Failed {
                index,
                message,
                removed: false,
            });
        }
        let e = switch_one(c, skill, &tree).err()?;
        // Security: a move off a withdrawn version is containment. When the move cannot be
        // made (no room for the new link, a quota, an entry another process put at the
        // temporary link's name: a package running as the agent's user can do that to keep
        // itself loaded), the agent's own link to the withdrawn tree is removed instead, which
        // takes no room and no new name: the agent loses the skill rather than keep running
        // what was withdrawn.
        if let Some(from) = c.from.as_deref().filter(|f| leaving.iter().any(|d| d == f))
            && c.to.is_some()
        {
            let off = LinkChange {
                to: None,
                ..c.clone()
            };
            if switch_one(&off, skill, &tree).is_ok() {
                return Some(Failed {
                    index,
                    message: removed_line(c, skill, from, &e.to_string()),
                    removed: true,
                });
            }
        }
        Some(Failed {
            index,
            message: failed_line(c, skill, &e.to_string()),
            removed: false,
        })
    };
    let indexed: Vec<(usize, &LinkChange)> = changes.iter().enumerate().collect();
    let mut failed: Vec<Failed> = Vec::new();
    if let Some((first, rest)) = indexed.split_first() {
        failed.extend(switch(*first));
        crash_point(op, "linked-one");
        // Links are independent; a long symlink target costs the filesystem a block and a
        // journal wait per rename, so many agents are switched from a few threads at once.
        let chunk = rest.len().div_ceil(SWITCH_THREADS).max(1);
        let found: Vec<Vec<Failed>> = std::thread::scope(|s| {
            let handles: Vec<_> = rest
                .chunks(chunk)
                .map(|part| {
                    s.spawn(|| part.iter().copied().filter_map(&switch).collect::<Vec<_>>())
                })
                .collect();
            handles
                .into_iter()
                .zip(rest.chunks(chunk))
                .map(|(h, part)| {
                    // A panicked thread's switches are not known to be made: all count as failed.
                    h.join().unwrap_or_else(|_| {
                        part.iter()
                            .map(|(i, c)| Failed {
                                index: *i,
                                message: failed_line(c, skill, "a link switch panicked"),
                                removed: false,
                            })
                            .collect()
                    })
                })
                .collect()
        });
        failed.extend(found.into_iter().flatten());
    }
    crash_point(op, "linked");
    let time = now();
    store.records.write(|tx| {
        for f in &failed {
            let Some(c) = changes.get(f.index) else {
                continue;
            };
            // Only while the records still hold this intent's step (under the store lock no
            // other command of this host changes this host's installations).
            if tx.install(&c.agent, skill)?.as_deref() != c.to.as_deref() {
                continue;
            }
            // Where its link is now: where it was, or nowhere once removed off a withdrawn one.
            let now_on = if f.removed { None } else { c.from.as_deref() };
            // The index it took that version from, as the event of its arrival there says: an
            // intake from another index (`--switch-index`) recorded the new one with the move.
            let host = tx.host().to_owned();
            let back_from = match now_on {
                Some(d) => tx.index_in_events(&host, &c.agent, d)?,
                None => None,
            };
            tx.set_install(&c.agent, skill, now_on)?;
            if back_from.is_some() {
                tx.set_install_index(&c.agent, skill, back_from.as_deref())?;
            }
            if let Some(d) = c.from.as_deref().or(c.to.as_deref()) {
                let index = match back_from {
                    Some(u) => Some(u),
                    None => tx.index_in_events(&host, &c.agent, d)?,
                };
                tx.event_about(
                    &time,
                    skill,
                    Some(d),
                    "switch_failed",
                    "skillbox",
                    &f.message,
                    super::records::About {
                        agent: Some(&c.agent),
                        index_url: index.as_deref(),
                    },
                )?;
            }
        }
        tx.remove_intent(seq)
    })?;
    failed.sort_by_key(|f| f.index);
    Ok(failed)
}

/// One switch of an intent. A link of ours that vanished is created afresh (as `verify`
/// recreates it): nothing is there to replace, and symlink(2) fails if anything appeared.
fn switch_one(c: &LinkChange, skill: &str, tree: &dyn Fn(&str) -> PathBuf) -> Result<(), Error> {
    // Never a link relative to the current directory: an agent without a recorded absolute
    // directory is an error, not a place to write.
    if !Path::new(&c.dir).is_absolute() {
        return Err(Error::new(
            Kind::Operational,
            format!("agent {} has no recorded directory", c.agent),
        ));
    }
    let link = link_path(&c.dir, skill);
    let from = match agents::inspect(&link)? {
        agents::Entry::Absent => None,
        _ => c.from.as_deref().map(tree),
    };
    let to = c.to.as_deref().map(tree);
    agents::switch(&link, from.as_deref(), to.as_deref())
}

/// A change onto `to`, withdrawn since the change was recorded: not made. `None` when the link
/// already points at `to`'s tree (switched before an interruption: the records say so, and
/// `sync` moves it off); else the line saying the agent stays where its link is.
fn onto_withdrawn(c: &LinkChange, skill: &str, to: &str, to_tree: &Path) -> Option<String> {
    let link = link_path(&c.dir, skill);
    if matches!(agents::inspect(&link), Ok(agents::Entry::Link(t)) if t == to_tree) {
        return None;
    }
    let stays = match c.from.as_deref() {
        Some(d) => format!("the records keep it on {skill}@{d}, where its link is"),
        None => format!("the records keep it without {skill}"),
    };
    Some(format!(
        "agent {}: not switched onto {skill}@{to}: it was withdrawn after this move was recorded; {stays}",
        c.agent
    ))
}

/// The operator's line for an agent on withdrawn `skill@digest` whose directory `dir` is
/// missing: skillbox does not recreate it (see `ops::unmovable`), so the agent stays recorded
/// on the withdrawn version until its directory is back.
pub fn missing_dir_line(agent: &str, dir: &str, skill: &str, digest: &str) -> String {
    format!(
        "agent {agent}: its directory {dir} is missing (removed, or on a filesystem not mounted); skillbox did not recreate it, and {agent} stays recorded on withdrawn {skill}@{digest}, since its link there comes back with the directory: mount it (or recreate it yourself, as the agent's owner), then run `skillbox sync` to move it"
    )
}

/// The operator's line for a switch that failed: who, why, what the records now say, and what
/// to do.
fn failed_line(c: &LinkChange, skill: &str, why: &str) -> String {
    let stays = match c.from.as_deref() {
        Some(d) => format!("the records keep it on {skill}@{d}, as before"),
        None => format!("the records keep it without {skill}"),
    };
    format!(
        "agent {}: {why}; {stays}: fix the cause, then run the command again (`skillbox sync` retries a move off a withdrawn version)",
        c.agent
    )
}

/// The operator's line for a move off withdrawn `from` that could not be made, whose link was
/// removed instead ([`switch_links`]).
fn removed_line(c: &LinkChange, skill: &str, from: &str, why: &str) -> String {
    format!(
        "agent {}: not moved to {skill}@{} ({why}); its link to withdrawn {skill}@{from} was removed instead, so it runs no version of {skill} now, and the records say so: fix the cause, then install {skill} for it again",
        c.agent,
        c.to.as_deref().unwrap_or("none")
    )
}

/// Finish or undo whatever an interrupted command left, and reap unrecorded trees. Returns one
/// line per thing done. Must run with the store lock held.
pub fn recover(store: &mut Store) -> Result<Vec<String>, Error> {
    let mut done = Vec::new();
    let intents = store.records.read(|tx| tx.intents())?;
    for row in intents {
        let intent: Intent = serde_json::from_value(row.payload.clone()).map_err(|e| {
            Error::new(
                Kind::Operational,
                format!("corrupt store: intent {} cannot be read: {e}", row.seq),
            )
        })?;
        match intent {
            Intent::Promote {
                staging,
                digest,
                existed,
            } => {
                if !staging.is_empty() && !staging.contains('/') && staging != ".." {
                    store::remove_tree(&store.staging_root().join(&staging))?;
                }
                let recorded = store
                    .records
                    .read(|tx| tx.version(&digest))?
                    .is_some_and(|v| v.stored);
                if !existed && !recorded {
                    store::remove_tree(&store.version_dir(&digest))?;
                }
                store.records.write(|tx| tx.remove_intent(row.seq))?;
                done.push(format!(
                    "undid an interrupted promotion of {digest} (it was never recorded)"
                ));
            }
            Intent::Links { skill, changes } => {
                let problems = finish_links(store, Some(row.seq), &skill, &changes, "recover")?;
                done.push(format!(
                    "finished switching {} link(s) of {skill}",
                    changes.len()
                ));
                done.extend(problems);
            }
        }
    }
    // Staging directories: a running install extracts into its own without the store lock,
    // holding a `flock` on it (`store::Staging`); one whose lock is free belongs to no running
    // command (a killed one's), and goes.
    if let Ok(rd) = std::fs::read_dir(store.staging_root()) {
        for e in rd.flatten() {
            if store::remove_abandoned_staging(&e.path())? {
                done.push(format!(
                    "removed abandoned staging {}",
                    e.file_name().to_string_lossy()
                ));
            }
        }
    }
    // What a killed quarantine step left (a copy put aside, a pending entry's temporary
    // file): only what no running command holds goes.
    for name in super::quarantine::remove_abandoned(store.root())? {
        done.push(format!(
            "removed {name}, left by an interrupted quarantine step"
        ));
    }
    // Trees whose version is not recorded as stored (a collected, denied or undone version).
    // Security: never by records this very command created: they cannot know any tree (the
    // store refuses records it is not bound to; this is the last guard).
    if store.records.just_created() {
        return Ok(done);
    }
    let stored: std::collections::BTreeSet<String> = store
        .records
        .read(|tx| tx.stored_digests())?
        .into_iter()
        .map(|d| store::hex_of(&d).to_owned())
        .collect();
    if let Ok(rd) = std::fs::read_dir(store.versions_root()) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !stored.contains(&name) {
                store::remove_tree(&e.path())?;
                done.push(format!("removed unrecorded tree sha256:{name}"));
            }
        }
    }
    Ok(done)
}
