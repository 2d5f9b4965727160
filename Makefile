# kubetrail — see README.md. `make run` and `make test` are the two commands a newcomer needs.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := build

export GOTOOLCHAIN ?= local
export GOFLAGS ?= -trimpath
export KUBETRAIL_CACHE ?= $(HOME)/.cache/kubetrail

OCB_VERSION   := v0.165.0
OCB           := $(KUBETRAIL_CACHE)/bin/ocb-$(OCB_VERSION)/builder
HELM_VERSION  := v3.19.0
export KUBETRAIL_HELM := $(KUBETRAIL_CACHE)/bin/helm-$(HELM_VERSION)/helm
DIST_DIR      := build/otelcol-kubetrail
COLLECTOR     := bin/otelcol-kubetrail
VERSION       := $(shell sed -n 's/^  version: *//p' builder-config.yaml)
IMAGE_TAR     := build/image/otelcol-kubetrail-$(VERSION).tar
# The commit and its time (the build date of a reproducible build), for `kubetrail version`.
COMMIT        := $(shell git rev-parse HEAD 2>/dev/null)
COMMIT_DATE   := $(shell TZ=UTC git log -1 --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ 2>/dev/null)
CLI_LDFLAGS   := -s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT) -X main.date=$(COMMIT_DATE)
MDATAGEN      := $(KUBETRAIL_CACHE)/bin/mdatagen-$(shell awk '$$1 == "go.opentelemetry.io/collector/cmd/mdatagen" {print $$2}' internal/tools/go.mod)
GO_SOURCES    := $(shell find . -name '*.go' -not -path './build/*' -not -path './testbed/.state/*' 2>/dev/null) go.mod go.sum
# Fuzz budgets are execution counts, not durations: with a wall-clock -fuzztime, Go 1.26's fuzz
# coordinator can fail a run with a bare "context deadline exceeded" when a worker is busy at the
# deadline under CPU contention (golang/go#75804, fixed in Go 1.27), which is a flake, not a finding.
FUZZTIME      ?= 100000x

.PHONY: build run image image-test test unit fuzz dist-test e2e helm lint bench bench-json bench-audit bench-kafka soak loadtest redis binaries cluster-up cluster-down record help

help: ## list the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | sort

## ---- the collector distribution -------------------------------------------------------------

$(OCB):
	@mkdir -p $(dir $(OCB))
	GOBIN=$(dir $(OCB)) go install go.opentelemetry.io/collector/cmd/builder@$(OCB_VERSION)

$(COLLECTOR): builder-config.yaml $(GO_SOURCES) | $(OCB)
	@mkdir -p bin $(dir $(DIST_DIR))
	$(OCB) --config builder-config.yaml
	cp $(DIST_DIR)/otelcol-kubetrail $(COLLECTOR).tmp && mv -f $(COLLECTOR).tmp $(COLLECTOR)

build: $(COLLECTOR) ## build bin/otelcol-kubetrail with ocb

image: build ## build the OCI image tarball build/image/otelcol-kubetrail-<version>.tar (the collector, and the CLI for the chart's viewer), no container engine needed (distribution/image)
	cd distribution/image && go build -o $(CURDIR)/build/image/builder .
	build/image/builder -binary $(COLLECTOR) -cli $(KUBETRAIL_CLI) -config distribution/config.yaml -version $(VERSION) \
	  -revision $$(git rev-parse HEAD) -created $$(git log -1 --format=%ct) -out $(IMAGE_TAR)

$(MDATAGEN): internal/tools/go.mod internal/tools/go.sum
	@mkdir -p $(dir $(MDATAGEN))
	cd internal/tools && go build -o $(MDATAGEN) go.opentelemetry.io/collector/cmd/mdatagen

.PHONY: generate
generate: $(MDATAGEN) ## regenerate internal/metadata, lifecycle tests and documentation.md of each component from its metadata.yaml
	MDATAGEN=$(MDATAGEN) internal/tools/generate.sh

# The shipped binaries, NAME=FILE: THIRD_PARTY_LICENSES.md lists what they link (recursive: the CLI's
# variable is set further down).
LICENSE_REPORT = go run ./testbed/cmd/licensereport -binary otelcol-kubetrail=$(COLLECTOR) -binary kubetrail=$(KUBETRAIL_CLI)

