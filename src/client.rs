//! A small client for the skillbox broker, for installers and for `skillbox extract --server`.
//!
//! It streams an artifact (header first, then chunks read as they are sent, never the whole
//! file in memory), and turns the answer back into the same [`Outcome`] the local engine
//! returns, so callers and the CLI's JSON do not care where the extraction ran.
//!
//! An accepted tree can be fetched too ([`Client::get_tree`], [`write_tree`]) and is written
//! with the engine's own writer: beneath one directory fd, no symlink followed, every file's
//! SHA-256 checked against the inventory before success; any mismatch leaves nothing.
//!
//! URIs: `unix:///path/to.sock` (or `unix:` for the default socket), `http://127.0.0.1:PORT`,
//! `https://host:PORT` (CA, and for mutual TLS a client certificate, from
//! `SKILLBOX_TLS_CA`, `SKILLBOX_TLS_CERT`, `SKILLBOX_TLS_KEY`).

use std::os::unix::fs::DirBuilderExt as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt as _};
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use tonic::{Code, Status};

use crate::convert::{self, MalformedAnswer};
use crate::extract::Request;
use crate::extract::detect::ArtifactType;
use crate::extract::policy::Limits;
use crate::intake::Outcome;
use crate::proto as pb;
use crate::proto::skillbox_client::SkillboxClient;

/// Bytes per chunk message; well under the server's default 1 MiB bound.
pub const CHUNK_BYTES: usize = 256 * 1024;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    #[error(
        "invalid server URI {0:?} (use unix:///path, http://127.0.0.1:PORT or https://host:PORT)"
    )]
    Uri(String),
    #[error("cannot connect to {uri}: {source}")]
    Connect {
        uri: String,
        source: tonic::transport::Error,
    },
    #[error("TLS settings: {0}")]
    Tls(String),
    /// One half of the client certificate pair was set without the other: mutual TLS needs
    /// both, and going on without a certificate would hide the mistake until the server
    /// refused the handshake (or, worse, a server that does not ask would never say).
    #[error(
        "{set} is set but {missing} is not: a client certificate needs both \
         SKILLBOX_TLS_CERT and SKILLBOX_TLS_KEY (set both, or neither)"
    )]
    TlsHalfPair {
        set: &'static str,
        missing: &'static str,
    },
    #[error("cannot read the artifact: {0}")]
    Io(#[from] std::io::Error),
    #[error("server answered {}: {}", code_name(.0.code()), .0.message())]
    Status(Status),
    /// The connection failed before the server answered: closed or reset at once (a broker at
    /// its `--max-connections` accepts a connection and closes it), or gone mid-call. gRPC's
    /// UNAVAILABLE ([`ClientError::code`]): the server never saw the call through, and a retry
    /// later may be served.
    #[error("UNAVAILABLE: the server closed the connection before answering ({0})")]
    Unavailable(String),
    #[error(transparent)]
    Malformed(#[from] MalformedAnswer),
    /// The tree sent does not match the accepted inventory, or cannot be written; nothing of
    /// it was left at the destination.
    #[error("tree: {0}")]
    Tree(String),
}

/// The gRPC spelling of a status code (`PERMISSION_DENIED`), which is what operators search for.
fn code_name(code: Code) -> String {
    let camel = format!("{code:?}");
    let mut out = String::with_capacity(camel.len() + 4);
    for (i, c) in camel.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

impl ClientError {
    /// The request itself was refused as malformed (a usage error for the CLI).
    pub fn is_invalid_argument(&self) -> bool {
        matches!(self, Self::Status(s) if s.code() == Code::InvalidArgument)
    }

    pub fn code(&self) -> Option<Code> {
        match self {
            Self::Status(s) => Some(s.code()),
            Self::Unavailable(_) => Some(Code::Unavailable),
            Self::Uri(_)
            | Self::Connect { .. }
            | Self::Tls(_)
            | Self::TlsHalfPair { .. }
            | Self::Io(_)
            | Self::Malformed(_)
            | Self::Tree(_) => None,
        }
    }
}

/// A call's failure as the caller should read it. tonic's client makes a status of its own
/// when the connection fails (its source is the transport error): UNKNOWN or CANCELLED,
/// whichever way it noticed first (a reset, a broken pipe, a connection closed before the
/// request went out). gRPC says UNAVAILABLE for that, and a caller must be able to tell it
/// from an answer: it is [`ClientError::Unavailable`]. tonic's own deadline timer (also a
/// local CANCELLED) is left as it is for the caller to name.
fn call_failed(status: Status) -> ClientError {
    let mut chain = std::error::Error::source(&status);
    let local = chain.is_some_and(|e| e.is::<tonic::transport::Error>());
    let mut deadline = false;
    while let Some(e) = chain {
        deadline |= e.is::<tonic::TimeoutExpired>();
        chain = e.source();
    }
    if local && !deadline && matches!(status.code(), Code::Unknown | Code::Cancelled) {
        return ClientError::Unavailable(error_chain(&status));
    }
    ClientError::Status(status)
}

/// A failed connect. One the server took and closed at once (a broker at its
/// `--max-connections` accepts and closes unread, so the HTTP/2 handshake meets a closed or
/// reset connection) is [`ClientError::Unavailable`]; one nobody took (no socket, nothing
/// listening, no route, a timeout) stays [`ClientError::Connect`].
fn connect_failed(uri: &str, source: tonic::transport::Error) -> ClientError {
    use std::io::ErrorKind;
    let mut chain = std::error::Error::source(&source);
    let mut closed = false;
    while let Some(e) = chain {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            closed = matches!(
                io.kind(),
                ErrorKind::BrokenPipe
                    | ErrorKind::ConnectionReset
                    | ErrorKind::ConnectionAborted
                    | ErrorKind::UnexpectedEof
            );
            break;
        }
        chain = e.source();
    }
    if closed {
        return ClientError::Unavailable(error_chain(&source));
    }
    ClientError::Connect {
        uri: uri.to_owned(),
        source,
    }
}

/// An error and its sources, each said once.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut why = e.to_string();
    let mut chain = e.source();
    while let Some(e) = chain {
        let text = e.to_string();
        if !why.contains(&text) {
            why = format!("{why}: {text}");
        }
        chain = e.source();
    }
    why
}

