# bnerd-vpn-operator
#
#   make test      installs what the tests need (idempotent, cached), checks formatting and
#                  vet, and runs every test. This is what CI runs.
#   make sandbox   runs the whole product locally (root): two real nodes, images built
#                  here, the simulator, the packet fabric, the chart-installed operator and a
#                  client site; SANDBOX_ARGS=--stay keeps it up, --objects-only runs the
#                  lighter sandbox that needs no root, --openstack=real the objects-only
#                  story against the real OpenStack of hack/openstack.sh (root).
#   make images    builds the operator, gateway and pause images without Docker (root).
#   make generate  regenerates deepcopy code and CRDs with the pinned controller-gen.

SHELL := /usr/bin/env bash
GO    ?= go
export GOFLAGS ?= -mod=mod

.PHONY: all test deps controlplane node-deps images node-up node-down vm-image generate fmt-check vet unit build sandbox fuzz

# A test whose prerequisite is missing fails instead of skipping when these are 1. CI
# sets both (.ci/run); run as root, `make test` defaults both to 1, so it can never pass
# by skipping. With both at 1 the test report fails the run on any skipped test.
BNERD_REQUIRE_ENVTEST ?= 1
BNERD_REQUIRE_DATAPLANE ?= $(shell [ "$$(id -u)" = 0 ] && echo 1 || echo 0)
export BNERD_REQUIRE_ENVTEST BNERD_REQUIRE_DATAPLANE
TESTREPORT = $(GO) run ./hack/testreport $(if $(and $(filter 1,$(BNERD_REQUIRE_ENVTEST)),$(filter 1,$(BNERD_REQUIRE_DATAPLANE))),-forbid-skips)

# Each fuzz target runs this long in `make test`, on top of its committed seed corpus
# (testdata/fuzz), which every `go test` runs.
FUZZTIME ?= 20s
FUZZ_TARGETS = FuzzGatewayValidate:./api/v1alpha1/fuzz FuzzAssignVIPs:./internal/ipam FuzzRenderSwanctl:./internal/gatewayconfig FuzzAgentConfigAddresses:./internal/gatewayconfig

all: build

## deps: Debian packages the dataplane tests need (root only; skipped with a note otherwise).
deps:
	@bash hack/install-deps.sh

## controlplane: build (or reuse the cached) kube-apiserver, etcd and kubectl.
controlplane:
	@bash hack/controlplane.sh >/dev/null

## node-deps: everything the product world needs, built and cached (root only): Debian
## packages, the control plane with kubelet and kube-scheduler, Multus, the images, the chart installer.
node-deps:
	@if [[ $$(id -u) == 0 ]]; then BNERD_NODE_STATE=$${BNERD_NODE_STATE:-$${TMPDIR:-/tmp}/bnerd-node} bash hack/node/up.sh --build-only; \
	else echo "node-deps: not root; the product e2e and the product sandbox will skip"; fi

## images: the operator, gateway and pause images as OCI archives (cached by content);
## IMPORT=/path/containerd.sock also imports them into that containerd.
images:
	$(GO) run ./hack/images $(if $(IMPORT),--import $(IMPORT)) operator gateway pause

## node-up / node-down: the local node world alone (control plane and two nodes).
node-up:
	BNERD_NODE_IMAGES=1 bash hack/node/up.sh
node-down:
	bash hack/node/down.sh

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
	$(GO) vet -tags vmtest ./test/e2e/...
	$(GO) vet -tags harness ./test/scale/ ./test/natbench/
	cd test/chart && $(GO) vet ./...

build:
	$(GO) build ./...

test: deps controlplane node-deps vm-image fmt-check vet
	@# As root a real OpenStack (hack/openstack.sh) joins the run: up once before the
	@# tests, down at the end, also when they fail; the conformance suite then runs on
	@# the simulator and on it, and test/openstack runs the controllers on it.
	set -o pipefail; \
	if [[ $$(id -u) == 0 ]]; then \
	  export BNERD_OPENSTACK_STATE=$$(bash hack/openstack.sh --print-state); \
	  trap 'bash hack/openstack.sh down "$$BNERD_OPENSTACK_STATE"' EXIT; \
	  bash hack/openstack.sh up "$$BNERD_OPENSTACK_STATE" >/dev/null || { \
	    echo "real OpenStack did not come up; stopping it and trying once more" >&2; \
	    bash hack/openstack.sh down "$$BNERD_OPENSTACK_STATE"; \
	    bash hack/openstack.sh up "$$BNERD_OPENSTACK_STATE" >/dev/null; } || exit 1; \
	  export BNERD_OPENSTACK=sim,real BNERD_REQUIRE_OPENSTACK=1; \
	fi; \
	KUBEBUILDER_ASSETS=$$(bash hack/controlplane.sh --print-dir) \
	  $(GO) test -json -count=1 -timeout 45m ./... 2>&1 | $(TESTREPORT)
	@# The Helm chart's tests live in their own module (the Helm SDK's dependencies stay
	@# out of the operator's).
	set -o pipefail; cd test/chart && KUBEBUILDER_ASSETS=$$(bash ../../hack/controlplane.sh --print-dir) \
	  $(GO) test -json -count=1 -timeout 10m ./... 2>&1 | (cd ../.. && $(TESTREPORT))
	$(MAKE) --no-print-directory fuzz

## fuzz: each fuzz target for FUZZTIME (default 20s).
fuzz:
	@for t in $(FUZZ_TARGETS); do \
	  echo "fuzz: $${t%%:*} for $(FUZZTIME)"; \
	  $(GO) test -run '^$$' -fuzz "^$${t%%:*}$$" -fuzztime $(FUZZTIME) "$${t#*:}" || exit 1; \
	done

## sandbox: the whole product with the examples applied (root); SANDBOX_ARGS=--stay keeps
## it running, SANDBOX_ARGS=--objects-only runs the objects-only sandbox (no root), and
## SANDBOX_ARGS=--openstack=real runs that against the real OpenStack of hack/openstack.sh.
sandbox: controlplane
	KUBEBUILDER_ASSETS=$$(bash hack/controlplane.sh --print-dir) $(GO) run ./cmd/sandbox $(SANDBOX_ARGS)

## unit: the quick loop while developing (no control plane required: those tests skip).
unit:
	BNERD_REQUIRE_ENVTEST=0 BNERD_REQUIRE_DATAPLANE=0 $(GO) test -short ./...
