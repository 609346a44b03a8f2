//! The skill itself: SKILL.md frontmatter and the review report of what a package asks to do.
//!
//! Everything here reads hostile content and therefore runs inside the confined child, after
//! extraction, over the staged tree. It reports; it never grants anything.

pub mod review;
