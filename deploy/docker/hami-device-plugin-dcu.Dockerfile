# syntax=docker/dockerfile:1.7
#
# hami-device-plugin-dcu: the kubelet device plugin for Hygon DCUs
# (docs/device-plugin.md#hygon-dcu). The DCU toolkit (HYGONPATH) and /opt/hyhal are
# not shipped here: the node provides them and containers mount them from the host.
#
# Build from the repository root (the build context must be the workspace):
#   docker build -f deploy/docker/hami-device-plugin-dcu.Dockerfile \
#     --build-arg VERSION=0.1.0 --build-arg REVISION="$(git rev-parse HEAD)" \
#     -t ghcr.io/hami-rs/hami-device-plugin-dcu:v0.1.0 .

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
    cargo build --release --locked -p hami-device-plugin-dcu --bin hami-device-plugin-dcu \
    && install -D -m 0755 target/release/hami-device-plugin-dcu /out/hami-device-plugin-dcu

FROM ${RUNTIME_IMAGE}
ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="hami-device-plugin-dcu" \
      org.opencontainers.image.description="hami-rs kubelet device plugin for shared Hygon DCUs" \
      org.opencontainers.image.source="https://github.com/hami-rs/hami-rs" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
COPY --from=build /out/hami-device-plugin-dcu /usr/local/bin/hami-device-plugin-dcu
# Root on purpose: the plugin serves a socket in the kubelet's root-owned
# device-plugins directory, reads the node's /sys and /dev and writes the vdev
# files under /usr/local/vgpu/dcu and /etc/vdev.
# hadolint ignore=DL3002
USER 0:0
# The plugin's admin port (/livez /readyz /metrics).
EXPOSE 9396
ENTRYPOINT ["/usr/local/bin/hami-device-plugin-dcu"]
