//! Compiles `proto/deviceplugin/v1beta1/api.proto` with protox (pure Rust), so
//! no `protoc` is needed on the build machine.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../proto");
    let file = "deviceplugin/v1beta1/api.proto";
    println!("cargo:rerun-if-changed={}", root.join(file).display());
    let descriptors = protox::compile([file], [&root])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(descriptors)?;
    Ok(())
}
