# txbox relay image: a static binary on an empty base with CA certificates,
# running as a non-root user. Build from the repository root:
#
#   docker build --build-arg REVISION=$(git rev-parse HEAD) -t txbox .
#   docker run --rm -v $PWD/txbox.yaml:/etc/txbox/txbox.yaml:ro -e APP_DSN=... txbox
#
# The arguments after the image name replace CMD, so
# `docker run txbox --config /other.yaml --migrate` works; another command
# needs `--entrypoint /txbox` (docker run --entrypoint /txbox txbox version).
# docs/deploy.md describes the image, the systemd unit and the Kubernetes
# example in deploy/.

FROM golang:1.26 AS build
WORKDIR /src
# Dependencies first, so a source change does not download them again.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG REVISION=""
ARG TARGETOS=linux
ARG TARGETARCH=amd64
# The static build. cmd/txbox's TestStaticBuild runs this same command
# line (read from this file) and checks that the result is static and
# prints its version, so keep it on one line.
RUN CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath -ldflags="-s -w -X main.buildRevision=$REVISION" -o /out/txbox ./cmd/txbox
# An empty, writable working directory for the default SQLite file
# (./txbox.db) owned by the runtime user; mount a volume there to keep it.
RUN mkdir -p /out/data && chown 65532:65532 /out/data

FROM scratch
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/txbox /txbox
COPY --from=build --chown=65532:65532 /out/data /data
WORKDIR /data
# 65532 is the conventional "nonroot" user of distroless images; scratch
# has no /etc/passwd, so the numeric id is what counts.
USER 65532:65532
ENTRYPOINT ["/txbox", "relay"]
CMD ["--config", "/etc/txbox/txbox.yaml"]
