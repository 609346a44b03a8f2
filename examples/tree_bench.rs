//! Remote trees: how fast `GetTree` moves an accepted 200 MB tree over loopback TCP+TLS, and
//! what `ExtractWithTree` (upload, verdict and the tree written locally, every hash checked)
//! costs for a typical package against `Extract` alone (upload and verdict; the `Release` that
//! follows is not timed).
//!
//! cargo build --release --bin skillbox --example tree_bench
//! target/release/examples/tree_bench --bin target/release/skillbox [--runs 100] [--current-thread]
//!
//! It starts its own `skillbox serve` twice (TLS on a loopback port, then a Unix socket), with a
//! self-signed certificate made by rcgen, staging under $TMPDIR. Both sides of the latency
//! comparison run in the same process, interleaved, against the same server.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use skillbox::client::{Client, TlsMaterial, endpoint_with, write_tree};
use skillbox::proto as pb;
use tokio_stream::StreamExt as _;

fn tar_of(files: &[(String, Vec<u8>, u32)]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (name, data, mode) in files {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(*mode);
        h.set_mtime(0);
        h.set_entry_type(tar::EntryType::Regular);
        b.append_data(&mut h, name, &data[..])
            .unwrap_or_else(|e| panic!("{e}"));
    }
    b.into_inner().unwrap_or_else(|e| panic!("{e}"))
}

const SKILL: &[u8] = b"---\nname: pdf-tools\ndescription: Fill, merge and inspect PDF forms\nallowed-tools: Bash Read\n---\n# PDF tools\n\nRun `scripts/fill.py` to fill a form.\n";

/// 200 MB in 4 files, half pseudo-random, half text (as the extraction benchmark's package).
fn large() -> Vec<u8> {
    let mut files = vec![("SKILL.md".to_owned(), SKILL.to_vec(), 0o644)];
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for i in 0..4 {
        let mut data = Vec::with_capacity(50_000_000);
        while data.len() < 50_000_000 {
            if (data.len() / (1 << 20)) % 2 == 0 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                data.extend_from_slice(&x.to_le_bytes());
            } else {
                data.extend_from_slice(b"the quick brown fox jumps over the lazy dog\n");
            }
        }
        data.truncate(50_000_000);
        files.push((format!("data/model-{i}.bin"), data, 0o644));
    }
    tar_of(&files)
}

/// A typical package: SKILL.md, scripts, references, an asset (about 40 KiB).
fn typical() -> Vec<u8> {
    let mut files = vec![("SKILL.md".to_owned(), SKILL.to_vec(), 0o644)];
    for i in 0..6 {
        let body = format!(
            "#!/usr/bin/env python3\n# script {i}\n{}",
            "print('x')\n".repeat(300)
        );
        files.push((format!("scripts/s{i}.py"), body.into_bytes(), 0o755));
    }
    for i in 0..7 {
        let body = format!(
            "# Reference {i}\n\n{}",
            "Some prose about forms.\n".repeat(120)
        );
        files.push((format!("references/r{i}.md"), body.into_bytes(), 0o644));
    }
    files.push((
        "assets/schema.json".into(),
        br#"{"type":"object"}"#.to_vec(),
        0o644,
    ));
    tar_of(&files)
}

fn header(data: &[u8]) -> pb::ExtractHeader {
    pb::ExtractHeader {
        expected_digest: Some(skillbox::digest::Sha256Digest::of_bytes(data).to_string()),
        declared_type: pb::ArtifactType::Archive as i32,
        file_name: Some("skill.tar".into()),
        ..Default::default()
    }
}

fn requests(data: &[u8]) -> Vec<pb::ExtractRequest> {
    let mut v = vec![pb::ExtractRequest {
        msg: Some(pb::extract_request::Msg::Header(header(data))),
    }];
    for c in data.chunks(256 * 1024) {
        v.push(pb::ExtractRequest {
            msg: Some(pb::extract_request::Msg::Chunk(c.to_vec().into())),
        });
    }
    v
}

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(bin: &Path, dir: &Path, args: &[String]) -> Server {
    let child = Command::new(bin)
        .arg("serve")
        .arg("--staging-root")
        .arg(dir.join("staging"))
        .args(["--log", "warn"])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("start {}: {e}", bin.display()));
    Server(child)
}

