//! Load generator for the broker: N concurrent clients sending one skill package over the Unix
//! socket, each extract followed by a release, for a fixed time per concurrency level.
//!
//! ```sh
//! cargo build --release --bin skillbox --example loadgen
//! target/release/examples/loadgen --bin target/release/skillbox \
//!     [--artifact PATH] [--concurrency 1,8,64] [--seconds 10]
//! target/release/examples/loadgen --save-package typical.tar.gz   # write the package, exit
//! ```
//!
//! It starts `skillbox serve` itself (its own socket and staging root in a temporary
//! directory) so it can sample the broker's RSS from /proc, then prints a Markdown table:
//! requests/s, p50/p99 latency, errors by gRPC code, and peak broker RSS, followed by the same
//! package through `skillbox extract` locally (one process per run) for comparison.
//! Every loop is bounded in time and count; traffic goes only to the local socket.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use prost::bytes::Bytes;
use skillbox::client::{Client, ClientError};
use skillbox::proto as pb;

struct Args {
    bin: PathBuf,
    artifact: Option<PathBuf>,
    concurrency: Vec<usize>,
    seconds: u64,
    local_runs: usize,
    server_args: Vec<String>,
    save_package: Option<PathBuf>,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        bin: PathBuf::from("target/release/skillbox"),
        artifact: None,
        concurrency: vec![1, 8, 64],
        seconds: 10,
        local_runs: 200,
        server_args: Vec::new(),
        save_package: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut val = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--bin" => a.bin = PathBuf::from(val()?),
            "--artifact" => a.artifact = Some(PathBuf::from(val()?)),
            "--concurrency" => {
                a.concurrency = val()?
                    .split(',')
                    .map(|s| s.parse().map_err(|_| format!("bad concurrency {s}")))
                    .collect::<Result<_, _>>()?;
            }
            "--seconds" => a.seconds = val()?.parse().map_err(|_| "bad --seconds")?,
            "--local-runs" => a.local_runs = val()?.parse().map_err(|_| "bad --local-runs")?,
            "--server-arg" => a.server_args.push(val()?),
            "--save-package" => a.save_package = Some(PathBuf::from(val()?)),
            other => return Err(format!("unknown flag {other}")),
        }
    }
    if a.seconds == 0 || a.seconds > 300 {
        return Err("--seconds must be 1..=300".into());
    }
    Ok(a)
}

/// A deterministic xorshift generator (the package is the same on every run).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn fill(&mut self, buf: &mut [u8]) {
        for c in buf.chunks_mut(8) {
            let x = self.next().to_le_bytes();
            c.copy_from_slice(&x[..c.len()]);
        }
    }
}

/// Prose from a fixed vocabulary of 4,096 made-up words: compresses about as well as real
/// documentation and scripts do with gzip (roughly 3:1).
struct Text {
    rng: Rng,
    words: Vec<Vec<u8>>,
}

impl Text {
    fn new() -> Self {
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        let words = (0..4096)
            .map(|_| {
                let len = 2 + rng.below(9) as usize;
                (0..len).map(|_| b'a' + rng.below(26) as u8).collect()
            })
            .collect();
        Self { rng, words }
    }

    fn text(&mut self, len: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(len + 16);
        let mut in_line = 0;
        while out.len() < len {
            let w = &self.words[self.rng.below(4096) as usize];
            out.extend_from_slice(w);
            out.push(b' ');
            in_line += 1;
            if in_line > 10 + self.rng.below(5) {
                out.push(b'\n');
                in_line = 0;
            }
        }
        out.truncate(len);
        out
    }
}

