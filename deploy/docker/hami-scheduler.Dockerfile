# syntax=docker/dockerfile:1.7
#
# hami-scheduler: the kube-scheduler extender (/filter, /bind). It runs beside a
# stock kube-scheduler in the chart's scheduler Deployment.
#
# Build from the repository root (the build context must be the workspace):
#   docker build -f deploy/docker/hami-scheduler.Dockerfile \
#     --build-arg VERSION=0.1.0 --build-arg REVISION="$(git rev-parse HEAD)" \
#     -t ghcr.io/hami-rs/hami-scheduler:v0.1.0 .

# The builder's rustc must be at least the newest rust-version in Cargo.lock
# (deploy/tests checks this); bookworm so the binary's glibc matches the runtime.
ARG RUST_IMAGE=docker.io/library/rust:1.95.0-slim-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot

FROM ${RUST_IMAGE} AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY proto ./proto
COPY crates ./crates
COPY xtask ./xtask
COPY tests ./tests
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p hami-scheduler --bin hami-scheduler \
    && install -D -m 0755 target/release/hami-scheduler /out/hami-scheduler

FROM ${RUNTIME_IMAGE}
ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="hami-scheduler" \
      org.opencontainers.image.description="hami-rs kube-scheduler extender: places GPU-sharing pods on nodes and GPUs, HAMi wire-compatible" \
      org.opencontainers.image.source="https://github.com/hami-rs/hami-rs" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
COPY --from=build /out/hami-scheduler /usr/local/bin/hami-scheduler
# distroless "nonroot": uid/gid 65532, no shell, no package manager.
USER 65532:65532
# mimalloc gives freed memory back 10 ms after it is freed instead of 1 s: after a sync
# or a burst of /filter calls the extender then holds about 5 MiB less, at no measured
# /filter cost (docs/extender.md#memory). `cargo xtask bench` reads this line.
ENV MIMALLOC_PURGE_DELAY=10
# 8888 extender HTTP (the chart binds it to 127.0.0.1), 9395 metrics and probes.
EXPOSE 8888 9395
ENTRYPOINT ["/usr/local/bin/hami-scheduler"]
