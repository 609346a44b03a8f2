//! What a peer can make the broker hold: memory for its header blocks, admission slots and
//! children for a stalled upload, threads for unread tree streams, kept trees nobody releases.
//! Each test misbehaves as a client would, over the real socket, and checks both the bound and
//! that the broker serves a well-behaved request afterwards.

use std::io::{Read as _, Write as _};
use std::time::Duration;

use super::harness::{self, Server, ok, skill_tar};

/// One HTTP/2 frame (RFC 9113 §4.1).
/// Assert that the broker's peak RSS grew by less than `room` since `at_start`.
fn peak_within(peak: u64, at_start: u64, room: u64, what: &str) {
    assert!(
        peak < at_start + room,
        "{what}: the broker's peak RSS went from {} MB to {} MB",
        at_start >> 20,
        peak >> 20
    );
}

pub(super) fn frame(out: &mut Vec<u8>, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
    let len = payload.len();
    out.extend_from_slice(&[(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags]);
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
}

/// A client connection that puts a 4000-byte value in its HPACK table (index 62), then sends
/// a header block of `refs` one-byte references to it: each byte decodes to 4 KB.
fn amplifying_connection(refs: usize) -> Vec<u8> {
    const HEADERS: u8 = 0x1;
    const CONTINUATION: u8 = 0x9;
    const END_HEADERS: u8 = 0x4;
    let mut wire = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    frame(&mut wire, 0x4, 0, 0, &[]); // SETTINGS, all defaults
    // Literal with incremental indexing, new name "x", value of 4000 bytes (RFC 7541 §6.2.1;
    // 4000 = 127 + 3873, an integer of a full 7-bit prefix and two continuation bytes).
    let mut entry = vec![0x40, 1, b'x', 127, 0xa1, 0x1e];
    entry.extend(std::iter::repeat_n(b'v', 4000));
    frame(&mut wire, HEADERS, END_HEADERS, 1, &entry);
    let refs = vec![0xbe; refs];
    let parts: Vec<&[u8]> = refs.chunks(16_384).collect();
    for (i, part) in parts.iter().enumerate() {
        let kind = if i == 0 { HEADERS } else { CONTINUATION };
        let flags = if i + 1 == parts.len() { END_HEADERS } else { 0 };
        frame(&mut wire, kind, flags, 3, part);
    }
    wire
}

/// A 40 KB header block that decodes to 160 MB closes its connection, and the broker's memory
/// stays where it was; sent by a peer the uid rule refuses, since the header layer runs before
/// that rule.
#[test]
fn a_header_block_that_decodes_to_megabytes_closes_its_connection() {
    let dir = harness::world_readable_dir();
    // Only nobody is allowed: this test's own uid is a refused peer.
    assert_ne!(nix::unistd::geteuid().as_raw(), 65534);
    let server = Server::start_in(&dir, &["--socket-mode", "0666", "--allow-uid", "65534"]);
    let at_start = server.peak_rss();

    let mut conn = ok(
        std::os::unix::net::UnixStream::connect(server.socket()),
        "connect",
    );
    ok(
        conn.set_read_timeout(Some(Duration::from_secs(10))),
        "timeout",
    );
    ok(conn.write_all(&amplifying_connection(40_000)), "send");
    // The server's SETTINGS and perhaps a GOAWAY, then the end of the connection.
    let mut sink = Vec::new();
    let closed = conn.read_to_end(&mut sink);

    let peak = server.peak_rss();
    assert!(
        peak < 100 << 20,
        "the broker's peak RSS went from {} MB to {} MB",
        at_start >> 20,
        peak >> 20
    );
    match closed {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        Err(e) => panic!("the connection was not closed: {e}"),
    }

    // Still serving: a refused peer is told so, and an allowed one gets its verdict.
    let rt = ok(tokio::runtime::Runtime::new(), "runtime");
    let denied = rt.block_on(async {
        let mut c = server.raw_client().await;
        c.server_info(skillbox::proto::ServerInfoRequest {}).await
    });
    assert_eq!(
        denied.err().map(|s| s.code()),
        Some(tonic::Code::PermissionDenied)
    );
    if nix::unistd::geteuid().is_root() {
        let art = dir.path().join("skill.tar");
        ok(std::fs::write(&art, skill_tar(&[])), "write");
        let allowed = harness::cli(
            &[
                "extract",
                "--json",
                "--server",
                &server.uri(),
                art.to_str().unwrap_or(""),
            ],
            Some((65534, 65534)),
        );
        assert_eq!(
            allowed.status.code(),
            Some(0),
            "stderr: {}",
            String::from_utf8_lossy(&allowed.stderr)
        );
    }
}

/// TCP connections do not go through the Unix socket's header layer: there h2's own bound on
/// the header list (16 KiB advertised) is what stands between a peer and the decoder. The same
/// 40 KB block that decodes to 160 MB, sent over plaintext TCP on loopback, closes its
/// connection and leaves the broker's memory under the same bound as on the socket (a TCP path
/// that decoded it whole, as the socket's layer did unbounded, went from 21 MB to 328 MB
/// here), and the broker serves a well-behaved client afterwards (an upload and its tree read
/// back, on plaintext TCP too).
#[test]
fn a_header_block_that_decodes_to_megabytes_is_bounded_on_tcp_too() {
    let server = Server::start_tcp(&[]);
    let port = server.tcp_port();
    let at_start = server.peak_rss();

    let mut conn = ok(std::net::TcpStream::connect(("127.0.0.1", port)), "connect");
    ok(
        conn.set_read_timeout(Some(Duration::from_secs(10))),
        "timeout",
    );
    ok(conn.write_all(&amplifying_connection(40_000)), "send");
    // The server's SETTINGS and a GOAWAY (ENHANCE_YOUR_CALM: h2 stops at its header-list
    // bound, 16 KiB advertised, and closes the connection), then the end of the connection.
    // With that bound raised to 1 GiB, h2 kept the connection open and this read timed out.
    let mut sink = Vec::new();
    match conn.read_to_end(&mut sink) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        Err(e) => panic!("the connection was not closed: {e}"),
    }
    drop(conn);

    let peak = server.peak_rss();
    assert!(
        peak < 100 << 20,
        "the broker's peak RSS went from {} MB to {} MB",
        at_start >> 20,
        peak >> 20
    );

    let rt = ok(tokio::runtime::Runtime::new(), "runtime");
    rt.block_on(async {
        let mut c = ok(
            skillbox::client::Client::connect(&format!("http://127.0.0.1:{port}")).await,
            "connect",
        );
        let done =
            super::extract_plain(&mut c, Some(Duration::from_secs(20)), "extract over TCP").await;
        let staged = done.staged.clone().unwrap_or_else(|| panic!("accepted"));
        let out = ok(tempfile::tempdir(), "tempdir");
        let wrote = ok(
            c.get_tree(&staged.id, &done.outcome.entries, &out.path().join("tree"))
                .await,
            "get_tree over TCP",
        );
        assert_eq!(wrote.files, 1, "{wrote:?}");
        ok(c.release(&staged.id).await, "release");
    });
    server.assert_clean();
}

