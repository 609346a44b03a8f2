//! How much the review adds to extraction, and whether it stays linear.
//!
//! Usage: `cargo run --release --example review_bench [-- RUNS [SKILLBOX_BIN]]`
//!
//! 1. The trigger automaton's first use in a process (built at compile time: nothing to build).
//! 2. A typical package (25 files, ~250 KB: SKILL.md, scripts, references, assets; prose with
//!    the occasional URL, command and variable) as a tar: RUNS full `extract()` calls (which
//!    include the review) and RUNS `review()` calls alone over the same staged tree. Reported as
//!    min and median wall time (min is the least disturbed on a shared machine);
//!    overhead = review / (extract - review).
//! 3. With SKILLBOX_BIN: RUNS end-to-end `skillbox extract ART --json` processes (what an
//!    operator waits for), and the review's share of that.
//! 4. Text packages of 10, 20 and 40 MB (1 MB files of script-like text dense with URLs,
//!    commands and variables: a worst case for the line scanner): review time per MB, which must
//!    stay flat.
//!
//! Everything is generated in memory from fixed seeds; staging goes to a temporary directory.

use std::fmt::Write as _;
use std::fs::File;
use std::io::Write as _;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use skillbox::extract::policy::Limits;
use skillbox::extract::{ArtifactType, Request};
use skillbox::intake::run as extract;
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
fn text(seed: u64, bytes: usize, code: bool, dense: bool) -> Vec<u8> {
    const WORDS: &[&str] = &[
        "extract", "tables", "from", "the", "document", "and", "write", "rows", "to", "output",
        "when", "page", "column", "header", "value", "parse", "file", "result", "check", "layout",
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
        match r % if dense { 16 } else { 96 } {
            0 => {
                let _ = writeln!(
                    s,
                    "curl -fsSL https://mirror{}.example.com/pkg/{} -o /tmp/out.bin",
                    r % 7,
                    line
                );
            }
            1 => {
                let _ = writeln!(
                    s,
                    "export API_TOKEN=\"${{PDF_API_TOKEN:-}}\"  # see docs.example.org/auth"
                );
            }
            2 if code => {
                let _ = writeln!(
                    s,
                    "if [ -f \"$1\" ]; then pdftotext -layout \"$1\" - | sed -e 's/\\t/,/g' > \"$OUT/{line}.csv\"; fi"
                );
            }
            3 => {
                let _ = writeln!(
                    s,
                    "See [section {line}](references/guide.md#part-{line}) for details."
                );
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
            &text(1, 6_000, false, false),
        ]
        .concat(),
    )];
    for i in 0..6 {
        files.push((
            format!("scripts/tool{i}.sh"),
            0o755,
            [
                &b"#!/bin/sh\nset -eu\n"[..],
                &text(10 + i, 6_000, true, false),
            ]
            .concat(),
        ));
    }
    for i in 0..12 {
        files.push((
            format!("references/ref{i:02}.md"),
            0o644,
            text(100 + i, 14_000, false, false),
        ));
    }
    for i in 0..4 {
        files.push((
            format!("assets/template{i}.txt"),
            0o644,
            text(200 + i, 4_000, false, false),
        ));
    }
    let mut blob = vec![0u8; 16_000];
    for (i, b) in blob.iter_mut().enumerate() {
        *b = (i * 31 % 251) as u8;
    }
    files.push(("assets/logo.png".to_owned(), 0o644, blob));
    files.push((
        "LICENSE.txt".to_owned(),
        0o644,
        text(300, 1_500, false, false),
    ));
    files
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn min(v: &[Duration]) -> Duration {
    v.iter().copied().min().unwrap_or_default()
}

/// CPU time (user + system) of the calling thread.
fn cpu() -> Duration {
    use nix::sys::resource::{UsageWho, getrusage};
    let u = getrusage(UsageWho::RUSAGE_THREAD).unwrap_or_else(|e| panic!("getrusage: {e}"));
    let tv =
        |t: nix::sys::time::TimeVal| Duration::new(t.tv_sec() as u64, t.tv_usec() as u32 * 1000);
    tv(u.user_time()) + tv(u.system_time())
}

/// Wall and CPU time of `f`.
fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration, Duration) {
    let (w, c) = (Instant::now(), cpu());
    let out = f();
    (out, w.elapsed(), cpu().saturating_sub(c))
}

struct Staged {
    _dir: tempfile::TempDir,
    fd: File,
    outcome: skillbox::intake::Outcome,
    took: Duration,
    cpu: Duration,
}

fn stage(art: &File) -> Staged {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let fd = File::open(dir.path()).unwrap_or_else(|e| panic!("{e}"));
    let req = Request::new(ArtifactType::Archive, Limits::default());
    let (outcome, took, cpu) =
        timed(|| extract(art, fd.as_fd(), &req).unwrap_or_else(|e| panic!("{e}")));
    assert!(outcome.review.is_some(), "{:?}", outcome.reason);
    Staged {
        _dir: dir,
        fd,
        outcome,
        took,
        cpu,
    }
}

