//! skillbox: sandboxed intake of Agent Skills artifacts.
//!
//! The library is split by responsibility: [`digest`] proves bytes are the indexed artifact,
//! [`extract`] turns verified bytes into a staged tree plus an inventory (or a rejection), and
//! [`reason`] is the stable vocabulary every rejection is expressed in. The engine in
//! [`extract`] is written to run inside a confined child process: it takes a readable file and
//! a directory fd, and never touches any path outside that directory.

pub mod answer;
pub mod broker;
pub mod client;
pub mod digest;
pub mod extract;
pub mod fetch;
#[doc(hidden)]
pub mod fuzzing;
pub mod index;
pub mod lifecycle;
pub mod out_dir;
pub mod reason;
pub mod replay;
pub mod sandbox;
pub mod skill;

/// The gRPC contract (`proto/skillbox/v1/skillbox.proto`), generated at build time.
pub mod proto {
    #![allow(clippy::all, clippy::pedantic, missing_docs)]
    tonic::include_proto!("skillbox.v1");

    /// The encoded descriptor set of the contract, served by gRPC reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] =
        tonic::include_file_descriptor_set!("skillbox_v1_descriptor");
}