/// An `Extract` whose request stream sends `header` (if any) and then nothing, open until the
/// returned sender is dropped.
async fn stalled_extract(
    raw: &mut skillbox::proto::skillbox_client::SkillboxClient<tonic::transport::Channel>,
    header: Option<skillbox::proto::ExtractHeader>,
) -> (
    tokio::sync::mpsc::Sender<skillbox::proto::ExtractRequest>,
    tokio::task::JoinHandle<Result<(), tonic::Status>>,
) {
    use skillbox::proto::{ExtractRequest, extract_request::Msg};
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    if let Some(h) = header {
        ok(
            tx.send(ExtractRequest {
                msg: Some(Msg::Header(h)),
            })
            .await,
            "queue the header",
        );
    }
    let mut raw = raw.clone();
    let call = tokio::spawn(async move {
        raw.extract(tokio_stream::wrappers::ReceiverStream::new(rx))
            .await
            .map(|_| ())
    });
    (tx, call)
}

/// The end of a stalled call: the server's own deadline, well before the test gives up.
async fn server_deadline(
    call: tokio::task::JoinHandle<Result<(), tonic::Status>>,
) -> tonic::Status {
    let ended = tokio::time::timeout(Duration::from_secs(20), call)
        .await
        .unwrap_or_else(|_| panic!("a stalled request was still held after 20 s"));
    match ok(ended, "task") {
        Ok(()) => panic!("a stalled request was answered"),
        Err(s) => s,
    }
}

/// A client that sends its header and then stalls holds its child only until the server's
/// upload deadline; clients that never send a header hold their slots only until the header
/// deadline. Each fails with DEADLINE_EXCEEDED naming the setting, and leaves nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_uploads_are_ended_by_the_servers_deadlines() {
    let server = Server::start(&[
        "--max-children",
        "1",
        "--max-queued",
        "1",
        "--header-timeout-ms",
        "1000",
        "--upload-timeout-ms",
        "3000",
        "--metrics",
        harness::ANY_PORT,
    ]);
    let addr = server.metrics_addr();
    let mut raw = server.raw_client().await;
    let header = skillbox::proto::ExtractHeader {
        declared_type: skillbox::proto::ArtifactType::Archive as i32,
        ..Default::default()
    };

    // The header, then nothing: the request takes the one child and keeps it until the
    // upload deadline.
    let (_open, call) = stalled_extract(&mut raw, Some(header)).await;
    let until = std::time::Instant::now() + Duration::from_secs(5);
    while server.request_children().is_empty() && std::time::Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        !server.request_children().is_empty(),
        "the stalled request's child was not seen"
    );
    let s = server_deadline(call).await;
    assert_eq!(s.code(), tonic::Code::DeadlineExceeded, "{s:?}");
    assert!(s.message().contains("--upload-timeout-ms"), "{s:?}");
    super::wait_counter(&addr, "skillbox_children_killed_total", 1);
    server.wait_clean(Duration::from_secs(5));

    // Two streams that never send a header hold both places (a third request is refused)
    // until the header deadline.
    let (_a, first) = stalled_extract(&mut raw, None).await;
    let (_b, second) = stalled_extract(&mut raw, None).await;
    super::wait_counter(&addr, "skillbox_requests_in_progress", 2);
    let mut c = server.client().await;
    let refused = c
        .extract(
            super::archive_header(),
            std::io::Cursor::new(skill_tar(&[])),
            None,
        )
        .await;
    assert_eq!(
        refused.err().map(|e| super::status_of(e).code()),
        Some(tonic::Code::ResourceExhausted)
    );
    for call in [first, second] {
        let s = server_deadline(call).await;
        assert_eq!(s.code(), tonic::Code::DeadlineExceeded, "{s:?}");
        assert!(s.message().contains("--header-timeout-ms"), "{s:?}");
    }

    // Everything was given back: a well-behaved request is served.
    let done = super::extract_plain(&mut c, Some(Duration::from_secs(20)), "extract").await;
    assert_eq!(done.outcome.verdict, skillbox::reason::Verdict::Accepted);
    if let Some(s) = done.staged {
        ok(c.release(&s.id).await, "release");
    }
    server.assert_clean();
}

/// `GetTree` into `dest`, retried for up to 5 s while it is refused for want of a tree-stream
/// place (a place goes just after the end of a stalled stream is logged).
async fn tree_once_a_place_frees(
    c: &mut skillbox::client::Client,
    id: &str,
    entries: &[skillbox::extract::inventory::Entry],
    dest: &std::path::Path,
) -> skillbox::client::TreeWritten {
    let until = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        match c.get_tree(id, entries, dest).await {
            Ok(w) => return w,
            Err(e) if e.code() == Some(tonic::Code::ResourceExhausted) => {
                assert!(
                    std::time::Instant::now() < until,
                    "still refused beside ended streams: {e}"
                );
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            Err(e) => panic!("get_tree: {e}"),
        }
    }
}

