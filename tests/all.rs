//! Integration tests: one binary, one module per area (see tests/suite/).

// clippy.toml allows unwrap/expect inside `#[test]` functions; the helpers of this test crate
// are test code too, and a helper that panics on an unexpected error is what a test wants.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod suite;