async fn connect(uri: &str, tls: &TlsMaterial) -> Client {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let ep = endpoint_with(uri, tls).unwrap_or_else(|e| panic!("{e}"));
        if let Ok(mut c) = Client::connect_to(uri, ep).await
            && c.server_info().await.is_ok()
        {
            return c;
        }
        assert!(Instant::now() < until, "the server does not answer");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// CPU seconds (user + system) used so far by process `pid`, all its threads, from /proc.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command's closing parenthesis; utime and stime are the 12th and 13th.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // The clock tick is 100 Hz on every Linux configuration we run on (USER_HZ).
    (ticks(11) + ticks(12)) / 100.0
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let mut bin = PathBuf::from("target/release/skillbox");
    let mut runs = 100usize;
    let mut current_thread = false;
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--bin" => bin = PathBuf::from(it.next().unwrap_or_default()),
            "--runs" => runs = it.next().and_then(|r| r.parse().ok()).unwrap_or(runs),
            // One thread for the connection, the decoding, the hashing and the writing (what
            // `skillbox extract --server` builds without `--out`); by default two workers, as
            // it builds with `--out`.
            "--current-thread" => current_thread = true,
            other => panic!("unknown argument {other}"),
        }
    }
    let runtime = if current_thread {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
    };
    let runtime = runtime.unwrap_or_else(|e| panic!("{e}"));
    runtime.block_on(run(bin, runs));
}

