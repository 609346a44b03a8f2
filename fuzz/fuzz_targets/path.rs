//! Entry-name validation against an independent model of the rules, idempotence and normal
//! form of its output, and the Unicode/case collision keys.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| skillbox::fuzzing::path(data));
