//! The `skillbox.v1.Skillbox` service. Each RPC is a thin wrapper (instrumented with
//! `skip_all`: artifact bytes are never logged) around an inner function returning our own
//! `Result`; the conversion to a gRPC `Status` happens only at that edge.
//!
//! The life of an `Extract`: take an admission slot, read and check the header, make a fresh
//! staging directory and start the job, stream the chunks into it (hashing, counting against
//! the artifact-size limit and the in-flight budget), compare the digest, wait for a child
//! permit, let the child run, and answer. Every early exit drops what it holds: the feed (so
//! no child starts), the kill switch (so a running child dies) and the staging guard (so the
//! directory goes).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_stream::StreamExt as _;
use tonic::{Request, Response, Status, Streaming};
use tracing::Instrument as _;

use super::admission::Admission;
use super::config::Config;
use super::conn;
use super::error::RequestError;
use super::job::{self, Feed, JobFault, KillSwitch, Runner};
use super::metrics::Metrics;
use super::staging::{StagingRoot, is_staging_id};
use super::tree;
use crate::convert;
use crate::digest::Hasher;
use crate::extract::inventory::{ArtifactFacts, Totals};
use crate::intake::Outcome;
use crate::proto as pb;
use crate::proto::extract_request::Msg;
use crate::reason::{Reason, ReasonCode, Verdict};

/// Everything a request needs, shared by all requests.
pub struct State {
    pub config: Config,
    pub admission: Admission,
    pub staging: Arc<StagingRoot>,
    pub runner: Arc<Runner>,
    pub metrics: Arc<Metrics>,
    /// Set when the broker stops (the grace period is over, or a second signal): every
    /// `Extract` still in flight ends at once ([`RequestError::ShuttingDown`]).
    pub stop: tokio::sync::watch::Sender<bool>,
}

#[derive(Clone)]
pub struct SkillboxService {
    state: Arc<State>,
}

impl SkillboxService {
    pub fn new(state: Arc<State>) -> Self {
        Self { state }
    }
}

/// An `Extract` under way, timed from `start`: ended once ([`Unended::end`], which records its
/// duration). Dropped before that, its call was dropped by hyper (the client reset it, or its
/// connection went), and it is counted and logged as a hang-up, `CANCELLED` (its child is
/// killed by its [`KillOnDrop`]). Dropped inside the request's span.
struct Unended<'m> {
    metrics: &'m Metrics,
    start: Instant,
    ended: bool,
}

impl Unended<'_> {
    /// Ends the request: its duration recorded, and returned in milliseconds rounded to a
    /// tenth (a log line is read by people).
    fn end(&mut self) -> f64 {
        self.ended = true;
        let elapsed = self.start.elapsed();
        self.metrics.duration(elapsed);
        (elapsed.as_secs_f64() * 1e4).round() / 10.0
    }
}

impl Drop for Unended<'_> {
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        let ms = self.end();
        self.metrics.error(tonic::Code::Cancelled);
        tracing::warn!(
            code = ?tonic::Code::Cancelled,
            ms,
            "failed: the client went away before the answer"
        );
    }
}

/// Trips the kill switch unless the job ended normally: a dropped request kills its child (the
/// job counts it).
struct KillOnDrop {
    kill: KillSwitch,
    armed: bool,
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if self.armed {
            self.kill.trip();
        }
    }
}

/// The caller's deadline from `grpc-timeout`, a little early so that our DEADLINE_EXCEEDED
/// (after killing the child) reaches the caller before tonic's own timer answers CANCELLED.
fn deadline(meta: &tonic::metadata::MetadataMap, start: Instant) -> Option<Instant> {
    let raw = meta.get("grpc-timeout")?.to_str().ok()?;
    let timeout = parse_grpc_timeout(raw)?;
    let margin = (timeout / 10).min(Duration::from_millis(20));
    Some(start + timeout.saturating_sub(margin))
}

