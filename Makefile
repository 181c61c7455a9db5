# sandbox-controller — kubebuilder-style targets. `make help` lists them.

IMG ?= sandbox-controller:latest
LOCALBIN ?= $(shell pwd)/bin
CONTROLLER_GEN ?= $(LOCALBIN)/controller-gen
CONTROLLER_TOOLS_VERSION ?= v0.23.0
# k8s.io/code-generator builds the typed clientset, listers and informers
# (pkg/client); keep it at the version of the k8s.io modules in go.mod.
CODE_GENERATOR_VERSION ?= v0.37.2
CLIENT_GEN ?= $(LOCALBIN)/client-gen
LISTER_GEN ?= $(LOCALBIN)/lister-gen
INFORMER_GEN ?= $(LOCALBIN)/informer-gen
STATICCHECK ?= $(LOCALBIN)/staticcheck
STATICCHECK_VERSION ?= v0.8.2
KUSTOMIZE ?= $(LOCALBIN)/kustomize
KUSTOMIZE_VERSION ?= v5.8.1
KUBECTL ?= kubectl
HELM ?= $(LOCALBIN)/helm
# promtool (test/monitoring: `promtool test rules`) is extracted from Debian's
# prometheus package by hack/promtool.sh.
PROMTOOL ?= $(LOCALBIN)/promtool
HELM_VERSION ?= v3.22.0
# Linked as helm's own Makefile does: its version, and the Kubernetes version of
# its client-go (v0.37: 1.37), which `helm template` and `helm lint` assume.
HELM_LDFLAGS ?= -X helm.sh/helm/v3/internal/version.version=$(HELM_VERSION) \
	-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=37 \
	-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=37
# envtest binaries are built from the Go module proxy by hack/envtest.sh.
ENVTEST_K8S_VERSION ?= 1.37.2
ENVTEST_ETCD_VERSION ?= 3.7.0
GO_TEST_FLAGS ?= -race -timeout 30m
# Test packages run without -race: their own code starts no goroutine, so the
# race detector has nothing of ours to watch, and it makes them ~4× as costly
# (hack/image: 62 → 16 CPU-seconds). Their coverage mode matches the others'.
GO_TEST_NORACE_PKGS ?= ./hack/image/
# Single-goroutine tests of other packages, built only without -race (a
# //go:build !race file) and run here: the hour-long request simulation
# (controllers: 75 → 10 CPU-seconds).
GO_TEST_NORACE_RUN ?= ^TestSimulatedHourRequestBudget$$
GO_TEST_NORACE_RUN_PKGS ?= ./controllers/
# test/e2e's tests each start a cluster of their own (control plane, emulator,
# the manager binary) and run -parallel at once for about two minutes: make
# test starts them first, beside the other packages, instead of as the last
# package of one go test.
GO_TEST_E2E_PKG ?= ./test/e2e/
# The packages that run beside the controllers suite rather than with the
# other packages: they wait on the processes they start far more than they
# compute (test/chaos used 51 CPU-seconds in 183 s, test/clients 82 in 168,
# measured with go test -exec /usr/bin/time), so they fill the core the
# suite leaves idle (it keeps 1.4 of 2 busy) instead of making the others'
# last minute a wait on two packages.
GO_TEST_BESIDE_PKGS ?= ./test/chaos/ ./test/clients/
# test/perf's TestShortBench bounds the writes and Vercel requests per object,
# and a machine loaded at the same priority makes the manager's cache lag and
# its stale-cache guard read Vercel more (a fresh-clone run measured 1.92
# requests per Sandbox, bound 1.25). make test runs it at normal priority and
# everything beside it at TEST_BULK's lower one.
GO_TEST_PERF_PKG ?= ./test/perf/
# How many test binaries of test-packages run at once (go test -p; its default
# is the number of cores). Most of them wait on what they started — control
# planes, the manager binary, kubectl, node, the official SDK and CLI —
# rather than compute: test/chaos used 63 CPU-seconds in 148 s, test/clients
# 90 in 119. Two at a time left the cores idle.
GO_TEST_PKG_PROCS ?= 6
MODULE := $(shell go list -m)
GO_TEST_NORACE_FLAGS ?= -covermode=atomic -timeout 30m
# make test runs five parts at once (test/perf, test/e2e, the other packages
# with -race, the packages above, the controllers suite's compile): alone each
# leaves one of the two cores idle much of the time, waiting on control planes
# and processes it started. The controllers suite then runs beside only
# GO_TEST_BESIDE_PKGS. The timing-sensitive parts (test/perf, the suite) failed
# beside all the rest at one priority (load average 20 on two cores), so what
# runs beside them runs under TEST_BULK: nice(1) hands them a core whenever
# they want one, and the rest the time they leave.
TEST_JOBS ?= 5
TEST_BULK ?= nice -n 10
BULK ?=
# make test's processes (test binaries under -race, and the kube-apiservers,
# etcds and managers they start) collect garbage at a quarter of the default
# rate: measured 942 → 865 CPU-seconds for make test, the largest process
# 1.3 GB either way (/usr/bin/time -v).
TEST_GOGC ?= 400
# The controllers suite (TestControllers) runs in TEST_PROCS Ginkgo processes,
# each with a local stack of its own, through the Ginkgo CLI of go.mod's Ginkgo
# version (docs/dev/testing.md). GINKGO_ARGS adds flags: --focus, -v, ...
GINKGO_VERSION ?= $(shell go list -m -f '{{.Version}}' github.com/onsi/ginkgo/v2)
GINKGO ?= $(LOCALBIN)/ginkgo-$(GINKGO_VERSION)
TEST_PROCS ?= 6
GINKGO_ARGS ?=
# What test-controllers runs: the package, or the binary make test compiled
# beforehand (controllers-suite-binary).
CONTROLLERS_SUITE ?= ./controllers
CONTROLLERS_SUITE_BIN := controllers/controllers.test