/// An answer: the outcome, for an acceptance the staged tree the server keeps, and how the
/// request was confined (the `sandbox` object of the CLI's JSON) when a child ran.
#[derive(Debug, Clone)]
pub struct Extracted {
    pub outcome: Outcome,
    pub staged: Option<Staged>,
    pub sandbox: Option<serde_json::Value>,
}

/// An accepted tree on the server's side, until [`Client::release`] or the server's TTL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Staged {
    pub id: String,
    pub path: PathBuf,
}

#[derive(Clone)]
pub struct Client {
    inner: SkillboxClient<Channel>,
}

/// PEM material for an `https` endpoint.
#[derive(Debug, Clone, Default)]
pub struct TlsMaterial {
    /// CA bundle to verify the server with.
    pub ca: Option<Vec<u8>>,
    /// Client certificate chain and key, for mutual TLS.
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl TlsMaterial {
    /// From `SKILLBOX_TLS_CA`, `SKILLBOX_TLS_CERT` and `SKILLBOX_TLS_KEY` (file paths).
    /// Only one of `SKILLBOX_TLS_CERT` and `SKILLBOX_TLS_KEY` set is an error
    /// ([`ClientError::TlsHalfPair`]), said before either file is read.
    pub fn from_env() -> Result<Self, ClientError> {
        half_pair()?;
        let read = |var: &str| -> Result<Option<Vec<u8>>, ClientError> {
            match std::env::var_os(var) {
                None => Ok(None),
                Some(p) => std::fs::read(&p)
                    .map(Some)
                    .map_err(|e| ClientError::Tls(format!("{var}: {e}"))),
            }
        };
        let ca = read("SKILLBOX_TLS_CA")?;
        let identity = match (read("SKILLBOX_TLS_CERT")?, read("SKILLBOX_TLS_KEY")?) {
            (Some(c), Some(k)) => Some((c, k)),
            _ => None,
        };
        Ok(Self { ca, identity })
    }
}

/// Whether only one of `SKILLBOX_TLS_CERT` and `SKILLBOX_TLS_KEY` is set (an error naming
/// both): a caller can check it before doing anything else.
pub fn half_pair() -> Result<(), ClientError> {
    const CERT: &str = "SKILLBOX_TLS_CERT";
    const KEY: &str = "SKILLBOX_TLS_KEY";
    match (std::env::var_os(CERT), std::env::var_os(KEY)) {
        (Some(_), None) => Err(ClientError::TlsHalfPair {
            set: CERT,
            missing: KEY,
        }),
        (None, Some(_)) => Err(ClientError::TlsHalfPair {
            set: KEY,
            missing: CERT,
        }),
        _ => Ok(()),
    }
}

/// The endpoint for `uri`; for `https`, TLS material from the environment.
pub fn endpoint(uri: &str) -> Result<Endpoint, ClientError> {
    let tls = if uri.starts_with("https://") {
        TlsMaterial::from_env()?
    } else {
        TlsMaterial::default()
    };
    endpoint_with(uri, &tls)
}

/// The endpoint for `uri` with explicit TLS material (used for `https` only).
pub fn endpoint_with(uri: &str, tls: &TlsMaterial) -> Result<Endpoint, ClientError> {
    let uri = if uri == "unix:" || uri == "unix://" {
        format!("unix://{}", convert::default_socket().display())
    } else {
        uri.to_owned()
    };
    let ep =
        if uri.starts_with("unix:") || uri.starts_with("http://") || uri.starts_with("https://") {
            Endpoint::from_shared(uri.clone()).map_err(|_| ClientError::Uri(uri.clone()))?
        } else {
            return Err(ClientError::Uri(uri));
        };
    let ep = ep.connect_timeout(Duration::from_secs(5)).tcp_nodelay(true);
    if !uri.starts_with("https://") {
        return Ok(ep);
    }
    let mut config = ClientTlsConfig::new();
    if let Some(ca) = &tls.ca {
        config = config.ca_certificate(Certificate::from_pem(ca));
    }
    if let Some((cert, key)) = &tls.identity {
        config = config.identity(Identity::from_pem(cert, key));
    }
    // tonic's error says only "transport error": the cause (a key that does not match its
    // certificate, a file that holds no certificate) is its source.
    ep.tls_config(config).map_err(|e| {
        ClientError::Tls(match std::error::Error::source(&e) {
            Some(cause) => format!("{e}: {cause}"),
            None => e.to_string(),
        })
    })
}

/// The request limits that differ from the defaults (what a caller deliberately set).
pub fn limits_delta(l: &Limits) -> Option<pb::Limits> {
    let mine = convert::limits_to_proto(l);
    let base = convert::limits_to_proto(&Limits::default());
    let pick = |a: Option<u64>, b: Option<u64>| if a == b { None } else { a };
    let delta = pb::Limits {
        max_artifact_bytes: pick(mine.max_artifact_bytes, base.max_artifact_bytes),
        max_entries: pick(mine.max_entries, base.max_entries),
        max_expanded_bytes: pick(mine.max_expanded_bytes, base.max_expanded_bytes),
        max_file_bytes: pick(mine.max_file_bytes, base.max_file_bytes),
        max_ratio: pick(mine.max_ratio, base.max_ratio),
        ratio_threshold_bytes: pick(mine.ratio_threshold_bytes, base.ratio_threshold_bytes),
        max_path_depth: pick(mine.max_path_depth, base.max_path_depth),
        max_path_bytes: pick(mine.max_path_bytes, base.max_path_bytes),
        max_component_bytes: pick(mine.max_component_bytes, base.max_component_bytes),
        zstd_window_log_max: (mine.zstd_window_log_max != base.zstd_window_log_max)
            .then_some(mine.zstd_window_log_max)
            .flatten(),
        allow_symlinks: (mine.allow_symlinks != base.allow_symlinks)
            .then_some(mine.allow_symlinks)
            .flatten(),
        hardlinks: (mine.hardlinks != base.hardlinks)
            .then_some(mine.hardlinks)
            .flatten(),
        require_skill_md: (mine.require_skill_md != base.require_skill_md)
            .then_some(mine.require_skill_md)
            .flatten(),
    };
    (delta != pb::Limits::default()).then_some(delta)
}

/// The header for an engine [`Request`] (limits sent only where they differ from the defaults).
pub fn header_for(req: &Request) -> pb::ExtractHeader {
    pb::ExtractHeader {
        expected_digest: req.expected_digest.map(|d| d.to_string()),
        declared_type: match req.artifact_type {
            ArtifactType::SkillMd => pb::ArtifactType::SkillMd,
            ArtifactType::Archive => pb::ArtifactType::Archive,
        } as i32,
        media_type: req.media_type.clone(),
        file_name: req.file_name.clone(),
        url: None,
        limits: limits_delta(&req.limits),
        skill_name: req.skill_name.clone(),
        index_description: req.index_description.clone(),
        caller_label: None,
        // Set to this client's receive limit by `Client::extract`.
        max_answer_bytes: 0,
    }
}

impl Client {
    pub async fn connect(uri: &str) -> Result<Self, ClientError> {
        Self::connect_to(uri, endpoint(uri)?).await
    }