/// The typical skill package, the shape of a real one: 26 files (SKILL.md, 7 scripts, 12
/// references, 4 binary assets, a template and a licence) in 4 directories, about 420 KB
/// unpacked and 250 KB as a tar.gz written by the `tar` and `flate2` crates.
fn typical_package() -> Vec<u8> {
    use std::io::Write as _;
    let mut t = Text::new();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut files: Vec<(String, u32, Vec<u8>)> = Vec::new();
    let mut skill = b"---\nname: pdf-tools\ndescription: Fill, merge and inspect PDF forms; render pages to images.\nallowed-tools: Bash Read\n---\n# PDF tools\n\nRun `scripts/tool_0.py` to fill a form. See [the reference](references/topic-00.md).\n\n".to_vec();
    skill.extend(t.text(5_500));
    files.push(("SKILL.md".into(), 0o644, skill));
    for (i, ext) in ["py", "py", "py", "sh", "sh", "py"].iter().enumerate() {
        let mut data: Vec<u8> = if *ext == "py" {
            b"#!/usr/bin/env python3\n".to_vec()
        } else {
            b"#!/bin/sh\nset -eu\n".to_vec()
        };
        data.extend(t.text(7_000 + 500 * i));
        files.push((format!("scripts/tool_{i}.{ext}"), 0o755, data));
    }
    files.push(("scripts/lib/util.py".into(), 0o644, t.text(4_000)));
    for i in 0..12 {
        files.push((
            format!("references/topic-{i:02}.md"),
            0o644,
            t.text(11_000 + 300 * i),
        ));
    }
    for (name, len) in [
        ("assets/logo.png", 48_000usize),
        ("assets/font.woff2", 64_000),
        ("assets/diagram.png", 40_000),
        ("assets/sample.pdf", 24_000),
    ] {
        let mut data = vec![0u8; len];
        rng.fill(&mut data);
        files.push((name.into(), 0o644, data));
    }
    files.push(("assets/template.json".into(), 0o644, t.text(6_000)));
    files.push(("LICENSE.txt".into(), 0o644, t.text(10_000)));

    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    let mut tar = tar::Builder::new(gz);
    for dir in ["scripts/", "scripts/lib/", "references/", "assets/"] {
        let mut h = tar::Header::new_ustar();
        h.set_entry_type(tar::EntryType::Directory);
        h.set_mode(0o755);
        h.set_size(0);
        h.set_mtime(1_700_000_000);
        let _ = tar.append_data(&mut h, dir, std::io::empty());
    }
    for (name, mode, data) in &files {
        let mut h = tar::Header::new_ustar();
        h.set_entry_type(tar::EntryType::Regular);
        h.set_mode(*mode);
        h.set_size(data.len() as u64);
        h.set_mtime(1_700_000_000);
        let _ = tar.append_data(&mut h, name, data.as_slice());
    }
    // An empty package is refused by main.
    tar.into_inner()
        .and_then(|mut gz| {
            gz.flush()?;
            gz.finish()
        })
        .unwrap_or_default()
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// CPU time of `pid` and its reaped children (the confined extractions), in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the parenthesised command: utime, stime, cutime, cstime are 14..=17.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<u64> = rest
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    // `rest` starts at field 3 (state, not numeric, filtered out): field n is f[n - 4].
    f.get(10..14).map_or(0, |v| v.iter().sum())
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1e3)
}

struct Level {
    concurrency: usize,
    ok: usize,
    errors: BTreeMap<String, usize>,
    latencies: Vec<Duration>,
    elapsed: Duration,
    peak_rss_kib: u64,
    /// Broker + children CPU time during the level (10 ms ticks).
    cpu_ms: f64,
}

async fn run_level(
    uri: &str,
    package: Bytes,
    file_name: &str,
    concurrency: usize,
    seconds: u64,
    server_pid: u32,
) -> Result<Level, String> {
    let client = Client::connect(uri).await.map_err(|e| e.to_string())?;
    let until = Instant::now() + Duration::from_secs(seconds);
    let digest = skillbox::digest::Sha256Digest::of_bytes(&package).to_string();
    let started = Instant::now();
    let cpu_before = cpu_ticks(server_pid);
    let sampler = tokio::spawn(async move {
        let mut peak = 0;
        while Instant::now() < until + Duration::from_millis(200) {
            peak = peak.max(rss_kib(server_pid));
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        peak
    });
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let mut c = client.clone();
        let package = package.clone();
        let digest = digest.clone();
        let file_name = file_name.to_owned();
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut errors: BTreeMap<String, usize> = BTreeMap::new();
            // Bounded by time, and by count as a second guard.
            for _ in 0..1_000_000 {
                if Instant::now() >= until {
                    break;
                }
                let header = pb::ExtractHeader {
                    declared_type: pb::ArtifactType::Archive as i32,
                    expected_digest: Some(digest.clone()),
                    file_name: Some(file_name.clone()),
                    ..Default::default()
                };
                let t = Instant::now();
                let r = c
                    .extract(
                        header,
                        // Shared, not copied: a client streaming a file has no copy of its own.
                        std::io::Cursor::new(package.clone()),
                        Some(Duration::from_secs(30)),
                    )
                    .await;
                match r {
                    Ok(done) => {
                        lat.push(t.elapsed());
                        if let Some(s) = done.staged {
                            if let Err(e) = c.release(&s.id).await {
                                *errors.entry(format!("release: {e}")).or_insert(0) += 1;
                            }
                        } else {
                            *errors
                                .entry(format!(
                                    "not accepted: {:?}",
                                    done.outcome.reason.map(|r| r.code)
                                ))
                                .or_insert(0) += 1;
                        }
                    }
                    Err(ClientError::Status(s)) => {
                        *errors.entry(format!("{:?}", s.code())).or_insert(0) += 1
                    }
                    Err(e) => *errors.entry(e.to_string()).or_insert(0) += 1,
                }
            }
            (lat, errors)
        }));
    }
    let mut level = Level {
        concurrency,
        ok: 0,
        errors: BTreeMap::new(),
        latencies: Vec::new(),
        elapsed: Duration::ZERO,
        peak_rss_kib: 0,
        cpu_ms: 0.0,
    };
    for t in tasks {
        let (lat, errors) = t.await.map_err(|e| e.to_string())?;
        level.ok += lat.len();
        level.latencies.extend(lat);
        for (k, v) in errors {
            *level.errors.entry(k).or_insert(0) += v;
        }
    }
    level.elapsed = started.elapsed();
    level.cpu_ms = (cpu_ticks(server_pid).saturating_sub(cpu_before)) as f64 * 10.0;
    level.peak_rss_kib = sampler.await.unwrap_or(0);
    level.latencies.sort();
    Ok(level)
}

