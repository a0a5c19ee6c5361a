# syntax=docker/dockerfile:1.7
#
# hami-webhook: the mutating admission webhook. The same binary runs the
# chart's certgen Job (`hami-webhook certgen`).
#
# Build from the repository root (the build context must be the workspace):
#   docker build -f deploy/docker/hami-webhook.Dockerfile \
#     --build-arg VERSION=0.1.0 --build-arg REVISION="$(git rev-parse HEAD)" \
#     -t ghcr.io/hami-rs/hami-webhook:v0.1.0 .

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
    cargo build --release --locked -p hami-webhook --bin hami-webhook \
    && install -D -m 0755 target/release/hami-webhook /out/hami-webhook

FROM ${RUNTIME_IMAGE}
ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="hami-webhook" \
      org.opencontainers.image.description="hami-rs mutating admission webhook: routes GPU-sharing pods to hami-scheduler and applies HAMi's defaults" \
      org.opencontainers.image.source="https://github.com/hami-rs/hami-rs" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
COPY --from=build /out/hami-webhook /usr/local/bin/hami-webhook
# distroless "nonroot": uid/gid 65532, no shell, no package manager.
USER 65532:65532
# 9443 admission (HTTPS), 9444 admin (/livez /readyz /metrics).
EXPOSE 9443 9444
ENTRYPOINT ["/usr/local/bin/hami-webhook"]