    /// Connect with an endpoint built by [`endpoint_with`].
    pub async fn connect_to(uri: &str, endpoint: Endpoint) -> Result<Self, ClientError> {
        let channel = endpoint
            .connect()
            .await
            .map_err(|source| connect_failed(uri, source))?;
        Ok(Self::from_channel(channel))
    }

    pub fn from_channel(channel: Channel) -> Self {
        Self {
            inner: SkillboxClient::new(channel)
                .max_decoding_message_size(convert::MAX_RESPONSE_BYTES),
        }
    }

    /// Stream `artifact` after `header`; `timeout` becomes the call's deadline. A header that
    /// leaves `max_answer_bytes` unset (0) is sent with this client's own receive limit,
    /// [`convert::MAX_RESPONSE_BYTES`], so the broker sends any answer this client can decode;
    /// set it to bound the answer lower.
    pub async fn extract(
        &mut self,
        mut header: pb::ExtractHeader,
        mut artifact: impl AsyncRead + Send + Unpin + 'static,
        timeout: Option<Duration>,
    ) -> Result<Extracted, ClientError> {
        if header.max_answer_bytes == 0 {
            header.max_answer_bytes = convert::MAX_RESPONSE_BYTES as u64;
        }
        let (tx, rx) = tokio::sync::mpsc::channel::<pb::ExtractRequest>(4);
        // Set before the server hears of it, so the answer to a refused upload finds it.
        let (failed_tx, mut failed) = tokio::sync::oneshot::channel::<std::io::Error>();
        let reader = tokio::spawn(async move {
            let header = pb::ExtractRequest {
                msg: Some(pb::extract_request::Msg::Header(header)),
            };
            if tx.send(header).await.is_err() {
                return;
            }
            loop {
                // Filled in place, not zeroed first: a chunk is sent away whole (it becomes
                // the message's bytes), so each is a fresh allocation.
                let mut buf = prost::bytes::BytesMut::with_capacity(CHUNK_BYTES);
                while buf.len() < CHUNK_BYTES {
                    let room = (CHUNK_BYTES - buf.len()) as u64;
                    let n = match (&mut artifact).take(room).read_buf(&mut buf).await {
                        Ok(n) => n,
                        Err(e) => {
                            // Ending the stream would tell the server the upload is whole:
                            // what was sent so far would be extracted (and, with no digest
                            // to refuse it, kept). A message with neither field is refused
                            // as malformed, so the upload is refused and nothing is kept.
                            let _ = failed_tx.send(e);
                            let _ = tx.send(pb::ExtractRequest { msg: None }).await;
                            return;
                        }
                    };
                    if n == 0 {
                        break;
                    }
                }
                if buf.is_empty() {
                    return;
                }
                // The server may answer early (e.g. the artifact passed its size limit).
                if tx
                    .send(pb::ExtractRequest {
                        msg: Some(pb::extract_request::Msg::Chunk(buf.freeze())),
                    })
                    .await
                    .is_err()
                {
                    return;
                }
            }
        });
        let mut request = tonic::Request::new(ReceiverStream::new(rx));
        if let Some(t) = timeout {
            request.set_timeout(t);
        }
        let call = self.inner.extract(request);
        let answer = match timeout {
            // Our own timer too: a deadline holds even if the server never answers.
            Some(t) => tokio::time::timeout(t + Duration::from_millis(500), call)
                .await
                .unwrap_or_else(|_| {
                    Err(Status::deadline_exceeded(
                        "deadline exceeded (client timer)",
                    ))
                }),
            None => call.await,
        };
        let answer = match answer {
            Ok(r) => r.into_inner(),
            Err(status) => {
                reader.abort();
                // The server refused the upload because our source failed: that is the cause.
                if let Ok(e) = failed.try_recv() {
                    return Err(ClientError::Io(e));
                }
                // tonic's server-side timer answers CANCELLED "Timeout expired" for a deadline.
                if timeout.is_some()
                    && status.code() == Code::Cancelled
                    && status.message() == "Timeout expired"
                {
                    return Err(ClientError::Status(Status::deadline_exceeded(
                        status.message().to_owned(),
                    )));
                }
                return Err(call_failed(status));
            }
        };
        // An answer before our source failed is about the bytes the server took, and cannot
        // have kept them (only a stream that ended is extracted); the failure is still ours.
        let _ = reader.await;
        if let Ok(e) = failed.try_recv() {
            return Err(ClientError::Io(e));
        }
        let outcome = convert::outcome_from_proto(&answer)?;
        let staged = (!answer.staging_id.is_empty()).then(|| Staged {
            id: answer.staging_id.clone(),
            path: PathBuf::from(&answer.staging_path),
        });
        let sandbox = answer.sandbox.as_ref().map(convert::sandbox_from_proto);
        Ok(Extracted {
            outcome,
            staged,
            sandbox,
        })
    }

