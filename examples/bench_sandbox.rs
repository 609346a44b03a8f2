//! What confinement costs per request: the same extraction run in-process (the engine alone)
//! and through the confined child (memfd copy + hash, spawn, confine, extract, answer,
//! re-check), interleaved, median over many runs. Driven by `scripts/bench-sandbox.sh`.
//!
//! ```text
//! cargo run --release --example bench_sandbox -- EXE WORKDIR [RUNS [typical]]
//! ```
//! EXE is the binary children start from: the release `skillbox-child` (what `skillbox` uses),
//! or a `skillbox` binary (its own hidden child subcommand, the fallback and what builds before
//! the child binary used). With `SKILLBOX_BENCH_ALSO_EXE=OTHER` the exec path is also run from
//! OTHER, interleaved in the same iterations, so two child binaries are compared in one run.
//! WORKDIR on tmpfs (/dev/shm) keeps disk noise out; on a disk it shows what staging there costs.
//! The two one-shot rows build a sandbox per request, as `skillbox extract` does: "fresh" starts
//! its child on demand, "ahead" starts it first (`start_child_ahead`), so the child's start
//! overlaps the profile's compilation and the parent's work on the artifact.

use std::fs::{self, File};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use skillbox::extract::policy::Limits;
use skillbox::extract::{ArtifactType, Request};
use skillbox::reason::Verdict;
use skillbox::sandbox::{Sandbox, SandboxConfig, Verify};

fn fail(what: &str, e: impl std::fmt::Display) -> ! {
    eprintln!("bench_sandbox: {what}: {e}");
    std::process::exit(1)
}

/// Deterministic, poorly compressible text (xorshift), so the archive is as large as its files.
fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            b"abcdefghijklmnopqrstuvwxyz0123456789 \n"[(x % 38) as usize]
        })
        .collect()
}

