//! The documents stand in the repository: every relative link in README.md and docs/*.md, and
//! every `docs/*.md` a source comment cites, names a file that exists.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn documents() -> Vec<PathBuf> {
    let mut docs = vec![root().join("README.md")];
    let mut more: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("docs/ exists")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    more.sort();
    assert!(more.len() >= 7, "docs/ holds {} documents", more.len());
    docs.extend(more);
    docs
}

/// The targets of `[text](target)` links, without their `#fragment`.
fn link_targets(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("](") {
        rest = &rest[i + 2..];
        let Some(end) = rest.find(')') else { break };
        let target = &rest[..end];
        out.push(target.split('#').next().unwrap_or("").to_owned());
        rest = &rest[end..];
    }
    out
}

#[test]
fn relative_links_point_at_files_that_exist() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).expect("read document");
        let dir = doc.parent().expect("parent");
        for target in link_targets(&text) {
            if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            if target.starts_with('/')
                || target.contains("../shared")
                || !dir.join(&target).exists()
            {
                broken.push(format!("{}: {target}", doc.display()));
            }
        }
    }
    assert!(checked >= 10, "only {checked} relative links found");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn documents_cited_in_code_exist() {
    let mut cited = Vec::new();
    for dir in [
        "src",
        "tests",
        "benches",
        "examples",
        "sandbox-profiles",
        "scripts",
    ] {
        walk(&root().join(dir), &mut cited);
    }
    assert!(!cited.is_empty(), "no source cites docs/");
    let missing: Vec<&String> = cited
        .iter()
        .filter(|c| !root().join(c.as_str()).exists())
        .collect();
    assert!(missing.is_empty(), "cited but missing: {missing:?}");
}

fn walk(dir: &Path, cited: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries {
        let path = e.expect("entry").path();
        if path.is_dir() {
            walk(&path, cited);
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let mut rest = text.as_str();
        while let Some(i) = rest.find("docs/") {
            // A citation follows a space, a backtick or a bracket; `"docs/a.md"` or
            // `x/docs/a.md` is a path in an archive a test builds, not a document.
            let cites = rest[..i]
                .chars()
                .next_back()
                .is_none_or(|c| c.is_whitespace() || "`([".contains(c));
            let tail = &rest[i..];
            let end = tail
                .find(|c: char| !(c.is_ascii_alphanumeric() || "/-_.".contains(c)))
                .unwrap_or(tail.len());
            let name = tail[..end].trim_end_matches('.');
            if cites && name.ends_with(".md") {
                cited.push(name.to_owned());
            }
            rest = &tail[end.max(5)..];
        }
    }
}
