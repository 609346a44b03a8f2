//! What stock gRPC clients send as `:authority` over a Unix socket, made acceptable to h2.
//!
//! grpc-core (Python `grpcio`, Ruby, C++) names a `unix:` target's authority after the socket
//! path, percent-encoded (`%2Frun%2Fskillbox.sock`), and grpc-java sends the raw path. h2
//! resets every stream whose `:authority` is not an RFC 3986 `host[:port]` and has no option to
//! relax that, so such clients could only talk to us with a channel option nobody guesses. On a
//! Unix socket the authority carries no information (the socket already names the peer), so
//! this layer, between the accepted socket and the HTTP/2 server, rewrites the header blocks the
//! client sends: an `:authority` that does not parse becomes `localhost`, every other field is
//! kept in order with its value.
//!
//! It must never pass on a header block it could not decode (the connection is closed instead),
//! never buffer more than one bounded header block, and never touch the server's direction or a
//! non-header frame's bytes. It runs before the peer-uid check (a refused peer's requests are
//! parsed too, to be told why), so what any peer can make it hold is bounded by sizes, not by
//! trust: the compressed block ([`MAX_BLOCK`]), the block as decoded ([`MAX_DECODED`]: HPACK
//! lets one byte name a 4 KiB table entry, so the decoded size is the one that matters), and
//! the rewritten bytes waiting for the server ([`MAX_PENDING`]). Because every block is re-encoded as literals (no HPACK dynamic
//! table), the server's decoder state never depends on the client's.

use std::future::Future as _;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, ReadBuf};

/// The HTTP/2 client connection preface (RFC 9113 §3.4), passed through unread.
const PREFACE_LEN: usize = 24;
const FRAME_HEADER_LEN: usize = 9;
const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;
/// SETTINGS_MAX_FRAME_SIZE's floor (RFC 9113 §6.5.2): any server accepts frames this large.
const MAX_FRAME: usize = 16_384;
/// SETTINGS_MAX_HEADER_LIST_SIZE the server advertises (hyper's default, set explicitly in
/// `serve`): h2 refuses a request whose header list, counted as below, is larger.
pub const MAX_HEADER_LIST: u32 = 16 * 1024;
/// The largest header block decoded and passed on, counted as RFC 9113 §6.5.2 counts a header
/// list (name + value + 32 per field). Four times what the server accepts: a block somewhat
/// over the advertised size still reaches h2, which refuses that one stream (431), while one
/// past this closes the connection. Without it a 40 KB block of one-byte references to a
/// 4 KB table entry decoded to 160 MB, written out twice, before any check on the peer.
const MAX_DECODED: usize = 4 * MAX_HEADER_LIST as usize;
/// The largest header block assembled, compressed: a block within [`MAX_DECODED`] decoded needs
/// no more (an encoder uses Huffman only where it is shorter, and each field counts 32 more).
const MAX_BLOCK: usize = MAX_DECODED;
/// Rewritten bytes held for the server before more input is decoded: many small blocks read in
/// one go are decoded a few at a time, as the server takes them.
const MAX_PENDING: usize = MAX_DECODED;
/// SETTINGS_HEADER_TABLE_SIZE's default: the server never advertises another, so the client's
/// encoder may not use more (RFC 7541 §4.2).
const CLIENT_TABLE_SIZE: usize = 4096;
const READ_CHUNK: usize = 64 * 1024;
const REPLACEMENT: &[u8] = b"localhost";

enum State {
    Preface { left: usize },
    FrameHeader,
    Payload { left: usize },
}

/// A header block being assembled from HEADERS and CONTINUATION frames.
struct Block {
    stream_id: [u8; 4],
    end_stream: bool,
    priority: Option<[u8; 5]>,
    fragment: Vec<u8>,
}

/// The client's connection with its header blocks rewritten as described above.
pub struct FixAuthority<S> {
    inner: S,
    state: State,
    /// Bytes read from the client: `input[start..]` are not yet passed on. Reads go into its
    /// spare capacity (READ_CHUNK, more only for a header frame larger than that), unzeroed.
    /// Given back whenever everything read was passed on and the client has sent nothing more:
    /// an idle connection holds no buffer. Held, with `output`'s, it made an idle connection
    /// 93 KB of the broker's memory against 24 KB over TCP (26 KB given back while idle).
    input: Vec<u8>,
    start: usize,
    /// Rewritten header frames (and the frame headers before pass-through payloads), sent
    /// before anything after them; given back with `input`.
    output: Vec<u8>,
    sent: usize,
    block: Option<Block>,
    decoder: loona_hpack::Decoder<'static>,
    eof: bool,
    /// An error found after bytes were already handed to the caller in the same read: it is
    /// returned by the next read (a read that fails must hand out nothing).
    failed: Option<io::Error>,
}