# What the binaries report (--version, the manager's start log and
# sandbox_controller_build_info; internal/version): the nearest v* tag as git
# describe prints it, the commit, and the commit's time, which is also every
# timestamp of `make image` and `make release` (SOURCE_DATE_EPOCH). Each is
# computed once (the := lines) and can be set on the command line.
VERSION ?= $(shell git describe --tags --match 'v[0-9]*' --dirty 2>/dev/null || echo v0.0.0-dev)
VERSION := $(VERSION)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)
REVISION := $(REVISION)
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
SOURCE_DATE_EPOCH := $(SOURCE_DATE_EPOCH)
COMMIT_TIME ?= $(shell TZ=UTC git log -1 --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ 2>/dev/null)
COMMIT_TIME := $(COMMIT_TIME)
VERSION_PKG := github.com/getsentry/sandbox-controller/internal/version
LDFLAGS ?= -X $(VERSION_PKG).version=$(VERSION) -X $(VERSION_PKG).revision=$(REVISION) -X $(VERSION_PKG).commitTime=$(COMMIT_TIME)
FUZZTIME ?= 15s

SHELL = /usr/bin/env bash -o pipefail
.SHELLFLAGS = -ec

.PHONY: all
all: build

##@ General

.PHONY: help
help: ## Display this help.
	@awk 'BEGIN {FS = ":.*##"; printf "\nUsage:\n  make \033[36m<target>\033[0m\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-15s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) } ' $(MAKEFILE_LIST)

##@ Development

.PHONY: manifests
manifests: controller-gen ## Generate CRDs and RBAC from the kubebuilder markers.
	$(CONTROLLER_GEN) rbac:roleName=manager-role crd paths="./api/..." paths="./controllers/..." output:crd:artifacts:config=config/crd/bases
	$(MAKE) --no-print-directory chart

.PHONY: chart
chart: kustomize ## Regenerate the Helm chart's CRDs, RBAC and admission policy from config/ (make manifests runs it).
	go run ./hack/chart -kustomize $(KUSTOMIZE)

.PHONY: generate
generate: controller-gen code-generator ts-generate ## Generate DeepCopy methods, and the Go client in pkg/client (apply configurations, clientset, listers, informers) and the TypeScript client's types.
	$(CONTROLLER_GEN) object:headerFile="hack/boilerplate.go.txt" paths="./api/..."
	CONTROLLER_GEN=$(CONTROLLER_GEN) CLIENT_GEN=$(CLIENT_GEN) LISTER_GEN=$(LISTER_GEN) INFORMER_GEN=$(INFORMER_GEN) ./hack/codegen.sh

TS_CLIENT ?= clients/typescript
# The TypeScript client is built and tested with the Node.js that
# hack/node.sh pins and installs into bin/ (from the npm registry): npm and
# what it starts run on it, whatever node the machine has.
TS_NPM = PATH="$$(./hack/node.sh):$$PATH" npm --prefix $(TS_CLIENT)

.PHONY: node
node: ## Install (once) the pinned Node.js the TypeScript client is built and tested with into bin/; print its directory.
	@./hack/node.sh

