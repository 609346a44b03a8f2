//! Load generator for the broker: N concurrent clients sending one skill package over the Unix
//! socket, each extract followed by a release, for a fixed time per concurrency level.
//!
//! ```sh
//! cargo build --release --bin skillbox --example loadgen
//! target/release/examples/loadgen --bin target/release/skillbox \
//!     [--artifact corpus/benign/typical.zip] [--concurrency 1,8,64] [--seconds 10]
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
use std::sync::Arc;
use std::time::{Duration, Instant};

use skillbox::client::{Client, ClientError};
use skillbox::proto as pb;

struct Args {
    bin: PathBuf,
    artifact: Option<PathBuf>,
    concurrency: Vec<usize>,
    seconds: u64,
    local_runs: usize,
    server_args: Vec<String>,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        bin: PathBuf::from("target/release/skillbox"),
        artifact: None,
        concurrency: vec![1, 8, 64],
        seconds: 10,
        local_runs: 200,
        server_args: Vec::new(),
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
            other => return Err(format!("unknown flag {other}")),
        }
    }
    if a.seconds == 0 || a.seconds > 300 {
        return Err("--seconds must be 1..=300".into());
    }
    Ok(a)
}

/// A typical skill package: SKILL.md, a few scripts, references and assets (about 40 KiB).
fn typical_package() -> Vec<u8> {
    use std::io::Write as _;
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let opts = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    let mut add = |name: &str, body: &[u8]| {
        let _ = zip.start_file(name, opts);
        let _ = zip.write_all(body);
    };
    add("SKILL.md", b"---\nname: pdf-tools\ndescription: Fill, merge and inspect PDF forms\nallowed-tools: Bash Read\n---\n# PDF tools\n\nRun `scripts/fill.py` to fill a form. See [the reference](references/forms.md).\n");
    for i in 0..6 {
        add(
            &format!("scripts/tool{i}.py"),
            format!(
                "#!/usr/bin/env python3\nimport sys\n{}\n",
                "print('line')\n".repeat(200)
            )
            .as_bytes(),
        );
    }
    for i in 0..6 {
        add(
            &format!("references/doc{i}.md"),
            "Lorem ipsum dolor sit amet, consectetur adipiscing elit. "
                .repeat(80)
                .as_bytes(),
        );
    }
    add("references/forms.md", b"# Forms\n");
    add(
        "assets/template.json",
        "{\"field\": \"value\"}\n".repeat(100).as_bytes(),
    );
    match zip.finish() {
        Ok(c) => c.into_inner(),
        Err(_) => Vec::new(),
    }
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
    package: Arc<Vec<u8>>,
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
        let package = Arc::clone(&package);
        let digest = digest.clone();
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
                    file_name: Some("typical.zip".into()),
                    ..Default::default()
                };
                let t = Instant::now();
                let r = c
                    .extract(
                        header,
                        std::io::Cursor::new(package.as_slice().to_vec()),
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
            let p = tmp.path().join("typical.zip");
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
    let package = Arc::new(package);
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
        let _ = runtime.block_on(run_level(&uri, Arc::clone(&package), 1, 1, server.id()));
        match runtime.block_on(run_level(
            &uri,
            Arc::clone(&package),
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