    /// [`Client::extract`] from a file.
    pub async fn extract_file(
        &mut self,
        path: &Path,
        header: pb::ExtractHeader,
        timeout: Option<Duration>,
    ) -> Result<Extracted, ClientError> {
        let file = tokio::fs::File::open(path).await?;
        self.extract(header, file, timeout).await
    }

    /// Delete an accepted staging directory on the server.
    pub async fn release(&mut self, staging_id: &str) -> Result<(), ClientError> {
        self.inner
            .release(pb::ReleaseRequest {
                staging_id: staging_id.to_owned(),
            })
            .await
            .map(|_| ())
            .map_err(call_failed)
    }

    /// Fetch the accepted tree `staged` into `dest` (see [`write_tree`]); the server keeps it
    /// until [`Client::release`].
    pub async fn get_tree(
        &mut self,
        staging_id: &str,
        inventory: &[crate::extract::inventory::Entry],
        dest: &Path,
    ) -> Result<TreeWritten, ClientError> {
        let parts = self
            .inner
            .get_tree(pb::GetTreeRequest {
                staging_id: staging_id.to_owned(),
            })
            .await
            .map_err(call_failed)?
            .into_inner();
        write_tree(parts, inventory, dest).await
    }

    pub async fn server_info(&mut self) -> Result<pb::ServerInfoResponse, ClientError> {
        self.inner
            .server_info(pb::ServerInfoRequest {})
            .await
            .map(tonic::Response::into_inner)
            .map_err(call_failed)
    }
}

/// What [`write_tree`] wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TreeWritten {
    pub entries: u64,
    pub files: u64,
    pub bytes: u64,
}