fn time_review(s: &Staged) -> (Duration, Duration) {
    let req = skillbox::skill::review::IndexFacts::default();
    let (r, wall, cpu) =
        timed(|| review(s.fd.as_fd(), &s.outcome.entries, &req).unwrap_or_else(|e| panic!("{e}")));
    std::hint::black_box(r);
    (wall, cpu)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn artifact(files: &[(String, u32, Vec<u8>)]) -> (tempfile::NamedTempFile, usize) {
    let bytes = tar(files);
    let mut f = tempfile::NamedTempFile::new().unwrap_or_else(|e| panic!("{e}"));
    f.write_all(&bytes).unwrap_or_else(|e| panic!("{e}"));
    (f, bytes.len())
}

fn main() {
    let runs: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(41);
    let bin = std::env::args().nth(2);
    let (_, build, _) = timed(skillbox::skill::scan::Triggers::get);
    println!(
        "trigger automaton first use (built at compile time): {:.3} ms",
        ms(build)
    );

    let files = typical();
    let (art, size) = artifact(&files);
    let art_file = File::open(art.path()).unwrap_or_else(|e| panic!("{e}"));
    let (mut ew, mut ec, mut rw, mut rc) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut findings = 0;
    for _ in 0..runs {
        let s = stage(&art_file);
        ew.push(s.took);
        ec.push(s.cpu);
        let (w, c) = time_review(&s);
        rw.push(w);
        rc.push(c);
        findings = s.outcome.review.as_ref().map_or(0, |r| r.findings.len());
    }
    println!(
        "typical package: {} files, {size} bytes tar, {findings} findings, {runs} runs",
        files.len()
    );
    // getrusage's thread CPU time is too coarse for single milliseconds: wall time, min and median.
    let _ = (&ec, &rc);
    for (what, e, r) in [
        ("wall min", min(&ew), min(&rw)),
        ("wall median", median(ew.clone()), median(rw.clone())),
    ] {
        let base = e.saturating_sub(r);
        println!(
            "  {what:<11} extract incl. review {:>7.3} ms | review {:>6.3} ms | extraction alone ~{:>6.3} ms | overhead {:>5.1}%",
            ms(e),
            ms(r),
            ms(base),
            100.0 * r.as_secs_f64() / base.as_secs_f64().max(1e-9)
        );
    }
    if let Some(bin) = bin {
        let mut cli = Vec::new();
        for _ in 0..runs {
            let t = Instant::now();
            let o = std::process::Command::new(&bin)
                .arg("extract")
                .arg(art.path())
                .args(["--type", "archive", "--json"])
                .output();
            let o = o.unwrap_or_else(|e| panic!("{bin}: {e}"));
            assert_eq!(o.status.code(), Some(0));
            cli.push(t.elapsed());
        }
        let (c, r) = (min(&cli), min(&rw));
        let cm = median(cli);
        println!(
            "  end to end `skillbox extract --json`: min {:.3} ms, median {:.3} ms; review share (min/min) {:.1}% of the rest",
            ms(c),
            ms(cm),
            100.0 * r.as_secs_f64() / c.saturating_sub(r).as_secs_f64().max(1e-9)
        );
    }

    println!("dense text packages (1 MB files, a finding every ~4 lines):");
    for mb in [10usize, 20, 40] {
        let files: Vec<(String, u32, Vec<u8>)> = std::iter::once((
            "SKILL.md".to_owned(),
            0o644,
            b"---\nname: big-text\ndescription: Large text package for the linearity check.\n---\nRead the references.\n".to_vec(),
        ))
        .chain((0..mb).map(|i| (format!("references/part{i:03}.sh"), 0o644, text(1000 + i as u64, 1_000_000, true, true))))
        .collect();
        let (art, _) = artifact(&files);
        let art_file = File::open(art.path()).unwrap_or_else(|e| panic!("{e}"));
        let (mut ext, mut rev) = (Vec::new(), Vec::new());
        let mut complete = true;
        for _ in 0..5 {
            let s = stage(&art_file);
            ext.push(s.took);
            rev.push(time_review(&s).0);
            complete &= s
                .outcome
                .review
                .as_ref()
                .is_some_and(|r| r.coverage.bytes_scanned as usize >= mb * 1_000_000);
        }
        let (e, r) = (min(&ext), min(&rev));
        println!(
            "  {mb:>3} MB: wall min: extract incl. review {:>7.1} ms | review {:>6.1} ms = {:>6.1} MB/s ({:.2} ms/MB) | every byte scanned: {complete}",
            ms(e),
            ms(r),
            mb as f64 / r.as_secs_f64(),
            ms(r) / mb as f64
        );
    }
}
