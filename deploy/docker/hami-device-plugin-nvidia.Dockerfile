# syntax=docker/dockerfile:1.7
#
# hami-device-plugin-nvidia: the kubelet device plugin for NVIDIA GPUs, plus
# HAMi-core (libvgpu.so, the in-container CUDA limiter), hami-vgpu-init, which
# installs HAMi-core on the node (the chart runs it as an init container), and
# hami-vgpu-monitor, the node's usage exporter and priority feedback loop (the
# chart runs it as a second container of the DaemonSet).
#
# Build from the repository root (the build context must be the workspace):
#   docker build -f deploy/docker/hami-device-plugin-nvidia.Dockerfile \
#     --build-arg VERSION=0.1.0 --build-arg REVISION="$(git rev-parse HEAD)" \
#     -t ghcr.io/hami-rs/hami-device-plugin-nvidia:v0.1.0 .

# The builder's rustc must be at least the newest rust-version in Cargo.lock
# (deploy/tests checks this); bookworm so the binary's glibc matches the runtime.
ARG RUST_IMAGE=docker.io/library/rust:1.95.0-slim-bookworm
# HAMi-core is preloaded into arbitrary user containers, so it is built against
# an old glibc (UBI 8: 2.28) to load in as many images as possible.
ARG CUDA_DEVEL_IMAGE=docker.io/nvidia/cuda:12.6.3-devel-ubi8
# Not distroless: hami-vgpu-init needs a shell and coreutils.
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
    cargo build --release --locked -p hami-device-plugin-nvidia --bin hami-device-plugin-nvidia \
        -p hami-vgpu-monitor --bin hami-vgpu-monitor \
    && install -D -m 0755 target/release/hami-device-plugin-nvidia /out/hami-device-plugin-nvidia \
    && install -D -m 0755 target/release/hami-vgpu-monitor /out/hami-vgpu-monitor

FROM ${CUDA_DEVEL_IMAGE} AS hami-core
# A release tag of Project-HAMi/HAMi-core; bump together with CUDA_DEVEL_IMAGE.
ARG HAMI_CORE_REF=v2.6.0
ARG HAMI_CORE_REPO=https://github.com/Project-HAMi/HAMi-core.git
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# hadolint ignore=DL3041
RUN dnf install -y cmake git make && dnf clean all
RUN git clone --depth 1 --branch "${HAMI_CORE_REF}" "${HAMI_CORE_REPO}" /hami-core
WORKDIR /hami-core
# HAMi-core's own build script (cmake with its hook options).
RUN bash ./build.sh \
    && test -s build/libvgpu.so \
    && install -D -m 0755 build/libvgpu.so /out/libvgpu.so

FROM ${RUNTIME_IMAGE}
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG HAMI_CORE_REF=v2.6.0
LABEL org.opencontainers.image.title="hami-device-plugin-nvidia" \
      org.opencontainers.image.description="hami-rs kubelet device plugin for shared NVIDIA GPUs, with HAMi-core (libvgpu.so)" \
      org.opencontainers.image.source="https://github.com/hami-rs/hami-rs" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      io.hami-rs.hami-core.ref="${HAMI_CORE_REF}"
# Ask the NVIDIA container runtime for the driver's management library (NVML),
# not for compute: the plugin and the monitor only enumerate, watch and measure
# GPUs.
ENV NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=utility
COPY --from=build /out/hami-device-plugin-nvidia /usr/local/bin/hami-device-plugin-nvidia
COPY --from=build /out/hami-vgpu-monitor /usr/local/bin/hami-vgpu-monitor
COPY --from=hami-core /out/libvgpu.so /k8s-vgpu/lib/nvidia/libvgpu.so
COPY --chmod=0755 deploy/docker/hami-vgpu-init.sh /usr/local/bin/hami-vgpu-init
# Root on purpose: the plugin serves a socket in the kubelet's root-owned
# device-plugins directory, opens /dev/nvidia*, and writes the node's HAMi-core
# directory; the monitor writes the priority feedback into the containers'
# HAMi-core files there (the chart adds privileged: true for the NVML backend).
# hadolint ignore=DL3002
USER 0:0
# 9396 the plugin's admin port (/livez /readyz /metrics), 9394 the monitor's
# /metrics (and /livez /readyz).
EXPOSE 9396 9394
ENTRYPOINT ["/usr/local/bin/hami-device-plugin-nvidia"]
