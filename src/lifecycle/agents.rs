//! Agents and their skills directories: `<skills dir>/<skill>` is a symlink skillbox owns,
//! pointing at one stored version's tree, switched atomically (a new link renamed over the old,
//! rename(2) being atomic on one filesystem).
//!
//! skillbox never replaces or deletes anything in a skills directory that it did not create:
//! before touching an entry it checks that the entry is exactly the link its records say it
//! made (a symlink, pointing at the version it recorded, inside its store). Anything else is an
//! error that names the entry and leaves it alone.
//!
//! A skills directory often lies under a directory someone else controls (a user's home, a
//! shared project) while skillbox runs as root. Checks and acts on full paths would each
//! resolve the path anew, and that user could swap a component in between (a symlink to
//! `/etc` in place of `skills`) to make skillbox delete or overwrite outside the directory. So
//! the directory is opened once, component by component without following links
//! ([`AgentDir::open`]), and every check and act is made relative to that descriptor
//! (`fstatat`, `readlinkat`, `symlinkat`, `renameat`, `unlinkat`). A symlink on the way is
//! followed only when nobody but root or the user running skillbox could have made or replaced
//! it (see [`AgentDir::open`]); any other is refused.

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, open, openat, readlinkat, renameat};
use nix::sys::stat::{FileStat, Mode, fstat, fstatat, mkdirat};
use nix::unistd::{UnlinkatFlags, symlinkat, unlinkat};

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
    /// Typed by the user (`--agent`), not read back from the records: a preset typed alone
    /// then means its directory as it is here (`project` is `./.agents/skills` of the current
    /// directory), and one recorded with another directory is refused rather than reused.
    pub typed: bool,
}

