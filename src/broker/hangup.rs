//! A client that gives up mid-upload resets its HTTP/2 stream (`RST_STREAM` with `CANCEL`), and
//! tonic's decoder reads a cancelled *request* stream as its orderly end. The broker would then
//! take the bytes received so far for the whole artifact: extract them, keep the tree for a
//! client that is gone, and count no child killed. Seen in about one run of five of the hang-up
//! test under load (whether the handler read that "end" before hyper dropped it was a race).
//!
//! [`HangupAware`] wraps the service so that such a reset reaches the handler as an error of its
//! own: the upload is a hang-up, its child is killed and counted, nothing is extracted.

use std::pin::Pin;
use std::task::{Context, Poll};

use http_body::{Frame, SizeHint};
use tonic::body::Body;
use tonic::codegen::{Bytes, Service, http};
use tonic::server::NamedService;
use tonic::{Code, Status};

/// A gRPC service whose request bodies report a client's reset as an error, not an end.
#[derive(Clone)]
pub struct HangupAware<S>(pub S);

impl<S: NamedService> NamedService for HangupAware<S> {
    const NAME: &'static str = S::NAME;
}

impl<S> Service<http::Request<Body>> for HangupAware<S>
where
    S: Service<http::Request<Body>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        self.0.call(req.map(|body| Body::new(ResetIsError(body))))
    }
}

/// The request body, with a stream reset by the client (`Cancelled`) turned into `Aborted`,
/// which the decoder passes on as the error it is.
struct ResetIsError(Body);

impl http_body::Body for ResetIsError {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        match Pin::new(&mut self.get_mut().0).poll_frame(cx) {
            Poll::Ready(Some(Err(s))) if s.code() == Code::Cancelled => Poll::Ready(Some(Err(
                Status::aborted(format!("the client reset the stream: {}", s.message())),
            ))),
            other => other,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.0.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.0.size_hint()
    }
}
