# Gateway agent image (images.statusAgent): the vpn-gateway-agent binary on a small Debian
# root with nft(8) for the init-nat role. Every gateway pod runs its init-nat, status
# agent and exporter containers from it.
# Build from the repository root (one platform, or several with buildx/buildah):
#   docker build -f build/status-agent.Dockerfile --build-arg VERSION=v0.2.0 -t bnerd-vpn-status-agent .
# `make images` builds the same image without Docker (hack/images); a test checks it.
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
COPY build/status-agent.packages /tmp/status-agent.packages
RUN apt-get update \
 && grep -v '^[[:space:]]*\(#\|$\)' /tmp/status-agent.packages \
    | DEBIAN_FRONTEND=noninteractive xargs apt-get install -y --no-install-recommends \
 && rm -rf /var/lib/apt/lists/* /tmp/status-agent.packages
COPY --from=build /out/vpn-gateway-agent /usr/local/bin/vpn-gateway-agent
# The container's args select the role (init-nat, status-agent, ipsec-exporter); see
# internal/render's Deployment and WireGuardDeployment.
ENTRYPOINT ["/usr/local/bin/vpn-gateway-agent"]