impl AgentArg {
    /// An agent the records name (the agents an install named, those an update revisits): its
    /// recorded directory, wherever the command runs.
    pub fn recorded(name: String) -> Self {
        AgentArg {
            name,
            dir: None,
            typed: false,
        }
    }
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
            typed: true,
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

/// What `link` (`<dir>/<skill>`) is now; [`Entry::Absent`] when its directory does not exist.
pub fn inspect(link: &Path) -> Result<Entry, Error> {
    let (dir, name) = split(link)?;
    match AgentDir::open(dir, false)? {
        Some(d) => d.inspect(name),
        None => Ok(Entry::Absent),
    }
}

/// Whether agent directory `dir` is missing (a component of it does not exist), walked as
/// [`AgentDir::open`] walks it, creating nothing.
pub fn dir_missing(dir: &Path) -> Result<bool, Error> {
    Ok(AgentDir::open(dir, false)?.is_none())
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
/// `to` is left as it is, so the step can be repeated after a crash. The directory of `link`
/// is opened once ([`AgentDir::open`]) and created only when a link is to be made in it.
pub fn switch(link: &Path, from: Option<&Path>, to: Option<&Path>) -> Result<(), Error> {
    let (dir, name) = split(link)?;
    if let Some(d) = AgentDir::open(dir, false)? {
        return d.switch(name, from, to);
    }
    // No directory, so no entry: decide as for an absent one before creating anything.
    match decide(&Entry::Absent, from, to) {
        Decision::Done => Ok(()),
        Decision::NotOurs => Err(not_ours(link)),
        Decision::Act => match AgentDir::open(dir, true)? {
            Some(d) => d.switch(name, from, to),
            None => Err(Error::new(
                Kind::Operational,
                format!("cannot create {}", dir.display()),
            )),
        },
    }
}

/// The temporary name a new link is made under before it is renamed over the old one; a
/// leftover one (after a crash) is ours by name and is replaced on the next switch.
pub fn temp_link(link: &Path) -> PathBuf {
    let name = link
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    link.with_file_name(temp_name(&name))
}

fn temp_name(name: &str) -> String {
    format!(".skillbox-new-{name}")
}

/// `<dir>/<name>` split, `name` one plain component.
fn split(link: &Path) -> Result<(&Path, &OsStr), Error> {
    match (link.parent(), link.file_name()) {
        (Some(dir), Some(name)) if !dir.as_os_str().is_empty() => Ok((dir, name)),
        _ => Err(Error::new(
            Kind::Usage,
            format!("{} has no parent", link.display()),
        )),
    }
}

enum Decision {
    /// The entry is already what it should become.
    Done,
    /// The entry is not what skillbox recorded: leave it alone.
    NotOurs,
    /// The entry is what skillbox recorded: change it.
    Act,
}

fn decide(now: &Entry, from: Option<&Path>, to: Option<&Path>) -> Decision {
    let matches = |want: Option<&Path>| match (now, want) {
        (Entry::Absent, None) => true,
        (Entry::Link(t), Some(w)) => t == w,
        _ => false,
    };
    if matches(to) {
        Decision::Done
    } else if matches(from) {
        Decision::Act
    } else {
        Decision::NotOurs
    }
}

/// More symbolic links than this on the way to one directory is a loop (the kernel's limit).
const MAX_LINKS: u32 = 40;
/// Bounds the mkdir-then-open retries when a component being created keeps vanishing.
const MAX_CREATE_TRIES: u32 = 8;
const GROUP_OR_OTHER_WRITE: u32 = 0o022;
const STICKY: u32 = 0o1000;

/// One agent's skills directory, opened once: every check and change of its entries is made
/// relative to this descriptor, so whatever happens to the path afterwards, skillbox acts in
/// this directory and nowhere else.
#[derive(Debug)]
pub struct AgentDir {
    fd: OwnedFd,
    /// The path it was opened by, for messages.
    path: PathBuf,
}

/// One step of a walk.
enum Step {
    Root,
    Up,
    Name(OsString),
}

fn steps(p: &Path) -> impl DoubleEndedIterator<Item = Step> + '_ {
    p.components().filter_map(|c| match c {
        Component::RootDir | Component::Prefix(_) => Some(Step::Root),
        Component::CurDir => None,
        Component::ParentDir => Some(Step::Up),
        Component::Normal(n) => Some(Step::Name(n.to_owned())),
    })
}

fn dir_flags() -> OFlag {
    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC
}

fn is_symlink(st: &FileStat) -> bool {
    st.st_mode & libc::S_IFMT == libc::S_IFLNK
}

impl AgentDir {
    /// Open `dir` component by component from `/` (or the current directory), each with
    /// `O_NOFOLLOW | O_DIRECTORY` relative to the one before, creating missing components
    /// (mode 0755) when `create`; `None` when a component is missing and `!create`.
    ///
    /// A symlink on the way is followed only when nobody but root and the user skillbox runs
    /// as could have made it or could replace it: the link is owned by one of them, and so is
    /// the directory holding it, which nobody else can write to (or only with the sticky bit,
    /// which keeps others from replacing a link they do not own). So `~/.codex/skills ->
    /// ~/.claude/skills` of one's own works, as do the system's links (`/var/run -> /run`);
    /// a link another user could plant or swap (in their home, in a shared project, in a
    /// group-writable directory) is refused with its name and target, and skillbox runs as
    /// root through no path another user can redirect. The directory itself may belong to
    /// anyone: what is done in it stays in it (see the type).
    pub fn open(dir: &Path, create: bool) -> Result<Option<AgentDir>, Error> {
        let fail = |what: &Path, e: Errno| {
            Error::io(
                format!(
                    "cannot open agent directory {} at {}",
                    dir.display(),
                    what.display()
                ),
                &io::Error::from(e),
            )
        };
        let start = if dir.is_absolute() { "/" } else { "." };
        let mut cur = open(
            start,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| fail(Path::new(start), e))?;
        // Where the walk is, for messages (`..` taken lexically, as it is in them).
        let mut at = PathBuf::from(start);
        let mut pending: VecDeque<Step> = steps(dir).collect();
        let (mut links, mut creates) = (0u32, 0u32);
        while let Some(step) = pending.pop_front() {
            let name = match step {
                Step::Root => {
                    cur = open(
                        "/",
                        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
                        Mode::empty(),
                    )
                    .map_err(|e| fail(Path::new("/"), e))?;
                    at = PathBuf::from("/");
                    continue;
                }
                Step::Up => {
                    cur =
                        openat(&cur, "..", dir_flags(), Mode::empty()).map_err(|e| fail(&at, e))?;
                    at.pop();
                    continue;
                }
                Step::Name(n) => n,
            };
            let here = at.join(&name);
            match openat(&cur, name.as_os_str(), dir_flags(), Mode::empty()) {
                Ok(fd) => {
                    cur = fd;
                    at = here;
                }
                Err(Errno::ENOENT) if create && creates < MAX_CREATE_TRIES => {
                    creates += 1;
                    // mkdirat never follows a link; 0755 whatever the umask: a directory
                    // skillbox makes is writable by nobody else.
                    match mkdirat(&cur, name.as_os_str(), Mode::from_bits_truncate(0o755)) {
                        Ok(()) | Err(Errno::EEXIST) => {}
                        Err(e) => {
                            return Err(Error::io(
                                format!("cannot create {}", here.display()),
                                &io::Error::from(e),
                            ));
                        }
                    }
                    // Open what is there now, through the same checks.
                    pending.push_front(Step::Name(name));
                }
                Err(Errno::ENOENT) if !create => return Ok(None),
                // O_NOFOLLOW on a link: ELOOP; O_DIRECTORY on anything else: ENOTDIR.
                Err(Errno::ELOOP | Errno::ENOTDIR) => {
                    let st = fstatat(&cur, name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW)
                        .map_err(|e| fail(&here, e))?;
                    if !is_symlink(&st) {
                        return Err(Error::new(
                            Kind::Operational,
                            format!(
                                "cannot open agent directory {}: {} is not a directory",
                                dir.display(),
                                here.display()
                            ),
                        ));
                    }
                    links += 1;
                    if links > MAX_LINKS {
                        return Err(fail(&here, Errno::ELOOP));
                    }
                    let why = untrusted_link(cur.as_fd(), &at, &st).map_err(|e| fail(&at, e))?;
                    // A link that passed cannot be replaced by anyone else between the check
                    // (of what fstatat found) and this read.
                    let target = readlinkat(&cur, name.as_os_str()).map_err(|e| fail(&here, e))?;
                    if let Some(why) = why {
                        return Err(Error::new(
                            Kind::Usage,
                            format!(
                                "agent directory {}: {} is a symbolic link to {} and {why}, so \
                                 another user could redirect it; skillbox does not follow it \
                                 (give the directory it points to, or make it a real directory)",
                                dir.display(),
                                here.display(),
                                Path::new(&target).display()
                            ),
                        ));
                    }
                    // Resolved from the directory holding it (a `/` first restarts from the
                    // root), each component through the same checks.
                    for s in steps(Path::new(&target)).rev() {
                        pending.push_front(s);
                    }
                }
                Err(e) => return Err(fail(&here, e)),
            }
        }
        Ok(Some(AgentDir {
            fd: cur,
            path: dir.to_owned(),
        }))
    }