impl<S> FixAuthority<S> {
    pub fn new(inner: S) -> Self {
        let mut decoder = loona_hpack::Decoder::new();
        decoder.set_max_allowed_table_size(CLIENT_TABLE_SIZE);
        Self {
            inner,
            state: State::Preface { left: PREFACE_LEN },
            input: Vec::new(),
            start: 0,
            output: Vec::new(),
            sent: 0,
            block: None,
            decoder,
            eof: false,
            failed: None,
        }
    }

    /// Decide what the buffered input allows: frame headers (passed on), header blocks
    /// (assembled, then rewritten into `output`). Stops at a pass-through run (the preface, a
    /// non-header frame's payload), which `poll_read` copies straight to its caller, and when
    /// the buffered bytes end mid-frame. Returns whether it consumed anything.
    fn process(&mut self) -> io::Result<bool> {
        if self.output.capacity() == 0 {
            // Given back while idle: taken again at its working size, so that it grows as it
            // always did (to twice that at most: MAX_PENDING, then one block).
            self.output.reserve_exact(READ_CHUNK);
        }
        let mut progressed = false;
        loop {
            let avail = &self.input[self.start..];
            match self.state {
                State::Preface { left } | State::Payload { left } if left > 0 => {
                    return Ok(progressed);
                }
                State::Preface { .. } | State::Payload { .. } => self.state = State::FrameHeader,
                // Rewritten blocks wait to be read before more are decoded (each of them may
                // be up to MAX_DECODED bytes from a few bytes of input).
                State::FrameHeader if self.output.len() >= MAX_PENDING => return Ok(progressed),
                State::FrameHeader => {
                    let Some(head) = avail.get(..FRAME_HEADER_LEN) else {
                        return Ok(progressed);
                    };
                    let len = usize::from(head[0]) << 16
                        | usize::from(head[1]) << 8
                        | usize::from(head[2]);
                    let (kind, flags) = (head[3], head[4]);
                    let stream_id = [head[5], head[6], head[7], head[8]];
                    let is_block =
                        kind == HEADERS || (kind == CONTINUATION && self.block.is_some());
                    if !is_block {
                        if self.block.is_some() {
                            return Err(protocol("a frame interrupted a header block"));
                        }
                        self.output.extend_from_slice(head);
                        self.start += FRAME_HEADER_LEN;
                        self.state = State::Payload { left: len };
                        progressed = true;
                        continue;
                    }
                    if len > MAX_BLOCK {
                        return Err(protocol("header frame too large"));
                    }
                    let Some(payload) = avail.get(FRAME_HEADER_LEN..FRAME_HEADER_LEN + len) else {
                        return Ok(progressed);
                    };
                    if kind == HEADERS {
                        if self.block.is_some() {
                            return Err(protocol("HEADERS inside a header block"));
                        }
                        self.block = Some(headers_frame(stream_id, flags, payload)?);
                    } else if let Some(block) = &mut self.block {
                        if block.fragment.len() + payload.len() > MAX_BLOCK {
                            return Err(protocol("header block too large"));
                        }
                        block.fragment.extend_from_slice(payload);
                    }
                    self.start += FRAME_HEADER_LEN + len;
                    progressed = true;
                    if flags & END_HEADERS != 0
                        && let Some(block) = self.block.take()
                    {
                        self.emit(&block)?;
                    }
                }
            }
        }
    }