/// `grpc-timeout`: at most 8 digits and a unit (H, M, S, m, u, n), per the gRPC HTTP/2 spec.
fn parse_grpc_timeout(s: &str) -> Option<Duration> {
    let (digits, unit) = s.split_at(s.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.checked_mul(3600)?),
        "M" => Duration::from_secs(n.checked_mul(60)?),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

fn peer_uid<T>(req: &Request<T>) -> Option<u32> {
    super::conn::unix_peer(req.extensions())
        .and_then(|i| i.peer_cred)
        .map(|c| c.uid())
}

/// The message an answer travels in, whose encoded size `header.max_answer_bytes` bounds.
#[derive(Clone, Copy, Debug)]
enum Carrier {
    /// `Extract`: the `ExtractResponse` itself.
    Unary,
    /// `ExtractWithTree`: the first `TreePart`, whose `answer` (field 1) it is.
    TreePart,
}

impl Carrier {
    /// The encoded size of the message that carries `answer`, as the client's decoder counts it
    /// against its receive limit (the gRPC frame's 5-byte prefix is not counted).
    fn len(self, answer: &pb::ExtractResponse) -> usize {
        use prost::Message as _;
        match self {
            Self::Unary => answer.encoded_len(),
            Self::TreePart => prost::encoding::message::encoded_len(1, answer),
        }
    }
}

impl SkillboxService {
    /// One `Extract`, logged and counted; shared by `Extract` and `ExtractWithTree`.
    async fn answer(
        &self,
        request: Request<Streaming<pb::ExtractRequest>>,
        carrier: Carrier,
    ) -> Result<pb::ExtractResponse, Status> {
        let start = Instant::now();
        let deadline = deadline(request.metadata(), start);
        let span = tracing::info_span!(
            "extract",
            peer_uid = peer_uid(&request),
            label = tracing::field::Empty
        );
        let stream = request.into_inner();
        let state = Arc::clone(&self.state);
        let work = async move {
            // hyper drops a call whose client reset it or whose connection went, wherever it is
            // (while its child runs, too): counted and logged then as the hang-up it is, as one
            // mid-upload is, so that every Extract is counted once.
            let mut unended = Unended {
                metrics: &state.metrics,
                start,
                ended: false,
            };
            let extract = async {
                match deadline {
                    Some(at) => tokio::time::timeout_at(at.into(), state.extract(stream, carrier))
                        .await
                        .unwrap_or(Err(RequestError::DeadlineExceeded {
                            during: "before the answer",
                        })),
                    None => state.extract(stream, carrier).await,
                }
            };
            // When the broker stops, the request is dropped where it is: its upload feed goes
            // and its kill switch trips, so its child is killed and reaped and its staging
            // directory removed by the job, which shutdown waits for (`StagingRoot::close`).
            // Biased: a request polled after the stop never makes or keeps anything.
            let mut stop = state.stop.subscribe();
            let result = tokio::select! {
                biased;
                _ = stop.wait_for(|s| *s) => Err(RequestError::ShuttingDown),
                r = extract => r,
            };
            let ms = unended.end();
            match &result {
                Ok(r) => {
                    let verdict = if r.verdict == pb::Verdict::Accepted as i32 {
                        "accepted"
                    } else {
                        "rejected"
                    };
                    let reason = r.reason.as_ref().map_or("none", |x| code_str(x.code));
                    state.metrics.outcome(verdict, reason);
                    tracing::info!(
                        verdict,
                        reason,
                        size = r.artifact.as_ref().map_or(0, |a| a.size),
                        ms,
                        "answered"
                    );
                }
                Err(e) => {
                    state.metrics.error(e.code());
                    tracing::warn!(code = ?e.code(), error = %e, ms, "failed");
                }
            }
            result
        };
        work.instrument(span).await.map_err(Status::from)
    }

    /// A place among the tree streams, and a slot among those open on the request's connection
    /// and on all of them (`conn`: streams whose place is freed stay open in HTTP/2 until their
    /// client reads them), or RESOURCE_EXHAUSTED now.
    fn tree_places(
        &self,
        ext: &tonic::Extensions,
    ) -> Result<(tokio::sync::OwnedSemaphorePermit, conn::TreeSlot), Status> {
        let b = &self.state.config.bounds;
        let open = conn::tree_slot(
            ext,
            b.max_tree_streams,
            &self.state.admission.open_trees,
            b.max_open_tree_streams,
        )
        .map_err(|what| RequestError::Overloaded { what })?;
        Ok((self.state.admission.tree_stream()?, open))
    }

    /// Stream the kept tree `id` on a blocking thread, holding `place` among the tree streams
    /// while it reads (see `tree::send` for when it is freed) and `open` on its connection
    /// until hyper drops the stream; released afterwards when `release`. With no tree (a
    /// rejection), the place is freed once `first` is queued, and `open` at once.
    fn stream_tree(
        &self,
        id: String,
        first: Option<pb::TreePart>,
        release: bool,
        (place, open): (tokio::sync::OwnedSemaphorePermit, conn::TreeSlot),
    ) -> Result<tree::TreeStream, Status> {
        // A rejection's stream is one small answer, like a unary one: it takes no slot on its
        // connection.
        let open = (!id.is_empty()).then_some(open);
        let (tx, stream) = tree::channel(place, open, self.state.config.tree_idle_timeout);
        if let Some(part) = first {
            // The channel is new and empty: the first part always fits.
            tx.first(Ok(part));
        }
        if id.is_empty() {
            // No reading thread and one queued part, like a unary answer: the sender and its
            // place go now, not when the client reads, which it may never do.
            drop(tx);
            return Ok(stream);
        }
        let opened = self
            .state
            .staging
            .open_kept(&id)
            .map_err(|e| Status::internal(format!("cannot open the staging directory: {e}")))?;
        let Some((dir, entries)) = opened else {
            return Err(RequestError::NotFound(id).into());
        };
        let staging = Arc::clone(&self.state.staging);
        tokio::task::spawn_blocking(move || {
            tree::send(dir, entries, tx, &id, || staging.is_kept(&id));
            if release
                && let Some(listed) = staging.take_kept(&id)
                && let Err(e) = staging.remove_listed(&id, &listed)
            {
                tracing::error!(staging_id = %id, error = %e, "cannot remove a staging directory");
            }
        });
        Ok(stream)
    }
}

#[tonic::async_trait]
impl pb::skillbox_server::Skillbox for SkillboxService {
    async fn extract(
        &self,
        request: Request<Streaming<pb::ExtractRequest>>,
    ) -> Result<Response<pb::ExtractResponse>, Status> {
        self.answer(request, Carrier::Unary)
            .await
            .map(Response::new)
    }

    type GetTreeStream = tree::TreeStream;

    #[tracing::instrument(skip_all)]
    async fn get_tree(
        &self,
        request: Request<pb::GetTreeRequest>,
    ) -> Result<Response<Self::GetTreeStream>, Status> {
        super::body::mark_decoded(request.extensions());
        let (_, ext, request) = request.into_parts();
        let id = request.staging_id;
        well_formed_id(&id)?;
        let places = self.tree_places(&ext)?;
        self.stream_tree(id, None, false, places).map(Response::new)
    }

    type ExtractWithTreeStream = tree::TreeStream;

    async fn extract_with_tree(
        &self,
        request: Request<Streaming<pb::ExtractRequest>>,
    ) -> Result<Response<Self::ExtractWithTreeStream>, Status> {
        // Its place among the tree streams first: refused now, before any work, rather than
        // after a tree was accepted that it could not send. Counted as every Extract that ends
        // with an error status is (`answer` counts those refused later).
        let places = self
            .tree_places(request.extensions())
            .inspect_err(|s| self.state.metrics.error(s.code()))?;
        let answer = self.answer(request, Carrier::TreePart).await?;
        let id = answer.staging_id.clone();
        let first = pb::TreePart {
            part: Some(pb::tree_part::Part::Answer(answer)),
        };
        self.stream_tree(id, Some(first), true, places)
            .map(Response::new)
    }

    #[tracing::instrument(skip_all)]
    async fn release(
        &self,
        request: Request<pb::ReleaseRequest>,
    ) -> Result<Response<pb::ReleaseResponse>, Status> {
        super::body::mark_decoded(request.extensions());
        let id = request.into_inner().staging_id;
        self.state
            .release(id)
            .await
            .map(|()| Response::new(pb::ReleaseResponse {}))
            .map_err(Status::from)
    }

    #[tracing::instrument(skip_all)]
    async fn server_info(
        &self,
        request: Request<pb::ServerInfoRequest>,
    ) -> Result<Response<pb::ServerInfoResponse>, Status> {
        super::body::mark_decoded(request.extensions());
        Ok(Response::new(self.state.server_info()))
    }
}

/// A client's `staging_id` checked as `GetTree` and `Release` both check it, so both refuse a
/// malformed one alike: INVALID_ARGUMENT naming the field, and the id. The id is the client's
/// own string, of any length and bytes: it is shown with control characters escaped and its
/// length bounded, so it cannot forge lines or terminal output where the message is shown.
/// (An id well formed but not held is [`RequestError::NotFound`] in both, naming it.)
fn well_formed_id(id: &str) -> Result<(), RequestError> {
    if is_staging_id(id) {
        return Ok(());
    }
    Err(RequestError::invalid(
        "staging_id",
        format!(
            "\"{}\" is not a staging id: it must be the 32 lowercase hex digits of an accepted \
             answer's staging_id",
            crate::reason::display_name(id.as_bytes())
        ),
    ))
}

/// A setting given in milliseconds, as ServerInfo reports it.
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn code_str(code: i32) -> &'static str {
    pb::ReasonCode::try_from(code)
        .ok()
        .and_then(convert::reason_code_from_proto)
        .map_or("unknown", |c| c.as_str())
}