    /// The path this directory was opened by.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What `<this directory>/<name>` is now. Never follows a link.
    pub fn inspect(&self, name: &OsStr) -> Result<Entry, Error> {
        let path = self.entry_path(name)?;
        match fstatat(&self.fd, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Err(Errno::ENOENT) => Ok(Entry::Absent),
            Err(e) => Err(Error::io(
                format!("cannot inspect {}", path.display()),
                &io::Error::from(e),
            )),
            Ok(st) if is_symlink(&st) => readlinkat(&self.fd, name)
                .map(|t| Entry::Link(PathBuf::from(t)))
                .map_err(|e| {
                    Error::io(
                        format!("cannot read {}", path.display()),
                        &io::Error::from(e),
                    )
                }),
            Ok(_) => Ok(Entry::Foreign),
        }
    }

    /// [`switch`] for `<this directory>/<name>`: the check and the change are made in this
    /// directory, whatever its path has become since it was opened.
    pub fn switch(
        &self,
        name: &OsStr,
        from: Option<&Path>,
        to: Option<&Path>,
    ) -> Result<(), Error> {
        let link = self.entry_path(name)?;
        let now = self.inspect(name)?;
        match decide(&now, from, to) {
            Decision::Done => return Ok(()),
            Decision::NotOurs => return Err(not_ours(&link)),
            Decision::Act => {}
        }
        let Some(target) = to else {
            return unlinkat(&self.fd, name, UnlinkatFlags::NoRemoveDir).map_err(|e| {
                Error::io(
                    format!("cannot remove {}", link.display()),
                    &io::Error::from(e),
                )
            });
        };
        if now == Entry::Absent {
            // symlinkat(2) fails if anything appeared meanwhile: nothing is replaced.
            return symlinkat(target, &self.fd, name).map_err(|e| {
                Error::io(
                    format!("cannot create {}", link.display()),
                    &io::Error::from(e),
                )
            });
        }
        let tmp_name = OsString::from(temp_name(&name.to_string_lossy()));
        let tmp = self.path.join(&tmp_name);
        match self.inspect(&tmp_name)? {
            Entry::Absent => {}
            // A leftover of an interrupted switch: our name, a symlink.
            Entry::Link(_) => unlinkat(&self.fd, tmp_name.as_os_str(), UnlinkatFlags::NoRemoveDir)
                .map_err(|e| {
                    Error::io(
                        format!("cannot remove {}", tmp.display()),
                        &io::Error::from(e),
                    )
                })?,
            Entry::Foreign => return Err(not_ours(&tmp)),
        }
        symlinkat(target, &self.fd, tmp_name.as_os_str()).map_err(|e| {
            Error::io(
                format!("cannot create {}", tmp.display()),
                &io::Error::from(e),
            )
        })?;
        renameat(&self.fd, tmp_name.as_os_str(), &self.fd, name).map_err(|e| {
            let _ = unlinkat(&self.fd, tmp_name.as_os_str(), UnlinkatFlags::NoRemoveDir);
            Error::io(
                format!("cannot switch {}", link.display()),
                &io::Error::from(e),
            )
        })
    }

