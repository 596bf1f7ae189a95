# bnerd-vpn-operator
#
#   make test      installs what the tests need (idempotent, cached), checks formatting and
#                  vet, and runs every test. This is what CI runs.
#   make sandbox   runs the local sandbox (the main job); SANDBOX_ARGS=--stay keeps it up.
#   make generate  regenerates deepcopy code and CRDs with the pinned controller-gen.

SHELL := /usr/bin/env bash
GO    ?= go
export GOFLAGS ?= -mod=mod

.PHONY: all test deps controlplane vm-image generate fmt-check vet unit build sandbox

all: build

## deps: Debian packages the dataplane tests need (root only; skipped with a note otherwise).
deps:
	@bash hack/install-deps.sh

## controlplane: build (or reuse the cached) kube-apiserver, etcd and kubectl.
controlplane:
	@bash hack/controlplane.sh >/dev/null

## vm-image: the cached VM image the kernel dataplane test boots (root only: debootstrap).
vm-image:
	@if [[ $$(id -u) == 0 ]]; then bash hack/vm/image.sh >/dev/null; else echo "vm-image: not root; the kernel dataplane VM test will skip" >&2; fi

generate:
	$(GO) tool controller-gen object:headerFile=hack/boilerplate.go.txt paths=./api/...
	$(GO) tool controller-gen crd:crdVersions=v1 paths=./api/... output:crd:dir=config/crd
	$(GO) run ./hack/crddesc config/crd
	$(GO) tool controller-gen rbac:roleName=bnerd-vpn-operator paths=./internal/controller/... output:rbac:dir=config/rbac
	cp config/crd/*.yaml charts/bnerd-vpn-operator/crds/
	cp config/rbac/role.yaml charts/bnerd-vpn-operator/files/role.yaml

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [[ -n "$$out" ]]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...
	$(GO) vet -tags vmtest ./test/e2e/dataplane
	cd test/chart && $(GO) vet ./...

build:
	$(GO) build ./...

test: deps controlplane vm-image fmt-check vet
	KUBEBUILDER_ASSETS=$$(bash hack/controlplane.sh --print-dir) BNERD_REQUIRE_ENVTEST=1 \
	  BNERD_REQUIRE_DATAPLANE=$$( [[ $$(id -u) == 0 ]] && echo 1 || echo 0 ) \
	  $(GO) test -count=1 -timeout 45m ./...
	@# The Helm chart's tests live in their own module (the Helm SDK's dependencies stay
	@# out of the operator's).
	cd test/chart && KUBEBUILDER_ASSETS=$$(bash ../../hack/controlplane.sh --print-dir) BNERD_REQUIRE_ENVTEST=1 \
	  $(GO) test -count=1 -timeout 10m ./...

## sandbox: the local sandbox (control plane, OpenStack simulator, operator, an example
## gateway); SANDBOX_ARGS=--stay keeps it running.
sandbox: controlplane
	KUBEBUILDER_ASSETS=$$(bash hack/controlplane.sh --print-dir) $(GO) run ./cmd/sandbox $(SANDBOX_ARGS)

## unit: the quick loop while developing (no control plane required: those tests skip).
unit:
	$(GO) test -short ./...
