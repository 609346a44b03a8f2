//! The confined child's own work on one package, without the child: `intake::run` (format
//! detection, extraction, the files' digests and the review: what a child runs for a request)
//! RUNS times over ARTIFACT, each into a fresh directory under WORKDIR. Made to run under
//! `valgrind --tool=callgrind`, whose instruction count does not move with the host's load the
//! way every timed figure on these shared machines does: `scripts/engine-ir.py` runs two builds
//! of it and reports instructions a request.
//!
//! ```text
//! cargo build --release --example engine_ir
//! target/release/examples/engine_ir ARTIFACT WORKDIR [RUNS]
//! ```
//! ARTIFACT is a tar, tar.gz, tar.zst or zip skill package (`loadgen --save-package PATH` writes
//! the typical one); its SKILL.md `name`, if given as SKILL_NAME in the environment, is passed
//! as the index's name, as a fetch would. Exits 1 unless every run is accepted.

use std::fs::{self, File};
use std::os::fd::AsFd;
use std::path::Path;

use skillbox::extract::policy::Limits;
use skillbox::extract::{ArtifactType, Request};
use skillbox::reason::Verdict;

fn fail(what: &str, e: impl std::fmt::Display) -> ! {
    eprintln!("engine_ir: {what}: {e}");
    std::process::exit(1)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(artifact), Some(work)) = (args.first(), args.get(1)) else {
        eprintln!("usage: engine_ir ARTIFACT WORKDIR [RUNS]");
        std::process::exit(2);
    };
    let runs: usize = match args.get(2).map(|r| r.parse()) {
        None => 1,
        Some(Ok(n)) if n > 0 => n,
        Some(_) => fail("RUNS", "must be a positive number"),
    };
    let bytes = fs::read(artifact).unwrap_or_else(|e| fail(artifact, e));
    let mut req = Request::new(ArtifactType::Archive, Limits::default());
    req.file_name = Path::new(artifact)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned());
    // As the broker sends it: the digest it computed while sealing the bytes, so the engine
    // does not hash the artifact again (a child never does).
    let digest = skillbox::digest::Sha256Digest::of_bytes(&bytes);
    req.expected_digest = Some(digest);
    req.sealed_digest = Some(digest);
    req.skill_name = std::env::var("SKILL_NAME").ok();
    for i in 0..runs {
        let out = Path::new(work).join(format!("run-{i}"));
        fs::create_dir(&out).unwrap_or_else(|e| fail(&out.display().to_string(), e));
        let file = File::open(artifact).unwrap_or_else(|e| fail(artifact, e));
        let dir = File::open(&out).unwrap_or_else(|e| fail(&out.display().to_string(), e));
        let answer =
            skillbox::intake::run(&file, dir.as_fd(), &req).unwrap_or_else(|e| fail("engine", e));
        if answer.verdict != Verdict::Accepted {
            fail("verdict", format!("{:?}", answer.verdict));
        }
    }
}