/// The accepted trees awaiting `Release` are at their bounds.
const NOT_KEPT: RequestError = RequestError::Overloaded {
    what: "accepted trees awaiting Release (--max-kept-trees, --max-kept-bytes); release the trees you are done with",
};

/// A job that ended without a verdict. The sandbox's detail names the server's own paths (the
/// staging directory of a failed request, the child binary) and is for the operator: it is
/// logged, and the client is told only that the server failed.
fn job_fault(fault: JobFault) -> RequestError {
    match fault {
        JobFault::Abandoned => {
            RequestError::Internal("the upload was lost on the way to the child".into())
        }
        JobFault::Sandbox(detail) => {
            tracing::error!(%detail, "the sandbox could not run an extraction");
            RequestError::Internal(
                "the sandbox could not run this extraction (the server's log has the detail)"
                    .into(),
            )
        }
    }
}

/// A request stream that failed: a reset or a lost connection is a hang-up, but what tonic's
/// decoder refuses is the client's request to fix, as a chunk past `max_chunk_bytes` is, so it
/// is `INVALID_ARGUMENT` naming `field` (the header for the first message, otherwise the chunk),
/// not `CANCELLED` "by the client": a message past the size it takes (`OUT_OF_RANGE` from
/// tonic), and one it could not decode (`INTERNAL` from tonic: bytes that are no
/// `ExtractRequest`, a bad frame prefix, a stream that ends inside a message). Every error of
/// the body itself reaches here as `ABORTED` ([`super::body`]), so an `INTERNAL` is the
/// decoder's, never a client's `RST_STREAM` (h2 reads some of its codes as `INTERNAL` too).
fn stream_error(status: Status, field: &str, max_chunk_bytes: u64) -> RequestError {
    match status.code() {
        tonic::Code::OutOfRange => RequestError::invalid(
            field,
            format!(
                "a message larger than the server decodes ({}); send the header first, then chunks of at most {max_chunk_bytes} bytes",
                status.message()
            ),
        ),
        tonic::Code::Internal => RequestError::undecodable(
            field,
            status.message(),
            "send ExtractRequest messages, the header first, then chunks",
        ),
        _ => RequestError::Cancelled(status.message().to_owned()),
    }
}

