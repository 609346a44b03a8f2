//! Agents and their skills directories: `<skills dir>/<skill>` is a symlink skillbox owns,
//! pointing at one stored version's tree, switched atomically (a new link renamed over the old,
//! rename(2) being atomic on one filesystem).
//!
//! skillbox never replaces or deletes anything in a skills directory that it did not create:
//! before touching an entry it checks that the entry is exactly the link its records say it
//! made (a symlink, pointing at the version it recorded, inside its store). Anything else is an
//! error that names the entry and leaves it alone.

use std::fs;
use std::io;
use std::path::{Component, Path, PathBuf};

use super::{Error, Kind};

/// The harness presets: name and skills directory (`~` is `$HOME`, a relative one is taken
/// from the current directory).
pub const PRESETS: &[(&str, &str)] = &[
    ("claude-code", "~/.claude/skills"),
    ("codex", "~/.codex/skills"),
    ("project", ".agents/skills"),
];

/// One `--agent NAME[=DIR]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentArg {
    pub name: String,
    pub dir: Option<PathBuf>,
}

impl std::str::FromStr for AgentArg {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (name, dir) = match s.split_once('=') {
            Some((n, d)) if !d.is_empty() => (n, Some(PathBuf::from(d))),
            Some(_) => return Err("empty directory after '='".into()),
            None => (s, None),
        };
        check_agent_name(name)?;
        Ok(AgentArg {
            name: name.to_owned(),
            dir,
        })
    }
}

pub fn check_agent_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 64 {
        return Err("an agent name is 1 to 64 characters".into());
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Err(format!(
            "agent name {:?}: use letters, digits, '-', '_' and '.'",
            name.escape_default().to_string()
        ));
    }
    Ok(())
}

/// The absolute skills directory of a preset, when `name` is one.
pub fn preset_dir(name: &str) -> Result<Option<PathBuf>, Error> {
    let Some((_, dir)) = PRESETS.iter().find(|(n, _)| *n == name) else {
        return Ok(None);
    };
    absolute(Path::new(dir)).map(Some)
}

/// `~/x` against `$HOME`, a relative path against the current directory; `..` refused.
pub fn absolute(dir: &Path) -> Result<PathBuf, Error> {
    let p = if let Ok(rest) = dir.strip_prefix("~") {
        let home = std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .ok_or_else(|| {
                Error::new(Kind::Usage, "HOME is not set; give the agent's directory")
            })?;
        PathBuf::from(home).join(rest)
    } else if dir.is_absolute() {
        dir.to_owned()
    } else {
        std::env::current_dir()
            .map_err(|e| Error::io("cannot read the current directory", &e))?
            .join(dir)
    };
    if p.components().any(|c| c == Component::ParentDir) {
        return Err(Error::new(
            Kind::Usage,
            format!("agent directory {}: give it without '..'", p.display()),
        ));
    }
    Ok(p)
}

/// What `<dir>/<skill>` is now, relative to what skillbox recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    Absent,
    /// A symlink to this target.
    Link(PathBuf),
    /// Anything else: a directory, a file, a device.
    Foreign,
}

pub fn inspect(path: &Path) -> Result<Entry, Error> {
    match fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Entry::Absent),
        Err(e) => Err(Error::io(format!("cannot inspect {}", path.display()), &e)),
        Ok(md) if md.file_type().is_symlink() => fs::read_link(path)
            .map(Entry::Link)
            .map_err(|e| Error::io(format!("cannot read {}", path.display()), &e)),
        Ok(_) => Ok(Entry::Foreign),
    }
}

/// The error for an entry skillbox did not create.
pub fn not_ours(path: &Path) -> Error {
    Error::new(
        Kind::Operational,
        format!(
            "{} exists and skillbox did not create it; it was left untouched (move it away, or install for another agent)",
            path.display()
        ),
    )
}

/// Make `link` match `to` (a tree, or none to remove it), given that it must currently be
/// `from` (the tree skillbox recorded, or none when it recorded nothing). An entry already at
/// `to` is left as it is, so the step can be repeated after a crash.
pub fn switch(link: &Path, from: Option<&Path>, to: Option<&Path>) -> Result<(), Error> {
    let now = inspect(link)?;
    let matches = |want: Option<&Path>| match (&now, want) {
        (Entry::Absent, None) => true,
        (Entry::Link(t), Some(w)) => t == w,
        _ => false,
    };
    if matches(to) {
        return Ok(());
    }
    if !matches(from) {
        return Err(not_ours(link));
    }
    match to {
        None => fs::remove_file(link)
            .map_err(|e| Error::io(format!("cannot remove {}", link.display()), &e)),
        Some(target) => {
            let dir = link.parent().ok_or_else(|| {
                Error::new(Kind::Usage, format!("{} has no parent", link.display()))
            })?;
            fs::create_dir_all(dir)
                .map_err(|e| Error::io(format!("cannot create {}", dir.display()), &e))?;
            if now == Entry::Absent {
                // symlink(2) fails if anything appeared meanwhile: nothing is replaced.
                return std::os::unix::fs::symlink(target, link)
                    .map_err(|e| Error::io(format!("cannot create {}", link.display()), &e));
            }
            let tmp = temp_link(link);
            match inspect(&tmp)? {
                Entry::Absent => {}
                // A leftover of an interrupted switch: our name, a symlink.
                Entry::Link(_) => fs::remove_file(&tmp)
                    .map_err(|e| Error::io(format!("cannot remove {}", tmp.display()), &e))?,
                Entry::Foreign => return Err(not_ours(&tmp)),
            }
            std::os::unix::fs::symlink(target, &tmp)
                .map_err(|e| Error::io(format!("cannot create {}", tmp.display()), &e))?;
            fs::rename(&tmp, link).map_err(|e| {
                let _ = fs::remove_file(&tmp);
                Error::io(format!("cannot switch {}", link.display()), &e)
            })
        }
    }
}

/// The temporary name a new link is made under before it is renamed over the old one; a
/// leftover one (after a crash) is ours by name and is replaced on the next switch.
pub fn temp_link(link: &Path) -> PathBuf {
    let name = link
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    link.with_file_name(format!(".skillbox-new-{name}"))
}
