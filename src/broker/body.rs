//! What the broker does to every request body before a service decodes it, in one wrapper and
//! one pass over each frame ([`Guarded`]):
//!
//! - The bytes of an unfinished request message count in the broker-wide budget of
//!   [`super::partial`] (every call but an upload's: those are read only once admitted).
//! - On the Skillbox service, a client's stream reset is an error, not an end. A client that
//!   gives up mid-upload resets its HTTP/2 stream (`RST_STREAM` with `CANCEL`), and tonic's
//!   decoder reads a cancelled *request* stream as its orderly end. The broker would then take
//!   the bytes received so far for the whole artifact: extract them, keep the tree for a
//!   client that is gone, and count no child killed. Seen in about one run of five of the
//!   hang-up test under load (whether the handler read that "end" before hyper dropped it was
//!   a race). So the reset reaches the handler as an error of its own: the upload is a
//!   hang-up, its child is killed and counted, nothing is extracted. Every other error of the
//!   body (a reset with another code, a connection lost) reaches it as the same code,
//!   `ABORTED`: h2 reads some reset codes as `INTERNAL`, which is also what tonic's decoder
//!   says of a message it cannot decode, and only that is the client's malformed request
//!   (`service::stream_error`).
//! - On the Skillbox service's unary calls (`Release`, `GetTree`, `ServerInfo`), a request
//!   message that does not decode is the client's malformed request, as it is in an upload:
//!   `INVALID_ARGUMENT` in the same words, a BadRequest naming the request message
//!   ([`RequestError::undecodable`]), not tonic's `INTERNAL`. tonic decodes a unary request
//!   before its handler runs and answers a failure itself, so the answer is rewritten here:
//!   an `INTERNAL` answered before the handler marked the request decoded ([`Decoded`]) is
//!   the decoder's (every error of the body is `ABORTED`, above); one answered after it is
//!   the handler's own and stays `INTERNAL`.
//! - Every unary call that ends with an error status is counted once, by method and code, in
//!   `skillbox_unary_request_errors_total` ([`Metrics::unary_error`]), as `Extract`'s errors
//!   are counted in `skillbox_request_errors_total`: a request that did not decode, rewritten
//!   above, as well as one its handler refused (a malformed or unknown `staging_id`, no room
//!   for a tree stream), and a `GetTree` stream that fails after it began. tonic answers a
//!   unary call's decoder and handler alike with a trailers-only response, so a refusal's code
//!   is read here, from the response's head, the one place both pass through. A stream that
//!   began has no status in its head: its status comes in the trailers after its parts
//!   (`DATA_LOSS` for a tree changed under it, `NOT_FOUND` for one released or expired while
//!   read, `DEADLINE_EXCEEDED` for a client that stopped reading), so the body of an answer
//!   that streams ([`Method::streams`], only `GetTree`'s) is wrapped and its code read from
//!   its trailers frame ([`Trailed`]). A stream dropped before its status was sent (the
//!   client reset it, or its connection went) is a hang-up, counted `CANCELLED`, as an
//!   upload's hang-up is counted in `Extract`'s errors, and so is a unary call whose client
//!   went before its request message was whole (its body's `ABORTED`, above, answered before
//!   the handler ran). Either way once: a trailers-only
//!   refusal is counted from its head and its body is not wrapped, and a wrapped body counts
//!   the first of its trailers, an error frame or its drop. A unary answer (`Release`,
//!   `ServerInfo`) is one small message whose trailers are always OK; its body is not
//!   wrapped, nor is any upload's.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, ready};

use http_body::{Frame, SizeHint};
use tonic::body::Body;
use tonic::codegen::{Bytes, Service, http};
use tonic::server::NamedService;
use tonic::{Code, Status};

use super::error::RequestError;
use super::metrics::Metrics;
use super::partial::{Budget, Unfinished};

/// A gRPC service whose request bodies are guarded as the module says.
#[derive(Clone)]
pub struct Guarded<S> {
    inner: S,
    budget: Arc<Budget>,
    /// A client's reset is an error (the Skillbox service); elsewhere it stays tonic's end.
    resets_fail: bool,
    /// Where the Skillbox service's unary refusals are counted; `None` on the other services.
    metrics: Option<Arc<Metrics>>,
}