    /// Decode one complete block and write it back as HEADERS (+ CONTINUATION) frames; a block
    /// that decodes to more than MAX_DECODED closes the connection.
    fn emit(&mut self, block: &Block) -> io::Result<()> {
        let mut encoded = Vec::with_capacity(block.fragment.len() + 64);
        let mut decoded = 0usize;
        self.decoder
            .decode_with_cb(&block.fragment, |name, value| {
                // Counted before anything is written: once over, the rest of the block is
                // decoded (the callback cannot stop it; bounded by MAX_BLOCK) but not kept.
                decoded = decoded.saturating_add(name.len() + value.len() + 32);
                if decoded > MAX_DECODED {
                    return;
                }
                let value: &[u8] = if &*name == b":authority"
                    && tonic::codegen::http::uri::Authority::try_from(&*value).is_err()
                {
                    REPLACEMENT
                } else {
                    &value
                };
                literal(&mut encoded, &name, value);
            })
            .map_err(|e| protocol(&format!("undecodable header block: {e:?}")))?;
        if decoded > MAX_DECODED {
            return Err(protocol(&format!(
                "a header block decodes to more than {MAX_DECODED} bytes (the server accepts {MAX_HEADER_LIST})"
            )));
        }

        let mut first = Vec::with_capacity(5 + encoded.len().min(MAX_FRAME));
        let mut flags = 0;
        if block.end_stream {
            flags |= END_STREAM;
        }
        if let Some(p) = block.priority {
            flags |= PRIORITY;
            first.extend_from_slice(&p);
        }
        let room = MAX_FRAME - first.len();
        let (head, mut rest) = encoded.split_at(encoded.len().min(room));
        first.extend_from_slice(head);
        if rest.is_empty() {
            flags |= END_HEADERS;
        }
        frame(&mut self.output, HEADERS, flags, block.stream_id, &first);
        while !rest.is_empty() {
            let (part, more) = rest.split_at(rest.len().min(MAX_FRAME));
            let flags = if more.is_empty() { END_HEADERS } else { 0 };
            frame(&mut self.output, CONTINUATION, flags, block.stream_id, part);
            rest = more;
        }
        Ok(())
    }
}

/// A HEADERS frame's fragment, without its padding (RFC 9113 §6.2).
fn headers_frame(stream_id: [u8; 4], flags: u8, payload: &[u8]) -> io::Result<Block> {
    let mut body = payload;
    let mut pad = 0;
    if flags & PADDED != 0 {
        let (&n, rest) = body
            .split_first()
            .ok_or_else(|| protocol("PADDED without a length"))?;
        pad = usize::from(n);
        body = rest;
    }
    let priority = if flags & PRIORITY != 0 {
        let (p, rest) = body
            .split_first_chunk::<5>()
            .ok_or_else(|| protocol("PRIORITY without its fields"))?;
        body = rest;
        Some(*p)
    } else {
        None
    };
    let end = body
        .len()
        .checked_sub(pad)
        .ok_or_else(|| protocol("padding longer than the frame"))?;
    Ok(Block {
        stream_id,
        end_stream: flags & END_STREAM != 0,
        priority,
        fragment: body[..end].to_vec(),
    })
}

/// A literal header field without indexing, new name, no Huffman (RFC 7541 §6.2.2).
fn literal(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.push(0);
    for s in [name, value] {
        integer(out, s.len());
        out.extend_from_slice(s);
    }
}

/// An HPACK integer with a 7-bit prefix and the Huffman bit clear (RFC 7541 §5.1).
fn integer(out: &mut Vec<u8>, mut n: usize) {
    if n < 127 {
        out.push(n as u8);
        return;
    }
    out.push(127);
    n -= 127;
    while n >= 128 {
        out.push((n % 128) as u8 | 0x80);
        n /= 128;
    }
    out.push(n as u8);
}

fn frame(out: &mut Vec<u8>, kind: u8, flags: u8, stream_id: [u8; 4], payload: &[u8]) {
    let len = payload.len();
    out.extend_from_slice(&[(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags]);
    out.extend_from_slice(&stream_id);
    out.extend_from_slice(payload);
}

fn protocol(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("HTTP/2 from the client: {what}"),
    )
}

