# bnerd-vpn-operator
#
#   make test      installs what the tests need (idempotent, cached), checks formatting and
#                  vet, and runs every test. This is what CI runs.
#   make sandbox   runs the whole product locally (root): two real nodes, images built
#                  here, the simulator, the packet fabric, the chart-installed operator and a
#                  client site; SANDBOX_ARGS=--stay keeps it up, --objects-only runs the
#                  lighter sandbox that needs no root, --openstack=real the objects-only
#                  story against the real OpenStack of hack/openstack.sh (root).
#   make images    builds the operator, gateway, gateway-wireguard, status-agent and pause
#                  images without Docker (root); REGISTRY=... pushes them.
#   make release   VERSION=0.2.0 REGISTRY=registry.example.com/team: the images for amd64
#                  and arm64 with SBOMs, the chart and the kubectl-vpn archives, pushed.
#   make generate  regenerates deepcopy code and CRDs with the pinned controller-gen.

SHELL := /usr/bin/env bash
GO    ?= go
export GOFLAGS ?= -mod=mod

.PHONY: all test deps controlplane node-deps images node-up node-down vm-image generate chart-docs fmt-check vet unit build sandbox fuzz release openstack-prepare test-envtest test-netns test-vm test-product test-openstack

# helm-docs writes the chart's README from values.yaml (make chart-docs); the chart's
# tests run the same version and fail when the README is stale.
HELM_DOCS_VERSION := v1.14.2
HELM_DOCS = GOFLAGS= GOWORK=off $(GO) run github.com/norwoodj/helm-docs/cmd/helm-docs@$(HELM_DOCS_VERSION) \
  --chart-search-root charts/bnerd-vpn-operator --sort-values-order file --skip-version-footer

# A test whose prerequisite is missing fails instead of skipping when these are 1. CI
# sets both (.ci/run); run as root, `make test` defaults both to 1, so it can never pass
# by skipping. With both at 1 the test report fails the run on any skipped test.
BNERD_REQUIRE_ENVTEST ?= 1
BNERD_REQUIRE_DATAPLANE ?= $(shell [ "$$(id -u)" = 0 ] && echo 1 || echo 0)
export BNERD_REQUIRE_ENVTEST BNERD_REQUIRE_DATAPLANE
TESTREPORT = $(GO) run ./hack/testreport $(if $(and $(filter 1,$(BNERD_REQUIRE_ENVTEST)),$(filter 1,$(BNERD_REQUIRE_DATAPLANE))),-forbid-skips)

# Each fuzz target runs a fixed number of inputs in `make test` (about 20 s each on an idle
# 2-core machine), on top of its committed seed corpus (testdata/fuzz), which every `go test`
# runs. A count, not a duration: with a duration Go 1.26's fuzzing coordinator can fail a
# target with a bare "context deadline exceeded" when the deadline passes while a worker
# is busy (golang/go#75804, fixed in Go 1.27); it failed a loaded CI run that way. FUZZTIME
# set (say FUZZTIME=2m) runs every target for that instead.
FUZZTIME ?=
FUZZ_TARGETS = FuzzGatewayValidate:./api/v1alpha1/fuzz:75000x FuzzVPNGatewayValidate:./api/v1alpha1/fuzz:140000x FuzzAssignVIPs:./internal/ipam:1200000x FuzzRenderSwanctl:./internal/gatewayconfig:80000x FuzzAgentConfigAddresses:./internal/gatewayconfig:25000x

all: build

## deps: Debian packages the dataplane tests need (root only; skipped with a note otherwise).
deps:
	@bash hack/install-deps.sh

## controlplane: build (or reuse the cached) kube-apiserver, etcd and kubectl.
controlplane:
	@bash hack/controlplane.sh >/dev/null

