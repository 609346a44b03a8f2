//! HTTP/1.1 on the wire (RFC 9112): one GET per connection, the response head parsed within a
//! bound, and the body framed strictly (Content-Length, chunked, or until close).
//!
//! Every socket read and write goes through [`DeadlineStream`], which sets the socket timeout to
//! what is left of the total time before each one, and fails once nothing is left. It sits under
//! rustls, not over it: one rustls call (a handshake step, a record arriving a byte at a time)
//! makes as many socket reads as the peer makes it, so a server trickling one byte at a time
//! still runs out of time, in the handshake as in the body. Ambiguous framing
//! (Transfer-Encoding with Content-Length, differing lengths) is refused, never guessed at.
//!
//! Why this is ours and not hyper's client connection (hyper is in the build through tonic):
//! the fetch path is synchronous std I/O, one GET per connection with `Connection: close`, no
//! keep-alive, pipelining or HTTP/2, and its guarantees live in the I/O layer: each socket
//! read re-armed with what is left of the total deadline, the byte cap counted on the body as it
//! arrives, and a refusal (not a choice) where framing is ambiguous (Transfer-Encoding with
//! Content-Length, which RFC 9112 6.3 lets a client resolve by ignoring Content-Length). hyper's
//! client needs a tokio executor, tokio-rustls and an upgrade path for CONNECT around the same
//! checks. What is hand-written is small: the head is parsed by httparse (hyper's own parser);
//! framing and chunked decoding are below, and `fuzz/fuzz_targets/http_response.rs` drives
//! [`fuzz_response`] over them, its seed corpus replayed by this module's tests.

use std::io::{self, BufRead, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

use rustls::{ClientConnection, StreamOwned};

use super::FetchError;
use super::policy::{Refusal, Rule};

/// Largest response head (status line and headers).
pub const MAX_HEAD_BYTES: u64 = 32 * 1024;
/// Most interim (1xx) responses skipped before the final one.
const MAX_INTERIM: usize = 8;
/// Most header fields in a head.
const MAX_HEADERS: usize = 100;
/// Longest chunk-size line, trailer line block.
const MAX_CHUNK_LINE: u64 = 1024;
const MAX_TRAILER_BYTES: u64 = 8 * 1024;

/// A TCP stream whose every read and write is bounded by a deadline: before each socket call
/// the socket timeout is set to the time left, and once the deadline has passed a call fails as
/// timed out without touching the socket.
///
/// Why per socket call: rustls is given this stream and reads from it as often as it needs to
/// for one handshake step or one record. A timeout armed once per TLS-level call would wait the
/// whole remaining time again on each of those reads, so a peer sending a byte now and then
/// could hold the connection open for ever.
pub struct DeadlineStream {
    sock: TcpStream,
    deadline: Instant,
}

fn timed_out() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, "the total time limit passed")
}

impl DeadlineStream {
    pub fn new(sock: TcpStream, deadline: Instant) -> Self {
        Self { sock, deadline }
    }

    /// What is left before the deadline; none left is the timed-out error.
    fn left(&self) -> io::Result<Duration> {
        self.deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or_else(timed_out)
    }

    pub fn get_ref(&self) -> &TcpStream {
        &self.sock
    }

    pub fn into_inner(self) -> TcpStream {
        self.sock
    }
}

fn map_timeout(e: io::Error) -> io::Error {
    match e.kind() {
        // SO_RCVTIMEO / SO_SNDTIMEO expiring reads as WouldBlock on Unix.
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => timed_out(),
        _ => e,
    }
}

impl Read for DeadlineStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.left()?;
        self.sock.set_read_timeout(Some(left))?;
        self.sock.read(buf).map_err(map_timeout)
    }
}

impl Write for DeadlineStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let left = self.left()?;
        self.sock.set_write_timeout(Some(left))?;
        self.sock.write(buf).map_err(map_timeout)
    }

    fn flush(&mut self) -> io::Result<()> {
        // A TcpStream buffers nothing; there is no socket call to bound.
        self.sock.flush()
    }
}

