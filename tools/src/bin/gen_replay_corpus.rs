//! A large replay corpus for the throughput benchmark (`scripts/bench-replay.sh`), never
//! committed: `N` cases drawn in turn from a real corpus (the project's `corpus/`: hostile and
//! benign archives and SKILL.md files, about two thirds hostile), each a copy of its artifact
//! under `rK/` with the verdict, reason, limits and findings its manifest expects.
//!
//! Usage: `cargo run -p skillbox-tools --bin gen_replay_corpus -- corpus/ OUT N [--skip TEXT]...`
//!
//! `--skip TEXT` leaves out the template cases whose name contains TEXT (the benchmark leaves
//! out corpus/'s few limit probes that stage 10,000 entries or expand 300 MiB: 1 case in 50 of
//! the project's corpus, far more than a CI corpus of 10,000 archives holds).
//!
//! Nested suites (a subdirectory with its own `manifest.json`) are flattened into one manifest:
//! the case `fuzz/x` of copy 3 is `r3/fuzz/x`, its file `r3/fuzz/<file>`. Files no manifest
//! names are not copied (they would only be `unexpected`). `OUT` must not exist yet; the result
//! is `OUT/manifest.json` and `OUT/rK/...`, and `skillbox replay OUT` must pass whole.

use std::error::Error;
use std::fs;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

/// Every case of the suite at `dir` and of the suites below it: (name, file relative to the
/// corpus root, the manifest entry).
fn load(
    root: &Path,
    rel: &Path,
    out: &mut Vec<(String, PathBuf, Value)>,
) -> Result<(), Box<dyn Error>> {
    let dir = root.join(rel);
    let manifest = dir.join("manifest.json");
    if manifest.is_file() {
        let m: Value = serde_json::from_slice(&fs::read(&manifest)?)?;
        for c in m["cases"].as_array().ok_or("manifest without cases")? {
            let name = c["name"].as_str().ok_or("case without a name")?;
            let file = c["file"].as_str().ok_or("case without a file")?;
            let name = if rel.as_os_str().is_empty() {
                name.to_owned()
            } else {
                format!("{}/{name}", rel.display())
            };
            out.push((name, rel.join(file), c.clone()));
        }
    }
    let mut subdirs: Vec<PathBuf> = fs::read_dir(&dir)?
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| rel.join(e.file_name()))
        .collect();
    subdirs.sort();
    for sub in subdirs {
        load(root, &sub, out)?;
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: gen_replay_corpus CORPUS OUT N [--skip TEXT]...";
    let (Some([src, out, n]), rest) = (args.get(..3), args.get(3..).unwrap_or_default()) else {
        return Err(usage.into());
    };
    let mut skip = Vec::new();
    for pair in rest.chunks(2) {
        match pair {
            [flag, text] if flag == "--skip" => skip.push(text.as_str()),
            _ => return Err(usage.into()),
        }
    }
    let n: usize = n.parse()?;
    let (src, out) = (Path::new(src), Path::new(out));
    let mut template = Vec::new();
    load(src, Path::new(""), &mut template)?;
    template.retain(|(name, _, _)| !skip.iter().any(|s| name.contains(s)));
    if template.is_empty() {
        return Err(format!("{} names no cases", src.display()).into());
    }
    fs::create_dir(out)?;
    let mut cases = Vec::with_capacity(n);
    for i in 0..n {
        let (name, file, entry) = &template[i % template.len()];
        let copy = PathBuf::from(format!("r{}", i / template.len())).join(file);
        let target = out.join(&copy);
        if let Some(parent) = target.parent() {
            fs::create_dir_all(parent)?;
        }
        fs::copy(src.join(file), &target)?;
        let mut entry = entry.clone();
        entry["name"] = json!(format!("r{}/{name}", i / template.len()));
        entry["file"] = json!(copy.to_string_lossy());
        cases.push(entry);
    }
    let manifest = json!({"version": 1, "cases": cases});
    fs::write(
        out.join("manifest.json"),
        serde_json::to_vec_pretty(&manifest)?,
    )?;
    println!("{n} cases from {} in {}", template.len(), out.display());
    Ok(())
}