.PHONY: ts-generate
ts-generate: $(TS_CLIENT)/node_modules/.package-lock.json ## Generate the TypeScript client's types (clients/typescript/src/generated) from config/crd/bases.
	$(TS_NPM) run --silent generate

# npm ci again only when package-lock.json changed (npm writes node_modules/.package-lock.json).
$(TS_CLIENT)/node_modules/.package-lock.json: $(TS_CLIENT)/package.json $(TS_CLIENT)/package-lock.json
	$(TS_NPM) ci --no-audit --no-fund

.PHONY: fmt
fmt: ## Run go fmt.
	go fmt ./...

.PHONY: vet
vet: ## Run go vet.
	go vet ./...

.PHONY: lint
lint: staticcheck ## Run staticcheck (CI runs it too) on everything but the generated client under pkg/client/.
	$(STATICCHECK) $$(go list ./... | grep -v '/pkg/client/')

.PHONY: test
test: export GOGC = $(TEST_GOGC)
test: manifests generate fmt vet envtest kustomize helm promtool ginkgo ## Run all tests against envtest and the emulator: test/perf, and at a lower priority every other package with go test (with -race but GO_TEST_NORACE_PKGS), then the controllers suite in parallel processes (test-controllers) beside GO_TEST_BESIDE_PKGS; coverage of all in cover.out.
	@mkdir -p $(LOCALBIN)/test
	$(MAKE) --no-print-directory -j$(TEST_JOBS) --output-sync=line test-perf test-e2e test-packages test-packages-norace controllers-suite-binary BULK="$(TEST_BULK)"
	$(MAKE) --no-print-directory -j2 --output-sync=line test-packages-beside test-controllers BULK="$(TEST_BULK)" CONTROLLERS_SUITE=$(CONTROLLERS_SUITE_BIN) GINKGO_ARGS="--cover --coverprofile=controllers.cover.out --output-dir=$(LOCALBIN)/test $(GINKGO_ARGS)"
	cat $(LOCALBIN)/test/packages.cover.out > cover.out
	tail -n +2 $(LOCALBIN)/test/beside.cover.out >> cover.out
	tail -n +2 $(LOCALBIN)/test/perf.cover.out >> cover.out
	tail -n +2 $(LOCALBIN)/test/e2e.cover.out >> cover.out
	tail -n +2 $(LOCALBIN)/test/norace.cover.out >> cover.out
	tail -n +2 $(LOCALBIN)/test/norace-run.cover.out >> cover.out
	tail -n +2 $(LOCALBIN)/test/controllers.cover.out >> cover.out

.PHONY: test-packages
test-packages: envtest kustomize helm promtool ## Only the packages' go test, with -race, but the controllers suite, test/e2e, test/perf, GO_TEST_BESIDE_PKGS and GO_TEST_NORACE_PKGS (part of make test).
	@mkdir -p $(LOCALBIN)/test
	KUBEBUILDER_ASSETS="$$(./hack/envtest.sh)" $(BULK) go test $(GO_TEST_FLAGS) -p $(GO_TEST_PKG_PROCS) $$(go list ./... | grep -v -x -F $(foreach p,$(GO_TEST_NORACE_PKGS) $(GO_TEST_E2E_PKG) $(GO_TEST_PERF_PKG) $(GO_TEST_BESIDE_PKGS),-e $(MODULE)/$(patsubst ./%/,%,$(p)))) \
		-skip '^TestControllers$$' -coverprofile $(LOCALBIN)/test/packages.cover.out

.PHONY: test-packages-beside
test-packages-beside: envtest kustomize ## Only GO_TEST_BESIDE_PKGS' go test, with -race (part of make test, beside the controllers suite).
	@mkdir -p $(LOCALBIN)/test
	KUBEBUILDER_ASSETS="$$(./hack/envtest.sh)" $(BULK) go test $(GO_TEST_FLAGS) $(GO_TEST_BESIDE_PKGS) -coverprofile $(LOCALBIN)/test/beside.cover.out

.PHONY: test-e2e
test-e2e: envtest kustomize helm ## Only test/e2e's go test, with -race (part of make test).
	@mkdir -p $(LOCALBIN)/test
	KUBEBUILDER_ASSETS="$$(./hack/envtest.sh)" $(BULK) go test $(GO_TEST_FLAGS) $(GO_TEST_E2E_PKG) -coverprofile $(LOCALBIN)/test/e2e.cover.out