/// The file being written and what it must come to.
struct OpenFile {
    file: std::fs::File,
    path: String,
    hasher: crate::digest::Hasher,
    written: u64,
    size: u64,
    sha256: Option<crate::digest::Sha256Digest>,
    executable: bool,
}

impl OpenFile {
    fn finish(self) -> Result<(), String> {
        let (digest, _) = self.hasher.finish();
        if self.written != self.size || Some(digest) != self.sha256 {
            return Err(format!(
                "{}: {} bytes hashing to {digest}, the inventory says {} bytes, {:?}",
                self.path,
                self.written,
                self.size,
                self.sha256.map(|d| d.to_string())
            ));
        }
        crate::extract::writer::Writer::finish_file(&self.file, self.executable)
            .map_err(|e| format!("{}: {e}", self.path))
    }
}

/// Write a tree stream (`GetTree`'s parts) into `dest`, a directory this call creates (0700; it
/// must not exist), holding every node against `inventory` (the accepted answer's entries, in
/// order). Succeeds only when every entry arrived, in order, as the inventory says, and every
/// file's bytes hash to its SHA-256; otherwise `dest` is removed with everything in it.
pub async fn write_tree<S>(
    mut parts: S,
    inventory: &[crate::extract::inventory::Entry],
    dest: &Path,
) -> Result<TreeWritten, ClientError>
where
    S: tokio_stream::Stream<Item = Result<pb::TreePart, Status>> + Unpin,
{
    use std::os::fd::AsFd as _;
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(dest)
        .map_err(|e| ClientError::Tree(format!("cannot create {}: {e}", dest.display())))?;
    let opened = nix::fcntl::open(
        dest,
        nix::fcntl::OFlag::O_RDONLY
            | nix::fcntl::OFlag::O_DIRECTORY
            | nix::fcntl::OFlag::O_NOFOLLOW
            | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    );
    let root = match opened {
        Ok(fd) => fd,
        Err(e) => {
            let _ = std::fs::remove_dir(dest);
            return Err(ClientError::Tree(format!(
                "cannot open {}: {e}",
                dest.display()
            )));
        }
    };
    let mut writer = crate::extract::writer::Writer::new(root.as_fd());
    let result = fill(&mut parts, inventory, &mut writer).await;
    if result.is_err() {
        // Nothing half-written survives: the directory was ours and new.
        let _ = writer.clear();
        let _ = std::fs::remove_dir(dest);
    }
    result
}