/// The server's log once it holds `needle` `times` times, or panic after `within`.
pub(super) fn wait_log(server: &Server, needle: &str, times: usize, within: Duration) {
    let until = std::time::Instant::now() + within;
    while server.log().matches(needle).count() < times {
        assert!(
            std::time::Instant::now() < until,
            "{needle:?} was not logged {times} times:\n{}",
            server.log()
        );
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// Tree streams whose clients do not read are counted against --max-tree-streams (the next is
/// refused at once) and ended after --tree-idle-timeout-ms (their reading threads return and
/// their queued chunks go), which frees their places while the stalled clients still hold
/// them open unread; a client that reads such a stream later gets DEADLINE_EXCEEDED.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unread_tree_streams_are_bounded_and_ended_when_idle() {
    use tokio_stream::StreamExt as _;
    // The idle timeout is the window in which the held places must refuse the next stream: 3 s,
    // so a loaded machine's pause between the requests does not end them first.
    let server = Server::start(&["--max-tree-streams", "2", "--tree-idle-timeout-ms", "3000"]);
    let mut c = server.client().await;
    // 16 MiB: far more than a stream queues and HTTP/2 windows hold, so an unread one stalls.
    let big: Vec<u8> = (0..16u32 << 20).map(|i| (i * 7 % 251) as u8).collect();
    let tar = skill_tar(&[("data/big.bin", &big, 0o644)]);
    let done = ok(
        c.extract(super::archive_header(), std::io::Cursor::new(tar), None)
            .await,
        "extract",
    );
    let staged = done.staged.clone().unwrap_or_else(|| panic!("accepted"));
    let mut raw = server.raw_client().await;
    let get = |id: &str| skillbox::proto::GetTreeRequest {
        staging_id: id.to_owned(),
    };
    let mut unread = Vec::new();
    for _ in 0..2 {
        let stream = ok(raw.get_tree(get(&staged.id)).await, "get_tree").into_inner();
        unread.push(stream);
    }
    let refused = raw.get_tree(get(&staged.id)).await;
    assert_eq!(
        refused.err().map(|s| s.code()),
        Some(tonic::Code::ResourceExhausted)
    );
    let with_tree = raw.extract_with_tree(tokio_stream::iter(Vec::new())).await;
    assert_eq!(
        with_tree.err().map(|s| s.code()),
        Some(tonic::Code::ResourceExhausted),
        "ExtractWithTree is refused before it takes an admission slot"
    );
    // A plain Extract is not held up by them.
    let other = super::extract_plain(
        &mut c,
        Some(Duration::from_secs(10)),
        "extract beside the unread trees",
    )
    .await;
    if let Some(s) = other.staged {
        ok(c.release(&s.id).await, "release");
    }

    wait_log(
        &server,
        "its client stopped reading",
        2,
        Duration::from_secs(15),
    );
    // Ended, they hold no place: a tree is served while they are still open and unread
    // (hyper polls them no more, so a place kept until it drops them would be kept for good).
    let out = ok(tempfile::tempdir(), "tempdir");
    let wrote = tree_once_a_place_frees(
        &mut c,
        &staged.id,
        &done.outcome.entries,
        &out.path().join("tree"),
    )
    .await;
    assert_eq!(wrote.files, 2, "{wrote:?}");
    // What was on the way still arrives, then the reason.
    let mut first = unread.remove(0);
    let mut end = None;
    while let Some(part) = first.next().await {
        if let Err(s) = part {
            end = Some(s);
            break;
        }
    }
    let end = end.unwrap_or_else(|| panic!("an idle tree stream ended as if complete"));
    assert_eq!(end.code(), tonic::Code::DeadlineExceeded, "{end:?}");
    assert!(end.message().contains("--tree-idle-timeout-ms"), "{end:?}");
    drop(first);
    drop(unread);

    // And once they are gone, a tree is still served.
    let dest = out.path().join("again");
    let wrote = ok(
        c.get_tree(&staged.id, &done.outcome.entries, &dest).await,
        "get_tree after the unread streams",
    );
    assert_eq!(wrote.files, 2, "{wrote:?}");
    ok(c.release(&staged.id).await, "release");
    server.assert_clean();
}

/// A client that gives its streams no flow-control window at all (its HTTP/2 stream window
/// is 0, so the broker can send nothing and stops polling them) holds a tree place only while
/// a reading thread does: a rejected `ExtractWithTree` (no thread, one queued answer) frees
/// its place once the answer is queued, and a `GetTree` of a tree whose parts all fit in the queue (its reading thread is
/// done at once) holds its place until the idle timeout ends it with parts still queued, not
/// for as long as the client keeps the stream open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_without_window_hold_a_tree_place_only_until_ended() {
    use skillbox::proto::{ExtractRequest, extract_request::Msg};
    // The idle timeout is the window in which the held places must refuse the next stream: 3 s,
    // so a loaded machine's pause between the requests does not end them first.
    let server = Server::start(&["--max-tree-streams", "2", "--tree-idle-timeout-ms", "3000"]);
    let mut c = server.client().await;
    // 1 MiB: four chunks, more than the connection takes at once and fewer than the queue holds.
    let mid: Vec<u8> = (0..1u32 << 20).map(|i| (i * 7 % 251) as u8).collect();
    let done = ok(
        c.extract(
            super::archive_header(),
            std::io::Cursor::new(skill_tar(&[("data/mid.bin", &mid, 0o644)])),
            None,
        )
        .await,
        "extract",
    );
    let staged = done.staged.clone().unwrap_or_else(|| panic!("accepted"));
    let stalled = ok(
        ok(skillbox::client::endpoint(&server.uri()), "endpoint")
            .initial_stream_window_size(0)
            .connect()
            .await,
        "connect",
    );
    let mut stalled = skillbox::proto::skillbox_client::SkillboxClient::new(stalled);
    let out = ok(tempfile::tempdir(), "tempdir");

    // Rejections, answered and never read: both places are free at once.
    let mut unread = Vec::new();
    for _ in 0..2 {
        let upload = vec![
            ExtractRequest {
                msg: Some(Msg::Header(super::archive_header())),
            },
            ExtractRequest {
                msg: Some(Msg::Chunk(
                    harness::raw_tar(&[("../x", b"x", 0o644)]).into(),
                )),
            },
        ];
        let stream = ok(
            stalled.extract_with_tree(tokio_stream::iter(upload)).await,
            "extract_with_tree",
        );
        unread.push(stream.into_inner());
    }
    let wrote = ok(
        c.get_tree(&staged.id, &done.outcome.entries, &out.path().join("a"))
            .await,
        "get_tree beside unread rejections",
    );
    assert_eq!(wrote.files, 2, "{wrote:?}");

    // Trees queued whole and never read: held (the next is refused) until ended.
    for _ in 0..2 {
        let get = skillbox::proto::GetTreeRequest {
            staging_id: staged.id.clone(),
        };
        unread.push(ok(stalled.get_tree(get).await, "get_tree").into_inner());
    }
    let refused = c
        .get_tree(&staged.id, &done.outcome.entries, &out.path().join("b"))
        .await;
    assert_eq!(
        refused.err().and_then(|e| e.code()),
        Some(tonic::Code::ResourceExhausted)
    );
    wait_log(
        &server,
        "its client stopped reading",
        2,
        Duration::from_secs(15),
    );
    let wrote = tree_once_a_place_frees(
        &mut c,
        &staged.id,
        &done.outcome.entries,
        &out.path().join("c"),
    )
    .await;
    assert_eq!(wrote.files, 2, "{wrote:?}");
    drop(unread);
    ok(c.release(&staged.id).await, "release");
    server.assert_clean();
}