/// A tar.gz of `files` files totalling about `bytes` bytes, with SKILL.md at the root.
fn package(files: usize, bytes: usize) -> Vec<u8> {
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    let mut b = tar::Builder::new(gz);
    let mut add = |path: &str, data: &[u8], mode: u32| {
        let mut h = tar::Header::new_ustar();
        h.set_size(data.len() as u64);
        h.set_mode(mode);
        h.set_entry_type(tar::EntryType::Regular);
        h.set_mtime(0);
        b.append_data(&mut h, path, data)
            .unwrap_or_else(|e| fail("tar", e));
    };
    add(
        "SKILL.md",
        b"---\nname: bench\ndescription: A benchmark skill\n---\nRun scripts/run.sh.\n",
        0o644,
    );
    let each = bytes / files.max(1);
    for i in 1..files {
        let dir = ["scripts", "references", "assets"][i % 3];
        let mode = if dir == "scripts" { 0o755 } else { 0o644 };
        add(
            &format!("{dir}/file{i:02}.txt"),
            &noise(i as u64, each),
            mode,
        );
    }
    let gz = b.into_inner().unwrap_or_else(|e| fail("tar", e));
    gz.finish().unwrap_or_else(|e| fail("gzip", e))
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn pct(mut v: Vec<Duration>, p: usize) -> Duration {
    v.sort();
    v[(v.len() * p / 100).min(v.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

struct Case {
    name: &'static str,
    artifact: PathBuf,
    req: Request,
}

fn case(work: &Path, name: &'static str, bytes: Vec<u8>) -> Case {
    let artifact = work.join(format!("{name}.tar.gz"));
    fs::write(&artifact, &bytes).unwrap_or_else(|e| fail("write artifact", e));
    let mut req = Request::new(ArtifactType::Archive, Limits::default());
    req.file_name = Some(format!("{name}.tar.gz"));
    req.expected_digest = Some(skillbox::digest::Sha256Digest::of_bytes(&bytes));
    eprintln!("{name}: {} bytes", bytes.len());
    Case {
        name,
        artifact,
        req,
    }
}

/// How one extraction runs.
#[derive(Clone, Copy)]
enum Way<'a> {
    InProcess,
    /// Through this sandbox, built once.
    Confined(&'a Sandbox),
    /// As `skillbox extract` runs: a sandbox built for the one request, compiling its profile,
    /// with its child started just before (`start_child_ahead`, which the CLI calls before
    /// parsing its command line) when the flag says so, else started on demand.
    OneShot(&'a SandboxConfig, bool),
}

fn once(work: &Path, case: &Case, sandbox: Option<&Sandbox>) -> Duration {
    once_by(work, case, sandbox.map_or(Way::InProcess, Way::Confined))
}

/// One extraction into a fresh directory under `work`; returns its wall time.
fn once_by(work: &Path, case: &Case, way: Way<'_>) -> Duration {
    let out = work.join("out");
    let _ = fs::remove_dir_all(&out);
    fs::create_dir(&out).unwrap_or_else(|e| fail("mkdir", e));
    let artifact = File::open(&case.artifact).unwrap_or_else(|e| fail("open", e));
    let dir = File::open(&out).unwrap_or_else(|e| fail("open out", e));
    let started = Instant::now();
    let verdict = match way {
        Way::InProcess => {
            skillbox::intake::run(&artifact, dir.as_fd(), &case.req)
                .unwrap_or_else(|e| fail("engine", e))
                .verdict
        }
        Way::Confined(sb) => {
            sb.extract_at(&artifact, dir.as_fd(), &case.req)
                .unwrap_or_else(|e| fail("sandbox", e))
                .outcome
                .verdict
        }
        Way::OneShot(config, ahead) => {
            let ahead = ahead.then(|| {
                skillbox::sandbox::start_child_ahead(config.exe.as_deref(), config.run_as)
                    .unwrap_or_else(|e| fail("start ahead", e))
            });
            Sandbox::with_child_ahead(config.clone(), ahead)
                .unwrap_or_else(|e| fail("sandbox", e))
                .extract_at(&artifact, dir.as_fd(), &case.req)
                .unwrap_or_else(|e| fail("sandbox", e))
                .outcome
                .verdict
        }
    };
    let took = started.elapsed();
    if verdict != Verdict::Accepted {
        fail(case.name, "not accepted");
    }
    took
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (exe, work) = match args.as_slice() {
        [exe, work, ..] => (PathBuf::from(exe), PathBuf::from(work)),
        _ => fail("usage", "bench_sandbox EXE WORKDIR [RUNS]"),
    };
    let runs: usize = args.get(2).and_then(|r| r.parse().ok()).unwrap_or(200);
    fs::create_dir_all(&work).unwrap_or_else(|e| fail("workdir", e));
    let sandbox = |verify, zygote_max_forks| {
        Sandbox::new(SandboxConfig {
            exe: Some(exe.clone()),
            verify,
            zygote_max_forks,
            ..SandboxConfig::default()
        })
        .unwrap_or_else(|e| fail("sandbox", e))
    };
    // exec per child (the CLI's path) and zygote-forked children (the broker's default).
    let (structure, full) = (sandbox(Verify::Structure, 0), sandbox(Verify::Full, 0));
    let zygote = sandbox(Verify::Structure, 256);
    let one_shot = SandboxConfig {
        exe: Some(exe.clone()),
        ..SandboxConfig::default()
    };
    let also = std::env::var_os("SKILLBOX_BENCH_ALSO_EXE").map(PathBuf::from);
    let other = also.as_ref().map(|other| {
        Sandbox::new(SandboxConfig {
            exe: Some(other.clone()),
            zygote_max_forks: 0,
            ..SandboxConfig::default()
        })
        .unwrap_or_else(|e| fail("sandbox", e))
    });

    // Floor: exec the binary as a child that gets no request (it closes its fds, finds fd 0
    // empty and exits): the loader, relocation and start-up, and nothing else.
    let bare = |exe: &Path| {
        let mut spawn = Vec::new();
        for _ in 0..runs {
            let t = Instant::now();
            let ok = Command::new(exe)
                .arg(skillbox::sandbox::CHILD_SUBCOMMAND)
                .env_clear()
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status();
            spawn.push(t.elapsed());
            if ok.ok().and_then(|s| s.code()) != Some(skillbox::sandbox::child::EXIT_BAD_SETUP) {
                fail(
                    "spawn",
                    format!("{} sandbox-child did not refuse", exe.display()),
                );
            }
        }
        spawn
    };
    let spawn = bare(&exe);
    if let Some(other) = &also {
        println!(
            "bare spawn+wait   OTHER sandbox-child median {:7.3} ms  ({})",
            ms(median(bare(other))),
            other.display()
        );
    }
    let mut spawn_true = Vec::new();
    for _ in 0..runs {
        let t = Instant::now();
        let _ = Command::new("/bin/true").env_clear().status();
        spawn_true.push(t.elapsed());
    }
    println!(
        "bare spawn+wait   /bin/true        median {:7.3} ms",
        ms(median(spawn_true))
    );
    println!(
        "bare spawn+wait   EXE sandbox-child   median {:7.3} ms  ({})",
        ms(median(spawn)),
        exe.display()
    );

    let typical = case(&work, "typical", package(25, 250 * 1024));
    let large = case(&work, "large", package(8, 64 * 1024 * 1024));
    // A fourth argument `typical` skips the large case (for profiling the per-request cost).
    let typical_only = args.get(3).is_some_and(|a| a == "typical");
    let cases = [(&typical, runs), (&large, (runs / 20).max(5))];
    for &(c, n) in cases.iter().take(if typical_only { 1 } else { 2 }) {
        let (mut inproc, mut conf, mut conf_full, mut conf_zyg, mut conf_other) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let (mut fresh, mut ahead) = (Vec::new(), Vec::new());
        // Warm-up, then interleave so drift hits all of them alike.
        once(&work, c, None);
        once(&work, c, Some(&structure));
        once(&work, c, Some(&zygote));
        if let Some(o) = &other {
            once(&work, c, Some(o));
        }
        for _ in 0..n {
            inproc.push(once(&work, c, None));
            conf.push(once(&work, c, Some(&structure)));
            if let Some(o) = &other {
                conf_other.push(once(&work, c, Some(o)));
            }
            conf_full.push(once(&work, c, Some(&full)));
            conf_zyg.push(once(&work, c, Some(&zygote)));
            fresh.push(once_by(&work, c, Way::OneShot(&one_shot, false)));
            ahead.push(once_by(&work, c, Way::OneShot(&one_shot, true)));
        }
        let mi = median(inproc.clone());
        let inproc_runs = inproc.clone();
        println!(
            "{:8} in-process       median {:8.3} ms  p90 {:8.3} ms  ({n} runs)",
            c.name,
            ms(mi),
            ms(pct(inproc, 90))
        );
        if other.is_some() {
            // The two child binaries against each other, iteration by iteration (each pair
            // ran back to back), so the host's drift cancels out of the difference.
            let mut d: Vec<f64> = conf
                .iter()
                .zip(&conf_other)
                .map(|(a, b)| a.as_secs_f64() - b.as_secs_f64())
                .collect();
            d.sort_by(f64::total_cmp);
            println!(
                "{:8} exec: EXE minus OTHER, paired median {:+.3} ms",
                c.name,
                d[d.len() / 2] * 1e3
            );
        }
        let mut variants = vec![
            ("confined, exec ", conf),
            ("confined, zygote", conf_zyg),
            ("confined+rehash", conf_full),
            ("one-shot, fresh", fresh),
            ("one-shot, ahead", ahead),
        ];
        if other.is_some() {
            variants.insert(1, ("exec from OTHER", conf_other));
        }
        for (label, runs) in variants {
            let m = median(runs.clone());
            // The same difference taken run by run against the in-process run just before it,
            // then the median: slow drift on a shared host hits both sides of each pair alike.
            let mut paired: Vec<f64> = runs
                .iter()
                .zip(&inproc_runs)
                .map(|(c, i)| c.as_secs_f64() - i.as_secs_f64())
                .collect();
            paired.sort_by(f64::total_cmp);
            let pm = paired[paired.len() / 2];
            println!(
                "{:8} {label:16} median {:8.3} ms  p90 {:8.3} ms  (+{:.3} ms, {:+.1}%; paired +{:.3} ms, {:+.1}%)",
                c.name,
                ms(m),
                ms(pct(runs, 90)),
                ms(m.saturating_sub(mi)),
                (m.as_secs_f64() / mi.as_secs_f64() - 1.0) * 100.0,
                pm * 1e3,
                pm / mi.as_secs_f64() * 100.0
            );
        }
    }
    let _ = fs::remove_dir_all(work.join("out"));
}