async fn fill<S>(
    parts: &mut S,
    inventory: &[crate::extract::inventory::Entry],
    writer: &mut crate::extract::writer::Writer<'_>,
) -> Result<TreeWritten, ClientError>
where
    S: tokio_stream::Stream<Item = Result<pb::TreePart, Status>> + Unpin,
{
    use crate::extract::inventory::Kind;
    use std::io::Write as _;
    use tokio_stream::StreamExt as _;
    let tree_err = ClientError::Tree;
    let mut next = inventory.iter();
    let mut open: Option<OpenFile> = None;
    let mut done = TreeWritten::default();
    while let Some(part) = parts.next().await {
        match part.map_err(call_failed)?.part {
            Some(pb::tree_part::Part::Entry(got)) => {
                if let Some(f) = open.take() {
                    f.finish().map_err(tree_err)?;
                }
                let want = next
                    .next()
                    .ok_or_else(|| tree_err(format!("{:?} is not in the inventory", got.path)))?;
                if got != convert::entry_to_proto(want) {
                    return Err(tree_err(format!(
                        "{:?} arrived where the inventory has {:?}, or differs from it",
                        got.path, want.path
                    )));
                }
                done.entries += 1;
                if done.entries == 2 {
                    crate::stop_point::stop_point("client:tree-begun");
                }
                let io = |e: std::io::Error| tree_err(format!("{}: {e}", want.path));
                match want.kind {
                    Kind::Dir => writer.mkdir(&want.path).map_err(io)?,
                    Kind::Symlink => writer
                        .symlink(&want.path, want.link_target.as_deref().unwrap_or(""))
                        .map_err(io)?,
                    Kind::File => {
                        open = Some(OpenFile {
                            file: writer.create_file(&want.path).map_err(io)?,
                            path: want.path.clone(),
                            hasher: crate::digest::Hasher::new(),
                            written: 0,
                            size: want.size,
                            sha256: want.sha256,
                            executable: want.mode == "0755",
                        });
                        done.files += 1;
                    }
                }
            }
            Some(pb::tree_part::Part::Chunk(bytes)) => {
                let f = open
                    .as_mut()
                    .ok_or_else(|| tree_err("bytes arrived outside a file".to_owned()))?;
                let n = bytes.len() as u64;
                if f.written + n > f.size {
                    return Err(tree_err(format!("{}: more bytes than its size", f.path)));
                }
                f.hasher.update(&bytes);
                f.file
                    .write_all(&bytes)
                    .map_err(|e| tree_err(format!("{}: {e}", f.path)))?;
                f.written += n;
                done.bytes += n;
            }
            Some(pb::tree_part::Part::Answer(_)) | None => {
                return Err(tree_err("an unexpected part in the tree".to_owned()));
            }
        }
    }
    if let Some(f) = open.take() {
        f.finish().map_err(tree_err)?;
    }
    if let Some(missing) = next.next() {
        return Err(tree_err(format!(
            "the tree ended before {:?}",
            missing.path
        )));
    }
    Ok(done)
}