/// Accepted trees nobody releases are bounded in count and in bytes: past either bound a
/// request fails with RESOURCE_EXHAUSTED saying to release trees (at admission when no tree
/// fits at all, else once its tree turns out not to fit, which is then removed), and a release
/// makes room again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreleased_trees_are_bounded_in_count_and_bytes() {
    let dir = ok(tempfile::tempdir(), "tempdir");
    let limits = dir.path().join("limits.toml");
    ok(
        std::fs::write(
            &limits,
            "max_expanded_bytes = 1048576\nmax_file_bytes = 1048576\n",
        ),
        "limits",
    );
    let server = Server::start(&[
        "--limits",
        limits.to_str().unwrap_or(""),
        "--max-kept-trees",
        "3",
        "--max-kept-bytes",
        "1M",
    ]);
    let mut c = server.client().await;
    let package = |n: usize| skill_tar(&[("data.bin", &vec![7u8; n], 0o644)]);
    let extract = |c: &mut skillbox::client::Client, tar: Vec<u8>| {
        let mut c = c.clone();
        async move {
            c.extract(super::archive_header(), std::io::Cursor::new(tar), None)
                .await
        }
    };
    let is_refusal = |r: Result<skillbox::client::Extracted, skillbox::client::ClientError>| {
        let s = super::status_of(r.err().unwrap_or_else(|| panic!("a tree was kept")));
        assert_eq!(s.code(), tonic::Code::ResourceExhausted, "{s:?}");
        assert!(s.message().contains("release the trees"), "{s:?}");
    };
    let staged = |r: Result<skillbox::client::Extracted, skillbox::client::ClientError>| {
        ok(r, "extract")
            .staged
            .unwrap_or_else(|| panic!("accepted and kept"))
    };

    // Bytes: 600 KB kept; another 600 KB does not fit, and its tree is removed.
    let big = staged(extract(&mut c, package(600_000)).await);
    is_refusal(extract(&mut c, package(600_000)).await);
    assert_eq!(server.staging_dirs(), std::slice::from_ref(&big.id));
    // Count: two small ones fit beside it; a fourth tree is refused at once.
    let small = staged(extract(&mut c, package(10)).await);
    let third = staged(extract(&mut c, package(10)).await);
    is_refusal(extract(&mut c, package(10)).await);
    assert_eq!(server.staging_dirs().len(), 3);
    // A release makes room again.
    ok(c.release(&small.id).await, "release");
    let again = staged(extract(&mut c, package(10)).await);
    ok(c.release(&big.id).await, "release");
    let big_again = staged(extract(&mut c, package(600_000)).await);
    for s in [again, big_again, third] {
        ok(c.release(&s.id).await, "release");
    }
    server.assert_clean();
}

