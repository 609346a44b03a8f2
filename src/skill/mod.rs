//! The skill itself: SKILL.md frontmatter, the review report of what a package asks to do, and
//! the permission diff between two versions.
//!
//! Everything that reads package content ([`frontmatter`], [`scan`], [`staged`], [`review`])
//! reads hostile bytes and therefore runs inside the confined child, after extraction, over the
//! staged tree, touching it only beneath the staging fd. [`diff`] compares two saved answers
//! (JSON the engine produced) and never opens a package. Nothing here executes, resolves or
//! fetches what it finds, and nothing here grants anything: it reports.

pub mod diff;
pub mod frontmatter;
pub mod review;
pub mod scan;
pub mod staged;
pub mod triggers;