impl State {
    async fn extract(
        self: &Arc<Self>,
        mut stream: Streaming<pb::ExtractRequest>,
        carrier: Carrier,
    ) -> Result<pb::ExtractResponse, RequestError> {
        let _slot = self.admission.slot()?;
        // No room for one more accepted tree: refused before the upload, not after the work.
        if self.staging.full() {
            return Err(NOT_KEPT);
        }
        // The server's own deadlines, counted from here: a client that sends its header or its
        // upload slowly, or never, holds a slot (and then a child and a staging directory) only
        // this long, whatever grpc-timeout it sent or did not send. Timers are registered only
        // if the client makes a read wait.
        let admitted = tokio::time::Instant::now();
        let upload_deadline = tokio::time::sleep_until(admitted + self.config.upload_timeout);
        tokio::pin!(upload_deadline);
        let upload_late = || RequestError::UploadDeadline {
            what: "whole upload",
            setting: "upload-timeout-ms",
            after: self.config.upload_timeout,
        };
        // While this request reads its header and waits for a child, a request before it that
        // takes the ready spare has the next one forked at once.
        let announced = self.runner.expect();
        let first = tokio::time::timeout_at(admitted + self.config.header_timeout, stream.next());
        let first = tokio::select! {
            biased;
            first = first => first.map_err(|_| RequestError::UploadDeadline {
                what: "header",
                setting: "header-timeout-ms",
                after: self.config.header_timeout,
            })?,
            () = &mut upload_deadline => return Err(upload_late()),
        };
        let header = match first {
            None => {
                return Err(RequestError::invalid(
                    "header",
                    "the stream ended before a header",
                ));
            }
            Some(Err(status)) => {
                return Err(stream_error(
                    status,
                    "header",
                    self.config.bounds.max_chunk_bytes,
                ));
            }
            Some(Ok(pb::ExtractRequest {
                msg: Some(Msg::Header(h)),
            })) => h,
            Some(Ok(pb::ExtractRequest {
                msg: Some(Msg::Chunk(_)),
            })) => {
                return Err(RequestError::invalid(
                    "header",
                    "a chunk arrived before the header; send the header first",
                ));
            }
            Some(Ok(pb::ExtractRequest { msg: None })) => {
                return Err(RequestError::invalid(
                    "msg",
                    "an empty message; set `header` or `chunk`",
                ));
            }
        };
        let checked = convert::request_from_header(header, &self.config.limits)?;
        if let Some(label) = &checked.caller_label {
            tracing::Span::current().record("label", label.as_str());
        }
        let max_answer = checked.max_answer_bytes;
        let request = checked.request;
        let max_artifact = request.limits.max_artifact_bytes;
        let expected = request.expected_digest;

        // The child permit comes before anything that makes a process: a child exists from
        // the start of its job (it confines while the upload is sealed), so a request waiting
        // here holds no process, no staging directory and no artifact bytes (HTTP/2 flow
        // control holds the upload back).
        let _child = tokio::select! {
            biased;
            child = self.admission.child() => child?,
            () = &mut upload_deadline => return Err(upload_late()),
        };
        // The job counts itself from here (`Sandbox::run_in`).
        drop(announced);
        let staging = self.staging.create().map_err(|e| {
            if *self.stop.borrow() {
                RequestError::ShuttingDown
            } else {
                RequestError::Internal(format!("cannot make a staging directory: {e}"))
            }
        })?;
        let job = job::start(
            Arc::clone(&self.runner),
            Arc::clone(&self.metrics),
            request,
            staging,
        );
        let mut kill = KillOnDrop {
            kill: job.kill.clone(),
            armed: true,
        };

        // The one pass over the upload's bytes: each chunk is hashed here as it arrives, so a
        // mismatch is refused before the child is told anything, and this digest is the one
        // the sandbox seals the artifact with (it copies the chunks without hashing them again).
        let mut hasher = Hasher::new();
        let mut size = 0u64;
        let mut reservation = self.admission.reservation();
        loop {
            let next = tokio::select! {
                biased;
                next = stream.next() => next,
                () = &mut upload_deadline => return Err(upload_late()),
            };
            let Some(msg) = next else { break };
            let max_chunk_bytes = self.config.bounds.max_chunk_bytes;
            let chunk = match msg
                .map_err(|s| stream_error(s, "chunk", max_chunk_bytes))?
                .msg
            {
                Some(Msg::Chunk(c)) => c,
                Some(Msg::Header(_)) => {
                    return Err(RequestError::invalid(
                        "header",
                        "a second header; send exactly one, first",
                    ));
                }
                None => {
                    return Err(RequestError::invalid(
                        "msg",
                        "an empty message; set `header` or `chunk`",
                    ));
                }
            };
            let len = chunk.len() as u64;
            if len > self.config.bounds.max_chunk_bytes {
                return Err(RequestError::invalid(
                    "chunk",
                    format!("larger than {} bytes", self.config.bounds.max_chunk_bytes),
                ));
            }
            let received = size.saturating_add(len);
            if received > max_artifact {
                // Stop reading now: the rest of the upload is never looked at.
                let reason = Reason::new(
                    ReasonCode::ArtifactSize,
                    "artifact is larger than the limit; the upload was stopped",
                )
                .limit(max_artifact, received);
                let facts = ArtifactFacts {
                    digest: None,
                    format: None,
                    size: received,
                };
                let totals = Totals {
                    bytes_in: received,
                    ..Totals::default()
                };
                return Ok(convert::outcome_to_proto(
                    &Outcome::rejected(facts, totals, reason),
                    None,
                )?);
            }
            if len == 0 {
                continue;
            }
            reservation.grow(len)?;
            hasher.update(&chunk);
            size = received;
            self.metrics.received(len);
            job.feed
                .send(Feed::Chunk(chunk))
                .await
                .map_err(|_| RequestError::Internal("the extraction worker ended early".into()))?;
        }
        let (digest, _) = hasher.finish();
        if let Some(expected) = expected
            && expected != digest
        {
            let reason = Reason::new(
                ReasonCode::DigestMismatch,
                format!("expected {expected}, the bytes received hash to {digest}"),
            );
            let facts = ArtifactFacts {
                digest: Some(digest),
                format: None,
                size,
            };
            let totals = Totals {
                bytes_in: size,
                ..Totals::default()
            };
            return Ok(convert::outcome_to_proto(
                &Outcome::rejected(facts, totals, reason),
                None,
            )?);
        }

        job.feed
            .send(Feed::End(digest))
            .await
            .map_err(|_| RequestError::Internal("the extraction worker ended early".into()))?;
        let end = job
            .handle
            .await
            .map_err(|e| RequestError::Internal(format!("the extraction worker failed: {e}")))?;
        kill.armed = false;
        drop(reservation);
        let (outcome, sandbox) = match end.result {
            Ok(done) => (done.outcome, done.sandbox),
            Err(fault) => return Err(job_fault(fault)),
        };
        // Encoded before the tree is kept: an answer that cannot be sent keeps nothing.
        let mut answer = convert::outcome_to_proto_with(&outcome, None, sandbox)?;
        if outcome.verdict == Verdict::Accepted {
            // What keeping the tree will name it, so that the size measured is the size sent.
            answer.staging_id = end.staging.id().to_owned();
            answer.staging_path = end.staging.path().display().to_string();
        }
        // Nor one the client would refuse: a stock client drops an answer over its receive
        // limit (4 MiB) with its own RESOURCE_EXHAUSTED, and never learns the id that releases
        // the tree, which would then hold its place and bytes until the TTL. Only the child's
        // answer can be that large (an inventory of long paths); the refusals above carry no
        // entries and are a few hundred bytes, under the smallest bound a request may set.
        let bytes = carrier.len(&answer);
        if bytes > max_answer {
            // Removed before the refusal is answered, as below: the client finds nothing left.
            let staging = end.staging;
            let _ = tokio::task::spawn_blocking(move || drop(staging)).await;
            return Err(RequestError::AnswerTooLarge {
                bytes,
                max: max_answer,
            });
        }
        match outcome.verdict {
            Verdict::Accepted => match self.staging.keep(end.staging, &outcome.entries) {
                Ok((id, path)) => {
                    answer.staging_id = id;
                    answer.staging_path = path.display().to_string();
                }
                Err(not_kept) => {
                    // The tree is removed off the async workers (it may be large), and before
                    // the refusal is answered: a client told "not kept" finds nothing left.
                    let _ = tokio::task::spawn_blocking(move || drop(not_kept)).await;
                    return Err(NOT_KEPT);
                }
            },
            Verdict::Rejected => drop(end.staging),
        }
        Ok(answer)
    }

