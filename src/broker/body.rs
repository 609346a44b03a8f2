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
//! - Every unary call's refusal is counted, by method and code, in
//!   `skillbox_unary_request_errors_total` ([`Metrics::unary_error`]): a request that did not
//!   decode, rewritten above, as well as one its handler refused (a malformed or unknown
//!   `staging_id`, no room for a tree stream), as `Extract`'s errors are counted in
//!   `skillbox_request_errors_total`. tonic answers a unary call's decoder and handler alike
//!   with a trailers-only response, so the code is read here, from the response's head, the one
//!   place both pass through.

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

/// The Skillbox service's unary methods (one request message, whatever they answer): the
/// method's name (a metrics label) and that of its request message. Each one's handler marks its
/// request [`Decoded`] first thing: an `INTERNAL` answered before that is taken for the
/// decoder's. Every method of the contract that takes one request message must be in [`UNARY`],
/// and none that takes a stream (a test reads the contract's descriptor to hold this).
fn unary_request(path: &str) -> Option<(&'static str, &'static str)> {
    let method = path
        .strip_prefix('/')?
        .strip_prefix(crate::proto::skillbox_server::SERVICE_NAME)?
        .strip_prefix('/')?;
    UNARY.iter().copied().find(|(name, _)| *name == method)
}

/// The Skillbox service's unary methods and their request messages ([`unary_request`]).
const UNARY: [(&str, &str); 3] = [
    ("Release", "ReleaseRequest"),
    ("GetTree", "GetTreeRequest"),
    ("ServerInfo", "ServerInfoRequest"),
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
            .map(|(metrics, (method, message))| {
                let decoded = Decoded::default();
                req.extensions_mut().insert(decoded.clone());
                Unary {
                    method,
                    message,
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
/// counted when it is a unary call's refusal.
pub struct Answer<F> {
    inner: F,
    unary: Option<Unary>,
}

/// A unary Skillbox call, as [`unary_request`] names it.
struct Unary {
    method: &'static str,
    message: &'static str,
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
        let response = undecoded(response, unary.message, &unary.decoded);
        // A refusal is a trailers-only response: its status is in the head. An answer's status
        // comes in its trailers (OK for a unary answer; a GetTree stream that fails after it
        // began is not counted here).
        if let Some(code) = response.headers().get(Status::GRPC_STATUS)
            && code.as_bytes() != b"0"
        {
            unary
                .metrics
                .unary_error(unary.method, Code::from_bytes(code.as_bytes()));
        }
        Poll::Ready(Ok(response))
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
            assert_eq!(
                unary_request(&path),
                Some((m.name(), message)),
                "{path} takes one {message}: list it in UNARY and mark it decoded in its handler"
            );
            unary.push((m.name(), message));
        }
        assert!(streamed > 0, "no streaming method found in {methods:?}");
        unary.sort_unstable();
        let mut listed = UNARY.to_vec();
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
