//! The fetcher's HTTP/1.1 response reading (`skillbox::fetch::http`): the head parsed within
//! its bound, the framing decided strictly, the body (Content-Length, chunked with trailers, or
//! until close) never longer than what arrived and exactly its declared length when complete.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| skillbox::fetch::http::fuzz_response(data));
