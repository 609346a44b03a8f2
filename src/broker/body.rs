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
use super::partial::{Budget, Unfinished};

/// A gRPC service whose request bodies are guarded as the module says.
#[derive(Clone)]
pub struct Guarded<S> {
    inner: S,
    budget: Arc<Budget>,
    /// A client's reset is an error (the Skillbox service); elsewhere it stays tonic's end.
    resets_fail: bool,
}

impl<S> Guarded<S> {
    /// The Skillbox service: resets fail the call, and every call but an upload is budgeted.
    pub fn skillbox(inner: S, budget: &Arc<Budget>) -> Self {
        Self {
            inner,
            budget: Arc::clone(budget),
            resets_fail: true,
        }
    }

    /// Another service (health, reflection): every call is budgeted.
    pub fn budgeted(inner: S, budget: &Arc<Budget>) -> Self {
        Self {
            inner,
            budget: Arc::clone(budget),
            resets_fail: false,
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

/// The Skillbox service's unary methods, with the name of their request message. Each one's
/// handler marks its request [`Decoded`] first thing: an `INTERNAL` answered before that is
/// taken for the decoder's.
fn unary_request(path: &str) -> Option<&'static str> {
    match path {
        "/skillbox.v1.Skillbox/Release" => Some("ReleaseRequest"),
        "/skillbox.v1.Skillbox/GetTree" => Some("GetTreeRequest"),
        "/skillbox.v1.Skillbox/ServerInfo" => Some("ServerInfoRequest"),
        _ => None,
    }
}

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
            .resets_fail
            .then(|| unary_request(req.uri().path()))
            .flatten()
            .map(|message| {
                let decoded = Decoded::default();
                req.extensions_mut().insert(decoded.clone());
                (message, decoded)
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

/// The answer of a call, rewritten as the module says when it is a unary call's decoder's.
pub struct Answer<F> {
    inner: F,
    /// A unary Skillbox call: its request message's name, and whether its handler ran.
    unary: Option<(&'static str, Decoded)>,
}

impl<F, E> Future for Answer<F>
where
    F: Future<Output = Result<http::Response<Body>, E>> + Unpin,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let response = ready!(Pin::new(&mut this.inner).poll(cx))?;
        Poll::Ready(Ok(match this.unary.take() {
            Some((message, decoded)) => undecoded(response, message, &decoded),
            None => response,
        }))
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
