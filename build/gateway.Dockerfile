# Gateway pod image: strongSwan charon (kernel XFRM dataplane; kernel-libipsec is
# included for kernels without ESP) plus the vpn-gateway-agent roles.
# Build from the repository root:
#   docker build -f build/gateway.Dockerfile -t bnerd-vpn-gateway .
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY api/ api/
COPY cmd/vpn-gateway-agent/ cmd/vpn-gateway-agent/
COPY internal/ internal/
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/vpn-gateway-agent ./cmd/vpn-gateway-agent

FROM debian:bookworm-slim
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      charon-systemd strongswan-charon strongswan-swanctl libstrongswan-standard-plugins \
      libcharon-extra-plugins libstrongswan-extra-plugins nftables iproute2 ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/vpn-gateway-agent /usr/local/bin/vpn-gateway-agent
# The container's args select the role. The strongswan container runs the `charon` role,
# which renders strongswan.conf (RenderStrongswanConf, kernel dataplane) and execs
# charon-systemd in the foreground; see internal/render's Deployment for every role's args.
ENTRYPOINT ["/usr/local/bin/vpn-gateway-agent"]
