//! SKILL.md frontmatter parsing, alone and through the engine: refusals are `invalid_skill_md`
//! with printable details; an accepted frontmatter is consistent, unchanged by looser budgets
//! and by CRLF line endings; the engine's verdict is the frontmatter's, and an accepted
//! SKILL.md is staged byte for byte. Input: a config byte (bit 0: tight budgets), then SKILL.md.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| skillbox::fuzzing::skill_md(data));