/// A TLS connection whose every socket read and write is bounded by the download's deadline
/// (the socket is a [`DeadlineStream`]).
pub struct Conn {
    tls: StreamOwned<ClientConnection, DeadlineStream>,
}

impl Conn {
    /// Run the TLS handshake (certificate checked against the server name in `tls`).
    pub fn handshake(
        tls: ClientConnection,
        sock: TcpStream,
        deadline: Instant,
    ) -> Result<Self, io::Error> {
        let mut conn = Self {
            tls: StreamOwned::new(tls, DeadlineStream::new(sock, deadline)),
        };
        while conn.tls.conn.is_handshaking() {
            let StreamOwned { conn: c, sock: s } = &mut conn.tls;
            c.complete_io(s).map_err(map_timeout)?;
        }
        Ok(conn)
    }

    /// Cut the connection now (a limit fired; nothing more is read).
    pub fn cut(&mut self) {
        let _ = self.tls.sock.get_ref().shutdown(Shutdown::Both);
    }
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.tls.read(buf).map_err(map_timeout)
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.tls.write(buf).map_err(map_timeout)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.tls.flush().map_err(map_timeout)
    }
}

/// A parsed response head.
#[derive(Debug, Clone)]
pub struct Head {
    pub status: u16,
    headers: Vec<(String, Vec<u8>)>,
}

impl Head {
    /// All values of the field `name` (case-insensitive), lossily decoded.
    pub fn all(&self, name: &str) -> Vec<String> {
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| String::from_utf8_lossy(v).trim().to_owned())
            .collect()
    }

    /// The single value of `name`; several are an error (a response may not disagree with itself).
    pub fn one(&self, name: &str) -> Result<Option<String>, FetchError> {
        let mut all = self.all(name);
        match all.len() {
            0 => Ok(None),
            1 => Ok(all.pop()),
            n => Err(FetchError::Http(format!(
                "{n} {name} fields in one response"
            ))),
        }
    }
}

/// Read one line, at most `max` bytes including the newline.
fn read_line(r: &mut impl BufRead, max: u64, what: &str) -> Result<Vec<u8>, FetchError> {
    let mut line = Vec::new();
    r.take(max)
        .read_until(b'\n', &mut line)
        .map_err(|e| match e.kind() {
            // rustls's error for a close without close_notify points at its docs; say what it is.
            io::ErrorKind::UnexpectedEof => {
                FetchError::Http(format!("{what}: the connection was closed before it ended"))
            }
            _ => io_error(e, what),
        })?;
    if !line.ends_with(b"\n") {
        if line.len() as u64 >= max {
            return Err(FetchError::Http(format!(
                "{what}: line longer than {max} bytes"
            )));
        }
        return Err(FetchError::Http(format!(
            "{what}: connection closed mid-line"
        )));
    }
    Ok(line)
}

/// An I/O error while talking to the server; a timeout is the total-time rule firing.
pub fn io_error(e: io::Error, what: &str) -> FetchError {
    if e.kind() == io::ErrorKind::TimedOut {
        FetchError::Refused(Refusal::new(
            Rule::TotalTimeout,
            format!("{what}: the total time limit passed"),
        ))
    } else {
        FetchError::Http(format!("{what}: {e}"))
    }
}

