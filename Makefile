# bnerd-vpn-operator
#
#   make test      installs what the tests need (idempotent, cached), checks formatting and
#                  vet, and runs every test. This is what CI runs.
#   make sandbox   runs the local sandbox (the main job); SANDBOX_ARGS=--stay keeps it up,
#                  SANDBOX_ARGS=--openstack=real runs it against a real OpenStack.
#   make generate  regenerates deepcopy code and CRDs with the pinned controller-gen.

SHELL := /usr/bin/env bash
GO    ?= go
export GOFLAGS ?= -mod=mod

.PHONY: all test deps controlplane generate fmt-check vet unit build sandbox

all: build

## deps: Debian packages the dataplane tests need (root only; skipped with a note otherwise).
deps:
	@bash hack/install-deps.sh

## controlplane: build (or reuse the cached) kube-apiserver, etcd and kubectl.
controlplane:
	@bash hack/controlplane.sh >/dev/null

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
	cd test/chart && $(GO) vet ./...

build:
	$(GO) build ./...

test: deps controlplane fmt-check vet
	@# As root a real OpenStack (hack/openstack.sh) joins the run: up once before the
	@# tests, down at the end, also when they fail; the conformance suite then runs on
	@# the simulator and on it, and test/openstack runs the controllers on it.
	if [[ $$(id -u) == 0 ]]; then \
	  export BNERD_OPENSTACK_STATE=$$(bash hack/openstack.sh --print-state); \
	  trap 'bash hack/openstack.sh down "$$BNERD_OPENSTACK_STATE"' EXIT; \
	  bash hack/openstack.sh up "$$BNERD_OPENSTACK_STATE" >/dev/null || exit 1; \
	  export BNERD_OPENSTACK=sim,real BNERD_REQUIRE_OPENSTACK=1; \
	fi; \
	KUBEBUILDER_ASSETS=$$(bash hack/controlplane.sh --print-dir) BNERD_REQUIRE_ENVTEST=1 \
	  BNERD_REQUIRE_DATAPLANE=$$( [[ $$(id -u) == 0 ]] && echo 1 || echo 0 ) \
	  $(GO) test -count=1 -timeout 45m ./...
	@# The Helm chart's tests live in their own module (the Helm SDK's dependencies stay
	@# out of the operator's).
	cd test/chart && KUBEBUILDER_ASSETS=$$(bash ../../hack/controlplane.sh --print-dir) BNERD_REQUIRE_ENVTEST=1 \
	  $(GO) test -count=1 -timeout 10m ./...

## sandbox: the local sandbox (control plane, OpenStack simulator, operator, an example
## gateway); SANDBOX_ARGS=--stay keeps it running; SANDBOX_ARGS=--openstack=real runs it
## against the real OpenStack of hack/openstack.sh (as root).
sandbox: controlplane
	KUBEBUILDER_ASSETS=$$(bash hack/controlplane.sh --print-dir) $(GO) run ./cmd/sandbox $(SANDBOX_ARGS)

## unit: the quick loop while developing (no control plane required: those tests skip).
unit:
	$(GO) test -short ./...
