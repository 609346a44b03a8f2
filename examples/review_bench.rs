//! How much the review adds to extraction, and whether it stays linear.
//!
//! Usage: `cargo run --release --example review_bench [-- RUNS]`
//!
//! 1. A typical package (25 files, ~250 KB: SKILL.md, scripts, references, assets) as a tar:
//!    median of RUNS full `extract()` calls (which include the review) and of RUNS `review()`
//!    calls alone over the same staged tree; the overhead is review / (extract - review).
//! 2. Text packages of 10, 20 and 40 MB (1 MB files of script-like text dense with URLs,
//!    commands and variables): review time and throughput, which must stay flat per MB.
//!
//! Everything is generated in memory from fixed seeds; staging goes to a temporary directory.

use std::fmt::Write as _;
use std::fs::File;
use std::io::Write as _;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use skillbox::extract::policy::Limits;
use skillbox::extract::{extract, ArtifactType, Request};
use skillbox::skill::review::review;

fn tar(files: &[(String, u32, Vec<u8>)]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (path, mode, data) in files {
        let mut h = tar::Header::new_ustar();
        h.set_size(data.len() as u64);
        h.set_mode(*mode);
        h.set_entry_type(tar::EntryType::Regular);
        h.set_mtime(0);
        if let Err(e) = b.append_data(&mut h, path, data.as_slice()) {
            panic!("tar: {e}");
        }
    }
    b.into_inner().unwrap_or_else(|e| panic!("tar: {e}"))
}

/// Deterministic prose and code lines (xorshift), with the occasional URL, command and variable.
fn text(seed: u64, bytes: usize, code: bool) -> Vec<u8> {
    const WORDS: &[&str] = &[
        "extract", "tables", "from", "the", "document", "and", "write", "rows", "to", "output", "when", "page", "column", "header",
        "value", "parse", "file", "result", "check", "layout",
    ];
    let mut x = seed | 1;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut s = String::with_capacity(bytes + 128);
    let mut line = 0u64;
    while s.len() < bytes {
        line += 1;
        let r = next();
        match r % 16 {
            0 => {
                let _ = writeln!(s, "curl -fsSL https://mirror{}.example.com/pkg/{} -o /tmp/out.bin", r % 7, line);
            }
            1 => {
                let _ = writeln!(s, "export API_TOKEN=\"${{PDF_API_TOKEN:-}}\"  # see docs.example.org/auth");
            }
            2 if code => {
                let _ = writeln!(s, "if [ -f \"$1\" ]; then pdftotext -layout \"$1\" - | sed -e 's/\\t/,/g' > \"$OUT/{line}.csv\"; fi");
            }
            3 => {
                let _ = writeln!(s, "See [section {line}](references/guide.md#part-{line}) for details.");
            }
            _ => {
                for i in 0..(8 + r % 8) {
                    s.push_str(WORDS[((r >> (i * 4)) % WORDS.len() as u64) as usize]);
                    s.push(' ');
                }
                s.push('\n');
            }
        }
    }
    s.truncate(bytes);
    s.into_bytes()
}

