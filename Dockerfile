# syntax=docker/dockerfile:1
#
# Two images from one build:
#   docker build -t csi-rclone .                                   # the driver (default target)
#   docker build --target secret-service -t csi-rclone-secret-service .
#
# Base images are pinned by tag here. CI should also pin them by digest
# (golang:1.26.8-bookworm@sha256:...), which cannot be looked up offline.
ARG GO_IMAGE=golang:1.26.8-bookworm
# bookworm-slim: Debian 12, rebuilt by Docker for every point release and
# security update; it never moves to another Debian release.
ARG RUNTIME_IMAGE=debian:bookworm-slim

FROM ${GO_IMAGE} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG VERSION=dev
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -buildvcs=false \
      -ldflags "-s -w -X main.version=${VERSION}" \
      -o /out/ ./cmd/csi-rclone ./cmd/secret-service

FROM ${RUNTIME_IMAGE} AS base
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/*

# The reference secret service: no FUSE, no root.
FROM base AS secret-service
COPY --from=build /out/secret-service /usr/local/bin/secret-service
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/secret-service"]
CMD ["serve"]

# The driver: node plugin, controller and mount workers. No fuse3: the node
# plugin opens /dev/fuse and mounts as root, and hands the device to each
# worker, so no setuid fusermount3 and no user_allow_other are needed.
FROM base AS csi-rclone
COPY --from=build /out/csi-rclone /usr/local/bin/csi-rclone
ENTRYPOINT ["/usr/local/bin/csi-rclone"]