.PHONY: test-packages-norace
test-packages-norace: ## Only the tests that run without -race: GO_TEST_NORACE_PKGS, and GO_TEST_NORACE_RUN in GO_TEST_NORACE_RUN_PKGS (part of make test).
	@mkdir -p $(LOCALBIN)/test
	$(BULK) go test $(GO_TEST_NORACE_FLAGS) $(GO_TEST_NORACE_PKGS) -coverprofile $(LOCALBIN)/test/norace.cover.out
	$(BULK) go test $(GO_TEST_NORACE_FLAGS) -run '$(GO_TEST_NORACE_RUN)' $(GO_TEST_NORACE_RUN_PKGS) -coverprofile $(LOCALBIN)/test/norace-run.cover.out

.PHONY: test-controllers
test-controllers: envtest kustomize ginkgo ## Run only the controllers suite, in TEST_PROCS parallel processes (focus: GINKGO_ARGS="--focus 'probe' -v").
	KUBEBUILDER_ASSETS="$$(./hack/envtest.sh)" $(GINKGO) run -race --procs=$(TEST_PROCS) --timeout=30m $(GINKGO_ARGS) $(CONTROLLERS_SUITE) -- -test.run='^TestControllers$$'

# make test compiles the suite while the packages run (the compile and link
# take a core for about ten seconds) and test-controllers then runs the binary,
# which Ginkgo starts in its folder (controllers/) as it would the package.
.PHONY: controllers-suite-binary
controllers-suite-binary: ginkgo
	$(BULK) $(GINKGO) build -race --cover ./controllers

.PHONY: test-perf
test-perf: envtest kustomize ## Only test/perf's go test (GO_TEST_PERF_PKG), with -race (part of make test).
	@mkdir -p $(LOCALBIN)/test
	KUBEBUILDER_ASSETS="$$(./hack/envtest.sh)" go test $(GO_TEST_FLAGS) $(GO_TEST_PERF_PKG) -coverprofile $(LOCALBIN)/test/perf.cover.out

.PHONY: chaos-short
chaos-short: envtest kustomize ## Only the short seeded chaos soak that make test runs (TestChaosShort; see docs/dev/chaos.md).
	KUBEBUILDER_ASSETS="$$(./hack/envtest.sh)" go test -count=1 -timeout 30m -run TestChaosShort -v ./test/chaos/

.PHONY: fuzz
fuzz: ## Run every Go fuzz target for FUZZTIME each (default 15s; CI runs it), not only the seed corpora.
	FUZZTIME=$(FUZZTIME) ./hack/fuzz.sh

.PHONY: conformance
conformance: ## Vercel's official CLI and SDK, and the Go client's contract tests, against real Vercel when VERCEL_TOKEN, VERCEL_TEAM_ID and VERCEL_PROJECT_ID are set, else the emulator; report in bin/conformance/ (docs/dev/conformance.md).
	go test -count=1 -timeout 20m -run 'TestOfficial' -v ./test/clients/
	go test -count=1 -timeout 20m -run 'Contract' -v ./internal/vercel/
	@echo "Report: bin/conformance/ (diff bin/conformance/emulator.txt bin/conformance/vercel.txt)"

.PHONY: bench
bench: envtest kustomize ## Benchmark the operator against direct Vercel calls and a floor controller (report in bin/bench/; ARGS="-n 100,1000 -latency 0,50ms -outage 5m", see -h).
	go build -o $(LOCALBIN)/bench/manager ./cmd/manager
	KUBEBUILDER_ASSETS="$$(./hack/envtest.sh)" go run ./test/perf/cmd/bench -manager-bin $(LOCALBIN)/bench/manager -out $(LOCALBIN)/bench $(ARGS)

.PHONY: chaos
chaos: envtest kustomize ## Chaos soak: two leader-elected manager replicas SIGKILLed at random, emulator faults, a seeded random workload; one table, exit 1 on a missed target (30 min; ARGS="-duration 10m -seed 7", see -h and docs/dev/chaos.md).
	go build -o $(LOCALBIN)/chaos/manager ./cmd/manager
	KUBEBUILDER_ASSETS="$$(./hack/envtest.sh)" go run ./test/chaos/cmd/chaos -manager-bin $(LOCALBIN)/chaos/manager -workdir $(LOCALBIN)/chaos/run-$$(date +%Y%m%d-%H%M%S) $(ARGS)

