# The manager image: a static binary on distroless static:nonroot (CA
# certificates, user nonroot 65532, no shell, no libc). `make image` assembles
# the same layout without Docker (hack/image); hack/image's tests check that
# this file and that image agree.
#
# `make docker-build` passes the build arguments VERSION, REVISION and
# COMMIT_TIME (and SOURCE_DATE_EPOCH, which BuildKit uses for the image's
# created time): the binary reports them (--version, the start log,
# sandbox_controller_build_info) and the image carries them as OCI labels.

# Build the manager binary.
FROM golang:1.26 AS builder
ARG TARGETOS
ARG TARGETARCH
ARG VERSION
ARG REVISION
ARG COMMIT_TIME

WORKDIR /workspace
# The module files first, so that a source change does not download the
# dependencies again.
COPY go.mod go.sum ./
RUN go mod download

COPY api/ api/
COPY cmd/ cmd/
COPY controllers/ controllers/
COPY internal/ internal/

# GOARCH is left to the builder's platform when TARGETARCH is unset, so the
# binary matches the image it goes into.
# The build context has no .git, so the version comes from the build
# arguments (internal/version).
RUN CGO_ENABLED=0 GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} \
    go build -trimpath -ldflags="-s -w \
      -X github.com/getsentry/sandbox-controller/internal/version.version=${VERSION} \
      -X github.com/getsentry/sandbox-controller/internal/version.revision=${REVISION} \
      -X github.com/getsentry/sandbox-controller/internal/version.commitTime=${COMMIT_TIME}" \
    -o manager ./cmd/manager

FROM gcr.io/distroless/static:nonroot
ARG VERSION
ARG REVISION
ARG COMMIT_TIME
LABEL org.opencontainers.image.title="sandbox-controller" \
      org.opencontainers.image.description="Kubernetes operator for Vercel Sandboxes" \
      org.opencontainers.image.source="https://github.com/getsentry/sandbox-controller" \
      org.opencontainers.image.url="https://github.com/getsentry/sandbox-controller" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${COMMIT_TIME}"
WORKDIR /
COPY --from=builder /workspace/manager /manager
USER 65532:65532

ENTRYPOINT ["/manager"]