    async fn release(self: &Arc<Self>, id: String) -> Result<(), RequestError> {
        well_formed_id(&id)?;
        let Some(listed) = self.staging.take_kept(&id) else {
            return Err(RequestError::NotFound(id));
        };
        let staging = Arc::clone(&self.staging);
        tokio::task::spawn_blocking(move || {
            crate::stop_point::stop_point("broker:releasing");
            staging.remove_listed(&id, &listed)
        })
        .await
        .map_err(|e| RequestError::Internal(e.to_string()))?
        .map_err(|e| RequestError::Internal(format!("cannot remove the staging directory: {e}")))
    }

    fn server_info(&self) -> pb::ServerInfoResponse {
        let c = self.runner.confinement();
        let b = self.config.bounds;
        pb::ServerInfoResponse {
            version: env!("CARGO_PKG_VERSION").to_owned(),
            limits: Some(convert::limits_to_proto(&self.config.limits)),
            landlock_abi: c.landlock_abi,
            landlock: c.landlock.as_str().to_owned(),
            seccomp: c.seccomp,
            confined: c.confined,
            max_children: b.max_children,
            max_queued: b.max_queued,
            max_inflight_bytes: b.max_inflight_bytes,
            max_chunk_bytes: b.max_chunk_bytes,
            extract_timeout_ms: millis(self.config.extract_timeout),
            staging_ttl_seconds: self.config.staging_ttl.as_secs(),
            header_timeout_ms: millis(self.config.header_timeout),
            upload_timeout_ms: millis(self.config.upload_timeout),
            max_tree_streams: b.max_tree_streams,
            max_open_tree_streams: b.max_open_tree_streams,
            max_connections: b.max_connections,
            max_partial_request_bytes: b.max_partial_request_bytes,
            max_answer_bytes: convert::MAX_RESPONSE_BYTES as u64,
            tree_idle_timeout_ms: millis(self.config.tree_idle_timeout),
            max_kept_trees: self.config.kept.trees,
            max_kept_bytes: self.config.kept.bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sandbox_fault_reaches_the_client_without_the_servers_paths() {
        let fault = crate::sandbox::SandboxError::Staging {
            path: "/run/skillbox/staging/0123456789abcdef0123456789abcdef".into(),
            source: std::io::Error::from(std::io::ErrorKind::PermissionDenied),
        };
        let status = Status::from(job_fault(JobFault::Sandbox(fault.to_string())));
        assert_eq!(status.code(), tonic::Code::Internal);
        assert!(!status.message().contains("/run/skillbox"), "{status:?}");
        assert!(status.message().contains("log"), "{status:?}");
    }

    #[test]
    fn the_measured_size_is_that_of_the_message_sent() {
        use prost::Message as _;
        let answer = pb::ExtractResponse {
            staging_id: "0".repeat(32),
            entries: vec![
                pb::Entry {
                    path: "a".repeat(300),
                    ..Default::default()
                };
                1000
            ],
            ..Default::default()
        };
        assert_eq!(Carrier::Unary.len(&answer), answer.encoded_len());
        let part = pb::TreePart {
            part: Some(pb::tree_part::Part::Answer(answer.clone())),
        };
        assert_eq!(Carrier::TreePart.len(&answer), part.encoded_len());
    }

    #[test]
    fn grpc_timeout_header() {
        assert_eq!(parse_grpc_timeout("100m"), Some(Duration::from_millis(100)));
        assert_eq!(parse_grpc_timeout("2S"), Some(Duration::from_secs(2)));
        assert_eq!(parse_grpc_timeout("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(parse_grpc_timeout("123456789m"), None);
        assert_eq!(parse_grpc_timeout("m"), None);
        assert_eq!(parse_grpc_timeout("10x"), None);
    }
}