.PHONY: dev
dev: kustomize ## Run everything locally until Ctrl-C: control plane (with kube-controller-manager) with the CRDs, Vercel emulator, manager (state in bin/dev/).
	go build -o $(LOCALBIN)/sandbox-dev ./hack/dev
	KUBE_VERSION=$(ENVTEST_K8S_VERSION) ETCD_VERSION=$(ENVTEST_ETCD_VERSION) exec $(LOCALBIN)/sandbox-dev $(ARGS)

.PHONY: demo
demo: kustomize ## Scripted tour with kubectl against a fresh dev environment: samples, snapshot, fork, pause, resume, delete; exits 0 only if every step succeeded.
	KUBEBUILDER_ASSETS="$$(KUBE_VERSION=$(ENVTEST_K8S_VERSION) ETCD_VERSION=$(ENVTEST_ETCD_VERSION) ./hack/envtest.sh)" go run ./hack/demo $(ARGS)

.PHONY: envtest
envtest: ## Build (once) etcd, kube-apiserver and kube-controller-manager for the local control plane; print their directory.
	@KUBE_VERSION=$(ENVTEST_K8S_VERSION) ETCD_VERSION=$(ENVTEST_ETCD_VERSION) ./hack/envtest.sh

##@ Build

.PHONY: build
build: manifests generate fmt vet ## Build the manager and emulator binaries.
	go build -ldflags='$(LDFLAGS)' -o $(LOCALBIN)/manager ./cmd/manager
	go build -ldflags='$(LDFLAGS)' -o $(LOCALBIN)/emulator ./cmd/emulator

.PHONY: kubectl-sandbox
kubectl-sandbox: ## Build the kubectl plugin into bin/ (put bin/ on PATH for `kubectl sandbox`; docs/clients.md).
	go build -ldflags='$(LDFLAGS)' -o $(LOCALBIN)/kubectl-sandbox ./cmd/kubectl-sandbox

.PHONY: run
run: manifests generate fmt vet ## Run the manager against the cluster in KUBECONFIG (needs VERCEL_TOKEN etc.).
	go run ./cmd/manager $(ARGS)

##@ Image

CONTAINER_TOOL ?= docker
# make image builds the manager into IMAGE_DIR and writes the image archive there.
IMAGE_DIR ?= $(LOCALBIN)/image
IMAGE_ARCHIVE ?= $(IMAGE_DIR)/sandbox-controller.oci.tar
IMAGE_ARCH ?= $(shell go env GOARCH)
CA_BUNDLE ?= /etc/ssl/certs/ca-certificates.crt

.PHONY: docker-build
docker-build: ## Build the manager image IMG from the Dockerfile with CONTAINER_TOOL (docker).
	$(CONTAINER_TOOL) build -t $(IMG) --build-arg VERSION=$(VERSION) --build-arg REVISION=$(REVISION) \
		--build-arg COMMIT_TIME=$(COMMIT_TIME) --build-arg SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) .

.PHONY: docker-push
docker-push: ## Push the image IMG with CONTAINER_TOOL.
	$(CONTAINER_TOOL) push $(IMG)

.PHONY: image
image: ## Build the same image without Docker or a registry, as an OCI archive named IMG (IMAGE_ARCHIVE, default bin/image/sandbox-controller.oci.tar).
	CGO_ENABLED=0 GOOS=linux GOARCH=$(IMAGE_ARCH) go build -trimpath -ldflags='-s -w $(LDFLAGS)' -o $(IMAGE_DIR)/manager ./cmd/manager
	SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) go run ./hack/image -binary $(IMAGE_DIR)/manager -arch $(IMAGE_ARCH) -ca-bundle $(CA_BUNDLE) -tag $(IMG) -out $(IMAGE_ARCHIVE) \
		-version '$(VERSION)' -revision '$(REVISION)'

##@ Release

# make release writes into DIST: the plugin archives and their krew manifest
# (uris under RELEASE_URL), the multi-architecture image index (RELEASE_IMG),
# install.yaml, the packaged chart and SHA256SUMS; reproducibly, with every
# timestamp the commit's (SOURCE_DATE_EPOCH). See CONTRIBUTING.md.
DIST ?= $(shell pwd)/dist
RELEASE_IMG ?= ghcr.io/getsentry/sandbox-controller:$(VERSION)
RELEASE_URL ?= https://github.com/getsentry/sandbox-controller/releases/download/$(VERSION)
RELEASE_PARTS ?= plugin,image,install,chart
RELEASE_PLUGIN_PLATFORMS ?= linux/amd64,linux/arm64,darwin/amd64,darwin/arm64