impl<S: AsyncRead + Unpin> AsyncRead for FixAuthority<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        if let Some(e) = this.failed.take() {
            return Poll::Ready(Err(e));
        }
        loop {
            if buf.remaining() == 0 {
                return Poll::Ready(Ok(()));
            }
            // What was decided goes out first, in order.
            if this.sent < this.output.len() {
                let n = buf.remaining().min(this.output.len() - this.sent);
                buf.put_slice(&this.output[this.sent..this.sent + n]);
                this.sent += n;
                if this.sent == this.output.len() {
                    this.output.clear();
                    this.sent = 0;
                }
                continue;
            }
            // Pass-through bytes (the bulk of a connection: DATA payloads) are copied once,
            // from the input straight to the caller; nothing in them is looked at.
            if let State::Preface { left } | State::Payload { left } = &mut this.state
                && *left > 0
                && this.start < this.input.len()
            {
                let n = (*left)
                    .min(this.input.len() - this.start)
                    .min(buf.remaining());
                buf.put_slice(&this.input[this.start..this.start + n]);
                this.start += n;
                *left -= n;
                continue;
            }
            match this.process() {
                Ok(true) => continue,
                Ok(false) => {}
                Err(e) if buf.filled().len() > before => {
                    this.failed = Some(e);
                    return Poll::Ready(Ok(()));
                }
                Err(e) => return Poll::Ready(Err(e)),
            }
            // Nothing more can be decided from what is buffered.
            if buf.filled().len() > before {
                return Poll::Ready(Ok(()));
            }
            if this.eof {
                // A truncated frame at the end is the server's to report; pass it on as is.
                if this.start == this.input.len() {
                    return Poll::Ready(Ok(()));
                }
                this.output.extend_from_slice(&this.input[this.start..]);
                this.start = this.input.len();
                continue;
            }
            if this.start > 0 {
                this.input.drain(..this.start);
                this.start = 0;
            }
            if this.input.len() == this.input.capacity() {
                // Given back while idle, or full with a header frame larger than the buffer
                // (bounded: `process` refuses frames over MAX_BLOCK before the buffer could
                // grow past twice that).
                this.input
                    .reserve_exact(this.input.capacity().max(READ_CHUNK));
            }
            let read = std::pin::pin!(this.inner.read_buf(&mut this.input)).poll(cx);
            let Poll::Ready(got) = read else {
                // Everything read was passed on and the client sends nothing now: hold no
                // buffers while it is quiet (idle connections are the many).
                if this.input.is_empty() && this.output.is_empty() {
                    this.input = Vec::new();
                    this.output = Vec::new();
                }
                return Poll::Pending;
            };
            if got? == 0 {
                this.eof = true;
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for FixAuthority<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

impl<S: tonic::transport::server::Connected> tonic::transport::server::Connected
    for FixAuthority<S>
{
    type ConnectInfo = S::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt as _;

    fn preface() -> Vec<u8> {
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec()
    }

    /// The client's bytes as the server would read them through the layer, decoded.
    async fn through(wire: Vec<u8>) -> (Vec<u8>, Vec<Vec<(Vec<u8>, Vec<u8>)>>) {
        let (mut client, server) = tokio::io::duplex(1 << 20);
        client.write_all(&wire).await.unwrap();
        drop(client);
        let mut fixed = FixAuthority::new(server);
        let mut out = Vec::new();
        fixed.read_to_end(&mut out).await.unwrap();
        assert_eq!(&out[..PREFACE_LEN], &preface()[..]);
        let mut blocks = Vec::new();
        let mut non_header = Vec::new();
        let mut dec = loona_hpack::Decoder::new();
        let mut at = PREFACE_LEN;
        let mut pending: Vec<u8> = Vec::new();
        while at < out.len() {
            let h = &out[at..at + 9];
            let len = usize::from(h[0]) << 16 | usize::from(h[1]) << 8 | usize::from(h[2]);
            let payload = &out[at + 9..at + 9 + len];
            match h[3] {
                HEADERS | CONTINUATION => {
                    assert!(len <= MAX_FRAME);
                    let body = if h[3] == HEADERS && h[4] & PRIORITY != 0 {
                        &payload[5..]
                    } else {
                        payload
                    };
                    pending.extend_from_slice(body);
                    if h[4] & END_HEADERS != 0 {
                        blocks.push(dec.decode(&pending).unwrap());
                        pending.clear();
                    }
                }
                _ => non_header.extend_from_slice(&out[at..at + 9 + len]),
            }
            at += 9 + len;
        }
        (non_header, blocks)
    }

    fn headers(stream: u8, flags: u8, block: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        frame(&mut v, HEADERS, flags, [0, 0, 0, stream], block);
        v
    }

    #[tokio::test]
    async fn a_socket_path_authority_becomes_localhost_and_the_rest_is_kept() {
        // The client's encoder indexes `te: trailers` in its dynamic table and refers to it
        // by index in the later requests: the layer must follow the client's table.
        let mut enc = loona_hpack::Encoder::new();
        let req = |auth: &[u8]| -> Vec<(Vec<u8>, Vec<u8>)> {
            vec![
                (b":method".to_vec(), b"POST".to_vec()),
                (b":scheme".to_vec(), b"http".to_vec()),
                (
                    b":path".to_vec(),
                    b"/skillbox.v1.Skillbox/ServerInfo".to_vec(),
                ),
                (b":authority".to_vec(), auth.to_vec()),
                (b"te".to_vec(), b"trailers".to_vec()),
            ]
        };
        let sock = b"%2Ftmp%2Fskillbox.sock".as_slice();
        let first = enc.encode(req(sock).iter().map(|(n, v)| (&n[..], &v[..])));
        let second = enc.encode(req(sock).iter().map(|(n, v)| (&n[..], &v[..])));
        let good = enc.encode(
            req(b"example.org:443")
                .iter()
                .map(|(n, v)| (&n[..], &v[..])),
        );
        let mut wire = preface();
        wire.extend(headers(1, END_HEADERS, &first));
        let mut data = Vec::new();
        frame(&mut data, 0x0, END_STREAM, [0, 0, 0, 1], b"\0\0\0\0\0");
        wire.extend(&data);
        // The second request split across HEADERS + CONTINUATION, padded, with priority.
        let (a, b) = second.split_at(second.len() / 2);
        let mut padded = vec![3u8];
        padded.extend_from_slice(&[0, 0, 0, 0, 16]);
        padded.extend_from_slice(a);
        padded.extend_from_slice(&[0, 0, 0]);
        wire.extend(headers(3, PADDED | PRIORITY | END_STREAM, &padded));
        frame(&mut wire, CONTINUATION, END_HEADERS, [0, 0, 0, 3], b);
        wire.extend(headers(5, END_HEADERS, &good));

        let (non_header, blocks) = through(wire).await;
        assert_eq!(non_header, data, "DATA passes through byte for byte");
        assert_eq!(blocks.len(), 3);
        assert_eq!(blocks[0], req(b"localhost"));
        assert_eq!(blocks[1], req(b"localhost"));
        assert_eq!(
            blocks[2],
            req(b"example.org:443"),
            "a valid authority is kept"
        );
    }

    /// A reader that hands out its bytes `step` at a time, as a slow socket would.
    struct Trickle {
        data: Vec<u8>,
        at: usize,
        step: usize,
    }

    impl AsyncRead for Trickle {
        fn poll_read(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            let this = self.get_mut();
            let n = this
                .step
                .min(buf.remaining())
                .min(this.data.len() - this.at);
            buf.put_slice(&this.data[this.at..this.at + n]);
            this.at += n;
            Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn any_split_of_reads_gives_the_same_bytes() {
        // Large DATA frames (passed through) between header blocks (rewritten), read through
        // every combination of small and large reads on either side of the layer.
        let mut enc = loona_hpack::Encoder::new();
        let block = |enc: &mut loona_hpack::Encoder<'_>, auth: &[u8]| {
            enc.encode([
                (&b":method"[..], &b"POST"[..]),
                (b":authority", auth),
                (b":path", b"/skillbox.v1.Skillbox/Extract"),
            ])
        };
        let mut wire = preface();
        let mut data = Vec::new();
        for stream in [1u8, 3, 5] {
            wire.extend(headers(stream, END_HEADERS, &block(&mut enc, b"%2Fs.sock")));
            for i in 0..7u8 {
                let payload: Vec<u8> = (0..MAX_FRAME).map(|j| (j as u8) ^ i ^ stream).collect();
                let mut f = Vec::new();
                frame(&mut f, 0x0, 0, [0, 0, 0, stream], &payload);
                wire.extend(&f);
                data.extend(f);
            }
        }
        let (want_data, want_blocks) = through(wire.clone()).await;
        assert_eq!(want_data, data);
        assert_eq!(want_blocks.len(), 3);
        let whole = {
            let mut out = Vec::new();
            FixAuthority::new(&wire[..])
                .read_to_end(&mut out)
                .await
                .unwrap();
            out
        };
        for (step, caller) in [(1, 7), (9, 16_384), (100_000, 3), (4_096, 100_000), (17, 1)] {
            let mut fixed = FixAuthority::new(Trickle {
                data: wire.clone(),
                at: 0,
                step,
            });
            let mut out = Vec::new();
            let mut buf = vec![0u8; caller];
            loop {
                let n = fixed.read(&mut buf).await.unwrap();
                if n == 0 {
                    break;
                }
                out.extend_from_slice(&buf[..n]);
            }
            assert!(
                out == whole,
                "reads of {step} under reads of {caller} differ"
            );
        }
    }

    #[tokio::test]
    async fn an_undecodable_block_closes_the_connection() {
        let mut wire = preface();
        // Indexed field 126: no such entry.
        wire.extend(headers(1, END_HEADERS, &[0xfe]));
        let (mut client, server) = tokio::io::duplex(1 << 16);
        client.write_all(&wire).await.unwrap();
        drop(client);
        let mut out = Vec::new();
        let err = FixAuthority::new(server).read_to_end(&mut out).await;
        assert!(err.is_err(), "{out:?}");
    }

    /// A block that puts a 4000-byte value in the client's table (index 62), then `refs`
    /// one-byte references to it in a block on stream 3 (HEADERS + CONTINUATION frames).
    fn amplifying(refs: usize) -> Vec<u8> {
        let mut entry = vec![0x40, 1, b'x'];
        entry.push(127);
        integer_tail(&mut entry, 4000);
        entry.extend(std::iter::repeat_n(b'v', 4000));
        let mut wire = preface();
        wire.extend(headers(1, END_HEADERS, &entry));
        let refs = vec![0xbe; refs];
        let mut chunks = refs.chunks(MAX_FRAME).peekable();
        let first = chunks.next().unwrap_or(&[]);
        let flags = if chunks.peek().is_none() {
            END_HEADERS
        } else {
            0
        };
        wire.extend(headers(3, flags, first));
        while let Some(c) = chunks.next() {
            let flags = if chunks.peek().is_none() {
                END_HEADERS
            } else {
                0
            };
            frame(&mut wire, CONTINUATION, flags, [0, 0, 0, 3], c);
        }
        wire
    }

    /// The continuation bytes of `n` after a full 7-bit prefix (RFC 7541 §5.1).
    fn integer_tail(out: &mut Vec<u8>, n: usize) {
        let mut v = Vec::new();
        integer(&mut v, n);
        out.extend_from_slice(&v[1..]);
    }

    #[tokio::test]
    async fn a_block_that_decodes_past_the_bound_closes_the_connection() {
        // 40,000 references decode to 160 MB; 16 (64,528 bytes counted) are within the
        // bound and pass, 17 (68,561) are not.
        for (refs, passes) in [(17, false), (16, true), (40_000, false)] {
            let wire = amplifying(refs);
            assert!(
                wire.len() < MAX_BLOCK + 4096 + 200,
                "within the compressed bound"
            );
            let mut fixed = FixAuthority::new(&wire[..]);
            let mut out = Vec::new();
            let mut buf = vec![0u8; 16_384];
            let result = loop {
                match fixed.read(&mut buf).await {
                    Ok(0) => break Ok(()),
                    Ok(n) => out.extend_from_slice(&buf[..n]),
                    Err(e) => break Err(e),
                }
                assert!(
                    fixed.output.capacity() <= 2 * MAX_DECODED + MAX_FRAME,
                    "{refs} references: {} bytes held",
                    fixed.output.capacity()
                );
            };
            assert_eq!(result.is_ok(), passes, "{refs} references: {result:?}");
            assert!(
                out.len() <= MAX_DECODED + 4096 + 200,
                "{refs}: {}",
                out.len()
            );
        }
    }

    #[tokio::test]
    async fn many_small_blocks_are_rewritten_a_few_at_a_time() {
        // 5,000 blocks of ten references (40 KB each decoded, under the bound): read in one
        // go they would all be rewritten at once, 200 MB; the layer holds a few at a time.
        let mut wire = amplifying(0);
        wire.truncate(wire.len() - FRAME_HEADER_LEN);
        for i in 0..5_000u32 {
            let id = (3 + 2 * i).to_be_bytes();
            frame(&mut wire, HEADERS, END_HEADERS, id, &[0xbe; 10]);
        }
        let mut fixed = FixAuthority::new(&wire[..]);
        let mut buf = vec![0u8; 16_384];
        let mut total = 0usize;
        loop {
            let n = fixed.read(&mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            total += n;
            assert!(
                fixed.output.capacity() <= 2 * MAX_DECODED + MAX_FRAME,
                "{} bytes held",
                fixed.output.capacity()
            );
        }
        assert!(total > 5_000 * 40_000, "every block is passed on: {total}");
    }

    #[test]
    fn long_literals_decode_back_to_themselves() {
        for len in [0, 126, 127, 128, 255, 16_383, 70_000] {
            let name = vec![b'n'; len.min(300)];
            let value = vec![b'v'; len];
            let mut v = Vec::new();
            literal(&mut v, &name, &value);
            let got = loona_hpack::Decoder::new().decode(&v).unwrap();
            assert_eq!(got, [(name, value)], "length {len}");
        }
    }
}
