//! Compiles `proto/deviceplugin/v1beta1/api.proto` with protox (pure Rust), so
//! no `protoc` is needed on the build machine.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Read at run time, not baked in with `env!`: a build script binary reused after the
    // checkout moved (cargo keeps path crates' hashes relative) must look where it runs.
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR")?;
    let root = std::path::Path::new(&manifest_dir).join("../../proto");
    let file = "deviceplugin/v1beta1/api.proto";
    println!("cargo:rerun-if-changed={}", root.join(file).display());
    let descriptors = protox::compile([file], [&root])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(descriptors)?;
    Ok(())
}