/// Read the response head, skipping interim 1xx responses.
pub fn read_head(r: &mut impl BufRead) -> Result<Head, FetchError> {
    for _ in 0..MAX_INTERIM {
        let mut raw = Vec::new();
        loop {
            let left = MAX_HEAD_BYTES - raw.len() as u64;
            if left == 0 {
                return Err(FetchError::Http(format!(
                    "response head is larger than {MAX_HEAD_BYTES} bytes"
                )));
            }
            let line = read_line(r, left, "reading the response head")?;
            let end = line == b"\r\n" || line == b"\n";
            raw.extend_from_slice(&line);
            if end && raw.len() > line.len() {
                break;
            }
        }
        let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut resp = httparse::Response::new(&mut fields);
        match resp.parse(&raw) {
            Ok(httparse::Status::Complete(_)) => {}
            Ok(httparse::Status::Partial) => {
                return Err(FetchError::Http("incomplete response head".into()));
            }
            Err(e) => return Err(FetchError::Http(format!("malformed response head: {e}"))),
        }
        let status = resp
            .code
            .ok_or_else(|| FetchError::Http("no status code".into()))?;
        // httparse takes any three digits; RFC 9110 15 defines 100 to 599 only (000 was found
        // by the fuzz target).
        if !(100..600).contains(&status) {
            return Err(FetchError::Http(format!("invalid status code {status:03}")));
        }
        if (100..200).contains(&status) && status != 101 {
            continue;
        }
        let headers = resp
            .headers
            .iter()
            .map(|h| (h.name.to_owned(), h.value.to_vec()))
            .collect();
        return Ok(Head { status, headers });
    }
    Err(FetchError::Http(format!(
        "more than {MAX_INTERIM} interim (1xx) responses"
    )))
}

/// How the body ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    Length(u64),
    Chunked,
    UntilClose,
}

fn tokens(values: &[String]) -> Vec<String> {
    values
        .iter()
        .flat_map(|v| v.split(','))
        .map(|t| t.trim().to_ascii_lowercase())
        .filter(|t| !t.is_empty())
        .collect()
}

/// Content-Encoding must be absent or `identity`: we asked for identity and never decode.
pub fn check_content_encoding(head: &Head) -> Result<(), Refusal> {
    let codings: Vec<String> = tokens(&head.all("content-encoding"))
        .into_iter()
        .filter(|t| t != "identity")
        .collect();
    if codings.is_empty() {
        return Ok(());
    }
    Err(Refusal::new(
        Rule::IdentityEncoding,
        format!(
            "the response is content-encoded ({}) although Accept-Encoding: identity was sent; it is refused, not decoded",
            codings.join(", ")
        ),
    ))
}

/// Body framing per RFC 9112 section 6, strictly.
pub fn framing(head: &Head) -> Result<Framing, FetchError> {
    let te = tokens(&head.all("transfer-encoding"));
    let lengths = head.all("content-length");
    if !te.is_empty() {
        if !lengths.is_empty() {
            return Err(FetchError::Http(
                "both Transfer-Encoding and Content-Length: ambiguous framing".into(),
            ));
        }
        if te != ["chunked"] {
            return Err(FetchError::Refused(Refusal::new(
                Rule::IdentityEncoding,
                format!(
                    "transfer coding {:?} is refused; only chunked framing is read",
                    te.join(", ")
                ),
            )));
        }
        return Ok(Framing::Chunked);
    }
    let mut length = None;
    for v in lengths.iter().flat_map(|v| v.split(',')).map(str::trim) {
        if v.is_empty() || v.len() > 19 || !v.bytes().all(|b| b.is_ascii_digit()) {
            return Err(FetchError::Http(format!("invalid Content-Length {v:?}")));
        }
        let n: u64 = v
            .parse()
            .map_err(|_| FetchError::Http(format!("invalid Content-Length {v:?}")))?;
        if length.is_some_and(|l| l != n) {
            return Err(FetchError::Http("differing Content-Length values".into()));
        }
        length = Some(n);
    }
    Ok(length.map_or(Framing::UntilClose, Framing::Length))
}

/// The body as a reader that ends where the framing says.
pub struct Body<'a, R: BufRead> {
    r: &'a mut R,
    framing: Framing,
    /// Bytes left in the whole body (Length) or in the current chunk (Chunked).
    left: u64,
    /// Chunked: the first chunk-size line has not been read yet.
    started: bool,
    done: bool,
}

impl<'a, R: BufRead> Body<'a, R> {
    pub fn new(r: &'a mut R, framing: Framing) -> Self {
        let left = match framing {
            Framing::Length(n) => n,
            Framing::Chunked | Framing::UntilClose => 0,
        };
        Self {
            r,
            framing,
            left,
            started: false,
            done: false,
        }
    }