impl<S> Guarded<S> {
    /// The Skillbox service: resets fail the call, every call but an upload is budgeted, and
    /// the unary calls' refusals are counted in `metrics`.
    pub fn skillbox(inner: S, budget: &Arc<Budget>, metrics: &Arc<Metrics>) -> Self {
        Self {
            inner,
            budget: Arc::clone(budget),
            resets_fail: true,
            metrics: Some(Arc::clone(metrics)),
        }
    }

    /// Another service (health, reflection): every call is budgeted.
    pub fn budgeted(inner: S, budget: &Arc<Budget>) -> Self {
        Self {
            inner,
            budget: Arc::clone(budget),
            resets_fail: false,
            metrics: None,
        }
    }
}

impl<S: NamedService> NamedService for Guarded<S> {
    const NAME: &'static str = S::NAME;
}

/// The methods whose request messages are uploads, read only once admitted.
fn is_upload(path: &str) -> bool {
    matches!(
        path,
        "/skillbox.v1.Skillbox/Extract" | "/skillbox.v1.Skillbox/ExtractWithTree"
    )
}

/// The Skillbox service's unary methods (one request message, whatever they answer). Each
/// one's handler marks its request [`Decoded`] first thing: an `INTERNAL` answered before that
/// is taken for the decoder's. Every method of the contract that takes one request message must
/// be in [`UNARY`], as the contract says it answers, and none that takes a stream (a test reads
/// the contract's descriptor to hold this).
fn unary_request(path: &str) -> Option<Method> {
    let method = path
        .strip_prefix('/')?
        .strip_prefix(crate::proto::skillbox_server::SERVICE_NAME)?
        .strip_prefix('/')?;
    UNARY.iter().copied().find(|m| m.name == method)
}

/// A unary method of the Skillbox service ([`unary_request`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Method {
    /// Its name, a metrics label.
    name: &'static str,
    /// Its request message's name.
    message: &'static str,
    /// It answers a stream, which can fail after it began: its status is read from the
    /// trailers ([`Trailed`]).
    streams: bool,
}

/// The Skillbox service's unary methods ([`unary_request`]).
const UNARY: [Method; 3] = [
    Method {
        name: "Release",
        message: "ReleaseRequest",
        streams: false,
    },
    Method {
        name: "GetTree",
        message: "GetTreeRequest",
        streams: true,
    },
    Method {
        name: "ServerInfo",
        message: "ServerInfoRequest",
        streams: false,
    },
];

/// In the request extensions of a unary Skillbox call: marked by its handler, which tonic
/// calls only once the request message decoded ([`mark_decoded`]).
#[derive(Clone, Default)]
pub struct Decoded(Arc<AtomicBool>);

/// Marks a unary request's message decoded: its handler runs. Every handler of a method
/// [`unary_request`] lists calls it before anything that can fail, so that its own `INTERNAL`
/// stays one.
pub fn mark_decoded(extensions: &http::Extensions) {
    if let Some(decoded) = extensions.get::<Decoded>() {
        decoded.0.store(true, Ordering::Release);
    }
}

impl<S> Service<http::Request<Body>> for Guarded<S>
where
    S: Service<http::Request<Body>, Response = http::Response<Body>>,
    S::Future: Unpin,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Answer<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<Body>) -> Self::Future {
        let unfinished =
            (!is_upload(req.uri().path())).then(|| Unfinished::new(Arc::clone(&self.budget)));
        let unary = self
            .metrics
            .as_ref()
            .zip(unary_request(req.uri().path()))
            .map(|(metrics, method)| {
                let decoded = Decoded::default();
                req.extensions_mut().insert(decoded.clone());
                Unary {
                    method,
                    decoded,
                    metrics: Arc::clone(metrics),
                }
            });
        if unfinished.is_none() && !self.resets_fail {
            return Answer {
                inner: self.inner.call(req),
                unary,
            };
        }
        let resets_fail = self.resets_fail;
        Answer {
            inner: self.inner.call(req.map(|body| {
                Body::new(GuardedBody {
                    body,
                    unfinished,
                    resets_fail,
                })
            })),
            unary,
        }
    }
}