/// The broker's `grpc.health.v1` status for `service` (`""`: the server as a whole), within
/// `timeout`. Blocking: runs its own small runtime (`skillbox health`).
pub fn health_blocking(
    server: &str,
    service: &str,
    timeout: Duration,
) -> Result<tonic_health::pb::health_check_response::ServingStatus, ClientError> {
    use tonic_health::pb::health_check_response::ServingStatus;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let channel = endpoint(server)?
            .timeout(timeout)
            .connect()
            .await
            .map_err(|source| connect_failed(server, source))?;
        let mut health = tonic_health::pb::health_client::HealthClient::new(channel);
        let answer = health
            .check(tonic_health::pb::HealthCheckRequest {
                service: service.to_owned(),
            })
            .await
            .map_err(call_failed)?;
        Ok(ServingStatus::try_from(answer.into_inner().status).unwrap_or(ServingStatus::Unknown))
    })
}

/// `skillbox extract --server URI`: send the artifact, return the answer, release the staged
/// tree (like the local path's temporary directory). Blocking: runs its own small runtime.
pub fn extract_blocking(
    server: &str,
    artifact: &Path,
    req: &Request,
) -> Result<Extracted, ClientError> {
    extract_blocking_into(server, artifact, req, None)
}

/// [`extract_blocking`], and for an acceptance with `out`, the tree written into `out` (a new
/// directory) before the server's copy is released.
pub fn extract_blocking_into(
    server: &str,
    artifact: &Path,
    req: &Request,
    out: Option<&Path>,
) -> Result<Extracted, ClientError> {
    match extract_blocking_until(server, artifact, req, out, &|| false)? {
        Until::Done(done) => Ok(*done),
        Until::Stopped(_) => Err(ClientError::Tree("stopped".to_owned())),
    }
}

