//! Admission: how much work the broker takes on at once, refused at the door, never queued
//! without bound.
//!
//! Three bounds. A request takes a *slot* before its header is read (children + queue slots
//! exist; none free is RESOURCE_EXHAUSTED at once). Its artifact bytes are *reserved* chunk by
//! chunk against the in-flight byte budget (exceeding it is RESOURCE_EXHAUSTED too). A *child*
//! permit is awaited only by a request that already holds a slot, so at most `max_queued`
//! requests ever wait, and only until their deadline. Everything is released by drop.
//!
//! Tree streams (`GetTree`, `ExtractWithTree`) have their own bound: each holds a reading
//! thread and a few queued chunks for as long as its client takes to read them, so they are
//! counted apart from requests and refused at once past it. What their connections keep of
//! them until their clients read is bounded per connection and broker-wide, and so are the
//! connections themselves ([`super::conn`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::{OwnedSemaphorePermit, Semaphore, TryAcquireError};

use super::config::Bounds;
use super::conn::{Connections, OpenTrees};
use super::error::RequestError;

pub struct Admission {
    slots: Arc<Semaphore>,
    children: Arc<Semaphore>,
    trees: Arc<Semaphore>,
    inflight: Arc<AtomicU64>,
    bounds: Bounds,
    /// Tree streams open in HTTP/2 across all connections (`--max-open-tree-streams`).
    pub open_trees: Arc<OpenTrees>,
    /// Connections open at once (`--max-connections`).
    pub connections: Arc<Connections>,
    /// Request messages begun and not finished (`--max-partial-request-bytes`).
    pub partial: Arc<super::partial::Budget>,
}

/// A request's place in the broker; dropping it frees the place.
pub struct Slot {
    _permit: OwnedSemaphorePermit,
}

/// Bytes a request holds against the in-flight budget; dropping it returns them.
pub struct Reservation {
    inflight: Arc<AtomicU64>,
    max: u64,
    held: u64,
}

impl Admission {
    pub fn new(bounds: Bounds) -> Self {
        let slots = usize::try_from(u64::from(bounds.max_children) + u64::from(bounds.max_queued))
            .unwrap_or(usize::MAX);
        let children = usize::try_from(bounds.max_children).unwrap_or(usize::MAX);
        Self {
            slots: Arc::new(Semaphore::new(slots.min(Semaphore::MAX_PERMITS))),
            children: Arc::new(Semaphore::new(children.min(Semaphore::MAX_PERMITS))),
            trees: Arc::new(Semaphore::new(
                usize::try_from(bounds.max_tree_streams)
                    .unwrap_or(usize::MAX)
                    .min(Semaphore::MAX_PERMITS),
            )),
            inflight: Arc::new(AtomicU64::new(0)),
            bounds,
            open_trees: Arc::new(OpenTrees::default()),
            connections: Arc::new(Connections::new(bounds.max_connections)),
            partial: Arc::new(super::partial::Budget::new(
                bounds.max_partial_request_bytes,
            )),
        }
    }

    /// A place for one request, or RESOURCE_EXHAUSTED now.
    pub fn slot(&self) -> Result<Slot, RequestError> {
        match Arc::clone(&self.slots).try_acquire_owned() {
            Ok(p) => Ok(Slot { _permit: p }),
            Err(TryAcquireError::NoPermits) => Err(RequestError::Overloaded {
                what: "requests in progress (children + queue)",
            }),
            Err(TryAcquireError::Closed) => Err(RequestError::ShuttingDown),
        }
    }

    /// A place for one tree stream, or RESOURCE_EXHAUSTED now.
    pub fn tree_stream(&self) -> Result<OwnedSemaphorePermit, RequestError> {
        match Arc::clone(&self.trees).try_acquire_owned() {
            Ok(p) => Ok(p),
            Err(TryAcquireError::NoPermits) => Err(RequestError::Overloaded {
                what: "tree streams in progress (--max-tree-streams)",
            }),
            Err(TryAcquireError::Closed) => Err(RequestError::ShuttingDown),
        }
    }

    /// Wait for a child to be free. Only slot holders call this, so the wait is bounded.
    pub async fn child(&self) -> Result<OwnedSemaphorePermit, RequestError> {
        Arc::clone(&self.children)
            .acquire_owned()
            .await
            .map_err(|_| RequestError::ShuttingDown)
    }

    pub fn reservation(&self) -> Reservation {
        Reservation {
            inflight: Arc::clone(&self.inflight),
            max: self.bounds.max_inflight_bytes,
            held: 0,
        }
    }

    /// Artifact bytes held across all requests right now.
    pub fn inflight_bytes(&self) -> u64 {
        self.inflight.load(Ordering::Relaxed)
    }

    /// Requests in progress (uploading, waiting or running).
    pub fn in_progress(&self) -> usize {
        let total = usize::try_from(
            u64::from(self.bounds.max_children) + u64::from(self.bounds.max_queued),
        )
        .unwrap_or(usize::MAX);
        total.saturating_sub(self.slots.available_permits())
    }

    /// Children running now.
    pub fn children_running(&self) -> usize {
        usize::try_from(self.bounds.max_children)
            .unwrap_or(usize::MAX)
            .saturating_sub(self.children.available_permits())
    }
}

impl Reservation {
    /// Hold `n` more bytes, or RESOURCE_EXHAUSTED when the budget would be passed.
    pub fn grow(&mut self, n: u64) -> Result<(), RequestError> {
        let mut cur = self.inflight.load(Ordering::Relaxed);
        loop {
            let next =
                cur.checked_add(n)
                    .filter(|&v| v <= self.max)
                    .ok_or(RequestError::Overloaded {
                        what: "artifact bytes in flight",
                    })?;
            match self.inflight.compare_exchange_weak(
                cur,
                next,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    self.held += n;
                    return Ok(());
                }
                Err(actual) => cur = actual,
            }
        }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.inflight.fetch_sub(self.held, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bounds() -> Bounds {
        Bounds {
            max_children: 1,
            max_queued: 1,
            max_inflight_bytes: 100,
            max_chunk_bytes: 10,
            max_tree_streams: 1,
            max_open_tree_streams: 1,
            max_connections: 1,
            max_partial_request_bytes: 1 << 20,
        }
    }

    #[test]
    fn slots_are_refused_at_once_beyond_children_plus_queue() {
        let a = Admission::new(bounds());
        let s1 = a.slot().expect("slot");
        let _s2 = a.slot().expect("slot");
        assert!(matches!(a.slot(), Err(RequestError::Overloaded { .. })));
        drop(s1);
        assert!(a.slot().is_ok());
    }

    #[test]
    fn inflight_bytes_are_bounded_and_returned() {
        let a = Admission::new(bounds());
        let mut r1 = a.reservation();
        r1.grow(60).expect("grow");
        let mut r2 = a.reservation();
        assert!(matches!(r2.grow(41), Err(RequestError::Overloaded { .. })));
        r2.grow(40).expect("grow");
        assert_eq!(a.inflight_bytes(), 100);
        drop(r1);
        assert_eq!(a.inflight_bytes(), 40);
    }
}