/// The answer of a call, rewritten as the module says when it is a unary call's decoder's, and
/// counted when it is a unary call's refusal (or, for a stream, when its trailers say so).
pub struct Answer<F> {
    inner: F,
    unary: Option<Unary>,
}

/// A unary Skillbox call, as [`unary_request`] names it.
struct Unary {
    method: Method,
    /// Whether its handler ran.
    decoded: Decoded,
    metrics: Arc<Metrics>,
}

impl<F, E> Future for Answer<F>
where
    F: Future<Output = Result<http::Response<Body>, E>> + Unpin,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let response = ready!(Pin::new(&mut this.inner).poll(cx))?;
        let Some(unary) = this.unary.take() else {
            return Poll::Ready(Ok(response));
        };
        let response = undecoded(response, unary.method.message, &unary.decoded);
        // A refusal is a trailers-only response: its status is in the head, and it is counted
        // here. An answer's status comes in its trailers: OK for a unary answer, read there for
        // a stream (never both: a trailers-only response's body is not wrapped).
        match response.headers().get(Status::GRPC_STATUS) {
            Some(code) => {
                if code.as_bytes() != b"0" {
                    let code = match Code::from_bytes(code.as_bytes()) {
                        // Every error of the request body is ABORTED (above): before the
                        // handler ran, that is the client's hang-up (a reset, a connection
                        // lost), counted as an upload's hang-up is in Extract's errors.
                        Code::Aborted if !unary.decoded.0.load(Ordering::Acquire) => {
                            Code::Cancelled
                        }
                        code => code,
                    };
                    unary.metrics.unary_error(unary.method.name, code);
                }
                Poll::Ready(Ok(response))
            }
            None if unary.method.streams => Poll::Ready(Ok(response.map(|body| {
                Body::new(Trailed {
                    body,
                    uncounted: Some((unary.method.name, unary.metrics)),
                })
            }))),
            None => Poll::Ready(Ok(response)),
        }
    }
}

/// The body of a unary call's answer that streams, whose status is counted once: from its
/// trailers frame (the stream's end, or an error after parts), from an error the body itself
/// yields (hyper resets the stream; tonic does so only for a status it cannot encode), or,
/// when it is dropped before either, as the client's hang-up (`CANCELLED`): hyper drops a
/// stream's body unfinished only when its client reset it or its connection went, as an
/// upload's hang-up is counted in `Extract`'s errors. The cost per frame is one test of its
/// kind; per call, this wrapper's allocation.
struct Trailed {
    body: Body,
    /// The method and where to count, until the status is counted.
    uncounted: Option<(&'static str, Arc<Metrics>)>,
}

impl Trailed {
    fn count(&mut self, code: Code) {
        if let Some((method, metrics)) = self.uncounted.take()
            && code != Code::Ok
        {
            metrics.unary_error(method, code);
        }
    }
}

impl http_body::Body for Trailed {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = self.get_mut();
        let polled = ready!(Pin::new(&mut this.body).poll_frame(cx));
        match &polled {
            Some(Ok(frame)) => {
                if let Some(trailers) = frame.trailers_ref() {
                    // tonic's trailers always carry a status; one without is no OK.
                    let code = trailers
                        .get(Status::GRPC_STATUS)
                        .map_or(Code::Unknown, |c| Code::from_bytes(c.as_bytes()));
                    this.count(code);
                }
            }
            Some(Err(status)) => this.count(status.code()),
            // The end after the trailers (or, never from tonic, without any: no status was
            // sent, and the stream did not end as a hang-up either).
            None => this.uncounted = None,
        }
        Poll::Ready(polled)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

impl Drop for Trailed {
    fn drop(&mut self) {
        // Dropped before its status was sent: the client went away.
        self.count(Code::Cancelled);
    }
}

/// `response` unless it is tonic's `INTERNAL` for a request message of `message` that did not
/// decode (answered before the handler ran), which becomes the client's malformed request.
fn undecoded(
    response: http::Response<Body>,
    message: &'static str,
    decoded: &Decoded,
) -> http::Response<Body> {
    let internal = response
        .headers()
        .get(Status::GRPC_STATUS)
        .is_some_and(|code| code.as_bytes() == b"13");
    if !internal || decoded.0.load(Ordering::Acquire) {
        return response;
    }
    let Some(status) = Status::from_header_map(response.headers()) else {
        return response;
    };
    let refused = RequestError::undecodable(
        message,
        status.message(),
        &format!("send one {message} message"),
    );
    tracing::warn!(code = ?refused.code(), error = %refused, "failed");
    Status::from(refused).into_http()
}

/// A request body with its unfinished message counted (when `unfinished` is there) and, when
/// `resets_fail`, a stream reset by the client (`Cancelled`) turned into `Aborted`, which the
/// decoder passes on as the error it is, and every other error of the body `Aborted` too.
struct GuardedBody {
    body: Body,
    unfinished: Option<Unfinished>,
    resets_fail: bool,
}

impl http_body::Body for GuardedBody {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = self.get_mut();
        match Pin::new(&mut this.body).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let (Some(unfinished), Some(data)) = (&mut this.unfinished, frame.data_ref())
                    && let Err(refused) = unfinished.account(data)
                {
                    // The frame is dropped here, and the call fails with the refusal.
                    return Poll::Ready(Some(Err(refused)));
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(s))) if this.resets_fail && s.code() == Code::Cancelled => {
                Poll::Ready(Some(Err(Status::aborted(format!(
                    "the client reset the stream: {}",
                    s.message()
                )))))
            }
            Poll::Ready(Some(Err(s))) if this.resets_fail => Poll::Ready(Some(Err(
                Status::aborted(format!("the request stream failed: {}", s.message())),
            ))),
            other => other,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use prost::Message as _;

