//! Reading a corpus: every suite's `manifest.json` (nested suites included) and the files
//! no manifest names, as a list of [`Case`]s. Reads manifests only; never an artifact.

use super::*;

/// One manifest entry as written in the file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCase {
    name: String,
    file: String,
    #[serde(rename = "type")]
    kind: CaseType,
    #[serde(default)]
    media_type: Option<String>,
    #[serde(default)]
    limits: Option<Value>,
    #[serde(default)]
    digest: Option<String>,
    expect: Expect,
    /// Kinds of review findings an accepted case must report, exactly (`corpus/review/`).
    #[serde(default)]
    findings: Option<BTreeSet<String>>,
    #[serde(default)]
    description: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawManifest {
    version: u32,
    cases: Vec<RawCase>,
}

/// Load every suite under `dir` and list the cases, unexpected files included.
pub fn collect(dir: &Path) -> Result<Vec<Case>, ReplayError> {
    let mut cases = Vec::new();
    let mut covered = BTreeSet::new();
    load_suite(dir, Path::new(""), &mut cases, &mut covered)?;
    let mut files = Vec::new();
    scan(dir, Path::new(""), &mut files).map_err(|source| ReplayError::Read {
        path: dir.to_owned(),
        source,
    })?;
    let mut names: BTreeSet<String> = cases.iter().map(|c| c.name.clone()).collect();
    for rel in files {
        if covered.contains(&rel) {
            continue;
        }
        let mut name = rel.to_string_lossy().into_owned();
        while !names.insert(name.clone()) {
            name.push('~');
        }
        cases.push(Case {
            name,
            file: rel,
            kind: None,
            media_type: None,
            limits: None,
            digest: None,
            expect: None,
            findings: None,
            description: None,
        });
    }
    Ok(cases)
}

/// Where the corpus of `dir` is: `(root, sub)`, with `root` the nearest directory at or above
/// `dir` holding a manifest and `sub` the path of `dir` below it (empty when `dir` is the
/// root). Only the cases under `sub` are run, so a suite's subdirectory replays on its own.
pub fn locate(dir: &Path) -> Result<(PathBuf, PathBuf), ReplayError> {
    match fs::metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            return Err(ReplayError::NotADir {
                path: dir.to_owned(),
            });
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(ReplayError::NoSuchDir {
                path: dir.to_owned(),
            });
        }
        Err(source) => {
            return Err(ReplayError::Read {
                path: dir.to_owned(),
                source,
            });
        }
    }
    if dir.join(MANIFEST).exists() {
        return Ok((dir.to_owned(), PathBuf::new()));
    }
    let abs = dir.canonicalize().map_err(|source| ReplayError::Read {
        path: dir.to_owned(),
        source,
    })?;
    let mut sub = Vec::new();
    let mut at = abs.as_path();
    while let Some(parent) = at.parent() {
        if let Some(name) = at.file_name() {
            sub.push(name.to_owned());
        }
        if parent.join(MANIFEST).is_file() {
            let rel: PathBuf = sub.iter().rev().collect();
            return Ok((parent.to_owned(), rel));
        }
        at = parent;
    }
    Err(ReplayError::MissingManifest {
        path: dir.to_owned(),
        suggestions: suites_below(dir, 2),
    })
}

/// Directories at most `depth` levels below `dir` that hold a manifest (not below one that
/// does), for the "did you mean" of a missing manifest; bounded, so a large tree costs little.
fn suites_below(dir: &Path, depth: usize) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut level = vec![dir.to_owned()];
    for _ in 0..depth {
        let mut next = Vec::new();
        for d in level {
            let Ok(entries) = fs::read_dir(&d) else {
                continue;
            };
            let mut subs: Vec<PathBuf> = entries
                .filter_map(Result::ok)
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| e.path())
                .collect();
            subs.sort();
            for s in subs {
                if s.join(MANIFEST).is_file() {
                    out.push(s);
                } else {
                    next.push(s);
                }
            }
        }
        level = next;
    }
    out
}