    /// `<path>/<name>`, `name` one plain component: a `/` or `..` in it would make the
    /// `*at` calls walk (and follow links) beyond this directory.
    fn entry_path(&self, name: &OsStr) -> Result<PathBuf, Error> {
        let mut c = Path::new(name).components();
        match (c.next(), c.next()) {
            (Some(Component::Normal(n)), None) if n == name => Ok(self.path.join(name)),
            _ => Err(Error::new(
                Kind::Usage,
                format!("{:?} is not a name in an agent directory", name),
            )),
        }
    }
}

/// Why a symlink (`link`, in the directory `parent` at `parent_path`) might have been made or
/// swapped by someone other than root and this user; `None` when it cannot.
fn untrusted_link(
    parent: BorrowedFd<'_>,
    parent_path: &Path,
    link: &FileStat,
) -> Result<Option<String>, Errno> {
    let euid = nix::unistd::geteuid().as_raw();
    let trusted = |uid: u32| uid == 0 || uid == euid;
    let pst = fstat(parent)?;
    let mode = pst.st_mode & 0o7777;
    Ok(if !trusted(link.st_uid) {
        Some(format!("is owned by uid {}", link.st_uid))
    } else if !trusted(pst.st_uid) {
        Some(format!(
            "{} is owned by uid {}",
            parent_path.display(),
            pst.st_uid
        ))
    } else if mode & GROUP_OR_OTHER_WRITE != 0 && mode & STICKY == 0 {
        Some(format!(
            "{} has mode {mode:04o} (writable by group or others)",
            parent_path.display()
        ))
    } else {
        None
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{PermissionsExt, symlink};

    fn is_root() -> bool {
        nix::unistd::geteuid().is_root()
    }

    /// A plain file skillbox never made, beside the agent directory: it must survive.
    fn victim(tmp: &Path) -> PathBuf {
        let victim = tmp.join("victim");
        std::fs::create_dir(&victim).expect("mkdir victim");
        std::fs::write(victim.join("demo"), b"precious").expect("write victim");
        victim
    }

    fn assert_untouched(victim: &Path) {
        assert_eq!(
            std::fs::read(victim.join("demo")).expect("victim/demo must still be there"),
            b"precious"
        );
        let names: Vec<_> = std::fs::read_dir(victim)
            .expect("read victim")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(
            names,
            [OsString::from("demo")],
            "nothing made in {victim:?}"
        );
    }

    fn chmod(p: &Path, mode: u32) {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).expect("chmod");
    }

    fn expect_refused(r: Result<impl std::fmt::Debug, Error>, link: &Path) {
        let e = r.expect_err("a link another user could swap must be refused");
        assert_eq!(e.kind, Kind::Usage, "{}", e.message);
        assert!(
            e.message.contains(&link.display().to_string())
                && e.message.contains("does not follow"),
            "{}",
            e.message
        );
    }

    #[test]
    fn follows_ones_own_links_and_creates_missing_components() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let home = tmp.path().join("home");
        std::fs::create_dir_all(home.join(".claude/skills")).expect("mkdir");
        std::fs::create_dir_all(home.join(".codex")).expect("mkdir");
        // ~/.codex/skills -> ../.claude/skills, as operators share one directory.
        symlink("../.claude/skills", home.join(".codex/skills")).expect("symlink");
        // And an absolute one.
        symlink(home.join(".claude"), home.join("abs")).expect("symlink");
        let tree = tmp.path().join("store/a/tree");
        switch(&home.join(".codex/skills/demo"), None, Some(&tree)).expect("switch");
        assert_eq!(
            std::fs::read_link(home.join(".claude/skills/demo")).expect("made"),
            tree
        );
        assert_eq!(
            inspect(&home.join("abs/skills/demo")).expect("inspect"),
            Entry::Link(tree.clone())
        );
        switch(&home.join("abs/skills/demo"), Some(&tree), None).expect("remove");
        assert!(!home.join(".claude/skills/demo").exists());

        // Missing components are made, writable by nobody else; none made for nothing.
        let deep = tmp.path().join("new/a/b");
        assert_eq!(inspect(&deep.join("demo")).expect("inspect"), Entry::Absent);
        switch(&deep.join("demo"), None, None).expect("nothing to do");
        assert!(!tmp.path().join("new").exists());
        switch(&deep.join("demo"), None, Some(&tree)).expect("switch");
        assert_eq!(std::fs::read_link(deep.join("demo")).expect("made"), tree);
        let mode = std::fs::metadata(&deep).expect("stat").permissions().mode();
        assert_eq!(mode & 0o022, 0, "mode {mode:o}");
    }

    #[test]
    fn refuses_a_link_in_a_directory_others_can_write() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let victim = victim(tmp.path());
        let shared = tmp.path().join("shared");
        std::fs::create_dir(&shared).expect("mkdir");
        symlink(&victim, shared.join("skills")).expect("symlink");
        chmod(&shared, 0o777);
        let link = shared.join("skills/demo");
        let tree = tmp.path().join("store/a/tree");
        expect_refused(inspect(&link), &shared.join("skills"));
        expect_refused(switch(&link, None, Some(&tree)), &shared.join("skills"));
        std::fs::remove_file(victim.join("demo")).expect("rm");
        symlink(&tree, victim.join("demo")).expect("symlink");
        expect_refused(switch(&link, Some(&tree), None), &shared.join("skills"));
        assert_eq!(std::fs::read_link(victim.join("demo")).expect("kept"), tree);

        // The sticky bit keeps others from replacing a link they do not own: followed.
        chmod(&shared, 0o1777);
        switch(&link, Some(&tree), None).expect("through a sticky directory");
        assert!(std::fs::symlink_metadata(victim.join("demo")).is_err());
    }