    /// Chunked: read the next chunk-size line (after the CRLF that ends the previous chunk).
    fn next_chunk(&mut self) -> io::Result<()> {
        let invalid = |m: String| io::Error::new(io::ErrorKind::InvalidData, m);
        if self.started {
            let crlf = read_line(self.r, 3, "chunk").map_err(|e| invalid(e.to_string()))?;
            if crlf != b"\r\n" && crlf != b"\n" {
                return Err(invalid("chunk data not followed by CRLF".into()));
            }
        }
        self.started = true;
        let line =
            read_line(self.r, MAX_CHUNK_LINE, "chunk size").map_err(|e| invalid(e.to_string()))?;
        let text = String::from_utf8_lossy(&line);
        let size = text.split(';').next().unwrap_or("").trim();
        if size.is_empty() || size.len() > 15 || !size.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(invalid(format!("invalid chunk size {size:?}")));
        }
        self.left = u64::from_str_radix(size, 16).map_err(|e| invalid(e.to_string()))?;
        if self.left == 0 {
            // Trailer section, then the final CRLF; bounded, then ignored.
            let mut seen = 0u64;
            loop {
                let line = read_line(
                    self.r,
                    MAX_TRAILER_BYTES.saturating_sub(seen).max(1),
                    "trailer",
                )
                .map_err(|e| invalid(e.to_string()))?;
                seen += line.len() as u64;
                if line == b"\r\n" || line == b"\n" {
                    break;
                }
                if seen >= MAX_TRAILER_BYTES {
                    return Err(invalid("trailer section too large".into()));
                }
            }
            self.done = true;
        }
        Ok(())
    }
}

impl<R: BufRead> Read for Body<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.done || buf.is_empty() {
            return Ok(0);
        }
        match self.framing {
            Framing::UntilClose => self.r.read(buf),
            Framing::Length(_) | Framing::Chunked => {
                if self.left == 0 {
                    if self.framing != Framing::Chunked {
                        self.done = true;
                        return Ok(0);
                    }
                    self.next_chunk()?;
                    if self.done {
                        return Ok(0);
                    }
                }
                let want = usize::try_from(self.left)
                    .unwrap_or(usize::MAX)
                    .min(buf.len());
                let n = self.r.read(&mut buf[..want])?;
                if n == 0 {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "body truncated: connection closed early",
                    ));
                }
                self.left -= n as u64;
                Ok(n)
            }
        }
    }
}

