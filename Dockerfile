# driftless container image: a release build with the etcd and kubernetes features, and the
# pinned kustomize and helm it renders overlays and charts with, on a slim non-root runtime.
#   docker build -t driftless .
#   docker run --rm -v "$PWD/config:/etc/driftless/config:ro" -p 7777:7777 driftless
# The image runs `driftless -c /etc/driftless/config/driftless.yaml run`; mount your config
# there, and a volume at /var/lib/driftless for the SQLite store and the repository cache.

# --- build ---
FROM rust:1.95-slim-bookworm AS build
# protoc: etcd-client's build; pkg-config and the OpenSSL headers: libgit2's https and ssh.
RUN apt-get update \
 && apt-get install -y --no-install-recommends protobuf-compiler pkg-config libssl-dev gcc make \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src src
COPY benches benches
RUN cargo build --release --locked --features etcd,kubernetes \
 && cp target/release/driftless /driftless

# --- renderers: kustomize and helm at the versions tools/ pins (go.mod + go.sum) ---
FROM golang:1.26-bookworm AS renderers
ENV GOTOOLCHAIN=local GOFLAGS="-mod=readonly -buildvcs=false" CGO_ENABLED=0
WORKDIR /tools
COPY tools/kustomize kustomize
COPY tools/helm helm
# The version each go.mod requires, stamped into the binary as scripts/test does.
RUN pinned() { awk -v m="$2" '$1 == "require" && $2 == m { print $3; exit } $1 == m { print $2; exit }' "$1/go.mod"; } \
 && v=$(pinned kustomize sigs.k8s.io/kustomize/kustomize/v5) \
 && (cd kustomize && go build -trimpath -ldflags "-s -w -X sigs.k8s.io/kustomize/api/provenance.version=$v" -o /out/kustomize sigs.k8s.io/kustomize/kustomize/v5) \
 && v=$(pinned helm helm.sh/helm/v4) \
 && (cd helm && go build -trimpath -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$v" -o /out/helm helm.sh/helm/v4/cmd/helm)

# --- runtime ---
FROM debian:bookworm-slim
# libssl3 and zlib: libgit2 (linked dynamically); ca-certificates: the roots of https Git
# remotes (libgit2) and of Git host APIs (rustls reads the system's roots); etcd uses the CA
# file of the config.
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates libssl3 zlib1g \
 && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /var/lib/driftless /etc/driftless/config \
 && chown 65532:65532 /var/lib/driftless
COPY --from=build /driftless /usr/local/bin/driftless
# The renderers of Kustomize overlays and Helm charts (`driftless version` shows them).
COPY --from=renderers /out/kustomize /out/helm /usr/local/bin/
USER 65532:65532
WORKDIR /var/lib/driftless
ENV RUST_LOG=info
EXPOSE 7777
VOLUME ["/var/lib/driftless"]
ENTRYPOINT ["/usr/local/bin/driftless"]
CMD ["-c", "/etc/driftless/config/driftless.yaml", "run"]
