//! The broker over a real socket: each test starts the real `skillbox serve` binary on a
//! temporary Unix socket with its own staging root, and talks to it with the crate's client
//! (or raw tonic stubs where a test must misbehave). Every test that ends a request checks
//! that the staging root holds only what it should and that no child process is left.

mod bounds;
mod harness;

use std::io::Write as _;
use std::time::{Duration, Instant};

use tonic::Code;
use tonic_types::StatusExt as _;

use harness::{Server, ok, skill_tar, slow_stream};
use skillbox::client::{Client, ClientError};
use skillbox::proto as pb;

fn header(kind: pb::ArtifactType) -> pb::ExtractHeader {
    pb::ExtractHeader {
        declared_type: kind as i32,
        ..Default::default()
    }
}

fn archive_header() -> pb::ExtractHeader {
    header(pb::ArtifactType::Archive)
}

/// The plain skill package (`skill_tar(&[])`) extracted over `c` within `deadline`; the test
/// fails, naming `what`, if the call does.
async fn extract_plain(
    c: &mut skillbox::client::Client,
    deadline: Option<Duration>,
    what: &str,
) -> skillbox::client::Extracted {
    ok(
        c.extract(
            archive_header(),
            std::io::Cursor::new(skill_tar(&[])),
            deadline,
        )
        .await,
        what,
    )
}

fn status_of(e: ClientError) -> tonic::Status {
    match e {
        ClientError::Status(s) => s,
        other => panic!("expected a status, got {other}"),
    }
}