## node-deps: everything the product world needs, built and cached (root only): Debian
## packages, the control plane with kubelet and kube-scheduler, Multus, the release's images
## for amd64 and arm64 with their SBOMs, the chart tools, GoReleaser.
node-deps:
	@if [[ $$(id -u) == 0 ]]; then BNERD_NODE_STATE=$${BNERD_NODE_STATE:-$${TMPDIR:-/tmp}/bnerd-node} bash hack/node/up.sh --build-only; \
	else echo "node-deps: not root; the product e2e and the product sandbox will skip"; fi

## images: every image (operator, gateway, gateway-wireguard, status-agent and the local
## world's pause) for PLATFORMS (default: this machine's), cached by content (root: the
## Debian roots); REGISTRY=registry.example.com/team also pushes them (content tags).
images:
	$(GO) run ./hack/images $(if $(PLATFORMS),--platforms $(PLATFORMS)) $(if $(REGISTRY),--push $(REGISTRY)) operator gateway gateway-wireguard status-agent pause

## node-up / node-down: the local node world alone (control plane and two nodes).
node-up:
	BNERD_NODE_IMAGES=1 bash hack/node/up.sh
node-down:
	bash hack/node/down.sh

## openstack-prepare: start building, in the background, what the 2025.1 OpenStack needs
## (its Debian 13 root file system and database schemas, cached; about 10 minutes the first
## time, nothing once cached), so it overlaps the rest of the set-up; `hack/openstack.sh up`
## waits for it (root only). The log is $TMPDIR/bnerd-openstack-prepare.log.
openstack-prepare:
	@if [[ $$(id -u) == 0 ]]; then \
	  (setsid bash hack/openstack.sh --release 2025.1 prepare </dev/null >$${TMPDIR:-/tmp}/bnerd-openstack-prepare.log 2>&1 &); \
	else echo "openstack-prepare: not root; the real OpenStack tiers will skip"; fi

## vm-image: the cached VM image the kernel dataplane test boots, and the libreswan
## clients image it attaches (root only: debootstrap).
vm-image:
	@if [[ $$(id -u) == 0 ]]; then bash hack/vm/image.sh >/dev/null && bash hack/vm/libreswan.sh >/dev/null; else echo "vm-image: not root; the kernel dataplane VM test will skip" >&2; fi

