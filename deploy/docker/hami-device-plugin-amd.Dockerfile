# syntax=docker/dockerfile:1.7
#
# hami-device-plugin-amd: the kubelet device plugin for AMD Instinct GPUs
# (docs/vendors.md#amd-device-plugin). The HIP audit library libamvgpu.so is not
# shipped here: the node provides it under <HOST_HOOK_PATH>/vgpu.
#
# Build from the repository root (the build context must be the workspace):
#   docker build -f deploy/docker/hami-device-plugin-amd.Dockerfile \
#     --build-arg VERSION=0.1.0 --build-arg REVISION="$(git rev-parse HEAD)" \
#     -t ghcr.io/hami-rs/hami-device-plugin-amd:v0.1.0 .

# The builder's rustc must be at least the newest rust-version in Cargo.lock
# (deploy/tests checks this); bookworm so the binary's glibc matches the runtime.
ARG RUST_IMAGE=docker.io/library/rust:1.95.0-slim-bookworm
ARG RUNTIME_IMAGE=docker.io/library/debian:bookworm-slim

FROM ${RUST_IMAGE} AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY proto ./proto
COPY crates ./crates
COPY xtask ./xtask
COPY tests ./tests
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p hami-device-plugin-amd --bin hami-device-plugin-amd \
    && install -D -m 0755 target/release/hami-device-plugin-amd /out/hami-device-plugin-amd

FROM ${RUNTIME_IMAGE}
ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="hami-device-plugin-amd" \
      org.opencontainers.image.description="hami-rs kubelet device plugin for shared AMD Instinct GPUs" \
      org.opencontainers.image.source="https://github.com/hami-rs/hami-rs" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
COPY --from=build /out/hami-device-plugin-amd /usr/local/bin/hami-device-plugin-amd
# Root on purpose: the plugin serves a socket in the kubelet's root-owned
# device-plugins directory and reads the node's /sys and /dev.
# hadolint ignore=DL3002
USER 0:0
# The plugin's admin port (/livez /readyz /metrics).
EXPOSE 9396
ENTRYPOINT ["/usr/local/bin/hami-device-plugin-amd"]