    #[test]
    fn refuses_a_link_another_user_could_swap() {
        if !is_root() {
            eprintln!(
                "NOTE: refuses_a_link_another_user_could_swap needs root to chown; the \
                 writable-directory case is covered by refuses_a_link_in_a_directory_others_can_write"
            );
            return;
        }
        let nobody = Some(nix::unistd::Uid::from_raw(65534));
        let tmp = tempfile::tempdir().expect("tempdir");
        let victim = victim(tmp.path());
        let tree = tmp.path().join("store/a/tree");
        // Their home: the link and its directory theirs.
        let home = tmp.path().join("home");
        std::fs::create_dir(&home).expect("mkdir");
        symlink(&victim, home.join("skills")).expect("symlink");
        nix::unistd::chown(&home, nobody, None).expect("chown");
        std::os::unix::fs::lchown(home.join("skills"), Some(65534), None).expect("lchown");
        expect_refused(
            switch(&home.join("skills/demo"), None, Some(&tree)),
            &home.join("skills"),
        );
        // A link of root's in their directory: they can still replace it.
        std::os::unix::fs::lchown(home.join("skills"), Some(0), None).expect("lchown");
        expect_refused(inspect(&home.join("skills/demo")), &home.join("skills"));
        // Their link in a sticky directory of root's: they can replace it.
        let sticky = tmp.path().join("sticky");
        std::fs::create_dir(&sticky).expect("mkdir");
        chmod(&sticky, 0o1777);
        symlink(&victim, sticky.join("skills")).expect("symlink");
        std::os::unix::fs::lchown(sticky.join("skills"), Some(65534), None).expect("lchown");
        expect_refused(
            switch(&sticky.join("skills/demo"), None, Some(&tree)),
            &sticky.join("skills"),
        );
        assert_untouched(&victim);
        // Their directory itself, reached without a link, is used: what is done stays in it.
        let theirs = home.join("real");
        std::fs::create_dir(&theirs).expect("mkdir");
        nix::unistd::chown(&theirs, nobody, None).expect("chown");
        switch(&theirs.join("demo"), None, Some(&tree)).expect("in their directory");
        assert_eq!(std::fs::read_link(theirs.join("demo")).expect("made"), tree);
    }

