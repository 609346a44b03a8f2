//! Compiles the gRPC contract in `proto/` with protox (a pure-Rust protobuf compiler: no system
//! `protoc`), generates the tonic client and server, and writes the encoded descriptor set that
//! server reflection serves: our contract plus the `google.rpc` error details the broker sends
//! (`proto/google/rpc/error_details.proto`, as googleapis publishes it) and their imports.

use std::path::PathBuf;

use protox::prost::Message as _;

const PROTOS: &[&str] = &["skillbox/v1/skillbox.proto"];
const SERVED_ALSO: &[&str] = &["google/rpc/error_details.proto"];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let fds = protox::compile(PROTOS, ["proto"])?;
    let served = protox::compile(PROTOS.iter().chain(SERVED_ALSO), ["proto"])?;
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out.join("skillbox_v1_descriptor.bin"),
        served.encode_to_vec(),
    )?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}