.PHONY: release
release: kustomize helm ## Build a release into dist/ (VERSION, RELEASE_IMG, RELEASE_URL; RELEASE_PARTS=plugin for the plugin alone): plugin archives, krew manifest, image index (amd64, arm64), install.yaml, chart, SHA256SUMS.
	SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) go run ./hack/release -out $(DIST) -version '$(VERSION)' -revision '$(REVISION)' \
		-release-url '$(RELEASE_URL)' -img '$(RELEASE_IMG)' -kustomize $(KUSTOMIZE) -helm $(HELM) -parts $(RELEASE_PARTS) \
		-plugin-platforms $(RELEASE_PLUGIN_PLATFORMS)

##@ Deployment

.PHONY: install
install: manifests kustomize ## Install the CRDs and the admission policies (the finalizer one on Kubernetes >= 1.36 only) into the cluster in KUBECONFIG.
	$(KUSTOMIZE) build config/crd | $(KUBECTL) apply --server-side -f -
	$(KUSTOMIZE) build config/admission | $(KUBECTL) apply --server-side -f - \
		|| { echo "Skipped the finalizer policy (needs admissionregistration.k8s.io/v1 MutatingAdmissionPolicy); the controllers add the finalizers themselves."; \
		     $(KUSTOMIZE) build config/admission | $(KUBECTL) apply --server-side -l sandbox.sentry.io/admission=required -f -; }

.PHONY: uninstall
uninstall: manifests kustomize ## Remove the CRDs (and so every object of the three kinds: see README "Uninstall") and the admission policy.
	-$(KUSTOMIZE) build config/admission | $(KUBECTL) delete --ignore-not-found -f -
	$(KUSTOMIZE) build config/crd | $(KUBECTL) delete --ignore-not-found -f -

.PHONY: deploy
deploy: manifests kustomize ## Deploy the manager into the cluster in KUBECONFIG (image $(IMG)).
	./hack/render-deploy.sh "$(KUSTOMIZE)" "$(IMG)" | $(KUBECTL) apply --server-side -f -

.PHONY: undeploy
undeploy: kustomize ## Remove the manager (and the CRDs, so every object of the three kinds) from the cluster in KUBECONFIG.
	$(KUSTOMIZE) build config/default | $(KUBECTL) delete --ignore-not-found -f -

##@ Tools

.PHONY: staticcheck
staticcheck: $(STATICCHECK) ## Build staticcheck into bin/.
$(STATICCHECK):
	GOBIN=$(LOCALBIN) go install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

.PHONY: ginkgo
ginkgo: $(GINKGO) ## Build the Ginkgo CLI of go.mod's Ginkgo version into bin/ (it runs the controllers suite in parallel).
$(GINKGO):
	GOBIN=$(LOCALBIN)/ginkgo.tmp go install github.com/onsi/ginkgo/v2/ginkgo@$(GINKGO_VERSION)
	mv $(LOCALBIN)/ginkgo.tmp/ginkgo $@ && rmdir $(LOCALBIN)/ginkgo.tmp

.PHONY: kustomize
kustomize: $(KUSTOMIZE) ## Build kustomize into bin/.
$(KUSTOMIZE):
	GOBIN=$(LOCALBIN) go install sigs.k8s.io/kustomize/kustomize/v5@$(KUSTOMIZE_VERSION)

.PHONY: helm
helm: $(HELM) ## Build helm into bin/ (test/chart lints, renders and installs the chart with it).
$(HELM):
	GOBIN=$(LOCALBIN) go install -ldflags '$(HELM_LDFLAGS)' helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)

.PHONY: promtool
promtool: $(PROMTOOL) ## Put promtool into bin/ from Debian's prometheus package (test/monitoring unit-tests the alerts with it).
$(PROMTOOL):
	./hack/promtool.sh $(PROMTOOL)

.PHONY: controller-gen
controller-gen: $(CONTROLLER_GEN) ## Build controller-gen into bin/.
$(CONTROLLER_GEN):
	GOBIN=$(LOCALBIN) go install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_TOOLS_VERSION)

.PHONY: code-generator
code-generator: $(CLIENT_GEN) $(LISTER_GEN) $(INFORMER_GEN) ## Build k8s.io/code-generator's client-gen, lister-gen and informer-gen into bin/.
$(CLIENT_GEN) $(LISTER_GEN) $(INFORMER_GEN):
	GOBIN=$(LOCALBIN) go install k8s.io/code-generator/cmd/$(notdir $@)@$(CODE_GENERATOR_VERSION)