/// How [`extract_blocking_until`] ended.
#[derive(Debug)]
pub enum Until {
    Done(Box<Extracted>),
    /// Given up when told to, wherever the exchange was.
    Stopped(Released),
}

/// What became of the server's copy of the tree when an exchange was given up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Released {
    /// None was held, or the server said it removed it.
    Yes,
    /// The server did not say within [`RELEASE_ON_STOP`] that it removed it: it does once it
    /// takes the release, if that reached it, else when the copy expires.
    Unconfirmed,
}

/// [`extract_blocking_into`], given up as soon as `stop` says so (asked every 20 ms: the
/// command was interrupted). What was written of `out` by then is left for the caller to
/// remove; the server's copy of an accepted tree is released on a connection of its own
/// (waited for [`RELEASE_ON_STOP`] at most), else left to the server's expiry.
pub fn extract_blocking_until(
    server: &str,
    artifact: &Path,
    req: &Request,
    out: Option<&Path>,
    stop: &(dyn Fn() -> bool + Sync),
) -> Result<Until, ClientError> {
    // Writing a tree, two workers: the connection (TLS, HTTP/2, decoding) runs on them while
    // this thread hashes and writes the files; on one thread the two take turns
    // (bench-results/load.md: about 540-630 MB/s for a 200 MB tree against 460-620).
    let runtime = match out {
        Some(_) => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?,
        None => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?,
    };
    // The id of the server's copy while this call holds it (between the answer and Release).
    let held: std::cell::RefCell<Option<String>> = std::cell::RefCell::new(None);
    runtime.block_on(async {
        let work = async {
            let mut client = Client::connect(server).await?;
            let done = client.extract_file(artifact, header_for(req), None).await?;
            if let Some(staged) = &done.staged {
                held.replace(Some(staged.id.clone()));
                let written = match out {
                    Some(dest) => client
                        .get_tree(&staged.id, &done.outcome.entries, dest)
                        .await
                        .map(|_| ()),
                    None => Ok(()),
                };
                client.release(&staged.id).await?;
                held.replace(None);
                written?;
            }
            Ok(done)
        };
        let stopped = async {
            while !stop() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        tokio::select! {
            done = work => done.map(|d| Until::Done(Box::new(d))),
            () = stopped => {
                // The exchange is dropped (a tree being sent stops at the server's next file:
                // it checks the copy is still kept). Best effort: the server's expiry removes
                // what a Release that does not arrive in time leaves.
                let Some(id) = held.take() else {
                    return Ok(Until::Stopped(Released::Yes));
                };
                let release = async { Client::connect(server).await?.release(&id).await };
                Ok(Until::Stopped(
                    match tokio::time::timeout(RELEASE_ON_STOP, release).await {
                        Ok(Ok(())) => Released::Yes,
                        Ok(Err(_)) | Err(_) => Released::Unconfirmed,
                    },
                ))
            }
        }
    })
}

/// How long an interrupted [`extract_blocking_until`] waits for the server to release its copy.
const RELEASE_ON_STOP: Duration = Duration::from_secs(2);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_deliberate_limits_are_sent() {
        assert_eq!(limits_delta(&Limits::default()), None);
        let l = Limits {
            max_entries: 5,
            allow_symlinks: false,
            ..Limits::default()
        };
        let d = limits_delta(&l).unwrap_or_default();
        assert_eq!(d.max_entries, Some(5));
        assert_eq!(d.allow_symlinks, Some(false));
        assert_eq!(d.max_file_bytes, None);
    }

    #[test]
    fn uris() {
        assert!(endpoint("unix:///tmp/x.sock").is_ok());
        assert!(endpoint("http://127.0.0.1:1").is_ok());
        assert!(matches!(endpoint("/tmp/x.sock"), Err(ClientError::Uri(_))));
    }
}