/// The property the response fuzz target checks, on any bytes as a server's answer: reading
/// never panics, never yields more body than arrived, a Content-Length body that reads to its
/// end is exactly that long, and a final status is never an interim one.
pub fn fuzz_response(data: &[u8]) {
    let mut r = io::BufReader::with_capacity(64, data);
    let Ok(head) = read_head(&mut r) else {
        return;
    };
    assert!(
        (200..600).contains(&head.status) || head.status == 101,
        "final status {}",
        head.status
    );
    let _ = check_content_encoding(&head);
    let _ = head.one("location");
    let Ok(framing) = framing(&head) else {
        return;
    };
    let mut body = Body::new(&mut r, framing);
    let mut out = Vec::new();
    let mut buf = [0u8; 97];
    let ended = loop {
        match body.read(&mut buf) {
            Ok(0) => break true,
            Ok(n) => {
                out.extend_from_slice(&buf[..n]);
                assert!(out.len() <= data.len(), "more body than input");
            }
            Err(_) => break false,
        }
    };
    if let (true, Framing::Length(n)) = (ended, framing) {
        assert_eq!(out.len() as u64, n, "a complete Content-Length body");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fuzz target's seed corpus, replayed on stable Rust through the same check.
    #[test]
    fn fuzz_seeds_replay() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/http_response");
        let mut n = 0;
        for e in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let p = e.unwrap_or_else(|e| panic!("{e}")).path();
            let bytes = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            fuzz_response(&bytes);
            n += 1;
        }
        assert!(n >= 8, "{} holds {n} seeds", dir.display());
    }

    fn body(raw: &[u8], framing: Framing) -> io::Result<Vec<u8>> {
        let mut r = io::BufReader::new(raw);
        let mut out = Vec::new();
        Body::new(&mut r, framing).read_to_end(&mut out)?;
        Ok(out)
    }

    #[test]
    fn chunked_bodies_decode_and_bad_ones_fail() {
        let ok = body(
            b"3\r\nabc\r\n2;x=y\r\nde\r\n0\r\nTrailer: 1\r\n\r\n",
            Framing::Chunked,
        );
        assert_eq!(ok.ok().as_deref(), Some(&b"abcde"[..]));
        assert!(body(b"3\r\nabcX\r\n0\r\n\r\n", Framing::Chunked).is_err());
        assert!(body(b"zz\r\nabc\r\n", Framing::Chunked).is_err());
        assert!(body(b"3\r\nab", Framing::Chunked).is_err());
        assert!(body(b"ffffffffffffffffff\r\n", Framing::Chunked).is_err());
    }

    #[test]
    fn length_bodies_stop_at_the_length_and_detect_truncation() {
        assert_eq!(
            body(b"abcdef", Framing::Length(3)).ok().as_deref(),
            Some(&b"abc"[..])
        );
        assert!(body(b"ab", Framing::Length(3)).is_err());
    }

    fn head(raw: &[u8]) -> Head {
        read_head(&mut io::BufReader::new(raw)).expect("read_head")
    }

    #[test]
    fn heads_parse_and_framing_is_strict() {
        let h = head(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Type: text/markdown\r\n\r\n");
        assert_eq!(h.status, 200);
        assert_eq!(framing(&h).ok(), Some(Framing::Length(5)));
        let h = head(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n");
        assert!(framing(&h).is_err());
        let h = head(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n");
        assert!(matches!(framing(&h), Err(FetchError::Refused(_))));
        let h = head(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n");
        assert!(framing(&h).is_err());
        for bad in [&b"HTTP/1.1 000 X\r\n\r\n"[..], b"HTTP/1.1 600 X\r\n\r\n"] {
            assert!(read_head(&mut io::BufReader::new(bad)).is_err());
        }
        let h = head(b"HTTP/1.1 200 OK\r\nContent-Encoding: identity\r\n\r\n");
        assert!(check_content_encoding(&h).is_ok());
        let h = head(b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\n\r\n");
        assert_eq!(
            check_content_encoding(&h).err().map(|r| r.rule),
            Some(Rule::IdentityEncoding)
        );
    }

    /// A peer sending one byte every 100 ms for 5 s: every read returns well within its
    /// timeout, yet reading fails as timed out soon after the deadline, not when the peer stops.
    #[test]
    fn a_trickling_peer_cannot_outlast_the_deadline() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("local_addr");
        let peer = std::thread::spawn(move || {
            let (mut tcp, _) = listener.accept().expect("accept");
            for _ in 0..50 {
                std::thread::sleep(Duration::from_millis(100));
                if tcp.write_all(b"a").is_err() {
                    break;
                }
            }
        });
        let started = Instant::now();
        let sock = TcpStream::connect(addr).expect("connect");
        let mut r = io::BufReader::new(DeadlineStream::new(
            sock,
            started + Duration::from_millis(500),
        ));
        let mut got = Vec::new();
        let e = r.read_to_end(&mut got).err();
        assert_eq!(e.map(|e| e.kind()), Some(io::ErrorKind::TimedOut));
        assert!(
            !got.is_empty(),
            "the peer's bytes arrived before the deadline"
        );
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "took {:?}",
            started.elapsed()
        );
        drop(r);
        let _ = peer.join();
    }

    #[test]
    fn oversized_heads_are_refused() {
        let mut raw = b"HTTP/1.1 200 OK\r\n".to_vec();
        while raw.len() as u64 <= MAX_HEAD_BYTES {
            raw.extend_from_slice(b"X-Pad: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n");
        }
        raw.extend_from_slice(b"\r\n");
        assert!(read_head(&mut io::BufReader::new(&raw[..])).is_err());
    }
}