async fn run(bin: PathBuf, runs: usize) {
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));

    // 1. GetTree of the 200 MB tree over loopback TCP+TLS.
    let cert = rcgen::generate_simple_self_signed(vec!["127.0.0.1".into(), "localhost".into()])
        .unwrap_or_else(|e| panic!("{e}"));
    let (cert_pem, key_pem) = (cert.cert.pem(), cert.signing_key.serialize_pem());
    std::fs::write(tmp.path().join("cert.pem"), &cert_pem).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(tmp.path().join("key.pem"), &key_pem).unwrap_or_else(|e| panic!("{e}"));
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("{e}"));
    let tls_dir = tmp.path().join("tls");
    std::fs::create_dir(&tls_dir).unwrap_or_else(|e| panic!("{e}"));
    let server = start(
        &bin,
        &tls_dir,
        &[
            "--tcp".into(),
            format!("127.0.0.1:{port}"),
            "--tls-cert".into(),
            tmp.path().join("cert.pem").display().to_string(),
            "--tls-key".into(),
            tmp.path().join("key.pem").display().to_string(),
        ],
    );
    let uri = format!("https://127.0.0.1:{port}");
    let tls = TlsMaterial {
        ca: Some(cert_pem.into_bytes()),
        identity: None,
    };
    let mut c = connect(&uri, &tls).await;
    let big = large();
    let done = c
        .extract(header(&big), std::io::Cursor::new(big.clone()), None)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let staged = done
        .staged
        .clone()
        .unwrap_or_else(|| panic!("not accepted"));
    let tree_bytes: u64 = done.outcome.entries.iter().map(|e| e.size).sum();
    let mut rates = Vec::new();
    let me = std::process::id();
    let server_pid = server.0.id();
    let (mut cpu_server, mut cpu_client) = (0.0, 0.0);
    for i in 0..5 {
        let dest = tmp.path().join(format!("big-{i}"));
        let (s0, c0) = (cpu_seconds(server_pid), cpu_seconds(me));
        let t = Instant::now();
        let wrote = c
            .get_tree(&staged.id, &done.outcome.entries, &dest)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let s = t.elapsed().as_secs_f64();
        cpu_server += cpu_seconds(server_pid) - s0;
        cpu_client += cpu_seconds(me) - c0;
        assert_eq!(wrote.bytes, tree_bytes);
        rates.push(tree_bytes as f64 / s / 1e6);
        std::fs::remove_dir_all(&dest).unwrap_or_else(|e| panic!("{e}"));
    }
    // The stream alone (no local write), to tell the wire from the disk.
    let mut wire = Vec::new();
    for _ in 0..3 {
        let mut raw = pb::skillbox_client::SkillboxClient::new(
            endpoint_with(&uri, &tls)
                .unwrap_or_else(|e| panic!("{e}"))
                .connect()
                .await
                .unwrap_or_else(|e| panic!("{e}")),
        );
        let t = Instant::now();
        let mut parts = raw
            .get_tree(pb::GetTreeRequest {
                staging_id: staged.id.clone(),
            })
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .into_inner();
        let mut n = 0u64;
        while let Some(p) = parts.next().await {
            if let Some(pb::tree_part::Part::Chunk(b)) = p.unwrap_or_else(|e| panic!("{e}")).part {
                n += b.len() as u64;
            }
        }
        wire.push(n as f64 / t.elapsed().as_secs_f64() / 1e6);
    }
    c.release(&staged.id)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    drop(server);
    println!(
        "GetTree, 200 MB tree (4 files) over loopback TCP+TLS: written and checked {:.0} MB/s (median of 5; min {:.0}, max {:.0}); stream only {:.0} MB/s (median of 3)",
        median(&mut rates.clone()),
        rates.iter().copied().fold(f64::MAX, f64::min),
        rates.iter().copied().fold(0.0, f64::max),
        median(&mut wire)
    );
    // CPU per MB moved, written and checked: the figure a loaded machine disturbs least.
    let mb = 5.0 * tree_bytes as f64 / 1e6;
    println!(
        "GetTree CPU per MB written and checked: server {:.2} ms, client {:.2} ms, together {:.2} ms",
        cpu_server * 1e3 / mb,
        cpu_client * 1e3 / mb,
        (cpu_server + cpu_client) * 1e3 / mb
    );

    // 2. Typical package over the Unix socket: Extract + Release vs ExtractWithTree.
    let unix_dir = tmp.path().join("unix");
    std::fs::create_dir(&unix_dir).unwrap_or_else(|e| panic!("{e}"));
    let socket = unix_dir.join("s.sock");
    let _server = start(
        &bin,
        &unix_dir,
        &["--socket".into(), socket.display().to_string()],
    );
    let uri = format!("unix://{}", socket.display());
    let mut c = connect(&uri, &TlsMaterial::default()).await;
    let mut raw = pb::skillbox_client::SkillboxClient::new(
        endpoint_with(&uri, &TlsMaterial::default())
            .unwrap_or_else(|e| panic!("{e}"))
            .connect()
            .await
            .unwrap_or_else(|e| panic!("{e}")),
    );
    let pkg = typical();
    let (mut alone, mut with_tree) = (Vec::new(), Vec::new());
    for i in 0..runs + 10 {
        // Extract alone: the call until its answer; the release is outside the timing.
        let t = Instant::now();
        let d = c
            .extract(header(&pkg), std::io::Cursor::new(pkg.clone()), None)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let a = t.elapsed().as_secs_f64() * 1e3;
        c.release(&d.staged.unwrap_or_else(|| panic!("rejected")).id)
            .await
            .unwrap_or_else(|e| panic!("{e}"));

        let dest = tmp.path().join(format!("t-{i}"));
        let t = Instant::now();
        let mut parts = raw
            .extract_with_tree(tokio_stream::iter(requests(&pkg)))
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .into_inner();
        let first = parts
            .next()
            .await
            .unwrap_or_else(|| panic!("no answer"))
            .unwrap_or_else(|e| panic!("{e}"));
        let Some(pb::tree_part::Part::Answer(answer)) = first.part else {
            panic!("the answer must come first")
        };
        let outcome =
            skillbox::convert::outcome_from_proto(&answer).unwrap_or_else(|e| panic!("{e}"));
        write_tree(parts, &outcome.entries, &dest)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let w = t.elapsed().as_secs_f64() * 1e3;
        std::fs::remove_dir_all(&dest).unwrap_or_else(|e| panic!("{e}"));
        if i >= 10 {
            alone.push(a);
            with_tree.push(w);
        }
    }
    let (ma, mw) = (median(&mut alone), median(&mut with_tree));
    println!(
        "typical package ({} bytes, {} runs each, interleaved, Unix socket): Extract alone p50 {ma:.2} ms, ExtractWithTree written and checked p50 {mw:.2} ms: {:.2}x",
        pkg.len(),
        runs,
        mw / ma
    );
}
