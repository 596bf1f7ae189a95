# Operator image: the static operator binary on distroless.
# Build from the repository root:
#   docker build -f build/operator.Dockerfile -t bnerd-vpn-operator .
# `make images` builds the same image without Docker (hack/images): the same binary and
# build flags, path, user and entrypoint on a distroless-like root (CA bundle, passwd
# with nonroot 65532); a test checks it.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/bnerd-vpn-operator ./cmd/bnerd-vpn-operator

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/bnerd-vpn-operator /bnerd-vpn-operator
USER 65532:65532
ENTRYPOINT ["/bnerd-vpn-operator"]
