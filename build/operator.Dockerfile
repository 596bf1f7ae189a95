# Operator image: the static operator binary on distroless.
# Build from the repository root:
#   docker build -f build/operator.Dockerfile --build-arg VERSION=v0.2.0 -t bnerd-vpn-operator .
# `make images` builds the same image without Docker (hack/images): the same binary and
# build flags, path, user and entrypoint on a distroless-like root (CA bundle, passwd
# with nonroot 65532); a test checks it.
FROM --platform=$BUILDPLATFORM golang:1.26-bookworm AS build
ARG TARGETOS
ARG TARGETARCH
ARG VERSION=v0.1.0
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath -buildvcs=false -ldflags="-s -w -X bnerd.net/vpn-operator/internal/version.Version=$VERSION" -o /out/bnerd-vpn-operator ./cmd/bnerd-vpn-operator

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/bnerd-vpn-operator /bnerd-vpn-operator
USER 65532:65532
ENTRYPOINT ["/bnerd-vpn-operator"]