/// Tree streams whose client gives them no flow-control window stay open in HTTP/2 after
/// their place is freed: hyper keeps the part it took for each, waiting for a window that
/// never comes. A tree that fits in what the connection takes at once frees its place at once,
/// and a larger one when the idle timeout ends it, so without a bound per connection one
/// client connection collected them up to HTTP/2's 1024 streams (256 here, alternating the two
/// kinds: the broker went from 24 MB to 74 MB; 1024 of the first kind, 23 MB to 198 MB). Each
/// connection may hold at most --max-tree-streams tree streams open, ended or not: the next one
/// on it is refused at once, naming the bound, and the broker's memory stays put. Another
/// connection is served meanwhile, and the slots come back when the client resets its streams.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_holds_no_more_open_tree_streams_than_the_bound() {
    const STREAMS: usize = 16;
    let server = Server::start(&[
        "--max-tree-streams",
        &STREAMS.to_string(),
        "--tree-idle-timeout-ms",
        "300",
        "--metrics",
        harness::ANY_PORT,
    ]);
    let mut c = server.client().await;
    // 250 KB: the connection takes the whole tree at once (the place is freed at once); 1 MiB:
    // it does not (the place is freed by the idle timeout).
    let mut trees = Vec::new();
    for size in [250_000u32, 1 << 20] {
        let data: Vec<u8> = (0..size).map(|i| (i * 7 % 251) as u8).collect();
        let tar = skill_tar(&[("data/bin", &data, 0o644)]);
        let done = ok(
            c.extract(super::archive_header(), std::io::Cursor::new(tar), None)
                .await,
            "extract",
        );
        trees.push(done);
    }
    let stalled = ok(
        ok(skillbox::client::endpoint(&server.uri()), "endpoint")
            .initial_stream_window_size(0)
            .connect()
            .await,
        "connect",
    );
    let mut stalled = skillbox::proto::skillbox_client::SkillboxClient::new(stalled);
    let get = |n: usize| skillbox::proto::GetTreeRequest {
        staging_id: trees[n % 2]
            .staged
            .as_ref()
            .map_or_else(String::new, |s| s.id.clone()),
    };
    let at_start = server.peak_rss();

    // Open and never read, round after round as places free, until the connection is refused.
    let mut unread = Vec::new();
    let until = std::time::Instant::now() + Duration::from_secs(30);
    let refused = loop {
        assert!(
            std::time::Instant::now() < until,
            "{} streams open on one connection and none refused",
            unread.len()
        );
        match stalled.get_tree(get(unread.len())).await {
            Ok(s) if unread.len() < 256 => unread.push(s.into_inner()),
            Ok(_) => panic!(
                "256 tree streams open on one connection: the broker's peak RSS went from {} MB to {} MB",
                at_start >> 20,
                server.peak_rss() >> 20
            ),
            Err(s) if s.code() == tonic::Code::ResourceExhausted => {
                if s.message().contains("per connection") {
                    break s;
                }
                // Every place is taken: wait for the idle timeout to free one.
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(s) => panic!("get_tree: {s:?}"),
        }
    };
    assert!(
        refused.message().contains("--max-tree-streams"),
        "{refused:?}"
    );
    assert_eq!(
        unread.len(),
        STREAMS,
        "open when the connection was refused"
    );
    let peak = server.peak_rss();
    peak_within(peak, at_start, 24 << 20, "one connection");
    // ExtractWithTree on that connection is refused before its upload, too.
    let with_tree = stalled
        .extract_with_tree(tokio_stream::iter(Vec::new()))
        .await;
    let with_tree = with_tree
        .err()
        .unwrap_or_else(|| panic!("ExtractWithTree was served"));
    assert!(
        with_tree.message().contains("per connection"),
        "{with_tree:?}"
    );
    // Counted as an Extract that ended with an error, as a refusal after the upload is (the
    // GetTree refusals above are counted among the unary calls').
    let exhausted = "skillbox_request_errors_total{code=\"ResourceExhausted\"}";
    assert_eq!(
        metric_once(&server.metrics_addr(), exhausted, 1, Duration::from_secs(5)),
        1,
        "{exhausted}"
    );

    // Another connection gets its tree once a place frees.
    let out = ok(tempfile::tempdir(), "tempdir");
    let wrote = tree_once_a_place_frees(
        &mut c,
        &trees[1]
            .staged
            .as_ref()
            .map_or_else(String::new, |s| s.id.clone()),
        &trees[1].outcome.entries,
        &out.path().join("tree"),
    )
    .await;
    assert_eq!(wrote.files, 2, "{wrote:?}");

    // Reset by their client, the streams give their slots back: the connection may open
    // another.
    drop(unread);
    let until = std::time::Instant::now() + Duration::from_secs(5);
    let again = loop {
        match stalled.get_tree(get(0)).await {
            Ok(s) => break s.into_inner(),
            Err(s) if s.code() == tonic::Code::ResourceExhausted => {
                assert!(std::time::Instant::now() < until, "still refused: {s:?}");
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            Err(s) => panic!("get_tree: {s:?}"),
        }
    };
    drop(again);
    for done in &trees {
        if let Some(s) = &done.staged {
            ok(c.release(&s.id).await, "release");
        }
    }
    server.assert_clean();
}

/// The broker on the Unix socket or on plain TCP at 127.0.0.1, and the URI to dial, with
/// `--metrics` on a port of its own.
fn server_on(tcp: bool, args: &[&str]) -> (Server, String, String) {
    let mut all = vec!["--metrics", harness::ANY_PORT];
    all.extend_from_slice(args);
    let server = if tcp {
        Server::start_tcp(&all)
    } else {
        Server::start(&all)
    };
    let uri = if tcp {
        format!("http://127.0.0.1:{}", server.tcp_port())
    } else {
        server.uri()
    };
    let metrics = server.metrics_addr();
    (server, uri, metrics)
}

/// The value of one metric the broker serves, once it is `want` or `within` has passed.
fn metric_once(addr: &str, name: &str, want: u64, within: Duration) -> u64 {
    let until = std::time::Instant::now() + within;
    loop {
        let text = harness::http_get(addr, "/metrics");
        let got = text
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("no {name} in {text}"));
        if got == want || std::time::Instant::now() >= until {
            return got;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A new connection with a stream window of 0: the broker can send its streams nothing.
async fn stalled_connection(
    uri: &str,
) -> skillbox::proto::skillbox_client::SkillboxClient<tonic::transport::Channel> {
    let ch = ok(
        ok(skillbox::client::endpoint(uri), "endpoint")
            .initial_stream_window_size(0)
            .connect()
            .await,
        "connect",
    );
    skillbox::proto::skillbox_client::SkillboxClient::new(ch)
}

/// The per-connection bound on open tree streams bounds one connection; unread streams on
/// many connections are bounded broker-wide by --max-open-tree-streams (eight times
/// --max-tree-streams by default: 128 here), over the Unix socket and over TCP. Without it, 64
/// connections of 16 unread streams of a 250 KB tree each (1024) took the broker from 45 MB
/// to 198 MB, linearly in the connections. Past it a tree stream on any connection is
/// refused at once, naming the bound, and the memory stays put; other calls are served
/// meanwhile, and once the stalled streams are reset a tree is served again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_tree_streams_are_bounded_across_connections() {
    const PER_CONNECTION: usize = 16;
    const CONNECTIONS: usize = 64;
    for tcp in [false, true] {
        let (server, uri, metrics) = server_on(
            tcp,
            &[
                "--max-tree-streams",
                &PER_CONNECTION.to_string(),
                "--tree-idle-timeout-ms",
                "300",
            ],
        );
        let mut c = ok(skillbox::client::Client::connect(&uri).await, "connect");
        let data: Vec<u8> = (0..250_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let tar = skill_tar(&[("data/bin", &data, 0o644)]);
        let done = ok(
            c.extract(super::archive_header(), std::io::Cursor::new(tar), None)
                .await,
            "extract",
        );
        let id = done
            .staged
            .as_ref()
            .map_or_else(String::new, |s| s.id.clone());
        let at_start = server.peak_rss();

        // Connection after connection, each opening its streams and reading none.
        let mut unread = Vec::new();
        let mut clients = Vec::new();
        let refused = 'open: loop {
            if clients.len() == CONNECTIONS {
                panic!(
                    "tcp={tcp}: {} tree streams open on {CONNECTIONS} connections and none refused: the broker's peak RSS went from {} MB to {} MB",
                    unread.len(),
                    at_start >> 20,
                    server.peak_rss() >> 20
                );
            }
            let mut stalled = stalled_connection(&uri).await;
            let until = std::time::Instant::now() + Duration::from_secs(30);
            let mut here = 0;
            while here < PER_CONNECTION {
                assert!(
                    std::time::Instant::now() < until,
                    "tcp={tcp}: no place freed"
                );
                let get = skillbox::proto::GetTreeRequest {
                    staging_id: id.clone(),
                };
                match stalled.get_tree(get).await {
                    Ok(s) => {
                        unread.push(s.into_inner());
                        here += 1;
                    }
                    Err(s) if s.message().contains("--max-open-tree-streams") => break 'open s,
                    // Every place is taken while the trees are read from disk.
                    Err(s)
                        if s.code() == tonic::Code::ResourceExhausted
                            && !s.message().contains("per connection") =>
                    {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                    Err(s) => panic!("tcp={tcp}: get_tree: {s:?}"),
                }
            }
            clients.push(stalled);
        };
        assert_eq!(
            refused.code(),
            tonic::Code::ResourceExhausted,
            "{refused:?}"
        );
        assert_eq!(
            unread.len(),
            8 * PER_CONNECTION,
            "tcp={tcp}: open when refused"
        );
        let peak = server.peak_rss();
        eprintln!(
            "tcp={tcp}: {} connections, {} unread tree streams: peak RSS {} MB -> {} MB",
            clients.len() + 1,
            unread.len(),
            at_start >> 20,
            peak >> 20
        );
        peak_within(peak, at_start, 64 << 20, &format!("tcp={tcp}"));
        assert_eq!(
            metric_once(&metrics, "skillbox_tree_streams_open", 128, Duration::ZERO),
            128
        );
        let info = ok(c.server_info().await, "server_info");
        assert_eq!(info.max_open_tree_streams, 128, "{info:?}");

        // Another connection is served meanwhile; its tree waits for the stalled ones.
        let again = ok(
            c.extract(
                super::archive_header(),
                std::io::Cursor::new(skill_tar(&[])),
                None,
            )
            .await,
            "extract beside the unread streams",
        );
        let out = ok(tempfile::tempdir(), "tempdir");
        let refused = c
            .get_tree(&id, &done.outcome.entries, &out.path().join("a"))
            .await;
        assert_eq!(
            refused.err().and_then(|e| e.code()),
            Some(tonic::Code::ResourceExhausted)
        );
        // Reset by their clients, the streams give their slots back.
        drop(unread);
        let wrote =
            tree_once_a_place_frees(&mut c, &id, &done.outcome.entries, &out.path().join("b"))
                .await;
        assert_eq!(wrote.files, 2, "{wrote:?}");
        drop(clients);
        for s in [done.staged, again.staged].into_iter().flatten() {
            ok(c.release(&s.id).await, "release");
        }
        server.assert_clean();
    }
}

/// Connections are bounded by --max-connections, over the Unix socket and over TCP: past it
/// the broker closes a new connection unread (its client gets a transport error at once), logs it
/// once, and counts each in skillbox_connections_refused_total; refused connections cost it
/// no memory, and once a connection closes a new one is served. Without the bound, all 500
/// attempts here were served (over the socket, an idle connection held about 90 KB then).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_bound_are_refused_until_one_closes() {
    const MAX: usize = 8;
    const ATTEMPTS: usize = 500;
    for tcp in [false, true] {
        let (server, uri, metrics) = server_on(tcp, &["--max-connections", &MAX.to_string()]);
        // The readiness probe's connection is gone.
        assert_eq!(
            metric_once(
                &metrics,
                "skillbox_connections_open",
                0,
                Duration::from_secs(5)
            ),
            0
        );
        let connect = || async {
            // A connection is answered or closed at once; one that is neither would hang the
            // test, so it fails instead, with the broker's log.
            let hung = |what: &str| format!("tcp={tcp}: {what} took too long:\n{}", server.log());
            let ch = tokio::time::timeout(
                Duration::from_secs(60),
                ok(skillbox::client::endpoint(&uri), "endpoint").connect(),
            )
            .await
            .unwrap_or_else(|_| panic!("{}", hung("connect")));
            let mut cl = skillbox::proto::skillbox_client::SkillboxClient::new(ch.ok()?);
            // A served connection answers in milliseconds. One closed at the bound sometimes
            // leaves tonic's channel dialling again, refused each time, and its call never
            // ends (seen once in four CI runs, over the socket): not served, so counted as
            // refused; the broker's log says it refused. Without the bound every attempt here
            // is answered at once, so the count still fails the old code.
            let Ok(answered) = tokio::time::timeout(
                Duration::from_secs(10),
                cl.server_info(skillbox::proto::ServerInfoRequest {}),
            )
            .await
            else {
                eprintln!("{}", hung("ServerInfo (counted as not served)"));
                return None;
            };
            answered
                .map(|info| (cl, info.into_inner()))
                .map_err(|s| {
                    // The connection was closed, not answered: tonic's client makes the
                    // status of its transport error (broken pipe, reset, closed; the code
                    // varies with the moment it noticed).
                    assert!(
                        std::error::Error::source(&s)
                            .is_some_and(|e| e.is::<tonic::transport::Error>()),
                        "tcp={tcp}: {s:?}"
                    );
                })
                .ok()
        };
        let mut held = Vec::new();
        for _ in 0..MAX {
            let (cl, info) = connect()
                .await
                .unwrap_or_else(|| panic!("tcp={tcp}: refused below the bound"));
            assert_eq!(info.max_connections, MAX as u32, "{info:?}");
            held.push(cl);
        }
        let at_start = server.peak_rss();
        let mut served = 0;
        for _ in 0..ATTEMPTS {
            if let Some(cl) = connect().await {
                served += 1;
                held.push(cl.0);
            }
        }
        let peak = server.peak_rss();
        eprintln!(
            "tcp={tcp}: {served} of {ATTEMPTS} connections served past the bound: peak RSS {} MB -> {} MB",
            at_start >> 20,
            peak >> 20
        );
        assert_eq!(
            served,
            0,
            "tcp={tcp}: {served} of {ATTEMPTS} connections past --max-connections {MAX} were served: the broker's peak RSS went from {} MB to {} MB",
            at_start >> 20,
            peak >> 20
        );
        peak_within(peak, at_start, 16 << 20, &format!("tcp={tcp}"));
        // Counted as each is closed, before its client sees it (which may dial again).
        let refused = metric_once(
            &metrics,
            "skillbox_connections_refused_total",
            0,
            Duration::ZERO,
        );
        assert!(refused >= ATTEMPTS as u64, "{refused} refused");
        assert_eq!(
            server
                .log()
                .matches("connection refused: --max-connections")
                .count(),
            1,
            "logged once:\n{}",
            server.log()
        );

        // One closes: a new client is served.
        drop(held.pop());
        let until = std::time::Instant::now() + Duration::from_secs(5);
        let mut fresh = loop {
            if let Some((cl, _)) = connect().await {
                break cl;
            }
            assert!(
                std::time::Instant::now() < until,
                "tcp={tcp}: still refused after a connection closed"
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        };
        let upload = vec![
            skillbox::proto::ExtractRequest {
                msg: Some(skillbox::proto::extract_request::Msg::Header(
                    super::archive_header(),
                )),
            },
            skillbox::proto::ExtractRequest {
                msg: Some(skillbox::proto::extract_request::Msg::Chunk(
                    skill_tar(&[]).into(),
                )),
            },
        ];
        let answer = ok(fresh.extract(tokio_stream::iter(upload)).await, "extract").into_inner();
        assert_eq!(
            answer.verdict,
            skillbox::proto::Verdict::Accepted as i32,
            "{answer:?}"
        );
        ok(
            fresh
                .release(skillbox::proto::ReleaseRequest {
                    staging_id: answer.staging_id,
                })
                .await,
            "release",
        );
        drop(held);
        server.assert_clean();
    }
}

/// `skillbox extract --server` against a broker at its --max-connections (1 here, held by
/// another client) is told the broker closed the connection before answering: UNAVAILABLE,
/// the bound named, exit 1 (operational), over the Unix socket and over TCP. tonic's client
/// made a status of its own of the closed connection, UNKNOWN ("transport error") or CANCELLED
/// by the moment it noticed, and the CLI printed it as if the server had answered that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_refused_at_the_bound_is_unavailable_to_the_cli() {
    let (_dir, art) = harness::write_temp("skill.tar", &skill_tar(&[]));
    for tcp in [false, true] {
        let (server, uri, _metrics) = server_on(tcp, &["--max-connections", "1"]);
        // The one place, once the readiness probe's connection has given it back.
        let until = std::time::Instant::now() + Duration::from_secs(5);
        let mut held = loop {
            let ch = ok(skillbox::client::endpoint(&uri), "endpoint")
                .connect()
                .await;
            if let Ok(ch) = ch {
                let mut cl = skillbox::proto::skillbox_client::SkillboxClient::new(ch);
                if cl
                    .server_info(skillbox::proto::ServerInfoRequest {})
                    .await
                    .is_ok()
                {
                    break cl;
                }
            }
            assert!(
                std::time::Instant::now() < until,
                "tcp={tcp}: the one place never freed"
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        };
        for _ in 0..3 {
            // The library says UNAVAILABLE, whether the connect or the call met the close.
            let refused = match skillbox::client::Client::connect(&uri).await {
                Ok(mut c) => c.server_info().await.map(|_| ()),
                Err(e) => Err(e),
            };
            let refused = refused.err();
            assert_eq!(
                refused
                    .as_ref()
                    .and_then(skillbox::client::ClientError::code),
                Some(tonic::Code::Unavailable),
                "tcp={tcp}: {refused:?}"
            );
            let args = [
                "extract",
                "--json",
                "--server",
                &uri,
                art.to_str().unwrap_or(""),
            ]
            .map(str::to_owned);
            let out = tokio::task::spawn_blocking(move || {
                harness::cli(&args.each_ref().map(String::as_str), None)
            });
            let out = ok(out.await, "cli");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "tcp={tcp}: {stderr}");
            assert!(
                stderr.contains("UNAVAILABLE") && stderr.contains("--max-connections"),
                "tcp={tcp}: {stderr}"
            );
            let error: serde_json::Value = ok(serde_json::from_slice(&out.stdout), "JSON");
            assert_eq!(error["error"]["kind"], "operational", "{error}");
        }
        // The held connection is served all along.
        ok(
            held.server_info(skillbox::proto::ServerInfoRequest {})
                .await,
            "server_info after the refusals",
        );
        drop(held);
        server.assert_clean();
    }
}

/// A literal header field, new name, no indexing, no Huffman (RFC 7541 §6.2.2; short strings).
fn literal(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.push(0);
    for s in [name, value] {
        out.push(u8::try_from(s.len()).unwrap_or(127).min(126));
        out.extend_from_slice(s);
    }
}

/// An idle connection over the Unix socket holds no buffer of the authority layer: 1,000 of them,
/// each left as a gRPC client leaves it (its preface, settings acknowledged, one ServerInfo
/// answered, then nothing), take the broker's peak RSS up by less than 40 MB. The socket's
/// authority layer held a 64 KiB read buffer (zeroed, so resident) and a 64 KiB rewrite buffer
/// for every connection, busy or not: 1,000 idle connections took it from 15 to 106 MB (93 KB
/// each; 24 KB over TCP).
#[test]
fn an_idle_unix_connection_holds_no_read_buffer() {
    const CONNECTIONS: usize = 1000;
    let server = Server::start(&[]);
    let mut block = Vec::new();
    for (n, v) in [
        (&b":method"[..], &b"POST"[..]),
        (b":scheme", b"http"),
        (b":path", b"/skillbox.v1.Skillbox/ServerInfo"),
        (b":authority", b"localhost"),
        (b"content-type", b"application/grpc"),
        (b"te", b"trailers"),
    ] {
        literal(&mut block, n, v);
    }
    let mut wire = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    frame(&mut wire, 0x4, 0, 0, &[]);
    frame(&mut wire, 0x4, 0x1, 0, &[]);
    frame(&mut wire, 0x1, 0x4, 1, &block);
    frame(&mut wire, 0x0, 0x1, 1, &[0; 5]);
    let at_start = server.peak_rss();
    let mut idle = Vec::with_capacity(CONNECTIONS);
    for _ in 0..CONNECTIONS {
        let mut s = ok(
            std::os::unix::net::UnixStream::connect(server.socket()),
            "connect",
        );
        ok(s.write_all(&wire), "write");
        idle.push(s);
    }
    // Each connection's answer read to its trailers: the broker has served it, and it is idle.
    for s in &mut idle {
        ok(s.set_read_timeout(Some(Duration::from_secs(30))), "timeout");
        loop {
            let mut head = [0u8; 9];
            ok(s.read_exact(&mut head), "frame header");
            let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
            let mut payload = vec![0; len];
            ok(s.read_exact(&mut payload), "frame payload");
            let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]);
            if head[3] == 0x1 && head[4] & 0x1 != 0 && stream == 1 {
                break;
            }
        }
    }
    let peak = server.peak_rss();
    eprintln!(
        "{CONNECTIONS} idle connections: peak RSS {} MB -> {} MB",
        at_start >> 20,
        peak >> 20
    );
    peak_within(peak, at_start, 40 << 20, "idle Unix connections");
    drop(idle);
    let rt = ok(tokio::runtime::Runtime::new(), "runtime");
    let info = rt.block_on(async { server.client().await.server_info().await });
    ok(info, "server_info after");
    server.assert_clean();
}