fn typical() -> Vec<(String, u32, Vec<u8>)> {
    let mut files = vec![(
        "SKILL.md".to_owned(),
        0o644,
        [
            &b"---\nname: pdf-tools\ndescription: Extract text and tables from PDF files.\nallowed-tools: Bash(pdftotext:*) Read\n---\n\n"[..],
            &text(1, 6_000, false),
        ]
        .concat(),
    )];
    for i in 0..6 {
        files.push((format!("scripts/tool{i}.sh"), 0o755, [&b"#!/bin/sh\nset -eu\n"[..], &text(10 + i, 6_000, true)].concat()));
    }
    for i in 0..12 {
        files.push((format!("references/ref{i:02}.md"), 0o644, text(100 + i, 14_000, false)));
    }
    for i in 0..4 {
        files.push((format!("assets/template{i}.txt"), 0o644, text(200 + i, 4_000, false)));
    }
    let mut blob = vec![0u8; 16_000];
    for (i, b) in blob.iter_mut().enumerate() {
        *b = (i * 31 % 251) as u8;
    }
    files.push(("assets/logo.png".to_owned(), 0o644, blob));
    files.push(("LICENSE.txt".to_owned(), 0o644, text(300, 1_500, false)));
    files
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

struct Staged {
    _dir: tempfile::TempDir,
    fd: File,
    outcome: skillbox::extract::inventory::Outcome,
    took: Duration,
}

fn stage(art: &File) -> Staged {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let fd = File::open(dir.path()).unwrap_or_else(|e| panic!("{e}"));
    let req = Request::new(ArtifactType::Archive, Limits::default());
    let t = Instant::now();
    let outcome = extract(art, fd.as_fd(), &req).unwrap_or_else(|e| panic!("{e}"));
    let took = t.elapsed();
    assert!(outcome.review.is_some(), "{:?}", outcome.reason);
    Staged { _dir: dir, fd, outcome, took }
}

fn time_review(s: &Staged) -> Duration {
    let req = Request::new(ArtifactType::Archive, Limits::default());
    let t = Instant::now();
    let r = review(s.fd.as_fd(), &s.outcome.entries, &req).unwrap_or_else(|e| panic!("{e}"));
    let took = t.elapsed();
    std::hint::black_box(r);
    took
}

fn artifact(files: &[(String, u32, Vec<u8>)]) -> (tempfile::NamedTempFile, usize) {
    let bytes = tar(files);
    let mut f = tempfile::NamedTempFile::new().unwrap_or_else(|e| panic!("{e}"));
    f.write_all(&bytes).unwrap_or_else(|e| panic!("{e}"));
    (f, bytes.len())
}

fn main() {
    let runs: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(31);
    let files = typical();
    let (art, size) = artifact(&files);
    let art_file = File::open(art.path()).unwrap_or_else(|e| panic!("{e}"));
    let mut total = Vec::new();
    let mut rev = Vec::new();
    let mut findings = 0;
    for _ in 0..runs {
        let s = stage(&art_file);
        total.push(s.took);
        rev.push(time_review(&s));
        findings = s.outcome.review.as_ref().map_or(0, |r| r.findings.len());
    }
    let (t, r) = (median(total), median(rev));
    let base = t.saturating_sub(r);
    println!("typical package: {} files, {} bytes tar, {findings} findings, {runs} runs (medians)", files.len(), size);
    println!(
        "  extract incl. review {:>8.3} ms | review alone {:>7.3} ms | extraction without review ~{:.3} ms | overhead {:.1}%",
        t.as_secs_f64() * 1e3,
        r.as_secs_f64() * 1e3,
        base.as_secs_f64() * 1e3,
        100.0 * r.as_secs_f64() / base.as_secs_f64().max(1e-9)
    );

    println!("text packages (1 MB files):");
    for mb in [10usize, 20, 40] {
        let files: Vec<(String, u32, Vec<u8>)> = std::iter::once((
            "SKILL.md".to_owned(),
            0o644,
            b"---\nname: big-text\ndescription: Large text package for the linearity check.\n---\nRead the references.\n".to_vec(),
        ))
        .chain((0..mb).map(|i| (format!("references/part{i:03}.sh"), 0o644, text(1000 + i as u64, 1_000_000, true))))
        .collect();
        let (art, _) = artifact(&files);
        let art_file = File::open(art.path()).unwrap_or_else(|e| panic!("{e}"));
        let mut rev = Vec::new();
        let mut ext = Vec::new();
        let mut complete = true;
        for _ in 0..3 {
            let s = stage(&art_file);
            ext.push(s.took);
            rev.push(time_review(&s));
            complete &= s.outcome.review.as_ref().is_some_and(|r| r.coverage.bytes_scanned as usize >= mb * 1_000_000);
        }
        let (e, r) = (median(ext), median(rev));
        println!(
            "  {mb:>3} MB: extract incl. review {:>8.1} ms | review {:>7.1} ms = {:>6.1} MB/s ({:.2} ms/MB) | all bytes scanned: {complete}",
            e.as_secs_f64() * 1e3,
            r.as_secs_f64() * 1e3,
            mb as f64 / r.as_secs_f64(),
            r.as_secs_f64() * 1e3 / mb as f64
        );
    }
}
