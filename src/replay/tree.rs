//! The staged-tree check: an accepted tree on disk must be exactly its inventory (walked
//! without following a link).

use super::*;

/// Compare the tree beneath `root` (never following symlinks) with an inventory: the same
/// paths, kinds, sizes, modes, link targets and file hashes. Returns every difference.
pub fn verify_tree(root: &Path, entries: &[Entry]) -> Result<(), Vec<String>> {
    let mut on_disk = BTreeMap::new();
    let mut diffs = Vec::new();
    if let Err(e) = walk(root, "", &mut on_disk, 0) {
        return Err(vec![format!("cannot walk the tree: {e}")]);
    }
    let mut listed = BTreeSet::new();
    for e in entries {
        if !listed.insert(e.path.as_str()) {
            diffs.push(format!("{:?} is listed twice", e.path));
        }
        let Some(meta) = on_disk.get(&e.path) else {
            diffs.push(format!("{:?} is listed but not on disk", e.path));
            continue;
        };
        let ft = meta.file_type();
        let kind = if ft.is_symlink() {
            Kind::Symlink
        } else if ft.is_dir() {
            Kind::Dir
        } else if ft.is_file() {
            Kind::File
        } else {
            diffs.push(format!("{:?} is a special file on disk", e.path));
            continue;
        };
        if kind != e.kind {
            diffs.push(format!(
                "{:?} is a {kind:?} on disk, listed as {:?}",
                e.path, e.kind
            ));
            continue;
        }
        let path = root.join(&e.path);
        match kind {
            Kind::File => {
                if meta.len() != e.size {
                    diffs.push(format!(
                        "{:?} has {} bytes on disk, listed {}",
                        e.path,
                        meta.len(),
                        e.size
                    ));
                }
                if let Some(want) = e.sha256 {
                    match hash_nofollow(&path) {
                        Ok(got) if got == want => {}
                        Ok(got) => {
                            diffs.push(format!("{:?} hashes to {got}, listed {want}", e.path))
                        }
                        Err(err) => diffs.push(format!("{:?} cannot be read: {err}", e.path)),
                    }
                } else {
                    diffs.push(format!("{:?} is a file without a sha256", e.path));
                }
            }
            Kind::Symlink => match fs::read_link(&path) {
                Ok(t) if Some(t.to_string_lossy().as_ref()) == e.link_target.as_deref() => {}
                Ok(t) => diffs.push(format!(
                    "{:?} points at {t:?} on disk, listed {:?}",
                    e.path, e.link_target
                )),
                Err(err) => diffs.push(format!("{:?} cannot be read: {err}", e.path)),
            },
            Kind::Dir => {}
        }
        if kind != Kind::Symlink {
            let mode = format!("{:04o}", meta.mode() & 0o7777);
            if mode != e.mode {
                diffs.push(format!(
                    "{:?} has mode {mode} on disk, listed {}",
                    e.path, e.mode
                ));
            }
        }
    }
    for path in on_disk.keys() {
        if !listed.contains(path.as_str()) {
            diffs.push(format!(
                "{:?} is on disk but not listed",
                display_name(path.as_bytes())
            ));
        }
    }
    if diffs.is_empty() { Ok(()) } else { Err(diffs) }
}

pub(super) fn walk(
    root: &Path,
    rel: &str,
    out: &mut BTreeMap<String, fs::Metadata>,
    depth: u32,
) -> io::Result<()> {
    if depth > 256 {
        return Err(io::Error::other("tree deeper than 256 levels"));
    }
    for e in fs::read_dir(root.join(rel))? {
        let e = e?;
        let name = e.file_name();
        let join = |name: &str| {
            if rel.is_empty() {
                name.to_owned()
            } else {
                format!("{rel}/{name}")
            }
        };
        let Some(name) = name.to_str() else {
            // Never created by the engine (names are UTF-8); listed so the diff shows it.
            out.insert(join(&name.to_string_lossy()), e.metadata()?);
            continue;
        };
        let path = join(name);
        // DirEntry::metadata does not follow symlinks.
        let meta = e.metadata()?;
        if meta.is_dir() {
            walk(root, &path, out, depth + 1)?;
        }
        out.insert(path, meta);
    }
    Ok(())
}

pub(super) fn hash_nofollow(path: &Path) -> io::Result<Sha256Digest> {
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(path)?;
    let mut reader = io::BufReader::new(file);
    let mut hasher = Hasher::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = reader.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher.finish().0)
}
