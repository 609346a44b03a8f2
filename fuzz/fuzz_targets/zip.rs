//! The zip reader through the whole engine: no panic, a rejection leaves nothing, an accepted
//! inventory satisfies every bound and equals the tree on disk, and re-packing it as tar
//! extracts to the same inventory. Input: a config byte (see `skillbox::fuzzing::Config`),
//! then the zip bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| skillbox::fuzzing::zip(data));
