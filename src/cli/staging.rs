//! Where the one-shot commands (`extract`, `fetch`) stage a tree: the caller's `--out`, created
//! fresh, or a temporary directory that is removed after the answer. It never reuses an
//! existing directory.

use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use super::output::Staged;

/// The staging directory of one command run.
pub enum Staging {
    /// The caller's `--out`: kept after an acceptance.
    Kept(PathBuf),
    /// A temporary directory, removed when dropped.
    Temporary(tempfile::TempDir),
}

/// `--out DIR` of `extract` and `fetch`, checked before any work is done (nothing read,
/// uploaded or downloaded for a tree that cannot be kept): DIR must not exist yet, and the
/// directory it goes in must ([`super::parent_exists`], the check every flag naming a directory
/// uses). Either is a usage error (2), said as this message; nothing is made.
pub fn check_out(out: &Path) -> Result<(), String> {
    // symlink_metadata: a dangling link is there too, and is never extracted through.
    if out.symlink_metadata().is_ok() {
        return Err(format!(
            "--out {} already exists; give a new path",
            out.display()
        ));
    }
    super::parent_exists("--out", out)
}

impl Staging {
    /// Create `out`; it must not exist yet (never extract into an earlier install or a link).
    /// From now until it is dropped, a Ctrl-C does not leave it half-written
    /// ([`super::interrupt`]).
    pub fn kept(out: &Path) -> io::Result<Self> {
        super::interrupt::staging(|| {
            std::fs::create_dir(out)?;
            Ok((Self::Kept(out.to_owned()), out.to_owned()))
        })
    }

    /// A new directory under TMPDIR, removed when dropped (or by a signal,
    /// [`super::interrupt`]).
    pub fn temporary() -> io::Result<Self> {
        super::interrupt::staging(|| {
            let t = tempfile::Builder::new().prefix("skillbox-").tempdir()?;
            let path = t.path().to_owned();
            Ok((Self::Temporary(t), path))
        })
    }

    pub fn path(&self) -> &Path {
        match self {
            Self::Kept(p) => p,
            Self::Temporary(t) => t.path(),
        }
    }

    /// Where the answer says the tree is.
    pub fn shown(&self) -> Staged<'_> {
        match self {
            Self::Kept(p) => Staged::At(p),
            Self::Temporary(_) => Staged::Removed,
        }
    }

    /// The kept path of an accepted tree.
    pub fn kept_path(&self) -> Option<&Path> {
        match self {
            Self::Kept(p) => Some(p),
            Self::Temporary(_) => None,
        }
    }

    /// Remove everything in it and the directory itself (after a rejection or a fault).
    pub fn discard(&self) {
        discard_path(self.path());
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        // A temporary tree goes first (`TempDir` then finds nothing to remove), so that no
        // signal after the note below ends the command with the tree still there.
        if let Self::Temporary(t) = self {
            discard_path(t.path());
        }
        super::interrupt::staging_done();
    }
}

/// Remove everything in the staging directory `path` and the directory itself.
pub fn discard_path(path: &Path) {
    if let Ok(dir) = File::open(path) {
        // Beneath the fd, never following a symlink: the tree may hold hostile links.
        let _ = skillbox::extract::writer::clear_beneath(dir.as_fd(), 0);
    }
    let _ = std::fs::remove_dir(path);
}
