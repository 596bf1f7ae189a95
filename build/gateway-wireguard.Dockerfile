# WireGuard gateway image (images.gatewayWireguard): the vpn-gateway-agent binary, whose
# wireguard role creates the gateway's WireGuard interface (the kernel's module, or
# wireguard-go inside the agent where the kernel has none) and configures it through
# wgctrl, plus wg(8) for inspection.
# Build from the repository root:
#   docker build -f build/gateway-wireguard.Dockerfile --build-arg VERSION=v0.2.0 -t bnerd-vpn-gateway-wireguard .
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
COPY build/gateway-wireguard.packages /tmp/gateway-wireguard.packages
RUN apt-get update \
 && grep -v '^[[:space:]]*\(#\|$\)' /tmp/gateway-wireguard.packages \
    | DEBIAN_FRONTEND=noninteractive xargs apt-get install -y --no-install-recommends \
 && rm -rf /var/lib/apt/lists/* /tmp/gateway-wireguard.packages
COPY --from=build /out/vpn-gateway-agent /usr/local/bin/vpn-gateway-agent
# The wireguard container runs the `wireguard` role; see internal/render's
# WireGuardDeployment for its args.
ENTRYPOINT ["/usr/local/bin/vpn-gateway-agent"]