    /// The swap made deterministically between opening the directory and acting in it: the
    /// acts land in the directory opened (now moved away), never behind the link put in its
    /// place.
    #[test]
    fn a_component_swapped_after_open_changes_nothing_outside() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let victim = victim(tmp.path());
        let home = tmp.path().join("home");
        let skills = home.join("skills");
        std::fs::create_dir_all(&skills).expect("mkdir");
        let (a, b) = (tmp.path().join("store/a"), tmp.path().join("store/b"));
        let swap = |moved: &str| {
            std::fs::rename(&skills, home.join(moved)).expect("move away");
            symlink(&victim, &skills).expect("plant");
        };
        let unswap = |moved: &str| {
            std::fs::remove_file(&skills).expect("unplant");
            std::fs::rename(home.join(moved), &skills).expect("move back");
        };
        let demo = OsStr::new("demo");

        // Withdrawal: remove.
        symlink(&a, skills.join("demo")).expect("our link");
        let dir = AgentDir::open(&skills, false)
            .expect("open")
            .expect("exists");
        swap("moved");
        dir.switch(demo, Some(&a), None).expect("remove");
        assert!(std::fs::symlink_metadata(home.join("moved/demo")).is_err());
        assert_untouched(&victim);
        unswap("moved");

        // Update: a temporary link renamed over ours.
        symlink(&a, skills.join("demo")).expect("our link");
        let dir = AgentDir::open(&skills, false)
            .expect("open")
            .expect("exists");
        swap("moved");
        assert_eq!(dir.inspect(demo).expect("inspect"), Entry::Link(a.clone()));
        dir.switch(demo, Some(&a), Some(&b)).expect("switch");
        assert_eq!(
            std::fs::read_link(home.join("moved/demo")).expect("switched"),
            b
        );
        assert_untouched(&victim);
        unswap("moved");