/// Read `dir/<prefix>/manifest.json` and, recursively, every nested suite below it.
pub(super) fn load_suite(
    root: &Path,
    prefix: &Path,
    cases: &mut Vec<Case>,
    covered: &mut BTreeSet<PathBuf>,
) -> Result<(), ReplayError> {
    let suite_dir = root.join(prefix);
    let path = suite_dir.join(MANIFEST);
    let malformed = |message: String| ReplayError::Malformed {
        path: path.clone(),
        message,
    };
    let meta = match fs::metadata(&path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(ReplayError::MissingManifest {
                path,
                suggestions: Vec::new(),
            });
        }
        Err(source) => return Err(ReplayError::Read { path, source }),
    };
    if !meta.is_file() {
        return Err(malformed("not a regular file".into()));
    }
    if meta.len() > MAX_MANIFEST_BYTES {
        return Err(malformed(format!("larger than {MAX_MANIFEST_BYTES} bytes")));
    }
    let text = fs::read(&path).map_err(|source| ReplayError::Read {
        path: path.clone(),
        source,
    })?;
    let raw: RawManifest = serde_json::from_slice(&text).map_err(|e| malformed(e.to_string()))?;
    if raw.version != 1 {
        return Err(malformed(format!(
            "version {} is not supported (expected 1)",
            raw.version
        )));
    }
    let mut seen = BTreeSet::new();
    for (i, c) in raw.cases.into_iter().enumerate() {
        let at = |msg: String| malformed(format!("cases[{i}] ({:?}): {msg}", c.name));
        if c.name.is_empty() {
            return Err(at("empty name".into()));
        }
        if !seen.insert(c.name.clone()) {
            return Err(at("duplicate case name".into()));
        }
        let file = Path::new(&c.file);
        if c.file.is_empty()
            || !file
                .components()
                .all(|p| matches!(p, Component::Normal(_) | Component::CurDir))
        {
            return Err(at(format!(
                "file {:?} must be a relative path without `..`",
                c.file
            )));
        }
        if c.expect.verdict == Verdict::Accepted && c.expect.reason.is_some() {
            return Err(at("an accepted case cannot name a reason".into()));
        }
        if let Some(limits) = &c.limits {
            let parsed: Limits =
                serde_json::from_value(limits.clone()).map_err(|e| at(format!("limits: {e}")))?;
            parsed.validate().map_err(|e| at(format!("limits: {e}")))?;
        }
        if let Some(d) = &c.digest {
            d.parse::<Sha256Digest>()
                .map_err(|e| at(format!("digest: {e}")))?;
        }
        let rel: PathBuf = prefix.join(file.components().collect::<PathBuf>());
        covered.insert(rel.clone());
        let name = if prefix.as_os_str().is_empty() {
            c.name
        } else {
            format!("{}/{}", prefix.display(), c.name)
        };
        cases.push(Case {
            name,
            file: rel,
            kind: Some(c.kind),
            media_type: c.media_type,
            limits: c.limits,
            digest: c.digest,
            expect: Some(c.expect),
            findings: c.findings,
            description: c.description,
        });
    }
    // Nested suites: any subdirectory with its own manifest.
    let mut subdirs = Vec::new();
    find_suites(&suite_dir, Path::new(""), &mut subdirs).map_err(|source| ReplayError::Read {
        path: suite_dir.clone(),
        source,
    })?;
    for sub in subdirs {
        load_suite(root, &prefix.join(sub), cases, covered)?;
    }
    Ok(())
}

/// Subdirectories (relative to `base`) that hold a manifest, not descending into them.
pub(super) fn find_suites(base: &Path, rel: &Path, out: &mut Vec<PathBuf>) -> io::Result<()> {
    let mut entries: Vec<_> = fs::read_dir(base.join(rel))?.collect::<io::Result<_>>()?;
    entries.sort_by_key(fs::DirEntry::file_name);
    for e in entries {
        if !e.file_type()?.is_dir() {
            continue;
        }
        let sub = rel.join(e.file_name());
        if base.join(&sub).join(MANIFEST).exists() {
            out.push(sub);
        } else {
            find_suites(base, &sub, out)?;
        }
    }
    Ok(())
}

/// Whether a file in a corpus is bookkeeping rather than a case.
pub(super) fn is_bookkeeping(name: &str, at_suite_root: bool) -> bool {
    let upper = name.to_ascii_uppercase();
    (at_suite_root && name == MANIFEST)
        || upper.starts_with("README")
        || upper.starts_with("CHECKSUMS")
}

/// Every artifact file under `base` (relative paths), skipping bookkeeping files.
pub(super) fn scan(base: &Path, rel: &Path, out: &mut Vec<PathBuf>) -> io::Result<()> {
    let here = base.join(rel);
    let at_suite_root = here.join(MANIFEST).is_file();
    let mut entries: Vec<_> = fs::read_dir(&here)?.collect::<io::Result<_>>()?;
    entries.sort_by_key(fs::DirEntry::file_name);
    for e in entries {
        let name = e.file_name();
        let ty = e.file_type()?;
        let sub = rel.join(&name);
        if ty.is_dir() {
            scan(base, &sub, out)?;
        } else if !is_bookkeeping(&name.to_string_lossy(), at_suite_root) {
            out.push(sub);
        }
    }
    Ok(())
}
