# Run `make demo` for a first import, `make test` for the test suite.
GO ?= go
export PATH := $(PATH):/usr/local/go/bin
export CGO_ENABLED ?= 0

.PHONY: build test test-short demo deps bench fuzz vet clean

build:
	$(GO) build -trimpath -o bin/importer ./cmd/importer

# The whole suite. Loop-device and namespace tests need root; they skip
# with a reason otherwise.
test:
	$(GO) vet ./...
	$(GO) test -count=1 -timeout 40m ./...

test-short:
	$(GO) test -short -count=1 ./...

# Installs qemu-utils and friends when missing (needs root and apt), builds,
# and imports a small qcow2.xz served on 127.0.0.1.
demo: deps build
	./scripts/demo.sh

deps:
	./scripts/install-deps.sh

vet:
	$(GO) vet ./...

# Side-by-side benchmarks (root; not part of test): builds a BENCH_SIZE (2G)
# test disk under bench/cache, imports it over HTTP BENCH_RUNS (3) times per
# format with the references interleaved; table on stdout, JSON in
# bench/results/. BENCH_GO=1 adds the go test -bench stage benchmarks.
bench:
	GO=$(GO) ./bench/bench.sh

# Every Fuzz* target in the module for FUZZTIME each (default 1m); CI runs
# them for a few seconds each: make fuzz FUZZTIME=5s.
FUZZTIME ?= 1m
fuzz:
	GO=$(GO) FUZZTIME=$(FUZZTIME) ./scripts/fuzz.sh

clean:
	rm -rf bin