        // Install: a new link.
        std::fs::remove_file(skills.join("demo")).expect("rm");
        let dir = AgentDir::open(&skills, false)
            .expect("open")
            .expect("exists");
        swap("moved");
        dir.switch(demo, None, Some(&b)).expect("install");
        assert_eq!(
            std::fs::read_link(home.join("moved/demo")).expect("made"),
            b
        );
        assert_untouched(&victim);

        // A name that would walk out of the directory is refused.
        for bad in ["../victim/demo", "..", "a/b", ""] {
            let e = dir
                .switch(OsStr::new(bad), Some(&a), None)
                .expect_err("not a plain name");
            assert_eq!(e.kind, Kind::Usage, "{bad}: {}", e.message);
        }
        assert_untouched(&victim);
    }

    /// The audit's race, through the public path API: another user swaps `home/skills` with
    /// `home/evil -> victim` (renameat2 RENAME_EXCHANGE) in a loop while skillbox removes or
    /// switches `home/skills/demo`. Checks and acts on full paths re-resolve `skills` each
    /// time: they deleted or overwrote `victim/demo` in about a quarter of the trials.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn a_component_swapped_during_a_switch_never_reaches_outside() {
        use nix::fcntl::{RenameFlags, renameat2};

        const TRIALS: usize = 300;
        let tmp = tempfile::tempdir().expect("tempdir");
        let victim = victim(tmp.path());
        let home = tmp.path().join("home");
        let skills = home.join("skills");
        std::fs::create_dir_all(&skills).expect("mkdir");
        symlink(&victim, home.join("evil")).expect("symlink");
        if is_root() {
            // As the audit had it: the home and its link are another user's.
            nix::unistd::chown(&home, Some(nix::unistd::Uid::from_raw(65534)), None)
                .expect("chown");
            std::os::unix::fs::lchown(home.join("evil"), Some(65534), None).expect("lchown");
        }
        let home_fd = open(
            &home,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .expect("open home");
        let exchange = || {
            renameat2(
                &home_fd,
                "skills",
                &home_fd,
                "evil",
                RenameFlags::RENAME_EXCHANGE,
            )
        };
        let (a, b) = (tmp.path().join("store/a"), tmp.path().join("store/b"));
        let link = skills.join("demo");
        let (mut ok, mut refused) = (0, 0);
        for trial in 0..TRIALS {
            // `skills` the real directory again, holding our link to `a`.
            if std::fs::symlink_metadata(&skills)
                .expect("stat")
                .is_symlink()
            {
                exchange().expect("exchange back");
            }
            let _ = std::fs::remove_file(&link);
            symlink(&a, &link).expect("our link");
            let to = (trial % 2 == 1).then_some(b.as_path());
            let result = crate::race::while_swapping(
                || exchange().expect("exchange"),
                || switch(&link, Some(&a), to),
            );
            if std::fs::symlink_metadata(&skills)
                .expect("stat")
                .is_symlink()
            {
                exchange().expect("exchange back");
            }
            assert_untouched(&victim);
            match result {
                Ok(()) => {
                    ok += 1;
                    // Done where it was asked, not only reported.
                    assert_eq!(
                        std::fs::read_link(&link).ok(),
                        to.map(Path::to_path_buf),
                        "trial {trial}: switch said ok"
                    );
                }
                Err(_) => refused += 1,
            }
        }
        eprintln!("{ok} switched, {refused} refused of {TRIALS}");
    }
}
