//! Compiles the gRPC contract in `proto/` with protox (a pure-Rust protobuf compiler: no system
//! `protoc`), generates the tonic client and server, and writes the encoded descriptor set that
//! server reflection serves: our contract plus the `google.rpc` error details the broker sends
//! (`proto/google/rpc/error_details.proto`, as googleapis publishes it) and their imports.

use std::path::PathBuf;

use protox::prost::Message as _;

const PROTOS: &[&str] = &["skillbox/v1/skillbox.proto"];
const SERVED_ALSO: &[&str] = &["google/rpc/error_details.proto"];

/// What the parent and its child binary must both be built from (see `SOURCE_ID` in
/// src/sandbox/wire.rs): every file of the library's sources, the contract and the lock file.
const SOURCES: &[&str] = &["src", "proto", "build.rs", "Cargo.toml", "Cargo.lock"];

/// A hash of the paths and bytes of every file under `SOURCES`, in sorted order. Not a
/// security boundary (the child binary is trusted by its owner and mode); it catches a
/// `skillbox-child` left from an older build, whose engine and review would silently differ.
fn source_id() -> std::io::Result<String> {
    use std::hash::{Hash as _, Hasher as _};
    fn walk(path: &std::path::Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
        if path.is_dir() {
            for e in std::fs::read_dir(path)? {
                walk(&e?.path(), out)?;
            }
        } else if path.is_file() {
            out.push(path.to_owned());
        }
        Ok(())
    }
    let mut files = Vec::new();
    for s in SOURCES {
        walk(std::path::Path::new(s), &mut files)?;
    }
    files.sort();
    // SipHash with fixed keys: the same bytes give the same id in both binaries' build.
    let mut h = std::hash::DefaultHasher::new();
    for f in &files {
        f.hash(&mut h);
        std::fs::read(f)?.hash(&mut h);
    }
    Ok(format!("{:016x}-{}", h.finish(), files.len()))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    for s in SOURCES {
        println!("cargo:rerun-if-changed={s}");
    }
    println!("cargo:rustc-env=SKILLBOX_SOURCE_ID={}", source_id()?);
    let fds = protox::compile(PROTOS, ["proto"])?;
    let served = protox::compile(PROTOS.iter().chain(SERVED_ALSO), ["proto"])?;
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out.join("skillbox_v1_descriptor.bin"),
        served.encode_to_vec(),
    )?;
    tonic_prost_build::configure()
        // A tree's chunks decode as slices of the received buffer (no copy per chunk); the
        // client hashes and writes them from there.
        .bytes(".skillbox.v1.TreePart.chunk")
        // An upload's chunks likewise: the broker hashes them where they were received and
        // hands them to the extraction worker without a copy.
        .bytes(".skillbox.v1.ExtractRequest.chunk")
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}