fn bad_field(s: &tonic::Status) -> String {
    let details = s.get_error_details();
    let bad = details
        .bad_request()
        .unwrap_or_else(|| panic!("no BadRequest detail in {s:?}"));
    bad.field_violations[0].field.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accepted_is_staged_until_release() {
    let server = Server::start(&[]);
    let mut c = server.client().await;
    let tar = skill_tar(&[("scripts/run.sh", b"#!/bin/sh\necho hi\n", 0o755)]);
    let mut h = archive_header();
    h.expected_digest = Some(skillbox::digest::Sha256Digest::of_bytes(&tar).to_string());
    h.caller_label = Some("test-installer".into());
    h.file_name = Some("demo.tar".into());
    let done = ok(
        c.extract(
            h,
            std::io::Cursor::new(tar.clone()),
            Some(Duration::from_secs(20)),
        )
        .await,
        "extract",
    );
    assert_eq!(
        done.outcome.verdict,
        skillbox::reason::Verdict::Accepted,
        "{:?}",
        done.outcome.reason
    );
    assert_eq!(done.outcome.artifact.size, tar.len() as u64);
    assert_eq!(done.outcome.artifact.format.as_deref(), Some("tar"));
    let paths: Vec<&str> = done
        .outcome
        .entries
        .iter()
        .map(|e| e.path.as_str())
        .collect();
    assert_eq!(paths, ["SKILL.md", "scripts", "scripts/run.sh"]);
    let staged = done
        .staged
        .unwrap_or_else(|| panic!("an acceptance names its staging directory"));
    assert!(staged.path.starts_with(server.staging_root()), "{staged:?}");
    assert_eq!(
        ok(
            std::fs::read(staged.path.join("scripts/run.sh")),
            "staged file"
        ),
        b"#!/bin/sh\necho hi\n"
    );
    assert_eq!(server.staging_dirs().len(), 1);
    // The log line says the duration the way a person reads it: at most one decimal.
    let log = server.log();
    let answered = log
        .lines()
        .find(|l| l.contains("answered"))
        .unwrap_or_else(|| panic!("no answered line in the log:\n{log}"));
    let ms = answered
        .split_whitespace()
        .find_map(|w| w.strip_prefix("ms="))
        .unwrap_or_else(|| panic!("no ms= in {answered:?}"));
    assert!(
        ms.parse::<f64>().is_ok() && ms.split_once('.').is_none_or(|(_, f)| f.len() <= 1),
        "{answered:?}"
    );

    ok(c.release(&staged.id).await, "release");
    assert!(!staged.path.exists());
    let again = status_of(
        c.release(&staged.id)
            .await
            .err()
            .unwrap_or_else(|| panic!("second release")),
    );
    assert_eq!(again.code(), Code::NotFound);
    let bad = status_of(
        c.release("../../etc")
            .await
            .err()
            .unwrap_or_else(|| panic!("bad id")),
    );
    assert_eq!(bad.code(), Code::InvalidArgument);
    server.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accepted_trees_expire_and_stale_ones_go_at_start() {
    let mut server = Server::start(&["--staging-ttl", "1"]);
    let mut c = server.client().await;
    let done = extract_plain(&mut c, None, "extract").await;
    let staged = done.staged.unwrap_or_else(|| panic!("accepted"));
    assert!(staged.path.exists());
    // The reaper runs every second; the TTL is one second.
    server.wait_clean(Duration::from_secs(5));
    // The reaper logs once the removal is done, a moment after the directory is gone.
    let until = Instant::now() + Duration::from_secs(3);
    while !server.log().contains("past their TTL") && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(server.log().contains("past their TTL"), "{}", server.log());

    // A tree left by a server that died is removed when the next one starts.
    server.restart(&[]);
    let mut c = server.client().await;
    let done = extract_plain(&mut c, None, "extract").await;
    let staged = done.staged.unwrap_or_else(|| panic!("accepted"));
    server.restart(&[]);
    assert!(
        !staged.path.exists(),
        "stale staging directory survived a restart"
    );
    assert!(
        server.log().contains("left by a previous run"),
        "{}",
        server.log()
    );
    server.assert_clean();
}

/// TCP only with TLS beyond loopback; with a client CA, only clients it signed get in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_with_mutual_tls() {
    let refused = harness::cli(
        &[
            "serve",
            "--tcp",
            "0.0.0.0:9",
            "--staging-root",
            "/nonexistent/never-made",
        ],
        None,
    );
    assert_eq!(refused.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("requires --tls-cert"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );

    let pki = harness::Pki::new();
    let server = Server::start_tcp(&[
        "--tls-cert",
        &pki.path("server.pem"),
        "--tls-key",
        &pki.path("server.key"),
        "--tls-client-ca",
        &pki.path("ca.pem"),
    ]);
    let uri = format!("https://127.0.0.1:{}", server.tcp_port());
    let with_cert = skillbox::client::TlsMaterial {
        ca: Some(pki.read("ca.pem")),
        identity: Some((pki.read("client.pem"), pki.read("client.key"))),
    };
    let mut c = ok(
        Client::connect_to(
            &uri,
            ok(
                skillbox::client::endpoint_with(&uri, &with_cert),
                "endpoint",
            ),
        )
        .await,
        "mTLS connect",
    );
    let done = extract_plain(&mut c, Some(Duration::from_secs(20)), "extract over mTLS").await;
    assert_eq!(done.outcome.verdict, skillbox::reason::Verdict::Accepted);

    let no_cert = skillbox::client::TlsMaterial {
        ca: Some(pki.read("ca.pem")),
        identity: None,
    };
    let refused = match Client::connect_to(
        &uri,
        ok(skillbox::client::endpoint_with(&uri, &no_cert), "endpoint"),
    )
    .await
    {
        Err(_) => true,
        Ok(mut c) => c.server_info().await.is_err(),
    };
    assert!(refused, "a client without a certificate was served");
    drop(server);
}

/// The deadlines and stream and kept-tree bounds a server is started with, each a value of its
/// own and none the default, and what ServerInfo must say for them (in its field order).
const SERVER_INFO_FLAGS: &[(&str, &str, u64)] = &[
    ("--header-timeout-ms", "4321", 4321),
    ("--upload-timeout-ms", "54321", 54321),
    ("--max-tree-streams", "7", 7),
    ("--tree-idle-timeout-ms", "23456", 23456),
    ("--max-kept-trees", "99", 99),
    ("--max-kept-bytes", "3G", 3 << 30),
    ("--max-open-tree-streams", "55", 55),
    ("--max-connections", "77", 77),
    ("--max-partial-request-bytes", "5M", 5 << 20),
];

fn server_info_flags() -> Vec<&'static str> {
    SERVER_INFO_FLAGS
        .iter()
        .flat_map(|(flag, value, _)| [*flag, *value])
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_info_reports_limits_and_bounds() {
    let mut args = vec!["--max-children", "3", "--max-queued", "5"];
    args.extend(server_info_flags());
    let server = Server::start(&args);
    let mut c = server.client().await;
    let info = ok(c.server_info().await, "server info");
    assert_eq!(info.version, env!("CARGO_PKG_VERSION"));
    assert_eq!((info.max_children, info.max_queued), (3, 5));
    let reported = [
        info.header_timeout_ms,
        info.upload_timeout_ms,
        u64::from(info.max_tree_streams),
        info.tree_idle_timeout_ms,
        info.max_kept_trees,
        info.max_kept_bytes,
        u64::from(info.max_open_tree_streams),
        u64::from(info.max_connections),
        info.max_partial_request_bytes,
    ];
    assert_eq!(
        reported.len(),
        SERVER_INFO_FLAGS.len(),
        "one field per flag"
    );
    for ((flag, _, want), got) in SERVER_INFO_FLAGS.iter().zip(reported) {
        assert_eq!(got, *want, "ServerInfo for {flag}: {info:?}");
    }
    assert!(info.confined, "extractions are confined on this host");
    assert!(info.seccomp && info.landlock_abi > 0, "{info:?}");
    let limits = info.limits.unwrap_or_default();
    assert_eq!(limits.max_entries, Some(10_000));
    assert_eq!(limits.max_artifact_bytes, Some(256 << 20));
}

/// The whole corpus, each case through gRPC, with the verdict and reason the manifest expects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corpus_replays_over_grpc() {
    let Some(cases) = harness::corpus_cases() else {
        eprintln!("corpus/manifest.json is absent: nothing to replay");
        return;
    };
    let limits = harness::write_temp("limits.toml", harness::CORPUS_SERVER_LIMITS);
    let scratch = super::corpus_scratch();
    let server = Server::start_in(
        &scratch,
        &[
            "--max-queued",
            "256",
            "--limits",
            limits.1.to_str().unwrap_or(""),
        ],
    );
    let c = server.client().await;
    let mut failures = Vec::new();
    for chunk in cases.chunks(8) {
        let mut tasks = Vec::new();
        for case in chunk.iter().cloned() {
            let mut c = c.clone();
            tasks.push(tokio::spawn(async move {
                let got = c
                    .extract(
                        case.header(),
                        ok(tokio::fs::File::open(&case.path).await, "corpus file"),
                        Some(Duration::from_secs(120)),
                    )
                    .await;
                (case, got)
            }));
        }
        for t in tasks {
            let (case, got) = ok(t.await, "task");
            match got {
                Err(e) => failures.push(format!("{}: {e}", case.name)),
                Ok(done) => {
                    let reason = done
                        .outcome
                        .reason
                        .as_ref()
                        .map(|r| r.code.as_str().to_owned());
                    let verdict = match done.outcome.verdict {
                        skillbox::reason::Verdict::Accepted => "accepted",
                        skillbox::reason::Verdict::Rejected => "rejected",
                    };
                    if verdict != case.verdict || (case.reason.is_some() && reason != case.reason) {
                        failures.push(format!(
                            "{}: expected {} {:?}, got {verdict} {reason:?}",
                            case.name, case.verdict, case.reason
                        ));
                    }
                    if let Some(staged) = done.staged {
                        let mut c = c.clone();
                        ok(c.release(&staged.id).await, "release");
                    }
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases disagree:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
    server.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_clients_each_get_their_own_answer() {
    let server = Server::start(&["--max-children", "2", "--max-queued", "64"]);
    let c = server.client().await;
    let mut tasks = Vec::new();
    for i in 0..24u32 {
        let mut c = c.clone();
        tasks.push(tokio::spawn(async move {
            // Every third one is hostile.
            let name = if i % 3 == 0 {
                format!("../escape-{i}")
            } else {
                format!("file-{i}.txt")
            };
            let tar =
                harness::raw_tar(&[("SKILL.md", harness::SKILL, 0o644), (&name, b"x", 0o644)]);
            let done = ok(
                c.extract(
                    archive_header(),
                    std::io::Cursor::new(tar),
                    Some(Duration::from_secs(60)),
                )
                .await,
                "extract",
            );
            (i, done)
        }));
    }
    let mut accepted = 0;
    for t in tasks {
        let (i, done) = ok(t.await, "task");
        if i % 3 == 0 {
            assert_eq!(
                done.outcome.reason.map(|r| r.code.as_str()),
                Some("path_traversal"),
                "request {i}"
            );
            assert!(done.staged.is_none());
        } else {
            assert_eq!(
                done.outcome.verdict,
                skillbox::reason::Verdict::Accepted,
                "request {i}"
            );
            let staged = done.staged.unwrap_or_else(|| panic!("staged"));
            assert!(
                staged.path.join(format!("file-{i}.txt")).exists(),
                "request {i} got someone else's tree"
            );
            let mut c = c.clone();
            ok(c.release(&staged.id).await, "release");
            accepted += 1;
        }
    }
    assert_eq!(accepted, 16);
    server.assert_clean();
    // A spare just forked carries the zygote's name until its first step renames it.
    let zygotes = server.wait_zygotes(1, Duration::from_secs(3));
    assert_eq!(zygotes.len(), 1, "one zygote forks every child");
    assert_eq!(
        server.wait_spares(1, Duration::from_secs(3)),
        1,
        "one spare waits for the next request"
    );
}

/// The zygote is replaced after its quota, and `--zygote-max-forks 0` execs every child; the
/// answers are the same either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zygotes_are_replaced_after_their_quota_or_not_used_at_all() {
    for (max_forks, zygotes) in [("3", 1), ("0", 0)] {
        let server = Server::start(&["--zygote-max-forks", max_forks]);
        let first = server.wait_zygotes(zygotes, Duration::from_secs(3));
        assert_eq!(first.len(), zygotes, "--zygote-max-forks {max_forks}");
        let mut c = server.client().await;
        for i in 0..7 {
            let name = if i % 2 == 0 {
                "../escape".to_owned()
            } else {
                format!("file-{i}.txt")
            };
            let tar =
                harness::raw_tar(&[("SKILL.md", harness::SKILL, 0o644), (&name, b"x", 0o644)]);
            let done = ok(
                c.extract(archive_header(), std::io::Cursor::new(tar), None)
                    .await,
                "extract",
            );
            if i % 2 == 0 {
                assert_eq!(
                    done.outcome.reason.map(|r| r.code.as_str()),
                    Some("path_traversal")
                );
            } else {
                let staged = done
                    .staged
                    .unwrap_or_else(|| panic!("request {i} not staged"));
                ok(c.release(&staged.id).await, "release");
            }
        }
        server.assert_clean();
        // A replacement is started while the last requests run: until it has named itself
        // (and the retired one is reaped) the count may be off for a moment.
        let now = server.wait_zygotes(zygotes, Duration::from_secs(5));
        assert_eq!(
            now.len(),
            zygotes,
            "--zygote-max-forks {max_forks}: {now:?}"
        );
        if zygotes > 0 {
            assert_ne!(
                now, first,
                "7 children with a quota of 3: the zygote should have been replaced"
            );
            for old in &first {
                let gone = || !std::path::Path::new(&format!("/proc/{old}")).exists();
                let until = Instant::now() + Duration::from_secs(5);
                while !gone() && Instant::now() < until {
                    std::thread::sleep(Duration::from_millis(10));
                }
                assert!(gone(), "retired zygote {old} not reaped");
            }
        }
    }
}

/// A rejected tree is removed by the broker once the child has answered and ended, not by the
/// child inside its deadline, on both ways children start (spares forked by the zygote, and an
/// exec per child with `--zygote-max-forks 0`): stopped at that moment (the debug build's
/// pause), the request's staging directory holds what the child staged before the review
/// rejected it; the answer follows, and nothing is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_tree_is_removed_by_the_broker_after_the_child_answered() {
    use super::{STOP_AT_DISCARD, resume, tree_names, wait_stopped};
    let tar = harness::raw_tar(&[
        ("SKILL.md", b"no frontmatter here\n", 0o644),
        ("notes.txt", b"notes\n", 0o644),
    ]);
    for args in [&[][..], &["--zygote-max-forks", "0"][..]] {
        let server = Server::start_env(args, &[STOP_AT_DISCARD]);
        let mut c = server.client().await;
        let pid = server.pid();
        let body = std::io::Cursor::new(tar.clone());
        let call = tokio::spawn(async move {
            c.extract(archive_header(), body, Some(Duration::from_secs(60)))
                .await
        });
        ok(
            tokio::task::spawn_blocking(move || wait_stopped(pid)).await,
            "wait for the stop",
        );
        let dirs = server.staging_dirs();
        assert_eq!(dirs.len(), 1, "{args:?}: {dirs:?}");
        assert_eq!(
            tree_names(&server.staging_root().join(&dirs[0])),
            ["SKILL.md", "notes.txt"],
            "{args:?}: the tree as the child left it"
        );
        resume(pid);
        let done = ok(ok(call.await, "join"), "extract");
        assert_eq!(done.outcome.verdict, skillbox::reason::Verdict::Rejected);
        assert_eq!(
            done.outcome.reason.map(|r| r.code),
            Some(skillbox::reason::ReasonCode::InvalidSkillMd),
            "{args:?}"
        );
        assert!(done.staged.is_none(), "{args:?}");
        server.wait_clean(Duration::from_secs(5));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hangup_mid_upload_leaves_nothing() {
    let server = Server::start(&[]);
    let c = server.client().await;
    let task = tokio::spawn(async move {
        let mut c = c;
        // 1,024 pieces of 64 KiB, one every 50 ms: still uploading when it is aborted.
        let body = slow_stream(vec![0u8; 64 << 20], 64 << 10, Duration::from_millis(50));
        c.extract(archive_header(), body, None).await
    });
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(
        server.staging_dirs().len(),
        1,
        "the request has its staging directory while uploading"
    );
    task.abort();
    let _ = task.await;
    server.wait_clean(Duration::from_secs(5));
}

/// Over a raw connection to `server`'s socket: the connection preface, an Extract's HEADERS on
/// stream 1 and a DATA frame with its header message, sent; returns once the header was read
/// (the request has its child and its staging directory). Raw frames, for what stock clients
/// never send.
fn raw_extract_with_header(server: &Server) -> std::os::unix::net::UnixStream {
    use prost::Message as _;
    let grpc_message = |m: &pb::ExtractRequest| {
        let body = m.encode_to_vec();
        let mut out = vec![0];
        out.extend_from_slice(&(body.len() as u32).to_be_bytes());
        out.extend_from_slice(&body);
        out
    };
    let mut wire = raw_call("Extract");
    let header = pb::ExtractRequest {
        msg: Some(pb::extract_request::Msg::Header(archive_header())),
    };
    bounds::frame(&mut wire, 0x0, 0, 1, &grpc_message(&header)); // DATA
    let mut conn = ok(
        std::os::unix::net::UnixStream::connect(server.socket()),
        "connect",
    );
    ok(conn.write_all(&wire), "send");
    let until = Instant::now() + Duration::from_secs(30);
    while server.staging_dirs().is_empty() {
        assert!(Instant::now() < until, "no upload: {}", server.log());
        std::thread::sleep(Duration::from_millis(20));
    }
    conn
}

/// The connection preface and the HEADERS of a call of `method` on stream 1, as raw frames.
fn raw_call(method: &str) -> Vec<u8> {
    // Literals without indexing, new names (RFC 7541 6.2.2), every length under 127.
    let hpack = |fields: &[(&str, &str)]| {
        let mut block = Vec::new();
        for (name, value) in fields {
            block.push(0);
            block.push(name.len() as u8);
            block.extend_from_slice(name.as_bytes());
            block.push(value.len() as u8);
            block.extend_from_slice(value.as_bytes());
        }
        block
    };
    let mut wire = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    bounds::frame(&mut wire, 0x4, 0, 0, &[]); // SETTINGS
    let headers = hpack(&[
        (":method", "POST"),
        (":scheme", "http"),
        (":path", &format!("/skillbox.v1.Skillbox/{method}")),
        (":authority", "localhost"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ]);
    bounds::frame(&mut wire, 0x1, 0x4, 1, &headers); // HEADERS, END_HEADERS
    wire
}

/// A client that goes before its unary request message has arrived whole (part of a
/// ReleaseRequest, then RST_STREAM with CANCEL, as raw frames) hung up: counted CANCELLED in
/// skillbox_unary_request_errors_total, as an Extract's hang-up mid-upload is counted in
/// skillbox_request_errors_total, not ABORTED (the code every error of a request body reaches
/// tonic's decoder as). The reset is sent once the broker holds the partial message.
#[test]
fn a_unary_call_whose_client_goes_before_its_request_is_counted_cancelled() {
    let server = Server::start(&["--metrics", harness::ANY_PORT]);
    let addr = server.metrics_addr();
    let mut wire = raw_call("Release");
    // A message prefix promising 100 bytes, and 10 of them.
    let mut partial = vec![0, 0, 0, 0, 100];
    partial.extend_from_slice(&[0x0a; 10]);
    bounds::frame(&mut wire, 0x0, 0, 1, &partial); // DATA
    let mut conn = ok(
        std::os::unix::net::UnixStream::connect(server.socket()),
        "connect",
    );
    ok(conn.write_all(&wire), "send");
    wait_counter(&addr, "skillbox_partial_request_bytes", 15);
    let mut reset = Vec::new();
    bounds::frame(&mut reset, 0x3, 0, 1, &8u32.to_be_bytes()); // RST_STREAM, CANCEL
    ok(conn.write_all(&reset), "send");
    wait_unary_errors(
        &addr,
        &[
            "skillbox_unary_request_errors_total{method=\"Release\",code=\"Cancelled\"} 1"
                .to_owned(),
        ],
    );
    wait_counter(&addr, "skillbox_partial_request_bytes", 0);
    drop(conn);
    server.assert_clean();
}

/// A client that resets its upload with an HTTP/2 error code tonic reads as INTERNAL
/// (`INTERNAL_ERROR` here; `PROTOCOL_ERROR` and `NO_ERROR` too) hung up: its request ends as a
/// hang-up (CANCELLED), with its child killed and its staging directory removed, never as the
/// malformed request (INVALID_ARGUMENT) that an INTERNAL from tonic's decoder, a message that
/// does not decode, is. Sent as raw frames over the socket: stock clients reset with `CANCEL`.
#[test]
fn a_reset_that_h2_reads_as_internal_is_a_hangup_not_a_malformed_request() {
    let server = Server::start(&[]);
    let mut conn = raw_extract_with_header(&server);
    let until = Instant::now() + Duration::from_secs(30);
    // Part of a chunk, then the reset.
    let mut rest = Vec::new();
    let mut partial = vec![0, 0, 0, 1, 0];
    partial.extend_from_slice(&[0x12, 0xfd, 0x01, 1, 2, 3]);
    bounds::frame(&mut rest, 0x0, 0, 1, &partial); // DATA
    bounds::frame(&mut rest, 0x3, 0, 1, &2u32.to_be_bytes()); // RST_STREAM, INTERNAL_ERROR
    ok(conn.write_all(&rest), "send");
    while !server.log().contains("failed code=") {
        assert!(Instant::now() < until, "not ended: {}", server.log());
        std::thread::sleep(Duration::from_millis(20));
    }
    let log = server.log();
    assert!(log.contains("failed code=Cancelled"), "{log}");
    assert!(!log.contains("InvalidArgument"), "{log}");
    server.wait_clean(Duration::from_secs(10));
    drop(conn);
}

/// An upload whose stream ends inside a message (a chunk's length prefix promises more bytes
/// than the client sends before it half-closes) is the client's malformed request: tonic's
/// decoder reports it as INTERNAL "Unexpected EOF decoding stream." (`Streaming::poll_frame`
/// on a body that ends with bytes buffered), so the broker answers INVALID_ARGUMENT naming the
/// chunk, "the request could not be decoded", not a hang-up; its child is killed and its
/// staging directory removed. Raw frames: stock clients never send a partial message.
#[test]
fn a_stream_that_ends_inside_a_message_is_an_invalid_argument_and_keeps_nothing() {
    let server = Server::start(&[]);
    let mut conn = raw_extract_with_header(&server);
    // A chunk message whose prefix promises 1000 bytes, 9 of them sent, then END_STREAM.
    let mut partial = vec![0, 0, 0, 0x03, 0xe8];
    partial.extend_from_slice(&[0x12, 0xe5, 0x07, 1, 2, 3, 4, 5, 6]);
    let mut rest = Vec::new();
    bounds::frame(&mut rest, 0x0, 0x1, 1, &partial); // DATA, END_STREAM
    ok(conn.write_all(&rest), "send");
    let until = Instant::now() + Duration::from_secs(30);
    while !server.log().contains("failed code=") {
        assert!(Instant::now() < until, "not ended: {}", server.log());
        std::thread::sleep(Duration::from_millis(20));
    }
    let log = server.log();
    assert!(log.contains("failed code=InvalidArgument"), "{log}");
    assert!(
        log.contains("chunk: the request could not be decoded (Unexpected EOF"),
        "{log}"
    );
    server.wait_clean(Duration::from_secs(10));
    drop(conn);
}

/// Reads `data`, then fails instead of ending: a local file that cannot be read to its end.
struct FailsAfter(std::io::Cursor<Vec<u8>>);

impl tokio::io::AsyncRead for FailsAfter {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        use std::io::Read as _;
        let mut chunk = vec![0u8; buf.remaining()];
        let n = self.0.read(&mut chunk)?;
        if n == 0 {
            return std::task::Poll::Ready(Err(std::io::Error::other("the disk went away")));
        }
        buf.put_slice(&chunk[..n]);
        std::task::Poll::Ready(Ok(()))
    }
}

/// The client cannot read its artifact to the end: the upload must not look whole to the
/// server. What was sent is a complete package (no digest given), so a stream that merely
/// ended would be extracted and kept, unreleased, while the client reports its error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_artifact_that_fails_to_read_is_not_taken_for_a_whole_one() {
    let server = Server::start(&[]);
    let mut c = server.client().await;
    // One whole chunk (the client sends a chunk once it is full), a complete tar padded with
    // zeros past its end; the read after it fails.
    let mut tar = skill_tar(&[]);
    tar.resize(skillbox::client::CHUNK_BYTES, 0);
    let e = c
        .extract(
            archive_header(),
            FailsAfter(std::io::Cursor::new(tar)),
            None,
        )
        .await
        .err()
        .unwrap_or_else(|| panic!("an upload whose source failed was answered"));
    match e {
        ClientError::Io(e) => assert!(e.to_string().contains("the disk went away"), "{e}"),
        other => panic!("expected the read error, got {other}"),
    }
    server.wait_clean(Duration::from_secs(5));
    let log = server.log();
    assert!(
        !log.contains("verdict=\"accepted\""),
        "the partial upload was extracted:\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_over_the_limit_is_stopped_and_rejected() {
    let server = Server::start(&[]);
    let mut c = server.client().await;
    let mut h = archive_header();
    h.limits = Some(pb::Limits {
        max_artifact_bytes: Some(100_000),
        ..Default::default()
    });
    let started = Instant::now();
    let done = ok(
        c.extract(
            h,
            std::io::Cursor::new(vec![7u8; 32 << 20]),
            Some(Duration::from_secs(30)),
        )
        .await,
        "extract",
    );
    let reason = done.outcome.reason.unwrap_or_else(|| panic!("rejected"));
    assert_eq!(reason.code.as_str(), "artifact_size");
    assert_eq!(reason.limit, Some(100_000));
    // Stopped at the first chunk past the limit, not after 32 MiB.
    assert!(
        reason.observed.unwrap_or(u64::MAX) <= 100_000 + skillbox::client::CHUNK_BYTES as u64,
        "{reason:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    server.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_digest_mismatch_is_a_verdict_and_bad_spellings_are_invalid() {
    let server = Server::start(&[]);
    let mut c = server.client().await;
    let tar = skill_tar(&[]);
    let mut h = archive_header();
    h.expected_digest = Some(format!("sha256:{}", "0".repeat(64)));
    let done = ok(
        c.extract(h, std::io::Cursor::new(tar.clone()), None).await,
        "extract",
    );
    assert_eq!(
        done.outcome.reason.as_ref().map(|r| r.code.as_str()),
        Some("digest_mismatch")
    );
    assert_eq!(
        done.outcome.artifact.digest,
        Some(skillbox::digest::Sha256Digest::of_bytes(&tar))
    );

    let good = skillbox::digest::Sha256Digest::of_bytes(&tar).to_string();
    for bad in [
        good.to_uppercase(),
        good.replace("sha256:", ""),
        good[..good.len() - 1].to_owned(),
        format!("{good} "),
        String::new(),
    ] {
        let mut h = archive_header();
        h.expected_digest = Some(bad.clone());
        let s = status_of(
            c.extract(h, std::io::Cursor::new(tar.clone()), None)
                .await
                .err()
                .unwrap_or_else(|| panic!("{bad:?} accepted")),
        );
        assert_eq!(s.code(), Code::InvalidArgument, "{bad:?}");
        assert_eq!(bad_field(&s), "header.expected_digest");
    }
    server.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_looser_than_the_servers_are_invalid() {
    let limits = harness::write_temp("limits.toml", b"max_entries = 100\n");
    let server = Server::start(&["--limits", limits.1.to_str().unwrap_or("")]);
    let mut c = server.client().await;
    for (l, field) in [
        (
            pb::Limits {
                max_entries: Some(101),
                ..Default::default()
            },
            "header.limits.max_entries",
        ),
        (
            pb::Limits {
                max_file_bytes: Some(u64::MAX),
                ..Default::default()
            },
            "header.limits.max_file_bytes",
        ),
        (
            pb::Limits {
                require_skill_md: Some(false),
                ..Default::default()
            },
            "header.limits.require_skill_md",
        ),
        (
            pb::Limits {
                hardlinks: Some(99),
                ..Default::default()
            },
            "header.limits.hardlinks",
        ),
        (
            pb::Limits {
                max_entries: Some(0),
                ..Default::default()
            },
            "header.limits.max_entries",
        ),
    ] {
        let mut h = archive_header();
        h.limits = Some(l);
        let s = status_of(
            c.extract(h, std::io::Cursor::new(skill_tar(&[])), None)
                .await
                .err()
                .unwrap_or_else(|| panic!("{field} accepted")),
        );
        assert_eq!(s.code(), Code::InvalidArgument);
        assert_eq!(bad_field(&s), field);
    }
    // Tighter is fine, and applies.
    let mut h = archive_header();
    h.limits = Some(pb::Limits {
        max_entries: Some(1),
        ..Default::default()
    });
    let done = ok(
        c.extract(
            h,
            std::io::Cursor::new(skill_tar(&[("a.txt", b"a", 0o644)])),
            None,
        )
        .await,
        "extract",
    );
    assert_eq!(
        done.outcome.reason.map(|r| r.code.as_str()),
        Some("entry_count")
    );
    server.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_streams_are_invalid_arguments_naming_the_field() {
    let server = Server::start(&[]);
    let mut raw = server.raw_client().await;
    use pb::extract_request::Msg;
    let h = || pb::ExtractRequest {
        msg: Some(Msg::Header(archive_header())),
    };
    let chunk = || pb::ExtractRequest {
        msg: Some(Msg::Chunk(b"abc".to_vec().into())),
    };
    // Past the message size the server decodes (`max_chunk_bytes` and 64 KiB of slack), as a
    // client that sends its artifact in 2 MiB chunks does: the decoder refuses the message,
    // which is the client's error to fix, not a hang-up (it was CANCELLED, "cancelled by the
    // client").
    let big = || pb::ExtractRequest {
        msg: Some(Msg::Chunk(vec![0u8; 2 << 20].into())),
    };
    let cases: Vec<(&str, Vec<pb::ExtractRequest>, &str)> = vec![
        ("no messages at all", vec![], "header"),
        ("a chunk past the message size", vec![h(), big()], "chunk"),
        (
            "a first message past the message size",
            vec![big()],
            "header",
        ),
        ("a chunk before the header", vec![chunk(), h()], "header"),
        ("two headers", vec![h(), chunk(), h()], "header"),
        (
            "an empty message",
            vec![pb::ExtractRequest { msg: None }],
            "msg",
        ),
        (
            "no declared type",
            vec![pb::ExtractRequest {
                msg: Some(Msg::Header(pb::ExtractHeader::default())),
            }],
            "header.declared_type",
        ),
    ];
    for (what, msgs, field) in cases {
        let s = raw
            .extract(tokio_stream::iter(msgs))
            .await
            .err()
            .unwrap_or_else(|| panic!("{what}: accepted"));
        assert_eq!(s.code(), Code::InvalidArgument, "{what}: {s:?}");
        assert_eq!(bad_field(&s), field, "{what}");
    }
    server.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_refuses_at_once_beyond_its_bounds() {
    let server = Server::start(&["--max-children", "1", "--max-queued", "0"]);
    let c = server.client().await;
    let slow = {
        let mut c = c.clone();
        tokio::spawn(async move {
            let body = slow_stream(skill_tar(&[]), 512, Duration::from_millis(100));
            c.extract(archive_header(), body, Some(Duration::from_secs(30)))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut c2 = c.clone();
    let started = Instant::now();
    let s = status_of(
        c2.extract(archive_header(), std::io::Cursor::new(skill_tar(&[])), None)
            .await
            .err()
            .unwrap_or_else(|| panic!("admitted")),
    );
    assert_eq!(s.code(), Code::ResourceExhausted);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "refused at once, not queued"
    );
    let done = ok(ok(slow.await, "task"), "the admitted request");
    assert_eq!(done.outcome.verdict, skillbox::reason::Verdict::Accepted);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_and_reflection_answer() {
    let server = Server::start(&[]);
    let channel = server.channel().await;
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel.clone());
    for service in ["", "skillbox.v1.Skillbox"] {
        let r = ok(
            health
                .check(tonic_health::pb::HealthCheckRequest {
                    service: service.into(),
                })
                .await,
            "health",
        );
        assert_eq!(
            r.into_inner().status,
            tonic_health::pb::health_check_response::ServingStatus::Serving as i32,
            "{service:?}"
        );
    }
    use tonic_reflection::pb::v1::{
        ServerReflectionRequest, server_reflection_client::ServerReflectionClient,
        server_reflection_request::MessageRequest, server_reflection_response::MessageResponse,
    };
    let mut refl = ServerReflectionClient::new(channel);
    let req = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut answers = ok(
        refl.server_reflection_info(tokio_stream::iter(vec![req]))
            .await,
        "reflection",
    )
    .into_inner();
    let first =
        ok(answers.message().await, "reflection answer").unwrap_or_else(|| panic!("no answer"));
    let Some(MessageResponse::ListServicesResponse(list)) = first.message_response else {
        panic!("not a service list")
    };
    let names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    assert!(
        names.iter().any(|n| n == "skillbox.v1.Skillbox"),
        "{names:?}"
    );
    assert!(
        names.iter().any(|n| n == "grpc.health.v1.Health"),
        "{names:?}"
    );

    // The typed answer and the error details are described by reflection, dependencies
    // included, so a client built from reflection alone can decode them.
    use prost::Message as _;
    let mut files = std::collections::BTreeMap::new();
    let mut asks: Vec<MessageRequest> = [
        "skillbox.v1.Review",
        "skillbox.v1.SandboxReport",
        "google.rpc.BadRequest",
        "google.rpc.RetryInfo",
        "google.rpc.QuotaFailure",
    ]
    .into_iter()
    .map(|s| MessageRequest::FileContainingSymbol(s.into()))
    .collect();
    // As a reflection client does: every import not yet seen is asked for by name.
    while let Some(ask) = asks.pop() {
        let req = ServerReflectionRequest {
            host: String::new(),
            message_request: Some(ask.clone()),
        };
        let mut answers = ok(
            refl.server_reflection_info(tokio_stream::iter(vec![req]))
                .await,
            "reflection",
        )
        .into_inner();
        let answer =
            ok(answers.message().await, "reflection answer").unwrap_or_else(|| panic!("no answer"));
        let Some(MessageResponse::FileDescriptorResponse(fd)) = answer.message_response else {
            panic!("{ask:?}: {:?}", answer.message_response)
        };
        for raw in fd.file_descriptor_proto {
            let file = ok(
                prost_types::FileDescriptorProto::decode(&raw[..]),
                "descriptor",
            );
            for dep in &file.dependency {
                if !files.contains_key(dep) {
                    asks.push(MessageRequest::FileByFilename(dep.clone()));
                }
            }
            files.insert(file.name().to_owned(), file);
        }
    }
    assert!(
        files.contains_key("google/rpc/error_details.proto")
            && files.contains_key("google/protobuf/duration.proto"),
        "{:?}",
        files.keys()
    );
    let ours = &files["skillbox/v1/skillbox.proto"];
    let response = ours
        .message_type
        .iter()
        .find(|m| m.name() == "ExtractResponse")
        .unwrap_or_else(|| panic!("no ExtractResponse"));
    assert!(response.reserved_name.iter().any(|n| n == "review_json"));
    assert!(
        response
            .field
            .iter()
            .any(|f| f.name() == "review" && f.type_name() == ".skillbox.v1.Review")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadline_mid_extraction_kills_the_child() {
    // 1 GiB of zeros compress to about a megabyte; the server's limits let it expand. It must
    // take the child well over the 600 ms deadline: 192 MiB once did, until the engine stopped
    // hashing the artifact twice and finished in time.
    let limits = harness::write_temp(
        "limits.toml",
        b"max_ratio = 100000\nmax_file_bytes = 2147483648\nmax_expanded_bytes = 2147483648\n",
    );
    let server = Server::start(&["--limits", limits.1.to_str().unwrap_or("")]);
    let mut c = server.client().await;
    let big = harness::zeros_tar_gz(1 << 30);
    let started = Instant::now();
    let call = tokio::spawn(async move {
        c.extract(
            archive_header(),
            std::io::Cursor::new(big),
            Some(Duration::from_millis(600)),
        )
        .await
    });
    // The extraction runs in a child of the server, never in the server itself.
    let mut saw_child = false;
    while !call.is_finished() && !saw_child {
        saw_child = !server.children().is_empty();
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        saw_child,
        "no confined child was seen during the extraction"
    );
    let e = ok(call.await, "task");
    let s = status_of(
        e.err()
            .unwrap_or_else(|| panic!("finished within the deadline: make the artifact bigger")),
    );
    assert_eq!(s.code(), Code::DeadlineExceeded, "{s:?}");
    assert!(started.elapsed() < Duration::from_secs(3));
    server.wait_clean(Duration::from_secs(10));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_in_flight_requests_then_exits() {
    let mut server = Server::start(&["--grace", "20"]);
    let zygotes = server.wait_zygotes(1, Duration::from_secs(3));
    assert_eq!(zygotes.len(), 1, "the server runs one zygote");
    assert_eq!(server.wait_spares(1, Duration::from_secs(3)), 1);
    let spares = server.spares();
    let c = server.client().await;
    let inflight = {
        let mut c = c.clone();
        tokio::spawn(async move {
            let body = slow_stream(skill_tar(&[]), 256, Duration::from_millis(100));
            c.extract(archive_header(), body, Some(Duration::from_secs(30)))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.sigterm();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !server.socket().exists(),
        "the socket is gone once draining starts"
    );
    assert!(
        Client::connect(&server.uri()).await.is_err(),
        "no new connections while draining"
    );
    let done = ok(ok(inflight.await, "task"), "the in-flight request finishes");
    assert_eq!(done.outcome.verdict, skillbox::reason::Verdict::Accepted);
    let status = server.wait_exit(Duration::from_secs(15));
    assert_eq!(status.code(), Some(0), "exit status after SIGTERM");
    // Never released: removed at shutdown, after the grace period, not left for a next start.
    let staged = done.staged.unwrap_or_else(|| panic!("accepted"));
    assert!(
        !staged.path.exists(),
        "an unreleased tree outlived the server"
    );
    assert!(
        server.staging_dirs().is_empty(),
        "{:?}",
        server.staging_dirs()
    );
    // The zygote and its spare do not outlive the server (they may linger as zombies of whoever
    // adopts them). The first spare was used by the in-flight request; its successor is checked
    // by name below.
    for pid in zygotes.iter().chain(&spares) {
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let running = state
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z') && !rest.starts_with('X'));
        assert!(!running, "{pid} outlived the server: {state}");
    }
    let until = Instant::now() + Duration::from_secs(3);
    while harness::live_named("skillbox-spare", server.pid()) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !harness::live_named("skillbox-spare", server.pid()),
        "a spare of the server is still running"
    );
}

/// A second SIGTERM during the drain stops the broker at once, and still leaves nothing in its
/// staging root: the tree an Extract kept (never released) and the directory of an upload in
/// flight (its child started, its bytes still arriving) are removed, and its children killed,
/// before it exits; it does not wait for the in-flight call or the grace period. (It exited
/// leaving the kept tree for the next start.) The end of the grace period stops it the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_sigterm_stops_at_once_and_removes_every_tree() {
    stopped_with_trees(&["--grace", "600"], 2, "again: stopping now").await;
    stopped_with_trees(&["--grace", "1"], 1, "grace period over").await;
}

/// Start the server with `args`, keep a tree and start an upload that never ends, send
/// `sigterms` SIGTERMs (the second once the drain has begun), and check that the server exits,
/// having logged `said`, with nothing left in its staging root and no child running.
async fn stopped_with_trees(args: &[&str], sigterms: usize, said: &str) {
    let mut server = Server::start(args);
    let mut c = server.client().await;
    let kept = extract_plain(&mut c, None, "extract")
        .await
        .staged
        .unwrap_or_else(|| panic!("accepted"));
    // An upload in flight: the header and a few bytes, then nothing more.
    let (mut writer, reader) = tokio::io::duplex(64);
    let inflight = {
        let mut c = c.clone();
        tokio::spawn(async move {
            c.extract(archive_header(), reader, Some(Duration::from_secs(600)))
                .await
        })
    };
    ok(
        tokio::io::AsyncWriteExt::write_all(&mut writer, &skill_tar(&[])[..512]).await,
        "write",
    );
    // Its staging directory is made, and its child is under way.
    let until = Instant::now() + Duration::from_secs(30);
    while server.staging_dirs().len() < 2 || server.request_children().is_empty() {
        assert!(
            Instant::now() < until,
            "no upload in flight: {}",
            server.log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let pid = server.pid();
    server.sigterm();
    if sigterms == 2 {
        // Draining: the socket goes first.
        while server.socket().exists() {
            assert!(Instant::now() < until, "not draining: {}", server.log());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(!inflight.is_finished(), "the upload is still in flight");
        server.sigterm();
    }
    let status = server.wait_exit(Duration::from_secs(60));
    assert_eq!(status.code(), Some(0), "{}", server.log());
    assert!(server.log().contains(said), "{}", server.log());
    assert!(!kept.path.exists(), "a kept tree outlived the server");
    assert!(
        server.staging_dirs().is_empty(),
        "left in the staging root: {:?}\n{}",
        server.staging_dirs(),
        server.log()
    );
    for comm in ["skillbox-child", "skillbox-spare"] {
        assert!(
            !harness::live_named(comm, pid),
            "a {comm} of the server is still running"
        );
    }
    let ended = ok(inflight.await, "task");
    assert!(ended.is_err(), "the upload in flight was answered");
    drop(writer);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_served_when_asked() {
    let server = Server::start(&["--metrics", harness::ANY_PORT]);
    let addr = server.metrics_addr();
    let mut c = server.client().await;
    ok(
        c.extract(
            archive_header(),
            std::io::Cursor::new(harness::raw_tar(&[("../x", b"x", 0o644)])),
            None,
        )
        .await,
        "extract",
    );
    let text = harness::http_get(&addr, "/metrics");
    assert!(
        text.contains("skillbox_requests_total{verdict=\"rejected\",reason=\"path_traversal\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("skillbox_request_duration_seconds_count 1"),
        "{text}"
    );
}

/// The value of an unlabelled counter in the server's metrics.
fn counter(addr: &str, name: &str) -> u64 {
    let text = harness::http_get(addr, "/metrics");
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in\n{text}"))
}

/// Wait until the counter reads `want` (the job counts once its child is reaped), or panic.
fn wait_counter(addr: &str, name: &str, want: u64) {
    let until = Instant::now() + Duration::from_secs(10);
    let mut got = counter(addr, name);
    while got != want && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(25));
        got = counter(addr, name);
    }
    assert_eq!(got, want, "{name}");
}

/// The child exists while the upload arrives (it confines meanwhile), so a client that hangs up
/// mid-upload, or whose deadline passes mid-upload, gets its child killed: the counter counts
/// those too, and nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn children_killed_counts_hangups_and_deadlines_during_upload() {
    const KILLED: &str = "skillbox_children_killed_total";
    let server = Server::start(&["--metrics", harness::ANY_PORT]);
    let addr = server.metrics_addr();
    let c = server.client().await;
    // An answered request kills nothing.
    let done = ok(
        c.clone()
            .extract(archive_header(), std::io::Cursor::new(skill_tar(&[])), None)
            .await,
        "extract",
    );
    if let Some(s) = done.staged {
        ok(c.clone().release(&s.id).await, "release");
    }
    assert_eq!(counter(&addr, KILLED), 0);
    server.wait_clean(Duration::from_secs(5));

    // A hang-up mid-upload, once the request's child exists.
    let task = {
        let mut c = c.clone();
        tokio::spawn(async move {
            let body = slow_stream(vec![0u8; 64 << 20], 64 << 10, Duration::from_millis(50));
            c.extract(archive_header(), body, None).await
        })
    };
    let until = Instant::now() + Duration::from_secs(5);
    while server.request_children().is_empty() && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        !server.request_children().is_empty() && !task.is_finished(),
        "the request's child was not seen during the upload"
    );
    task.abort();
    let _ = task.await;
    wait_counter(&addr, KILLED, 1);
    server.wait_clean(Duration::from_secs(5));

    // A deadline mid-upload.
    let mut c2 = c.clone();
    let body = slow_stream(vec![0u8; 64 << 20], 64 << 10, Duration::from_millis(50));
    let e = c2
        .extract(archive_header(), body, Some(Duration::from_millis(500)))
        .await
        .err()
        .unwrap_or_else(|| panic!("a 64 MiB upload at 1.3 MB/s finished within 500 ms"));
    assert_eq!(status_of(e).code(), Code::DeadlineExceeded);
    wait_counter(&addr, KILLED, 2);
    server.wait_clean(Duration::from_secs(5));
}

/// A client that goes after its whole upload, while its child runs, ends its call: hyper drops
/// it. It is counted once, as a hang-up (`Cancelled` in skillbox_request_errors_total, as one
/// mid-upload is), its child killed and counted; before, such a call was counted nowhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_gone_while_its_child_runs_is_counted_as_a_hang_up() {
    const KILLED: &str = "skillbox_children_killed_total";
    const CANCELLED: &str = "skillbox_request_errors_total{code=\"Cancelled\"}";
    let server = Server::start(&["--metrics", harness::ANY_PORT]);
    let addr = server.metrics_addr();
    let c = server.client().await;
    let artifact = skill_tar(&[("data.txt", &[b'x'; 200_000], 0o644)]);
    let len = artifact.len() as u64;
    // Slowly, so that the request's child exists before the upload is whole.
    let task = {
        let mut c = c.clone();
        tokio::spawn(async move {
            let body = slow_stream(artifact, 16 << 10, Duration::from_millis(40));
            c.extract(archive_header(), body, None).await
        })
    };
    let until = Instant::now() + Duration::from_secs(5);
    while server.request_children().is_empty() && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let children = server.request_children();
    assert!(
        !children.is_empty() && !task.is_finished(),
        "the request's child was not seen during the upload"
    );
    // Held where it is: it cannot answer, so the call is still waiting for it when the client
    // goes (SIGKILL, the broker's kill, ends a stopped process as any other).
    for pid in &children {
        ok(
            nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(*pid as i32),
                nix::sys::signal::Signal::SIGSTOP,
            ),
            "SIGSTOP the request's child",
        );
    }
    let until = Instant::now() + Duration::from_secs(10);
    while counter(&addr, "skillbox_artifact_bytes_received_total") < len && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        counter(&addr, "skillbox_artifact_bytes_received_total"),
        len,
        "the whole upload reached the broker"
    );
    assert!(!task.is_finished(), "answered by a stopped child");
    let text = harness::http_get(&addr, "/metrics");
    assert!(!text.contains("skillbox_request_errors_total{"), "{text}");
    task.abort();
    let _ = task.await;
    wait_counter(&addr, KILLED, 1);
    let until = Instant::now() + Duration::from_secs(10);
    let mut text = harness::http_get(&addr, "/metrics");
    while !text.contains(&format!("{CANCELLED} 1")) && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(25)).await;
        text = harness::http_get(&addr, "/metrics");
    }
    assert!(text.contains(&format!("{CANCELLED} 1")), "{text}");
    assert!(
        text.contains("skillbox_request_duration_seconds_count 1"),
        "{text}"
    );
    assert!(!text.contains("skillbox_requests_total{"), "{text}");
    server.wait_clean(Duration::from_secs(5));
}

/// `skillbox extract --json --server` of `path` through `server`: exit 0, its JSON answer.
fn extracted_over(server: &Server, path: &str) -> serde_json::Value {
    let out = harness::cli(
        &["extract", "--json", "--server", &server.uri(), path],
        None,
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    ok(serde_json::from_slice(&out.stdout), "JSON on stdout")
}

/// The global sandbox flags reach the broker's children (`--verify-staged full` shows in every
/// answer), and `--sandbox-timeout`, which serve has its own flag for, is refused, not ignored.
#[test]
fn global_sandbox_flags_apply_to_serve_or_are_refused() {
    let server = Server::start(&["--verify-staged", "full"]);
    let dir = harness::world_readable_dir();
    let path = dir.path().join("good.tar");
    ok(
        ok(std::fs::File::create(&path), "create").write_all(&skill_tar(&[("a.txt", b"a", 0o644)])),
        "write",
    );
    let answer = extracted_over(&server, path.to_str().unwrap_or(""));
    assert_eq!(answer["sandbox"]["verify"], "full", "{answer}");
    server.assert_clean();

    // Refused before anything is made: the socket's directory is not created (the old order
    // made it first, as root `/nonexistent` here, then said no).
    let tmp = ok(tempfile::tempdir(), "tempdir");
    let never = tmp.path().join("never-made");
    let socket = never.join("x.sock");
    let refused = harness::cli(
        &[
            "--sandbox-timeout",
            "5",
            "serve",
            "--socket",
            &socket.display().to_string(),
        ],
        None,
    );
    assert_eq!(refused.status.code(), Some(2));
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(err.contains("--extract-timeout-ms"), "{err}");
    assert!(
        !never.exists(),
        "a refused serve made the socket's directory {}",
        never.display()
    );
}

/// `--max-inflight-bytes` below the limits' `max_artifact_bytes` is refused at start: such a
/// broker answered a lone upload larger than the budget, on an idle server, "at capacity" with a
/// retry hint, on every retry. Equal to it, an upload of that size is served.
#[test]
fn an_inflight_budget_below_the_artifact_limit_is_refused_at_start() {
    // The socket's and the staging root's directory is a file: settings that were taken would
    // fail at start (exit 1), never serve.
    let (_file, file) = harness::write_temp("not-a-dir", b"");
    let (socket, staging) = (file.join("x.sock"), file.join("staging"));
    let refused = harness::cli(
        &[
            "serve",
            "--socket",
            socket.to_str().unwrap_or(""),
            "--staging-root",
            staging.to_str().unwrap_or(""),
            "--max-inflight-bytes",
            "2M",
        ],
        None,
    );
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--max-inflight-bytes must be at least 268435456"),
        "{err}"
    );

    let limits = harness::write_temp("limits.toml", b"max_artifact_bytes = 2097152\n");
    let server = Server::start(&[
        "--max-inflight-bytes",
        "2M",
        "--limits",
        limits.1.to_str().unwrap_or(""),
    ]);
    let dir = harness::world_readable_dir();
    let path = dir.path().join("big.tar");
    let tar = skill_tar(&[("assets/blob.bin", &vec![7u8; (2 << 20) - 8192], 0o644)]);
    assert!(tar.len() <= 2 << 20, "{}", tar.len());
    ok(std::fs::write(&path, &tar), "write");
    extracted_over(&server, path.to_str().unwrap_or(""));
    server.assert_clean();
}

/// `skillbox extract --server` prints what the local path prints, with the same exit code.
#[test]
fn cli_over_the_server_matches_the_local_cli() {
    let server = Server::start(&[]);
    let dir = harness::world_readable_dir();
    for (name, tar) in [
        ("good.tar", skill_tar(&[("a.txt", b"a", 0o644)])),
        (
            "evil.tar",
            harness::raw_tar(&[("SKILL.md", harness::SKILL, 0o644), ("/etc/x", b"x", 0o644)]),
        ),
    ] {
        let path = dir.path().join(name);
        ok(
            ok(std::fs::File::create(&path), "create").write_all(&tar),
            "write",
        );
        let p = path.to_str().unwrap_or("");
        let local = harness::cli(&["extract", "--json", p], None);
        let remote = harness::cli(&["extract", "--json", "--server", &server.uri(), p], None);
        assert_eq!(
            local.status.code(),
            remote.status.code(),
            "{name}: {}",
            String::from_utf8_lossy(&remote.stderr)
        );
        let parse = |o: &std::process::Output| -> serde_json::Value {
            ok(serde_json::from_slice(&o.stdout), "JSON on stdout")
        };
        assert_eq!(parse(&local), parse(&remote), "{name}");
    }
    server.assert_clean();
}

/// `extract --skill-name --index-description --server`: the facts travel in the header and the
/// broker's review raises the mismatch flags exactly as the local path does.
#[test]
fn cli_index_facts_reach_the_review_over_the_server() {
    let server = Server::start(&[]);
    let (_dir, path) = harness::write_temp("skill.tar", &skill_tar(&[]));
    let p = path.to_str().unwrap_or("");
    let uri = server.uri();
    let parse = |o: &std::process::Output| -> serde_json::Value {
        serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&o.stderr)))
    };
    for (name, description, want) in [
        (
            "demo",
            "A demo skill for the broker tests",
            serde_json::json!([]),
        ),
        (
            "demo-2",
            "A demo skill for the broker tests",
            serde_json::json!(["name_mismatch"]),
        ),
        (
            "demo-2",
            "Another skill",
            serde_json::json!(["name_mismatch", "description_mismatch"]),
        ),
    ] {
        let facts = ["--skill-name", name, "--index-description", description];
        let local = harness::cli(&[&["extract", "--json", p][..], &facts].concat(), None);
        let remote = harness::cli(
            &[&["extract", "--json", "--server", &uri, p][..], &facts].concat(),
            None,
        );
        assert_eq!(
            remote.status.code(),
            Some(0),
            "{name}: {}",
            String::from_utf8_lossy(&remote.stderr)
        );
        let (local, remote) = (parse(&local), parse(&remote));
        assert_eq!(
            remote["review"]["flags"], want,
            "{name}, {description}: {remote:#}"
        );
        assert_eq!(local, remote, "{name}, {description}");
    }
    server.assert_clean();
}

/// SO_PEERCRED: a client running as a uid not on the allow-list is refused with
/// PERMISSION_DENIED naming the rule (not a reset that looks like an outage), even when the
/// socket's mode lets it connect; the CLI and both stock clients say so.
#[test]
fn a_peer_uid_not_allowed_is_refused() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("not root: cannot run a client as another uid");
        return;
    }
    let dir = harness::world_readable_dir();
    let art = dir.path().join("skill.tar");
    ok(std::fs::write(&art, skill_tar(&[])), "write");
    let art = art.to_str().unwrap_or("");
    let nobody = Some((65534, 65534));

    let server = Server::start_in(&dir, &["--socket-mode", "0666"]);
    let refused = harness::cli(
        &["extract", "--json", "--server", &server.uri(), art],
        nobody,
    );
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "stderr: {stderr}");
    assert!(
        stderr.contains("PERMISSION_DENIED") && stderr.contains("peer uid 65534 is not allowed"),
        "{stderr}"
    );
    drop(server);

    // The stock clients run as root (their packages are root's), on a server that allows
    // only nobody.
    let server = Server::start_in(&dir, &["--socket-mode", "0666", "--allow-uid", "65534"]);
    let socket = server.socket().to_str().unwrap_or("");
    let py = python(&["--socket", socket, "--artifact", art, "--expect-denied"]);
    assert_eq!(py["denied"]["code"], "PERMISSION_DENIED", "{py}");
    assert!(
        py["denied"]["details"]
            .as_str()
            .is_some_and(|d| d.contains("--allow-uid")),
        "{py}"
    );
    let js = node(&[
        "--target",
        &format!("unix://{socket}"),
        "--artifact",
        art,
        "--hostile",
        art,
        "--expect-denied",
    ]);
    assert_eq!(js["denied"]["code"], "PERMISSION_DENIED", "{js}");
    assert!(
        server.log().contains("peer uid not allowed"),
        "{}",
        server.log()
    );
    assert!(
        server.staging_dirs().is_empty(),
        "a refused request got a staging directory"
    );
    drop(server);

    let server = Server::start_in(&dir, &["--socket-mode", "0666", "--allow-uid", "0,65534"]);
    let allowed = harness::cli(
        &["extract", "--json", "--server", &server.uri(), art],
        nobody,
    );
    assert_eq!(
        allowed.status.code(),
        Some(0),
        "stderr: {}",
        String::from_utf8_lossy(&allowed.stderr)
    );
}

/// Run one of the stock clients (tests/python, tests/node) and parse the JSON it prints.
fn stock_client(program: &str, script: &str, args: &[&str]) -> serde_json::Value {
    let root = env!("CARGO_MANIFEST_DIR");
    let mut cmd = std::process::Command::new(program);
    cmd.arg(format!("{root}/{script}"))
        .args(args)
        .args(["--proto-root", &format!("{root}/proto")]);
    let out = cmd.output().unwrap_or_else(|e| {
        panic!("{program} is required for this test (.ci/run installs its packages): {e}")
    });
    assert!(
        out.status.success(),
        "{script} failed (python: pip install -r tests/python/requirements.txt; node: npm ci --prefix tests/node):\nstdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    ok(serde_json::from_slice(&out.stdout), "client output")
}

fn python(args: &[&str]) -> serde_json::Value {
    stock_client("python3", "tests/python/grpc_client.py", args)
}

/// The stock Python client in `mode` (one of its flags) against `server`, with a plain skill
/// tarball as its artifact.
fn python_on_a_skill(server: &Server, mode: &str) -> serde_json::Value {
    let dir = ok(tempfile::tempdir(), "tempdir");
    let art = dir.path().join("skill.tar");
    ok(std::fs::write(&art, skill_tar(&[])), "write");
    python(&[
        "--socket",
        server.socket().to_str().unwrap_or(""),
        "--artifact",
        art.to_str().unwrap_or(""),
        mode,
    ])
}

fn node(args: &[&str]) -> serde_json::Value {
    let root = env!("CARGO_MANIFEST_DIR");
    assert!(
        std::path::Path::new(&format!("{root}/tests/node/node_modules/@grpc/grpc-js")).is_dir(),
        "the Node client's packages are missing: npm ci --prefix tests/node"
    );
    stock_client("node", "tests/node/client.mjs", args)
}

/// The contract outside Rust, as users would call it: stock Python grpcio (stubs generated
/// from proto/) and stock Node @grpc/grpc-js (proto-loader), no channel options at all, over the
/// default kind of socket and over TCP+TLS; each gets a verdict for a valid and a hostile
/// package.
#[test]
fn stock_grpcio_and_grpc_js_clients_get_verdicts_over_unix_and_tls() {
    let dir = harness::world_readable_dir();
    let art = dir.path().join("skill.tar");
    let tar = skill_tar(&[("scripts/x.py", b"print(1)\n", 0o644)]);
    ok(std::fs::write(&art, &tar), "write");
    let evil = dir.path().join("evil.tar");
    let hostile = harness::raw_tar(&[
        ("SKILL.md", b"---\nname: x\ndescription: y\n---\n", 0o644),
        ("../evil.sh", b"#!/bin/sh\n", 0o755),
    ]);
    ok(std::fs::write(&evil, &hostile), "write");
    let (art, evil) = (art.to_str().unwrap_or(""), evil.to_str().unwrap_or(""));
    let digest = skillbox::digest::Sha256Digest::of_bytes(&tar).to_string();

    // Each field the clients decoded, against the flag both servers were started with (JSON
    // numbers from Python, strings from Node).
    let check_server_info = |v: &serde_json::Value| {
        for (flag, _, want) in SERVER_INFO_FLAGS {
            let field = flag.trim_start_matches("--").replace('-', "_");
            let got = &v["server_info"][&field];
            let got = got
                .as_u64()
                .or_else(|| got.as_str().and_then(|s| s.parse().ok()));
            assert_eq!(got, Some(*want), "ServerInfo {field} for {flag}: {v}");
        }
    };

    let check_python = |v: &serde_json::Value| {
        assert_eq!(v["accepted"]["verdict"], "VERDICT_ACCEPTED", "{v}");
        assert_eq!(v["accepted"]["digest"], digest.as_str(), "{v}");
        assert_eq!(v["hostile"]["reason"], "REASON_CODE_PATH_TRAVERSAL", "{v}");
        assert_eq!(v["bad_digest"]["code"], "INVALID_ARGUMENT", "{v}");
        assert_eq!(
            v["tree"]["files_checked"], 2,
            "SKILL.md and the script: {v}"
        );
        check_server_info(v);
    };
    let check_node = |v: &serde_json::Value| {
        assert_eq!(v["accepted"]["verdict"], "VERDICT_ACCEPTED", "{v}");
        assert_eq!(v["accepted"]["digest"], digest.as_str(), "{v}");
        assert_eq!(v["hostile"]["reason"], "REASON_CODE_PATH_TRAVERSAL", "{v}");
        assert_eq!(
            v["tree"]["files_checked"], 2,
            "SKILL.md and the script: {v}"
        );
        check_server_info(v);
    };

    // Started with none of the defaults, so that ServerInfo shows each setting's own value.
    let server = Server::start(&server_info_flags());
    let socket = server.socket().to_str().unwrap_or("");
    check_python(&python(&["--socket", socket, "--artifact", art, "--tree"]));
    let unix = format!("unix://{socket}");
    check_node(&node(&[
        "--target",
        &unix,
        "--artifact",
        art,
        "--hostile",
        evil,
        "--tree",
    ]));
    server.assert_clean();
    drop(server);

    let pki = harness::Pki::new();
    let (cert, key) = (pki.path("server.pem"), pki.path("server.key"));
    let mut args = vec!["--tls-cert", &cert, "--tls-key", &key];
    args.extend(server_info_flags());
    let server = Server::start_tcp(&args);
    let port = server.tcp_port();
    let target = format!("127.0.0.1:{port}");
    let ca = pki.path("ca.pem");
    check_python(&python(&[
        "--target",
        &target,
        "--ca",
        &ca,
        "--artifact",
        art,
        "--tree",
    ]));
    check_node(&node(&[
        "--target",
        &target,
        "--ca",
        &ca,
        "--artifact",
        art,
        "--hostile",
        evil,
        "--tree",
    ]));
    server.assert_clean();
}

/// A gzip-compressed request (stock grpcio, `compression=grpc.Compression.Gzip`, per call or
/// per channel) ends `UNIMPLEMENTED` saying gzip is not supported, for a unary call and an
/// upload alike, as docs/broker.md says; the same package sent uncompressed on the same
/// channel is served, and the refused calls leave no staging directory and no child.
#[test]
fn gzip_compressed_requests_are_unimplemented_and_uncompressed_ones_served() {
    let server = Server::start(&[]);
    let v = python_on_a_skill(&server, "--gzip");
    for how in ["per_call", "per_channel"] {
        for call in ["server_info", "extract"] {
            let got = &v[how][call];
            assert_eq!(got["code"], "UNIMPLEMENTED", "{how} {call}: {v}");
            assert!(
                got["details"].as_str().is_some_and(|d| d.contains("gzip")),
                "{how} {call}: {v}"
            );
        }
    }
    assert_eq!(v["uncompressed"]["verdict"], "VERDICT_ACCEPTED", "{v}");
    server.assert_clean();
}

/// A message in the Extract stream that is no ExtractRequest (bytes that do not decode, framed
/// by stock grpcio's generic `stream_unary` with identity serializers, as a user can send them)
/// is the client's malformed request: INVALID_ARGUMENT saying the request could not be decoded,
/// with a BadRequest naming the header when it is the first message and the chunk after it, not
/// CANCELLED "by the client" (what tonic's INTERNAL decode error became). The one sent after a
/// header and a chunk, when a child and a staging directory exist, leaves neither.
#[test]
fn a_message_that_does_not_decode_is_an_invalid_argument_and_keeps_nothing() {
    let server = Server::start(&[]);
    let v = python_on_a_skill(&server, "--bad-frame");
    for (case, field) in [("first", "header"), ("after_a_chunk", "chunk")] {
        let got = &v[case];
        assert_eq!(got["code"], "INVALID_ARGUMENT", "{case}: {v}");
        let message = got["details"].as_str().unwrap_or("");
        assert!(message.contains("could not be decoded"), "{case}: {v}");
        let details = ok(
            hex::decode(got["status_details_hex"].as_str().unwrap_or("")),
            "hex",
        );
        let s = tonic::Status::with_details(Code::InvalidArgument, message, details.into());
        assert_eq!(bad_field(&s), field, "{case}: {v}");
    }
    // The second case was refused in the upload, after its child started and its staging
    // directory was made (the BadRequest names the chunk): both are gone.
    server.assert_clean();
}

/// Bytes that are no request message sent to a unary call (Release, GetTree, ServerInfo), by
/// stock grpcio's generic calls with identity serializers, are the client's malformed request
/// as they are in an upload: INVALID_ARGUMENT saying the request could not be decoded, with a
/// BadRequest naming the request message, not tonic's INTERNAL (which the client cannot tell
/// from a fault of the server). The same generic call with bytes that decode is served. Each
/// refusal is counted as one the call's handler makes is (a Release of a staging id that is
/// none): in skillbox_unary_request_errors_total by method and code, scraped before and after.
#[test]
fn a_unary_request_that_does_not_decode_is_an_invalid_argument() {
    let server = Server::start(&["--metrics", harness::ANY_PORT]);
    let addr = server.metrics_addr();
    let series = "skillbox_unary_request_errors_total{";
    let before = harness::http_get(&addr, "/metrics");
    assert!(
        before.contains("# TYPE skillbox_unary_request_errors_total counter"),
        "{before}"
    );
    assert!(!before.contains(series), "{before}");
    let v = python_on_a_skill(&server, "--bad-unary");
    for (call, message) in [
        ("Release", "ReleaseRequest"),
        ("GetTree", "GetTreeRequest"),
        ("ServerInfo", "ServerInfoRequest"),
    ] {
        let got = &v[call];
        assert_eq!(got["code"], "INVALID_ARGUMENT", "{call}: {v}");
        let details = got["details"].as_str().unwrap_or("");
        assert!(details.contains("could not be decoded"), "{call}: {v}");
        assert!(details.contains(message), "{call}: {v}");
        let bytes = ok(
            hex::decode(got["status_details_hex"].as_str().unwrap_or("")),
            "hex",
        );
        let s = tonic::Status::with_details(Code::InvalidArgument, details, bytes.into());
        assert_eq!(bad_field(&s), message, "{call}: {v}");
    }
    assert!(
        v["ServerInfo_empty"]["answer_bytes"].as_u64().unwrap_or(0) > 0,
        "{v}"
    );
    assert_eq!(v["Release_bad_id"]["code"], "INVALID_ARGUMENT", "{v}");
    let after = harness::http_get(&addr, "/metrics");
    let mut counted: Vec<_> = after.lines().filter(|l| l.starts_with(series)).collect();
    counted.sort_unstable();
    assert_eq!(
        counted,
        [
            "skillbox_unary_request_errors_total{method=\"GetTree\",code=\"InvalidArgument\"} 1",
            "skillbox_unary_request_errors_total{method=\"Release\",code=\"InvalidArgument\"} 2",
            "skillbox_unary_request_errors_total{method=\"ServerInfo\",code=\"InvalidArgument\"} 1",
        ],
        "the undecodable three, and the staging id that is none; not the ServerInfo served:\n{after}"
    );
    // Not an Extract's error.
    assert!(!after.contains("skillbox_request_errors_total{"), "{after}");
    server.assert_clean();
}

/// Files of `harness::long_paths_tar` whose answer passes 4 MiB (about 4.7 MB).
const PAST_4_MIB: usize = 4400;

/// The size the refusal's message gives ("the answer is N bytes encoded, ...").
fn refused_size(message: &str) -> u64 {
    message
        .strip_prefix("the answer is ")
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no answer size in {message:?}"))
}

/// An answer larger than the 4 MiB a stock gRPC client receives by default (an inventory of
/// long paths) is not sent to a client that did not raise `max_answer_bytes`: stock grpcio and
/// grpc-js with no options get the broker's FAILED_PRECONDITION, naming the answer's size, the
/// bound and the field, not their own RESOURCE_EXHAUSTED about an answer dropped while the
/// broker kept the tree under an id the client never learnt. Nothing stays staged or kept, so
/// the one place `--max-kept-trees 1` allows is free for the same archive from skillbox's own
/// client (`extract --server`), which sets the field to its receive limit and is answered.
#[test]
fn an_answer_past_a_stock_clients_limit_is_refused_and_keeps_nothing() {
    let dir = harness::world_readable_dir();
    let art = dir.path().join("long-paths.tar");
    ok(
        std::fs::write(&art, harness::long_paths_tar(PAST_4_MIB)),
        "write",
    );
    let art = art.to_str().unwrap_or("");
    let server = Server::start(&["--metrics", harness::ANY_PORT, "--max-kept-trees", "1"]);
    let addr = server.metrics_addr();
    let socket = server.socket().to_str().unwrap_or("");

    let py = python(&["--socket", socket, "--artifact", art, "--expect-refusal"]);
    let unix = format!("unix://{socket}");
    let js = node(&[
        "--target",
        &unix,
        "--artifact",
        art,
        "--hostile",
        art,
        "--expect-refusal",
    ]);
    for v in [&py, &js] {
        assert_eq!(v["refused"]["code"], "FAILED_PRECONDITION", "{v}");
        let message = v["refused"]["details"].as_str().unwrap_or("");
        assert!(refused_size(message) > 4_194_304, "{message}");
        assert!(
            message.contains("more than the 4194304")
                && message.contains("header.max_answer_bytes"),
            "{message}"
        );
    }
    server.assert_clean();
    assert_eq!(counter(&addr, "skillbox_staging_kept"), 0);
    let text = harness::http_get(&addr, "/metrics");
    assert!(
        text.contains("skillbox_request_errors_total{code=\"FailedPrecondition\"} 2"),
        "{text}"
    );
    assert!(
        server.log().contains("header.max_answer_bytes"),
        "the refusal is logged: {}",
        server.log()
    );

    let v = extracted_over(&server, art);
    assert_eq!(v["verdict"], "accepted", "{}", v["reason"]);
    let entries = v["entries"].as_array().map_or(0, Vec::len);
    assert_eq!(
        entries,
        PAST_4_MIB + 4,
        "SKILL.md, three directories, the files"
    );
    server.assert_clean();
}

/// `header.max_answer_bytes` out of range is INVALID_ARGUMENT naming it; in range it bounds
/// `Extract`'s answer and the `TreePart` that carries `ExtractWithTree`'s (the refusal has the
/// ErrorInfo and PreconditionFailure details, and no RetryInfo), and nothing is left staged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_answer_bytes_is_checked_and_bounds_every_answer_with_an_inventory() {
    let server = Server::start(&[]);
    let mut c = server.client().await;
    let info = ok(c.server_info().await, "server_info");
    assert_eq!(info.max_answer_bytes, 64 << 20);
    for bad in [1, 65_535, (64 << 20) + 1] {
        let mut h = archive_header();
        h.max_answer_bytes = bad;
        let refused = status_of(
            c.extract(h, std::io::Cursor::new(skill_tar(&[])), None)
                .await
                .err()
                .unwrap_or_else(|| panic!("max_answer_bytes {bad} was accepted")),
        );
        assert_eq!(refused.code(), Code::InvalidArgument, "{bad}: {refused:?}");
        assert_eq!(bad_field(&refused), "header.max_answer_bytes");
    }
    server.assert_clean();
    // The smallest bound takes a typical answer.
    let mut h = archive_header();
    h.max_answer_bytes = 65_536;
    let small = ok(
        c.extract(h, std::io::Cursor::new(skill_tar(&[])), None)
            .await,
        "extract within 64 KiB",
    );
    let staged = small
        .staged
        .unwrap_or_else(|| panic!("a typical package is accepted"));
    ok(c.release(&staged.id).await, "release");

    let tar = harness::long_paths_tar(PAST_4_MIB);
    let details_of = |s: &tonic::Status| {
        assert_eq!(s.code(), Code::FailedPrecondition, "{s:?}");
        let d = s.get_error_details();
        let info = d
            .error_info()
            .unwrap_or_else(|| panic!("no ErrorInfo in {s:?}"));
        assert_eq!(info.reason, "ANSWER_TOO_LARGE");
        assert_eq!(info.metadata["max_answer_bytes"], "4194304");
        let pre = d
            .precondition_failure()
            .unwrap_or_else(|| panic!("no PreconditionFailure in {s:?}"));
        assert_eq!(pre.violations[0].subject, "header.max_answer_bytes");
        assert!(d.retry_info().is_none(), "no retry can help: {s:?}");
        let bytes: u64 = ok(info.metadata["answer_bytes"].parse(), "answer_bytes");
        assert_eq!(bytes, refused_size(s.message()));
        bytes
    };

    // The crate's client sends its own 64 MiB unless told otherwise; told the stock 4 MiB.
    let mut h = archive_header();
    h.max_answer_bytes = 4 << 20;
    let unary = status_of(
        c.extract(h, std::io::Cursor::new(tar.clone()), None)
            .await
            .err()
            .unwrap_or_else(|| panic!("an answer past its bound was sent")),
    );
    let unary = details_of(&unary);
    server.assert_clean();

    // ExtractWithTree with the header a stock client sends (no bound: 4 MiB).
    let mut raw = server.raw_client().await;
    let mut upload = vec![pb::ExtractRequest {
        msg: Some(pb::extract_request::Msg::Header(archive_header())),
    }];
    for chunk in tar.chunks(256 * 1024) {
        upload.push(pb::ExtractRequest {
            msg: Some(pb::extract_request::Msg::Chunk(chunk.to_vec().into())),
        });
    }
    let with_tree = raw
        .extract_with_tree(tokio_stream::iter(upload))
        .await
        .err()
        .unwrap_or_else(|| panic!("ExtractWithTree sent an answer past its bound"));
    // The same answer in a TreePart: its tag and a 4-byte length more.
    assert_eq!(details_of(&with_tree), unary + 5);
    server.assert_clean();
}

/// `extract --server https://...` and `health` against a broker whose CA the client was not
/// given say the TLS handshake failed and which variable names the CA (they said nobody
/// answered there and asked whether `skillbox serve --tcp` was running); given it, served.
#[test]
fn a_tls_broker_without_its_ca_is_said_so() {
    let pki = harness::Pki::new();
    let server = Server::start_tcp(&[
        "--tls-cert",
        &pki.path("server.pem"),
        "--tls-key",
        &pki.path("server.key"),
    ]);
    let uri = format!("https://127.0.0.1:{}", server.tcp_port());
    let dir = ok(tempfile::tempdir(), "tempdir");
    let art = dir.path().join("ok.tar");
    ok(std::fs::write(&art, skill_tar(&[])), "write");
    let art = art.to_str().unwrap_or_else(|| panic!("utf-8"));
    let run = |args: &[&str], ca: Option<&str>| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_skillbox"));
        cmd.args(args)
            .env_remove("SKILLBOX_TLS_CA")
            .env_remove("SKILLBOX_TLS_CERT")
            .env_remove("SKILLBOX_TLS_KEY");
        if let Some(ca) = ca {
            cmd.env("SKILLBOX_TLS_CA", ca);
        }
        ok(cmd.output(), "run skillbox")
    };
    for args in [
        &["extract", "--server", &uri, art][..],
        &["health", "--server", &uri][..],
    ] {
        let o = run(args, None);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains("TLS handshake"), "{args:?}: {err}");
        assert!(err.contains("SKILLBOX_TLS_CA"), "{args:?}: {err}");
        assert!(!err.contains("no broker answers"), "{args:?}: {err}");
        let o = run(args, Some(&pki.path("ca.pem")));
        assert_eq!(
            o.status.code(),
            Some(0),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    server.assert_clean();
}

/// GetTree over TCP+TLS: the accepted tree comes back byte for byte (the Rust client writes it
/// with the engine's writer and checks every hash; the CLI's `--out` over `--server`), and a
/// staged file changed after acceptance ends the stream with DATA_LOSS and leaves nothing at
/// the destination.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accepted_trees_are_read_back_remotely_and_checked() {
    let pki = harness::Pki::new();
    let server = Server::start_tcp(&[
        "--tls-cert",
        &pki.path("server.pem"),
        "--tls-key",
        &pki.path("server.key"),
    ]);
    let uri = format!("https://127.0.0.1:{}", server.tcp_port());
    let tls = skillbox::client::TlsMaterial {
        ca: Some(pki.read("ca.pem")),
        identity: None,
    };
    let mut c = ok(
        Client::connect_to(
            &uri,
            ok(skillbox::client::endpoint_with(&uri, &tls), "endpoint"),
        )
        .await,
        "connect",
    );
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let tar = skill_tar(&[
        ("scripts/run.sh", b"#!/bin/sh\necho hi\n", 0o755),
        ("data/big.bin", &big, 0o644),
        ("data/empty", b"", 0o644),
    ]);
    let done = ok(
        c.extract(archive_header(), std::io::Cursor::new(tar.clone()), None)
            .await,
        "extract",
    );
    let staged = done.staged.clone().unwrap_or_else(|| panic!("accepted"));
    let out = ok(tempfile::tempdir(), "tempdir");
    let dest = out.path().join("tree");
    let wrote = ok(
        c.get_tree(&staged.id, &done.outcome.entries, &dest).await,
        "get_tree",
    );
    assert_eq!(wrote.files, 4, "{wrote:?}");
    assert_eq!(ok(std::fs::read(dest.join("data/big.bin")), "read"), big);
    use std::os::unix::fs::PermissionsExt as _;
    let mode = ok(std::fs::metadata(dest.join("scripts/run.sh")), "stat")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o755);

    // Changed after acceptance (same size, other bytes): the server refuses to pass it on,
    // and the client leaves nothing.
    let staged_big = staged.path.join("data/big.bin");
    let mut changed = big.clone();
    changed[1_000_000] ^= 1;
    ok(std::fs::write(&staged_big, &changed), "tamper");
    let again = out.path().join("again");
    let e = c
        .get_tree(&staged.id, &done.outcome.entries, &again)
        .await
        .err()
        .unwrap_or_else(|| panic!("a changed tree was passed on"));
    assert_eq!(e.code(), Some(Code::DataLoss), "{e}");
    assert!(e.to_string().contains("data/big.bin"), "{e}");
    assert!(!again.exists(), "a failed tree left {again:?}");
    // A planted symlink in a directory's place is never followed.
    ok(std::fs::remove_dir_all(staged.path.join("scripts")), "rm");
    ok(
        std::os::unix::fs::symlink("/etc", staged.path.join("scripts")),
        "plant",
    );
    let e = c
        .get_tree(&staged.id, &done.outcome.entries, &again)
        .await
        .err()
        .unwrap_or_else(|| panic!("a planted link was followed"));
    assert_eq!(e.code(), Some(Code::DataLoss), "{e}");
    assert!(!again.exists());
    ok(c.release(&staged.id).await, "release");
    let e = c
        .get_tree(&staged.id, &done.outcome.entries, &again)
        .await
        .err()
        .unwrap_or_else(|| panic!("a released tree was sent"));
    assert_eq!(e.code(), Some(Code::NotFound), "{e}");

    // The CLI: `extract --server https://... --out DIR` writes the tree locally.
    let dir = harness::world_readable_dir();
    let art = dir.path().join("skill.tar");
    ok(std::fs::write(&art, &tar), "write");
    let cli_out = out.path().join("cli");
    let run = ok(
        std::process::Command::new(harness::bin())
            .args(["extract", "--json", "--server", &uri, "--out"])
            .arg(&cli_out)
            .arg(&art)
            .env("SKILLBOX_TLS_CA", pki.path("ca.pem"))
            .output(),
        "cli",
    );
    assert_eq!(
        run.status.code(),
        Some(0),
        "stderr: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert_eq!(ok(std::fs::read(cli_out.join("data/big.bin")), "read"), big);
    assert!(cli_out.join("SKILL.md").is_file());
    let exists = std::process::Command::new(harness::bin())
        .args(["extract", "--server", &uri, "--out"])
        .arg(&cli_out)
        .arg(&art)
        .env("SKILLBOX_TLS_CA", pki.path("ca.pem"))
        .output();
    assert_eq!(
        ok(exists, "cli").status.code(),
        Some(2),
        "an existing --out is a usage error"
    );
    server.wait_clean(Duration::from_secs(5));
}

/// A tree released while a client reads it (its own `Release`, or the TTL) ends the stream
/// with NOT_FOUND, in the words of a `GetTree` after the release: the same message, naming the
/// staging id, and the same details. Its nodes went because it was released, not because the
/// staged tree was changed, which DATA_LOSS would say (it did); and the error names the id as
/// every other `GetTree` and `Release` error does (it said only "the staging directory was
/// released or expired while its tree was read").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tree_released_while_it_is_read_ends_not_found() {
    // Its client's own Release.
    let server = Server::start(&[]);
    let mut c = server.client().await;
    cut_while_read(&server, |id| async move {
        ok(c.release(&id).await, "release");
    })
    .await;
    // The TTL: the reaper runs every second, and removes it between 3 and 4 s after it was kept.
    let server = Server::start(&["--staging-ttl", "3"]);
    cut_while_read(&server, |_| async {
        let until = Instant::now() + Duration::from_secs(30);
        while !server.staging_dirs().is_empty() {
            assert!(Instant::now() < until, "not expired: {}", server.log());
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    })
    .await;
}

/// Extract a tree far larger than a tree stream queues, read the first parts of its `GetTree`,
/// let `cut` make it go, and check how the stream ends.
async fn cut_while_read<F: std::future::Future<Output = ()>>(
    server: &Server,
    cut: impl FnOnce(String) -> F,
) {
    let staged = staged_blobs(server).await;
    let mut parts = tree_begun(server, &staged.id).await;
    cut(staged.id.clone()).await;
    let end = tree_end(&mut parts).await;
    let (after, _) = tree_and_release_refuse(server, &staged.id).await;
    assert_eq!(end.code(), Code::NotFound, "{end:?}");
    assert!(end.message().contains(&staged.id), "names the id: {end:?}");
    assert_eq!(end.message(), after.message(), "worded as an unknown id");
    assert_eq!(end.details(), after.details(), "{end:?}");
    server.wait_clean(Duration::from_secs(10));
}

/// Files of [`staged_blobs`]: sixteen of 2 MiB, `assets/blob00.bin` to `assets/blob15.bin`.
const BLOBS: u8 = 16;

/// An accepted tree staged on `server`, far larger than a tree stream queues ahead of its
/// reader (eight 256 KiB chunks and the HTTP/2 windows): [`BLOBS`] files of 2 MiB, file `i`
/// all bytes `i`. A stream begun on it and left unread still has files to open.
async fn staged_blobs(server: &Server) -> skillbox::client::Staged {
    let mut c = server.client().await;
    let blobs: Vec<(String, Vec<u8>)> = (0..BLOBS)
        .map(|i| (format!("assets/blob{i:02}.bin"), vec![i; 2 << 20]))
        .collect();
    let extra: Vec<(&str, &[u8], u32)> = blobs
        .iter()
        .map(|(n, b)| (n.as_str(), b.as_slice(), 0o644))
        .collect();
    let done = ok(
        c.extract(
            archive_header(),
            std::io::Cursor::new(skill_tar(&extra)),
            Some(Duration::from_secs(60)),
        )
        .await,
        "extract",
    );
    done.staged.unwrap_or_else(|| panic!("accepted"))
}

/// A `GetTree` of `id` on a connection of its own, its first three parts read: the stream has
/// begun (its head, with no status, and parts were sent).
async fn tree_begun(server: &Server, id: &str) -> tonic::Streaming<pb::TreePart> {
    let mut raw = server.raw_client().await;
    let mut parts = ok(
        raw.get_tree(pb::GetTreeRequest {
            staging_id: id.to_owned(),
        })
        .await,
        "get_tree",
    )
    .into_inner();
    for _ in 0..3 {
        ok(parts.message().await, "a first part").unwrap_or_else(|| panic!("ended early"));
    }
    parts
}

/// The status a begun tree stream ends with, its remaining parts read; panics if it ends OK.
async fn tree_end(parts: &mut tonic::Streaming<pb::TreePart>) -> tonic::Status {
    loop {
        match parts.message().await {
            Ok(Some(_)) => {}
            Ok(None) => panic!("the tree stream ended OK"),
            Err(s) => break s,
        }
    }
}

/// The `skillbox_unary_request_errors_total` series `server` serves, sorted.
fn unary_errors(addr: &str) -> Vec<String> {
    let text = harness::http_get(addr, "/metrics");
    let mut lines: Vec<_> = text
        .lines()
        .filter(|l| l.starts_with("skillbox_unary_request_errors_total{"))
        .map(str::to_owned)
        .collect();
    lines.sort_unstable();
    lines
}

/// A `GetTree` series line of `skillbox_unary_request_errors_total`.
fn tree_errors(code: &str, n: u64) -> String {
    format!("skillbox_unary_request_errors_total{{method=\"GetTree\",code=\"{code}\"}} {n}")
}

/// Wait until `addr` serves the unary error series `want` (a hang-up is counted when the broker
/// sees the client's reset, after the client went), or panic.
fn wait_unary_errors(addr: &str, want: &[String]) {
    let until = Instant::now() + Duration::from_secs(10);
    let mut got = unary_errors(addr);
    while got != want && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(25));
        got = unary_errors(addr);
    }
    assert_eq!(got, want);
}

/// Every `GetTree` that ends with an error status is counted once, by its code, in
/// skillbox_unary_request_errors_total, whether the status is a trailers-only refusal or comes
/// in the trailers after parts (it counted only refusals): a tree changed under the stream
/// (DATA_LOSS), one released while read (NOT_FOUND, and a GetTree of it afterwards, refused:
/// two), a client that read nothing for --tree-idle-timeout-ms and then read the end
/// (DEADLINE_EXCEEDED). A client that goes away mid-stream is counted CANCELLED, as an
/// Extract's hang-up mid-upload is, and so is one that stopped reading and went away without
/// reading the status the idle timeout left it. A stream read to its end counts nothing, nor
/// does a Release served. Scraped after each call: the broker counts a status when it hands it
/// to the connection, before the client can read it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_tree_stream_that_fails_is_counted_once_by_code() {
    let server = Server::start(&["--metrics", harness::ANY_PORT]);
    let addr = server.metrics_addr();
    let staged = staged_blobs(&server).await;

    // Read to its end: nothing counted.
    let mut whole = tree_begun(&server, &staged.id).await;
    while ok(whole.message().await, "a part").is_some() {}
    drop(whole);
    assert_eq!(unary_errors(&addr), Vec::<String>::new());

    // The client goes away mid-stream (tonic resets the stream when it is dropped).
    drop(tree_begun(&server, &staged.id).await);
    let mut counted = vec![tree_errors("Cancelled", 1)];
    wait_unary_errors(&addr, &counted);

    // The last file changed after acceptance (same size, other bytes): parts were sent, then
    // DATA_LOSS naming it.
    let last = format!("assets/blob{:02}.bin", BLOBS - 1);
    ok(
        std::fs::write(staged.path.join(&last), vec![0xa5; 2 << 20]),
        "tamper",
    );
    let mut parts = tree_begun(&server, &staged.id).await;
    let end = tree_end(&mut parts).await;
    assert_eq!(end.code(), Code::DataLoss, "{end:?}");
    assert!(end.message().contains(&last), "{end:?}");
    drop(parts);
    counted.push(tree_errors("DataLoss", 1));
    counted.sort_unstable();
    assert_eq!(unary_errors(&addr), counted);

    // Released while read: NOT_FOUND at the end of the stream, then a GetTree of it is refused
    // NOT_FOUND at once (a trailers-only answer): each counted once.
    let mut parts = tree_begun(&server, &staged.id).await;
    let mut c = server.client().await;
    ok(c.release(&staged.id).await, "release");
    let end = tree_end(&mut parts).await;
    assert_eq!(end.code(), Code::NotFound, "{end:?}");
    drop(parts);
    let (refused, _) = tree_and_release_refuse(&server, &staged.id).await;
    assert_eq!(refused.code(), Code::NotFound, "{refused:?}");
    counted.push(tree_errors("NotFound", 2));
    counted.push(
        "skillbox_unary_request_errors_total{method=\"Release\",code=\"NotFound\"} 1".to_owned(),
    );
    counted.sort_unstable();
    assert_eq!(unary_errors(&addr), counted);
    server.wait_clean(Duration::from_secs(10));

    // A client that reads nothing for the idle timeout: DEADLINE_EXCEEDED when it reads on.
    let server = Server::start(&[
        "--metrics",
        harness::ANY_PORT,
        "--tree-idle-timeout-ms",
        "500",
    ]);
    let addr = server.metrics_addr();
    let staged = staged_blobs(&server).await;
    const IDLE: &str = "its client stopped reading";
    let mut parts = tree_begun(&server, &staged.id).await;
    bounds::wait_log(&server, IDLE, 1, Duration::from_secs(10));
    let end = tree_end(&mut parts).await;
    assert_eq!(end.code(), Code::DeadlineExceeded, "{end:?}");
    drop(parts);
    let mut counted = vec![tree_errors("DeadlineExceeded", 1)];
    assert_eq!(unary_errors(&addr), counted);
    // One that goes away instead never got that status: it hung up.
    let parts = tree_begun(&server, &staged.id).await;
    bounds::wait_log(&server, IDLE, 2, Duration::from_secs(10));
    drop(parts);
    counted.insert(0, tree_errors("Cancelled", 1));
    wait_unary_errors(&addr, &counted);
    let mut c = server.client().await;
    ok(c.release(&staged.id).await, "release");
    server.wait_clean(Duration::from_secs(10));
}

/// A burst of 64 slow uploads with `--max-children 2`: every request is answered, and at no
/// moment do more than two request children (plus the one spare) exist; the queued requests
/// hold no process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn children_follow_the_admission_bound_under_a_burst() {
    let server = Server::start(&["--max-children", "2", "--max-queued", "64"]);
    let c = server.client().await;
    let calls: Vec<_> = (0..64)
        .map(|_| {
            let mut c = c.clone();
            tokio::spawn(async move {
                let body = slow_stream(skill_tar(&[]), 1024, Duration::from_millis(20));
                c.extract(archive_header(), body, Some(Duration::from_secs(120)))
                    .await
            })
        })
        .collect();
    let (mut most, mut samples) = (0, 0u64);
    let count = || server.children().len() + server.spares().len();
    while calls.iter().any(|h| !h.is_finished()) {
        let mut n = count();
        // Names trail what a process is by a moment: a spare renames itself `skillbox-child`
        // only once it has its order, and the next spare may be forked by then. So a count
        // over the bound is looked at again: a queued request holding a process would hold it
        // while its slow upload lasts (20 ms per KiB), not for a few milliseconds.
        for _ in 0..5 {
            if n <= 3 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
            n = count();
        }
        most = most.max(n);
        samples += 1;
        assert!(
            n <= 3,
            "{n} processes for 10 ms: children {:?}, spares {:?}",
            server.children(),
            server.spares()
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    for call in calls {
        let done = ok(ok(call.await, "task"), "a request of the burst");
        assert_eq!(done.outcome.verdict, skillbox::reason::Verdict::Accepted);
        if let Some(s) = done.staged {
            ok(c.clone().release(&s.id).await, "release");
        }
    }
    assert!(
        most >= 1 && samples > 10,
        "the burst was never observed ({most}, {samples})"
    );
    server.assert_clean();
}

/// 64 uploads of a package larger than a quarter of hyper's default connection window, at once
/// on one channel (as stock clients multiplex), with two children: the queued streams must not
/// take the flow-control credit the admitted ones need. With the default windows every request
/// stalled until its deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_uploads_on_one_channel_do_not_stall_the_admitted_ones() {
    let server = Server::start(&["--max-children", "2", "--max-queued", "64"]);
    let c = server.client().await;
    // 300 KB that gzip cannot shrink much in a tar: the upload is what fills the windows.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let noise: Vec<u8> = (0..300_000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let package = skill_tar(&[("noise.bin", &noise, 0o644)]);
    let calls: Vec<_> = (0..64)
        .map(|_| {
            let mut c = c.clone();
            let package = package.clone();
            tokio::spawn(async move {
                c.extract(
                    archive_header(),
                    std::io::Cursor::new(package),
                    Some(Duration::from_secs(60)),
                )
                .await
            })
        })
        .collect();
    for call in calls {
        let done = ok(ok(call.await, "task"), "a request of the burst");
        assert_eq!(done.outcome.verdict, skillbox::reason::Verdict::Accepted);
        if let Some(s) = done.staged {
            ok(c.clone().release(&s.id).await, "release");
        }
    }
    server.assert_clean();
}

/// `skillbox health --socket PATH`: the probe a container runtime can exec.
#[test]
fn health_probe_exits_zero_only_when_serving() {
    let mut server = Server::start(&["--grace", "5"]);
    let socket = server.socket().to_str().unwrap_or("").to_owned();
    let up = harness::cli(&["health", "--socket", &socket], None);
    assert_eq!(
        up.status.code(),
        Some(0),
        "stderr: {}",
        String::from_utf8_lossy(&up.stderr)
    );
    assert!(String::from_utf8_lossy(&up.stdout).contains("SERVING"));
    server.sigterm();
    let _ = server.wait_exit(Duration::from_secs(15));
    let down = harness::cli(&["health", "--socket", &socket], None);
    assert_eq!(down.status.code(), Some(1));
    assert!(
        !String::from_utf8_lossy(&down.stderr).is_empty(),
        "a failed probe says why"
    );
}

/// What `GetTree` and `Release` answer for `id`: each call's error status (the test fails if
/// either succeeds).
async fn tree_and_release_refuse(server: &Server, id: &str) -> (tonic::Status, tonic::Status) {
    let mut raw = server.raw_client().await;
    let tree = raw
        .get_tree(pb::GetTreeRequest {
            staging_id: id.to_owned(),
        })
        .await
        .err()
        .unwrap_or_else(|| panic!("GetTree of {id:?} was served"));
    let release = raw
        .release(pb::ReleaseRequest {
            staging_id: id.to_owned(),
        })
        .await
        .err()
        .unwrap_or_else(|| panic!("Release of {id:?} succeeded"));
    (tree, release)
}

/// `GetTree` and `Release` refuse the same ids in the same words: a malformed id is
/// INVALID_ARGUMENT with a BadRequest naming `staging_id`, and the message names the id,
/// control characters escaped and its length bounded; an id the server does not hold (never
/// given, released, expired) is NOT_FOUND naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_tree_and_release_refuse_a_bad_or_unknown_id_alike() {
    let same = |(tree, release): &(tonic::Status, tonic::Status), code: Code, id: &str| {
        assert_eq!(tree.code(), code, "GetTree of {id:?}: {tree:?}");
        assert_eq!(release.code(), code, "Release of {id:?}: {release:?}");
        assert_eq!(
            tree.message(),
            release.message(),
            "GetTree and Release word {id:?} alike"
        );
    };
    let server = Server::start(&[]);

    // Malformed: a path, and a hostile one (a terminal escape, far past any id's length).
    let hostile = format!("../\u{1b}[2J{}", "z".repeat(100_000));
    for id in ["../../etc", hostile.as_str()] {
        let answers = tree_and_release_refuse(&server, id).await;
        same(&answers, Code::InvalidArgument, id);
        for s in [&answers.0, &answers.1] {
            assert_eq!(bad_field(s), "staging_id", "{s:?}");
            assert!(
                s.message().len() < 1000,
                "bounded: {} bytes",
                s.message().len()
            );
            assert!(!s.message().contains('\u{1b}'), "escaped: {s:?}");
        }
        let shown: String = id.replace('\u{1b}', "\\u{1b}").chars().take(20).collect();
        assert!(
            answers.0.message().contains(&shown),
            "names the id: {:?}",
            answers.0
        );
    }

    // Never given.
    let unknown = "0123456789abcdef0123456789abcdef";
    let answers = tree_and_release_refuse(&server, unknown).await;
    same(&answers, Code::NotFound, unknown);
    assert!(answers.0.message().contains(unknown), "{:?}", answers.0);

    // Released.
    let mut c = server.client().await;
    let staged = extract_plain(&mut c, None, "extract")
        .await
        .staged
        .unwrap_or_else(|| panic!("accepted"));
    ok(c.release(&staged.id).await, "release");
    let answers = tree_and_release_refuse(&server, &staged.id).await;
    same(&answers, Code::NotFound, &staged.id);
    assert!(answers.0.message().contains(&staged.id), "{:?}", answers.0);
    server.assert_clean();

    // Expired (the reaper runs every second; the TTL is one second).
    let server = Server::start(&["--staging-ttl", "1"]);
    let mut c = server.client().await;
    let staged = extract_plain(&mut c, None, "extract")
        .await
        .staged
        .unwrap_or_else(|| panic!("accepted"));
    server.wait_clean(Duration::from_secs(5));
    let answers = tree_and_release_refuse(&server, &staged.id).await;
    same(&answers, Code::NotFound, &staged.id);
    assert!(answers.0.message().contains(&staged.id), "{:?}", answers.0);
    server.assert_clean();
}
