# The manager image: a static binary on distroless static:nonroot (CA
# certificates, user nonroot 65532, no shell, no libc). `make image` assembles
# the same layout without Docker (hack/image); hack/image's tests check that
# this file and that image agree.

# Build the manager binary.
FROM golang:1.26 AS builder
ARG TARGETOS
ARG TARGETARCH

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
RUN CGO_ENABLED=0 GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} \
    go build -trimpath -ldflags='-s -w' -o manager ./cmd/manager

FROM gcr.io/distroless/static:nonroot
LABEL org.opencontainers.image.title="sandbox-controller" \
      org.opencontainers.image.description="Kubernetes operator for Vercel Sandboxes" \
      org.opencontainers.image.source="https://github.com/getsentry/sandbox-controller" \
      org.opencontainers.image.url="https://github.com/getsentry/sandbox-controller"
WORKDIR /
COPY --from=builder /workspace/manager /manager
USER 65532:65532

ENTRYPOINT ["/manager"]