generate:
	$(GO) tool controller-gen object:headerFile=hack/boilerplate.go.txt paths=./api/...
	$(GO) tool controller-gen crd:crdVersions=v1 paths=./api/... output:crd:dir=config/crd
	$(GO) run ./hack/crddesc config/crd
	$(GO) tool controller-gen rbac:roleName=bnerd-vpn-operator paths="./internal/controller/...;./cmd/bnerd-vpn-operator" output:rbac:dir=config/rbac
	rm -f charts/bnerd-vpn-operator/files/crds/*.yaml
	cp config/crd/*.yaml charts/bnerd-vpn-operator/files/crds/
	cp config/rbac/role.yaml charts/bnerd-vpn-operator/files/role.yaml
	$(MAKE) --no-print-directory chart-docs

## chart-docs: the chart's README (values table) from values.yaml, with the pinned helm-docs.
chart-docs:
	$(HELM_DOCS)

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [[ -n "$$out" ]]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...
	$(GO) vet -tags vmtest ./test/e2e/...
	$(GO) vet -tags measure ./test/scale/ ./test/natbench/
	cd test/chart && $(GO) vet ./...

build:
	$(GO) build ./...

# openstack-up RELEASE STATE: bring a real OpenStack up; when it does not come up, print
# Nova's errors (stopping it removes its logs), stop it and try once more.
define openstack-up
{ bash hack/openstack.sh --release $(1) up "$(2)" >/dev/null || { \
  echo "real OpenStack $(1) did not come up; Nova's last errors:" >&2; \
  grep -h -E "ERROR|database is locked" "$(2)"/log/nova-*.log 2>/dev/null | tail -n 20 >&2; \
  echo "stopping it and trying once more" >&2; \
  bash hack/openstack.sh --release $(1) down "$(2)"; \
  bash hack/openstack.sh --release $(1) up "$(2)" >/dev/null; }; }
endef

# The order the Go tests' packages start in (go test starts them in the order named, a
# package named twice once, at most -p at a time): the kernel VMs run one at a time (a
# lock in hack/vm/run.sh), so the VM tests are a chain that bounds the run. The dataplane
# package, whose VM test is the longest, starts first, beside the product e2e; the
# routed package, whose VM would wait for the dataplane's holding a slot, starts last.
TEST_PKGS_FIRST = ./test/e2e/dataplane ./test/e2e/product
TEST_PKGS_LAST = ./test/e2e/routed
TEST_PKGS_ORDERED = $(TEST_PKGS_FIRST) $$($(GO) list ./... | grep -vx '$(subst ./,bnerd.net/vpn-operator/,$(TEST_PKGS_LAST))') $(TEST_PKGS_LAST)

test: openstack-prepare deps controlplane node-deps vm-image fmt-check vet
	@# As root two real OpenStacks (hack/openstack.sh) join the run, Zed and 2025.1, side
	@# by side on their own loopback addresses: up at once before the tests, down at the
	@# end, also when they fail; the conformance suite then runs on the simulator and on
	@# both, and test/openstack runs the controllers on both.
	@echo "make test: prerequisites done at $$(date -u +%T)"
	set -o pipefail; \
	if [[ $$(id -u) == 0 ]]; then \
	  export BNERD_OPENSTACK_STATE=$$(bash hack/openstack.sh --print-state); \
	  export BNERD_OPENSTACK_STATE_2025_1=$$(bash hack/openstack.sh --release 2025.1 --print-state); \
	  trap 'bash hack/openstack.sh down "$$BNERD_OPENSTACK_STATE"; bash hack/openstack.sh --release 2025.1 down "$$BNERD_OPENSTACK_STATE_2025_1"' EXIT; \
	  $(call openstack-up,zed,$$BNERD_OPENSTACK_STATE) & zed=$$!; \
	  $(call openstack-up,2025.1,$$BNERD_OPENSTACK_STATE_2025_1) & new=$$!; \
	  wait $$zed && wait $$new || exit 1; \
	  export BNERD_OPENSTACK=sim,real,real-2025.1 BNERD_REQUIRE_OPENSTACK=1; \
	fi; \
	echo "make test: the Go tests start at $$(date -u +%T)"; \
	KUBEBUILDER_ASSETS=$$(bash hack/controlplane.sh --print-dir) \
	  $(GO) test -json -count=1 -timeout 45m $(TEST_PKGS_ORDERED) 2>&1 | $(TESTREPORT)
	@# The Helm chart's tests live in their own module (the Helm SDK's dependencies stay
	@# out of the operator's).
	@echo "make test: the chart module's tests start at $$(date -u +%T)"
	set -o pipefail; cd test/chart && KUBEBUILDER_ASSETS=$$(bash ../../hack/controlplane.sh --print-dir) \
	  $(GO) test -json -count=1 -timeout 20m ./... 2>&1 | (cd ../.. && $(TESTREPORT))
	@echo "make test: the fuzzing starts at $$(date -u +%T)"
	$(MAKE) --no-print-directory fuzz

## The tiers one at a time (docs/testing.md, "The tiers"); `make test` runs them all at once.
## test-envtest: the packages whose TestMain starts a real kube-apiserver and etcd
## (testenv.Main), except the real OpenStack tier's; no root.
ENVTEST_PKGS = $(shell grep -rl --include='*_test.go' 'testenv.Main' api cmd internal test | xargs -n1 dirname | sort -u | grep -vx 'test/openstack' | sed 's|^|./|')
test-envtest: deps controlplane
	BNERD_REQUIRE_ENVTEST=1 KUBEBUILDER_ASSETS=$$(bash hack/controlplane.sh --print-dir) \
	  $(GO) test -count=1 -timeout 30m $(ENVTEST_PKGS)

## test-netns: the dataplane end to end in network namespaces (root): real strongSwan
## (libipsec), nftables, wireguard-go, captures; the kernel VM tests left out.
E2E_PKGS = ./test/e2e/dataplane ./test/e2e/routed ./test/e2e/wireguard
test-netns: deps controlplane
	KUBEBUILDER_ASSETS=$$(bash hack/controlplane.sh --print-dir) \
	  $(GO) test -count=1 -timeout 30m -skip 'KernelVM|VMRunner' $(E2E_PKGS) ./test/e2e/peerconfig

## test-vm: the kernel VM tier (root): kernel XFRM and WireGuard in a qemu guest.
test-vm: deps vm-image
	$(GO) test -count=1 -timeout 45m -run 'KernelVM|VMRunner' $(E2E_PKGS)

## test-product: the node world (root): the product e2e and the whole-product sandbox.
test-product: deps controlplane node-deps
	KUBEBUILDER_ASSETS=$$(bash hack/controlplane.sh --print-dir) $(GO) test -count=1 -timeout 60m ./test/e2e/product
	KUBEBUILDER_ASSETS=$$(bash hack/controlplane.sh --print-dir) $(GO) test -count=1 -timeout 20m -run TestSandboxProductRunsToCompletion ./cmd/sandbox

## test-openstack: the seam's conformance suite and the controllers against the real
## OpenStacks (root): Zed and 2025.1 brought up, tested, brought down.
test-openstack: openstack-prepare controlplane
	set -o pipefail; \
	export BNERD_OPENSTACK_STATE=$$(bash hack/openstack.sh --print-state); \
	export BNERD_OPENSTACK_STATE_2025_1=$$(bash hack/openstack.sh --release 2025.1 --print-state); \
	trap 'bash hack/openstack.sh down "$$BNERD_OPENSTACK_STATE"; bash hack/openstack.sh --release 2025.1 down "$$BNERD_OPENSTACK_STATE_2025_1"' EXIT; \
	$(call openstack-up,zed,$$BNERD_OPENSTACK_STATE) & zed=$$!; \
	$(call openstack-up,2025.1,$$BNERD_OPENSTACK_STATE_2025_1) & new=$$!; \
	wait $$zed && wait $$new || exit 1; \
	BNERD_OPENSTACK=sim,real,real-2025.1 BNERD_REQUIRE_OPENSTACK=1 KUBEBUILDER_ASSETS=$$(bash hack/controlplane.sh --print-dir) \
	  $(GO) test -count=1 -timeout 30m ./internal/openstack/ ./test/openstack/

## fuzz: each fuzz target for its count of inputs (FUZZ_TARGETS), or for FUZZTIME when set.
fuzz:
	@for t in $(FUZZ_TARGETS); do \
	  IFS=: read -r name pkg count <<<"$$t"; budget=$${FUZZTIME:-$$count}; \
	  echo "fuzz: $$name for $$budget"; \
	  $(GO) test -run '^$$' -fuzz "^$$name$$" -fuzztime "$$budget" "$$pkg" || exit 1; \
	done

## sandbox: the whole product with the examples applied (root); SANDBOX_ARGS=--stay keeps
## it running, SANDBOX_ARGS=--objects-only runs the objects-only sandbox (no root), and
## SANDBOX_ARGS=--openstack=real runs that against the real OpenStack of hack/openstack.sh.
sandbox: deps controlplane
	KUBEBUILDER_ASSETS=$$(bash hack/controlplane.sh --print-dir) $(GO) run ./cmd/sandbox $(SANDBOX_ARGS)

## unit: the quick loop while developing: -short starts no API server and needs no root
## (the tests that need either skip; docs/testing.md).
unit:
	BNERD_REQUIRE_ENVTEST=0 BNERD_REQUIRE_DATAPLANE=0 $(GO) test -short ./...

## release: the release, pushed to any OCI registry: VERSION=0.2.0 REGISTRY=registry.example.com/team
## (images for linux/amd64 and linux/arm64 with SBOMs, the chart, the kubectl-vpn archives
## and krew manifest in dist/; hack/release.sh). PLATFORMS and RELEASE_PARTS narrow it.
release:
	VERSION=$(VERSION) REGISTRY=$(REGISTRY) bash hack/release.sh
