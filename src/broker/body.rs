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

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http_body::{Frame, SizeHint};
use tonic::body::Body;
use tonic::codegen::{Bytes, Service, http};
use tonic::server::NamedService;
use tonic::{Code, Status};

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

impl<S> Service<http::Request<Body>> for Guarded<S>
where
    S: Service<http::Request<Body>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        let unfinished =
            (!is_upload(req.uri().path())).then(|| Unfinished::new(Arc::clone(&self.budget)));
        if unfinished.is_none() && !self.resets_fail {
            return self.inner.call(req);
        }
        let resets_fail = self.resets_fail;
        self.inner.call(req.map(|body| {
            Body::new(GuardedBody {
                body,
                unfinished,
                resets_fail,
            })
        }))
    }
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
