# digest-gate container image.
#
#   docker build -t digest-gate .
#
# Stage 1 builds the release binary with the locked dependency set; stage 2
# runs it on distroless "cc" (glibc and libgcc, nothing else: no shell, no
# package manager) as a numeric non-root user, so runAsNonRoot can verify it.

FROM docker.io/library/rust:1.95-slim-bookworm AS build
WORKDIR /src
# Dependencies first, so source edits do not rebuild them. The manifest
# declares the benchmark target and the docs test, so cargo wants their
# files to exist.
COPY Cargo.toml Cargo.lock ./
COPY benches ./benches
COPY tests/docs.rs ./tests/docs.rs
RUN mkdir src \
    && echo 'fn main() {}' > src/main.rs \
    && echo '' > src/lib.rs \
    && cargo fetch --locked \
    && rm -rf src
COPY src ./src
# serve --dev embeds the example allowlist.
COPY examples/allowlist.yaml ./examples/allowlist.yaml
RUN cargo build --release --locked \
    && strip target/release/digest-gate

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/digest-gate /usr/local/bin/digest-gate
USER 65532:65532
EXPOSE 8443 8080
ENTRYPOINT ["/usr/local/bin/digest-gate"]
CMD ["serve", "--help"]
