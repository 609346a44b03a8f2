//! The parent<->child framing and message decoding (`skillbox::sandbox::wire`): bounds hold
//! before any payload is buffered, the stream and buffer decoders agree, frames round-trip, and
//! whatever decodes as an answer or a request re-encodes to the same value.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| skillbox::fuzzing::wire(data));
