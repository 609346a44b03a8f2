//! skillbox: sandboxed intake of Agent Skills artifacts.
//!
//! The library is split by responsibility, and its dependencies point one way (no cycle;
//! `scripts/modgraph.py` checks it):
//!
//! - [`digest`]: SHA-256 digests, parsed once; proves bytes are the indexed artifact.
//! - [`reason`]: verdicts and the stable reason-code vocabulary of every rejection.
//! - [`extract`]: the engine. Verified bytes in, a staged tree plus an inventory (or a
//!   rejection) out; it takes a readable file and a directory fd and never touches a path
//!   outside that directory. It knows nothing of review, sandbox or broker.
//! - `names`: what a file's name says (its interpreter, how the review reads it); depends on
//!   nothing, so the engine can keep the bytes the review will read whole without knowing the
//!   review.
//! - [`skill`]: SKILL.md frontmatter, the review of a staged tree, the diff of two answers.
//! - [`intake`]: one job as the confined child runs it: the engine, then the review.
//! - [`sandbox`]: starting, confining and supervising the child that runs [`intake`].
//! - `sys`: the raw system calls (pidfd, seccomp, Landlock, memfd seals, the mapped read of a
//!   sealed artifact); the only module with `unsafe`, used by the sandbox, the engine and the
//!   broker, and depending on nothing in the crate.
//! - [`convert`]: the one conversion between the gRPC messages ([`proto`]) and these types.
//! - [`broker`]: the tonic gRPC service.
//! - [`client`]: the Rust client installers embed.
//! - [`urls`], [`index`]: URL resolution and discovery-index parsing.
//! - [`fetch`]: fetch policy, HTTPS, cache and acquisition with provenance.
//! - [`replay`]: replaying a corpus against its manifest.
//! - [`publish`]: the publisher's side: skill folders in, a reviewed, reproducible discovery
//!   index out, every artifact checked by the same confined extraction a consumer runs.
//! - `fuzzing` (feature `fuzzing`, for tests and `fuzz/` only): the fuzz targets' property
//!   checks, shared with their stable test.
//!
//! The command line (clap types, printing, exit codes) is the binary's, in `src/cli/`.

pub mod broker;
pub mod client;
pub mod convert;
pub mod digest;
pub mod extract;
pub mod fetch;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod index;
pub mod intake;
pub mod lifecycle;
mod names;
pub mod owned_dir;
pub mod publish;
#[cfg(test)]
mod race;
pub mod reason;
pub mod replay;
pub mod sandbox;
pub mod skill;
pub mod staging_fs;
mod stop_point;
pub(crate) mod sys;
pub mod urls;

/// The gRPC contract (`proto/skillbox/v1/skillbox.proto`), generated at build time.
pub mod proto {
    #![allow(clippy::all, clippy::pedantic, missing_docs)]
    tonic::include_proto!("skillbox.v1");

    /// The encoded descriptor set of the contract, served by gRPC reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] =
        tonic::include_file_descriptor_set!("skillbox_v1_descriptor");
}
