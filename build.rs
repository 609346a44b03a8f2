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

/// Links both binaries' unwinder in from libgcc's static `libgcc_eh.a` instead of loading
/// `libgcc_s.so.1` at every start: `skillbox-child` is `exec`'d once per one-shot request and
/// `skillbox` once per command, and the dynamic loader mapping and binding one library fewer
/// takes about 0.1 ms off each start (bench-results/sandbox.md, "ninth session"); a confined
/// child also has one library's code fewer at hand.
///
/// Rust's standard library asks for `-lgcc_s` on linux-gnu, and a build script's link arguments
/// come after it, where a static archive no longer wins. So this gives the binaries' links a
/// directory, searched before the compiler's own, holding a `libgcc_s.so` linker script that
/// names the static unwinder, plus `-lgcc` as the real `libgcc_s.so` script does: what `gcc
/// -static-libgcc` links. Works with GNU ld and lld alike. Tests, examples and benchmarks link
/// as before. Without a `libgcc_eh.a` (no gcc installed, another libc) nothing changes but a
/// warning; a static-pie child (`crt-static`, scripts/install.sh) links the static unwinder
/// anyway and never reads the script.
fn unwinder_linked_in(out: &std::path::Path) -> std::io::Result<()> {
    println!("cargo:rerun-if-env-changed=RUSTC_LINKER");
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    if var("CARGO_CFG_TARGET_OS") != "linux" || var("CARGO_CFG_TARGET_ENV") != "gnu" {
        return Ok(());
    }
    // The C compiler rustc links with: the configured linker, else `cc` (only right for a
    // native build; a cross build without a configured linker would not link anyway).
    let linker = match std::env::var("RUSTC_LINKER") {
        Ok(l) => l,
        Err(_) if var("TARGET") == var("HOST") => "cc".to_owned(),
        Err(_) => return Ok(()),
    };
    let probe = std::process::Command::new(&linker)
        .arg("-print-file-name=libgcc_eh.a")
        .output();
    let archive = probe
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
        // A `"` could not be quoted in the linker script below.
        .filter(|p| p.is_absolute() && p.is_file() && !p.to_string_lossy().contains('"'));
    let Some(archive) = archive else {
        println!(
            "cargo:warning=no libgcc_eh.a from `{linker} -print-file-name`: skillbox and \
             skillbox-child will load libgcc_s.so.1 at every start (about 0.1 ms slower, nothing \
             else differs)"
        );
        return Ok(());
    };
    let dir = out.join("static-unwinder");
    std::fs::create_dir_all(&dir)?;
    let path = archive.to_string_lossy();
    std::fs::write(
        dir.join("libgcc_s.so"),
        format!(
            "/* skillbox build.rs: the binaries link libgcc's unwinder statically. */\n\
             GROUP ( \"{path}\" -lgcc )\n"
        ),
    )?;
    println!("cargo:rustc-link-arg-bins=-L{}", dir.display());
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    for s in SOURCES {
        println!("cargo:rerun-if-changed={s}");
    }
    println!("cargo:rustc-env=SKILLBOX_SOURCE_ID={}", source_id()?);
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    unwinder_linked_in(&out)?;
    let fds = protox::compile(PROTOS, ["proto"])?;
    let served = protox::compile(PROTOS.iter().chain(SERVED_ALSO), ["proto"])?;
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