.PHONY: licenses licenses-check
licenses: build ## regenerate THIRD_PARTY_LICENSES.md and NOTICE from what the built binaries link; fails on a GPL, LGPL, AGPL, unknown or missing licence (testbed/cmd/licensereport)
	$(LICENSE_REPORT)

licenses-check: build ## fail when THIRD_PARTY_LICENSES.md or NOTICE differ from a regeneration, or a linked licence is not allowed
	$(LICENSE_REPORT) -check

run: build ## run the collector on distribution/config.yaml and replay a recorded audit capture into it
	testbed/hack/run-demo.sh

## ---- tests -----------------------------------------------------------------------------------

test: lint redis unit fuzz dist-test image-test release-check e2e ## everything CI runs: lint, unit + golden + Redis tests, fuzzing, the built binary, image and a snapshot release, end-to-end

redis: ## make sure a redis-server answers on 127.0.0.1:6379 (installs and starts one if not)
	testbed/hack/ensure-redis.sh

unit: redis ## unit, golden and Redis tests of every package
	go test -count=1 ./...
	GOEXPERIMENT=jsonv2 go test -count=1 -run JSONText ./internal/auditconv   # the jsontext comparison reads what the scanner reads

fuzz: ## run each fuzz target for FUZZTIME executions
	@for target in $$(grep -rl --include='*_test.go' '^func Fuzz' . | xargs -r -n1 dirname | sort -u); do \
	  for f in $$(grep -h '^func Fuzz' $$target/*_test.go | sed 's/func \(Fuzz[A-Za-z0-9_]*\).*/\1/'); do \
	    echo "fuzz $$target $$f"; go test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$target; \
	  done; \
	done

$(KUBETRAIL_HELM):
	HELM_VERSION=$(HELM_VERSION) testbed/hack/ensure-helm.sh

helm: $(KUBETRAIL_HELM) ## build (or reuse) helm from the Go module proxy for the chart tests

dist-test: build helm licenses-check ## the real bin/otelcol-kubetrail: shipped configs and the Helm chart's renderings validate, a recorded capture becomes one tree; the licence report is current
	go test -tags dist -count=1 ./distribution/

image-test: image ## open the image tarball: non-root user, entrypoint, labels, files, the binary inside runs, the Dockerfile agrees, reproducible
	cd distribution/image && IMAGE_TAR=$(CURDIR)/$(IMAGE_TAR) go test -count=1 .

e2e: build binaries redis helm ## end-to-end: real control plane + collector + Jaeger (and the Helm chart applied with a server-side dry run)
	testbed/hack/e2e.sh

lint: ## gofmt, no tracked binaries, go vet, golangci-lint (.golangci.yml) and shellcheck on the testbed scripts
	@out=$$(gofmt -l $$(git ls-files '*.go') 2>/dev/null); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@out=$$(git ls-files -z | xargs -0 sh -c 'for f; do [ -f "$$f" ] && [ "$$(head -c4 "$$f")" = "$$(printf "\177ELF")" ] && echo "$$f"; done; true' _); \
	  if [ -n "$$out" ]; then echo "compiled binaries are tracked (build them into bin/ or build/):"; echo "$$out"; exit 1; fi
	go vet ./...
	go vet -tags dist,e2e ./distribution/ ./testbed/...
	cd distribution/image && go vet .
	golangci_lint=$$(testbed/hack/ensure-linters.sh | tail -1); nice -n 10 "$$golangci_lint" run ./... && \
	  cd distribution/image && nice -n 10 "$$golangci_lint" run --config $(CURDIR)/.golangci.yml ./...   # build tags in .golangci.yml; the image builder is a module of its own
	shellcheck -x testbed/hack/*.sh testbed/hack/lib.bash testbed/scenarios/*.sh testbed/scenarios/lib.bash
	MDATAGEN=$(MDATAGEN) internal/tools/generate.sh --check

lint: $(MDATAGEN)

bench: ## benchmarks of every component (figures in docs/performance.md)
	go test -run '^$$' -bench . -benchmem -count=1 ./...

bench-json: ## the hand-written JSON scanner and index against encoding/json/jsontext on the same bodies (figures in docs/performance.md)
	GOEXPERIMENT=jsonv2 go test -run '^$$' -bench BenchmarkJSON -benchmem -count=$(or $(COUNT),5) ./internal/auditconv

bench-audit: build ## CPU µs per audit event, events/s, allocated bytes, peak RSS, spans lost of bin/otelcol-kubetrail (BASELINE=<rev> also measures that revision's collector, KELEMETRY=<binary> Kelemetry; testbed/hack/bench-audit.sh)
	OCB=$(OCB) testbed/hack/bench-audit.sh

soak: build redis ## the single tier, then the Kafka tiers (edge and one processing replica), each at a steady RATE (default 1000 events/s) for SOAK_MINUTES (default 10): RSS, Go heap, goroutines and open fds every SAMPLE seconds (60), the RSS slope at the end (bench-audit.sh and bench-kafka.sh with SAMPLE; SOAK_TIERS="single kafka" picks)
	@for tier in $${SOAK_TIERS:-single kafka}; do case $$tier in \
	  single) RATE=$${RATE:-1000} SAMPLE=$${SAMPLE:-60} WORKLOADS=$${WORKLOADS:-replay} BENCH_EVENTS=$$(( $${RATE:-1000} * 60 * $${SOAK_MINUTES:-10} )) OCB=$(OCB) testbed/hack/bench-audit.sh || exit 1 ;; \
	  kafka) RUNS=lag RATES=$${RATE:-1000} REPLICAS=1 SAMPLE=$${SAMPLE:-60} RUN_SECONDS=$$(( 60 * $${SOAK_MINUTES:-10} )) testbed/hack/bench-kafka.sh || exit 1 ;; \
	  *) echo "SOAK_TIERS: $$tier is neither single nor kafka" >&2; exit 2 ;; \
	esac; done

bench-kafka: build redis ## the Kafka edge and processing tiers through bin/otelcol-kubetrail: CPU per event of each, lag p50/p99 at 1,000 and 5,000 events/s with 1 and 2 replicas, catch-up after OUTAGE (default 5m) without a processing tier (testbed/hack/bench-kafka.sh)
	testbed/hack/bench-kafka.sh

loadtest: build redis ## end-to-end load test of bin/otelcol-kubetrail: events/s, CPU, peak RSS, spans in = out (testbed/hack/loadtest.sh)
	testbed/hack/loadtest.sh

## ---- releases (docs/releasing.md) -----------------------------------------------------------

.PHONY: release release-check
RELEASE_DIR := build/release/$(VERSION)

release: build helm ## a release into build/release/<version>/ from a clean tree (SNAPSHOT=1 builds a dirty one, PLATFORMS="linux/amd64 …" fewer platforms): CLI and collector archives, multi-arch image, chart, krew manifest, SBOM, SHA256SUMS (testbed/hack/release.sh)
	SNAPSHOT="$(SNAPSHOT)" PLATFORMS="$(PLATFORMS)" testbed/hack/release.sh

release-check: build helm ## a snapshot release of linux/amd64 only, then open every artifact it wrote (testbed/cmd/release)
	SNAPSHOT=1 PLATFORMS=linux/amd64 testbed/hack/release.sh
	RELEASE_DIR=$(CURDIR)/$(RELEASE_DIR) go test -tags dist -count=1 ./testbed/cmd/release/

## ---- the testbed -----------------------------------------------------------------------------

binaries: ## build (or reuse) kube-apiserver, controller-manager, scheduler, kubectl, etcd, kwok, jaeger
	testbed/hack/build-binaries.sh all

cluster-up: binaries ## start a real control plane on 127.0.0.1 (state in testbed/.state)
	testbed/hack/cluster-up.sh

cluster-down: ## stop the control plane started by cluster-up
	testbed/hack/cluster-down.sh

record: binaries ## record fixtures of one scenario: make record SCENARIO=deployment (SCENARIO=all records every one)
	testbed/hack/record.sh $(SCENARIO)

## ---- the kubetrail command (cmd/kubetrail, docs/cli.md) ------------------------------------

.PHONY: chromium
KUBETRAIL_CLI := bin/kubetrail

$(KUBETRAIL_CLI): $(GO_SOURCES)
	@mkdir -p bin
	CGO_ENABLED=0 go build -ldflags='$(CLI_LDFLAGS)' -o $@ ./cmd/kubetrail

bin/kubectl-trail: $(KUBETRAIL_CLI) ## the kubectl plugin: `kubectl trail deployment/web …`
	ln -sf kubetrail $@

build: $(KUBETRAIL_CLI) bin/kubectl-trail

chromium: ## make sure a headless chromium is installed (the kubetrail -o html test renders the page)
	testbed/hack/ensure-chromium.sh

unit: chromium