fn local_runs(bin: &Path, artifact: &Path, runs: usize) -> Vec<Duration> {
    let mut lat = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        let status = Command::new(bin)
            .arg("extract")
            .arg(artifact)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if matches!(status, Ok(s) if s.success()) {
            lat.push(t.elapsed());
        }
    }
    lat.sort();
    lat
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("loadgen: {e}");
            std::process::exit(2);
        }
    };
    // The package alone, for other tools to run the same bytes (scripts/engine-ir.py).
    if let Some(path) = &args.save_package {
        if let Err(e) = std::fs::write(path, typical_package()) {
            eprintln!("loadgen: {}: {e}", path.display());
            std::process::exit(1);
        }
        return;
    }
    let tmp = match tempfile::tempdir() {
        Ok(t) => t,
        Err(e) => {
            eprintln!("loadgen: {e}");
            std::process::exit(1);
        }
    };
    let (package, artifact) = match &args.artifact {
        Some(p) => (std::fs::read(p).unwrap_or_default(), p.clone()),
        None => {
            let bytes = typical_package();
            let p = tmp.path().join("typical.tar.gz");
            let _ = std::fs::write(&p, &bytes);
            (bytes, p)
        }
    };
    if package.is_empty() {
        eprintln!("loadgen: empty artifact");
        std::process::exit(2);
    }
    let socket = tmp.path().join("skillbox.sock");
    let mut server = match Command::new(&args.bin)
        .arg("serve")
        .arg("--socket")
        .arg(&socket)
        .arg("--staging-root")
        .arg(tmp.path().join("staging"))
        .args(["--max-queued", "128", "--log", "warn"])
        .args(&args.server_args)
        .stdout(Stdio::null())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("loadgen: cannot start {}: {e}", args.bin.display());
            std::process::exit(1);
        }
    };
    let ready = Instant::now() + Duration::from_secs(20);
    while std::os::unix::net::UnixStream::connect(&socket).is_err() && Instant::now() < ready {
        std::thread::sleep(Duration::from_millis(20));
    }
    let uri = format!("unix://{}", socket.display());
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("loadgen: {e}");
            std::process::exit(1);
        }
    };
    let package = Bytes::from(package);
    let file_name = artifact
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let idle_rss = rss_kib(server.id());
    println!(
        "package: {} bytes; broker idle RSS {:.1} MiB; {} s per level\n",
        package.len(),
        idle_rss as f64 / 1024.0,
        args.seconds
    );
    println!(
        "| concurrency | requests | req/s | p50 ms | p99 ms | max ms | errors | broker peak RSS MiB | server CPU ms/req |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---|---:|---:|");
    for &c in &args.concurrency {
        // Warm-up: the first requests pay for page faults and lazy initialisation.
        let _ = runtime.block_on(run_level(
            &uri,
            package.clone(),
            &file_name,
            1,
            1,
            server.id(),
        ));
        match runtime.block_on(run_level(
            &uri,
            package.clone(),
            &file_name,
            c,
            args.seconds,
            server.id(),
        )) {
            Ok(l) => {
                let errors = if l.errors.is_empty() {
                    "0".to_owned()
                } else {
                    format!("{:?}", l.errors)
                };
                println!(
                    "| {} | {} | {:.0} | {} | {} | {} | {} | {:.1} | {:.2} |",
                    l.concurrency,
                    l.ok,
                    l.ok as f64 / l.elapsed.as_secs_f64(),
                    ms(percentile(&l.latencies, 0.50)),
                    ms(percentile(&l.latencies, 0.99)),
                    ms(l.latencies.last().copied().unwrap_or_default()),
                    errors,
                    l.peak_rss_kib as f64 / 1024.0,
                    l.cpu_ms / l.ok.max(1) as f64
                );
            }
            Err(e) => println!("| {c} | error: {e} | | | | | | | |"),
        }
    }
    let _ = server.kill();
    let _ = server.wait();
    if args.local_runs > 0 {
        let lat = local_runs(&args.bin, &artifact, args.local_runs);
        println!(
            "\nlocal `skillbox extract` (one process per run, {} runs): p50 {} ms, p99 {} ms",
            lat.len(),
            ms(percentile(&lat, 0.50)),
            ms(percentile(&lat, 0.99))
        );
    }
}
