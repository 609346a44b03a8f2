//! skillbox: sandboxed intake of Agent Skills artifacts.
//!
//! The library is split by responsibility: [`digest`] proves bytes are the indexed artifact,
//! [`extract`] turns verified bytes into a staged tree plus an inventory (or a rejection), and
//! [`reason`] is the stable vocabulary every rejection is expressed in. The engine in
//! [`extract`] is written to run inside a confined child process: it takes a readable file and
//! a directory fd, and never touches any path outside that directory.

pub mod digest;
pub mod extract;
pub mod reason;
pub mod replay;
#[doc(hidden)]
pub mod fuzzing;
pub mod skill;