    use super::*;
    use crate::proto::{FILE_DESCRIPTOR_SET, skillbox_server::SERVICE_NAME};

    /// A method added to the contract cannot be forgotten here: the descriptor set the build
    /// compiles from proto/ (the one reflection serves, generated with the service's code) is
    /// read, and every method of the Skillbox service that takes one request message is in
    /// [`unary_request`] with that message's name, and no client-streaming one is. (A new
    /// unary method also needs its handler to call [`mark_decoded`] first thing.)
    fn fields(m: Method) -> (&'static str, &'static str, bool) {
        (m.name, m.message, m.streams)
    }

    #[test]
    fn every_unary_method_of_the_contract_and_no_streaming_one_is_listed() {
        let set = prost_types::FileDescriptorSet::decode(FILE_DESCRIPTOR_SET)
            .unwrap_or_else(|e| panic!("the built descriptor set does not decode: {e}"));
        let (package, service) = SERVICE_NAME
            .rsplit_once('.')
            .unwrap_or_else(|| panic!("{SERVICE_NAME} has no package"));
        let methods: Vec<_> = set
            .file
            .iter()
            .filter(|f| f.package() == package)
            .flat_map(|f| &f.service)
            .filter(|s| s.name() == service)
            .flat_map(|s| &s.method)
            .collect();
        let mut unary = Vec::new();
        let mut streamed = 0;
        for m in &methods {
            let path = format!("/{SERVICE_NAME}/{}", m.name());
            if m.client_streaming() {
                streamed += 1;
                assert_eq!(unary_request(&path), None, "{path} takes a stream");
                continue;
            }
            let message = m
                .input_type()
                .strip_prefix(&format!(".{package}."))
                .unwrap_or_else(|| panic!("{path}: {} is not of {package}", m.input_type()));
            let method = (m.name(), message, m.server_streaming());
            assert_eq!(
                unary_request(&path).map(fields),
                Some(method),
                "{path} takes one {message}: list it in UNARY as it answers, and mark it decoded \
                 in its handler"
            );
            unary.push(method);
        }
        assert!(streamed > 0, "no streaming method found in {methods:?}");
        assert!(
            unary.iter().any(|(_, _, streams)| *streams),
            "no unary method answering a stream found in {methods:?}"
        );
        unary.sort_unstable();
        let mut listed: Vec<_> = UNARY.into_iter().map(fields).collect();
        listed.sort_unstable();
        assert_eq!(
            listed, unary,
            "UNARY lists a method the contract does not have"
        );
        // Another service's path is not taken for the Skillbox service's.
        assert_eq!(unary_request("/grpc.health.v1.Health/Check"), None);
        assert_eq!(unary_request(&format!("/{SERVICE_NAME}x/Release")), None);
    }
}
