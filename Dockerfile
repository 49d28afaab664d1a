# Multi-stage build: a static-ish release binary on a small non-root runtime.
FROM rust:1-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
# Workspace members must be present for Cargo to read the workspace; the
# build below leaves the simulator out (no `demo` feature).
COPY crates ./crates
# The web UI and client are embedded in the binary (src/http/web.rs).
COPY web-demo/index.html web-demo/app.js web-demo/style.css ./web-demo/
COPY web-demo/client/kube-pulse.js web-demo/client/kube-pulse.d.ts ./web-demo/client/
RUN cargo build --release --locked --no-default-features -p kube-pulse && strip target/release/kube-pulse

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/kube-pulse /usr/local/bin/kube-pulse
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/kube-pulse"]
CMD ["serve", "--config", "/etc/kube-pulse/config.yaml"]
