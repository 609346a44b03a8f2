//! The tar family (plain, gzip, zstd) through the whole engine, with the same properties as
//! `zip`. Input: a config byte (bits 4-5 choose whether the rest is compressed here with gzip
//! or zstd, so tar-level mutations reach both decoders), then the bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| skillbox::fuzzing::tar(data));
