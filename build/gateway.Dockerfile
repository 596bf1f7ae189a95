# Gateway pod image: strongSwan charon (kernel XFRM dataplane; kernel-libipsec is
# included for kernels without ESP) plus the vpn-gateway-agent roles.
# Build from the repository root:
#   docker build -f build/gateway.Dockerfile --build-arg VERSION=v0.2.0 -t bnerd-vpn-gateway .
# `make images` builds the same image without Docker (hack/images): the same package list
# (build/gateway.packages), the same binary and build flags, the same entrypoint.
FROM --platform=$BUILDPLATFORM golang:1.26-bookworm AS build
ARG TARGETOS
ARG TARGETARCH
ARG VERSION=v0.1.0
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY api/ api/
COPY cmd/vpn-gateway-agent/ cmd/vpn-gateway-agent/
COPY internal/ internal/
RUN CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath -buildvcs=false -ldflags="-s -w -X bnerd.net/vpn-operator/internal/version.Version=$VERSION" -o /out/vpn-gateway-agent ./cmd/vpn-gateway-agent

FROM debian:bookworm-slim
COPY build/gateway.packages /tmp/gateway.packages
RUN apt-get update \
 && grep -v '^[[:space:]]*\(#\|$\)' /tmp/gateway.packages \
    | DEBIAN_FRONTEND=noninteractive xargs apt-get install -y --no-install-recommends \
 && rm -rf /var/lib/apt/lists/* /tmp/gateway.packages
COPY --from=build /out/vpn-gateway-agent /usr/local/bin/vpn-gateway-agent
# The container's args select the role. The strongswan container runs the `charon` role,
# which renders strongswan.conf and execs charon-systemd in the foreground; see
# internal/render's Deployment for every role's args.
ENTRYPOINT ["/usr/local/bin/vpn-gateway-agent"]