/// One raw HTTP/2 connection that starts `streams` calls of `path` and sends each `sent`
/// bytes of a request message that declares 1 MiB, then sends nothing more; what the broker
/// answers is read and dropped (on a thread of its own) until the connection closes. Returns
/// the connection's writing side: the connection lasts as long as it.
fn partial_messages<W: std::io::Write, R: std::io::Read + Send + 'static>(
    mut w: W,
    mut r: R,
    path: &str,
    streams: u32,
    sent: usize,
) -> W {
    const HEADERS: u8 = 0x1;
    const DATA: u8 = 0x0;
    const SETTINGS: u8 = 0x4;
    const END_HEADERS: u8 = 0x4;
    const ACK: u8 = 0x1;
    const WINDOW_UPDATE: u8 = 0x8;
    // Literal header fields without indexing, new names, no Huffman (RFC 7541 §6.2.2).
    let mut block = Vec::new();
    for (name, value) in [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", path),
        (":authority", "localhost"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ] {
        block.extend_from_slice(&[0, name.len() as u8]);
        block.extend_from_slice(name.as_bytes());
        block.push(value.len() as u8);
        block.extend_from_slice(value.as_bytes());
    }
    let mut message = vec![0u8];
    message.extend_from_slice(&(1u32 << 20).to_be_bytes());
    message.resize(sent, 0x0a);

    let mut wire = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    frame(&mut wire, SETTINGS, 0, 0, &[]);
    ok(w.write_all(&wire), "preface");
    // The server's SETTINGS (its stream window) and then the WINDOW_UPDATE that opens its
    // connection window: data sent before that would pass the 64 KiB default. The rest is
    // drained on a thread.
    loop {
        let mut head = [0u8; 9];
        ok(r.read_exact(&mut head), "the server's first frames");
        let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
        ok(r.read_exact(&mut vec![0; len]), "a frame's payload");
        if head[3] == WINDOW_UPDATE && head[5..9] == [0; 4] {
            break;
        }
    }
    std::thread::spawn(move || std::io::copy(&mut r, &mut std::io::sink()));
    let mut wire = Vec::new();
    frame(&mut wire, SETTINGS, ACK, 0, &[]);
    ok(w.write_all(&wire), "ack");
    for n in 0..streams {
        let id = 1 + 2 * n;
        let mut wire = Vec::new();
        frame(&mut wire, HEADERS, END_HEADERS, id, &block);
        for part in message.chunks(16_384) {
            frame(&mut wire, DATA, 0, id, part);
        }
        ok(w.write_all(&wire), "a partial message");
    }
    w
}

/// A request message begun and not finished is held by the broker (tonic's decoder keeps what
/// arrived and hands the flow-control window back), on any call's stream, up to 1024 streams a
/// connection, on every connection: without a broker-wide bound, 8 connections each sending 80
/// `Release` messages 300 KB of their declared 1 MiB took the broker from 23 MB to about 220 MB
/// until they closed. Their bytes are bounded across all connections by
/// --max-partial-request-bytes (16 MiB by default), over the Unix socket and over TCP: a
/// message that does not fit is refused with RESOURCE_EXHAUSTED naming the bound, calls whose
/// messages come whole are served meanwhile (health, ServerInfo, Release), and the budget is
/// given back when the connections go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partly_sent_request_messages_are_bounded_across_connections() {
    const CONNECTIONS: usize = 8;
    const STREAMS: u32 = 80;
    const SENT: usize = 300_000;
    for tcp in [false, true] {
        let (server, uri, metrics) = server_on(tcp, &[]);
        let mut c = ok(skillbox::client::Client::connect(&uri).await, "connect");
        let done = ok(
            c.extract(
                super::archive_header(),
                std::io::Cursor::new(skill_tar(&[])),
                None,
            )
            .await,
            "extract",
        );
        let at_start = server.peak_rss();
        let path = "/skillbox.v1.Skillbox/Release";
        // Each connection, shut down (both its descriptors) when called.
        let mut held: Vec<Box<dyn FnOnce()>> = Vec::new();
        for _ in 0..CONNECTIONS {
            if tcp {
                let addr = uri.trim_start_matches("http://");
                let s = ok(std::net::TcpStream::connect(addr), "connect");
                let r = ok(s.try_clone(), "clone");
                let s = partial_messages(s, r, path, STREAMS, SENT);
                held.push(Box::new(move || drop(s.shutdown(std::net::Shutdown::Both))));
            } else {
                let s = ok(
                    std::os::unix::net::UnixStream::connect(server.socket()),
                    "connect",
                );
                let r = ok(s.try_clone(), "clone");
                let s = partial_messages(s, r, path, STREAMS, SENT);
                held.push(Box::new(move || drop(s.shutdown(std::net::Shutdown::Both))));
            }
        }
        // What the broker held once it had taken all it would: neither its peak memory nor
        // the gauge moves any more.
        let mut last = (u64::MAX, u64::MAX);
        let until = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let now = (
                server.peak_rss(),
                metric_once(
                    &metrics,
                    "skillbox_partial_request_bytes",
                    0,
                    Duration::ZERO,
                ),
            );
            if now == last || std::time::Instant::now() >= until {
                break;
            }
            last = now;
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        let last = last.1;
        let peak = server.peak_rss();
        eprintln!(
            "tcp={tcp}: {CONNECTIONS} connections of {STREAMS} partial messages: peak RSS {} MB -> {} MB, {last} bytes counted",
            at_start >> 20,
            peak >> 20
        );
        peak_within(peak, at_start, 64 << 20, &format!("tcp={tcp}"));
        assert!(
            last > 0 && last <= 16 << 20,
            "tcp={tcp}: {last} bytes of partial messages held"
        );
        // Whole messages are served meanwhile.
        let mut health = tonic_health::pb::health_client::HealthClient::new(ok(
            ok(skillbox::client::endpoint(&uri), "endpoint")
                .connect()
                .await,
            "connect",
        ));
        ok(
            health
                .check(tonic_health::pb::HealthCheckRequest::default())
                .await,
            "health",
        );
        ok(c.server_info().await, "server_info");
        // A message larger than what is left, sent over several frames, is refused.
        let mut raw = skillbox::proto::skillbox_client::SkillboxClient::new(ok(
            ok(skillbox::client::endpoint(&uri), "endpoint")
                .connect()
                .await,
            "connect",
        ));
        let big = skillbox::proto::ReleaseRequest {
            staging_id: "a".repeat(400_000),
        };
        let refused = raw.release(big).await.err().unwrap_or_else(|| {
            panic!("tcp={tcp}: a 400 KB message was taken beside a full budget")
        });
        assert_eq!(
            refused.code(),
            tonic::Code::ResourceExhausted,
            "{refused:?}"
        );
        assert!(
            refused.message().contains("--max-partial-request-bytes"),
            "{refused:?}"
        );
        if let Some(s) = &done.staged {
            ok(c.release(&s.id).await, "release");
        }
        // Closed, the connections give the budget back.
        for close in held {
            close();
        }
        assert_eq!(
            metric_once(
                &metrics,
                "skillbox_partial_request_bytes",
                0,
                Duration::from_secs(10)
            ),
            0
        );
        server.assert_clean();
    }
}
