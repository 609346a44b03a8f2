//! Request messages begun and not finished, bounded across all connections.
//!
//! tonic's decoder holds what has arrived of a request message until the whole message is
//! there (up to the service's message size limit: about 1 MiB here, 4 MiB for health and
//! reflection), and hands the flow-control window back as it goes, so such bytes cost their
//! client nothing: any call's stream can hold them, on each of a connection's 1024 streams, on
//! every connection. Measured: 8 connections each sending 80 `Release` messages 300 KB of their
//! declared 1 MiB took the broker from 33 MB to 229 MB, until the connections closed.
//!
//! Each call's request body ([`super::body::Guarded`]) counts the bytes of its unfinished
//! message ([`Unfinished`]) in one broker-wide budget (`--max-partial-request-bytes`), from the frame that brings them
//! until the message is complete or the call ends; a frame that would pass the budget fails its
//! call with RESOURCE_EXHAUSTED and its bytes go. Only what stays unfinished after a frame is
//! counted, so a message that arrives whole in its frame (every request of this contract but an
//! upload chunk, health probes included) is never refused, however full the budget is.
//! Uploads (`Extract`, `ExtractWithTree`) are not counted: their bytes are read only by an
//! admitted request ([`super::admission`]) and counted against `--max-inflight-bytes`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tonic::Status;

/// Why a call was refused: request messages begun and not finished hold the whole budget.
pub const TOO_MANY_PARTIAL: &str = "request message bytes begun and not finished across all connections (--max-partial-request-bytes); send each message whole";

/// The bytes of unfinished request messages held across all calls.
pub struct Budget {
    held: AtomicU64,
    max: u64,
}

impl Budget {
    pub fn new(max: u64) -> Self {
        Self {
            held: AtomicU64::new(0),
            max,
        }
    }

    /// Bytes held now.
    pub fn held(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }

    fn take(&self, n: u64) -> bool {
        self.held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |cur| {
                cur.checked_add(n).filter(|&v| v <= self.max)
            })
            .is_ok()
    }

    fn give(&self, n: u64) {
        self.held.fetch_sub(n, Ordering::AcqRel);
    }
}

/// Where a body is in its stream of length-prefixed gRPC messages.
#[derive(Default)]
struct Framing {
    /// Bytes of the current message's 5-byte prefix seen so far.
    prefix: [u8; 5],
    prefix_len: usize,
    /// Bytes of the current message's payload still to come (known once the prefix is whole).
    remaining: u64,
    /// Bytes of the current, unfinished message seen so far, prefix included.
    unfinished: u64,
}

impl Framing {
    /// Walk `data`; afterwards `unfinished` is what of the last message is not complete.
    fn feed(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            if self.prefix_len < 5 {
                let take = (5 - self.prefix_len).min(data.len());
                self.prefix[self.prefix_len..self.prefix_len + take].copy_from_slice(&data[..take]);
                self.prefix_len += take;
                self.unfinished += take as u64;
                data = &data[take..];
                if self.prefix_len == 5 {
                    let [_, a, b, c, d] = self.prefix;
                    self.remaining = u64::from(u32::from_be_bytes([a, b, c, d]));
                    if self.remaining == 0 {
                        *self = Self::default();
                    }
                }
            } else {
                let take = usize::try_from(self.remaining)
                    .unwrap_or(usize::MAX)
                    .min(data.len());
                self.remaining -= take as u64;
                self.unfinished += take as u64;
                data = &data[take..];
                if self.remaining == 0 {
                    *self = Self::default();
                }
            }
        }
    }
}

/// What one request body holds in the budget: its framing, and the bytes of its unfinished
/// message counted so far. Given back when dropped (the call ended, however).
pub struct Unfinished {
    budget: Arc<Budget>,
    framing: Framing,
    /// What this body holds in the budget: `framing.unfinished` after the last frame.
    held: u64,
}

impl Unfinished {
    pub fn new(budget: Arc<Budget>) -> Self {
        Self {
            budget,
            framing: Framing::default(),
            held: 0,
        }
    }

    /// Count what `data` leaves unfinished, or refuse it when the budget cannot hold it.
    pub fn account(&mut self, data: &[u8]) -> Result<(), Status> {
        self.framing.feed(data);
        let now = self.framing.unfinished;
        if now > self.held {
            if !self.budget.take(now - self.held) {
                return Err(Status::resource_exhausted(TOO_MANY_PARTIAL));
            }
        } else {
            self.budget.give(self.held - now);
        }
        self.held = now;
        Ok(())
    }
}

impl Drop for Unfinished {
    fn drop(&mut self) {
        self.budget.give(self.held);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(len: u32) -> Vec<u8> {
        let mut m = vec![0];
        m.extend_from_slice(&len.to_be_bytes());
        m.extend(std::iter::repeat_n(7u8, len as usize));
        m
    }

    #[test]
    fn framing_counts_only_the_unfinished_message() {
        let mut f = Framing::default();
        f.feed(&message(10));
        assert_eq!(f.unfinished, 0, "a whole message");
        let two = [message(3), message(0), message(100)].concat();
        f.feed(&two[..20]);
        // 8 + 5 whole; of the third, its prefix and 2 bytes.
        assert_eq!(f.unfinished, 7);
        f.feed(&two[20..]);
        assert_eq!(f.unfinished, 0);
        f.feed(&message(9)[..3]);
        assert_eq!(f.unfinished, 3, "part of a prefix");
    }

    #[test]
    fn a_body_holds_its_unfinished_bytes_until_done_or_dropped() {
        let budget = Arc::new(Budget::new(100));
        let mut a = Unfinished::new(Arc::clone(&budget));
        let big = message(200);
        a.account(&big[..60]).expect("fits");
        assert_eq!(budget.held(), 60);
        let mut b = Unfinished::new(Arc::clone(&budget));
        assert!(b.account(&big[..41]).is_err(), "past the budget");
        drop(b);
        assert_eq!(budget.held(), 60, "a refused frame holds nothing");
        // A whole message needs no room, however full the budget.
        let mut c = Unfinished::new(Arc::clone(&budget));
        c.account(&message(1000)).expect("whole");
        a.account(&big[60..]).expect("finished");
        assert_eq!(budget.held(), 0);
        a.account(&big[..50]).expect("again");
        drop(a);
        assert_eq!(budget.held(), 0, "given back when the call ends");
    }
}
