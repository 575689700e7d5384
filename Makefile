# Run `make demo` for a first import, `make test` for the test suite.
GO ?= go
export PATH := $(PATH):/usr/local/go/bin
export CGO_ENABLED ?= 0

.PHONY: build native install test test-short demo deps bench fuzz vet tidy-check clean image image-test man docs e2e-build e2e-cdi-build e2e-cluster e2e-down e2e e2e-netfilter-test e2e-cdi-image e2e-timing

# Stamped into `importer --version` and the image's tag and labels. The
# commit's time is every image file's mtime, so two builds of one commit
# give the same image digest.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
VERSION := $(VERSION)
COMMIT := $(COMMIT)
SOURCE_DATE_EPOCH := $(SOURCE_DATE_EPOCH)
LDFLAGS := -s -w -X main.buildVersion=$(VERSION) -X main.buildCommit=$(COMMIT)

build: native
	$(GO) build -trimpath -ldflags "$(LDFLAGS)" -o bin/importer ./cmd/importer
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w" -o bin/cdi-containerimage-server ./cmd/cdi-containerimage-server

# The decoder child in C (native/inflate: ISA-L's inflate and liblzma into
# shared memory, no pipe), built where a C compiler and the two libraries'
# headers are (apt-get install gcc libisal-dev liblzma-dev); without it the
# engine decodes gzip through igzip's pipe and xz through xz's, or in Go.
# bin/native is on the tests' PATH.
CC ?= cc
native:
	@mkdir -p bin/native
	@if [ -f /usr/include/isa-l.h ] && [ -f /usr/include/lzma.h ] && command -v $(CC) >/dev/null; then \
		$(CC) -O2 -Wall -Wextra -Werror -o bin/native/diskimport-inflate native/inflate/*.c -lisal -llzma; \
	else echo "native: diskimport-inflate not built (apt-get install gcc libisal-dev liblzma-dev): gzip and xz decode through igzip's and xz's pipes"; fi

# Installs bin/importer and its man pages under PREFIX (DESTDIR for a
# staged install, as packagers use it).
PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
MANDIR ?= $(PREFIX)/share/man
DATADIR ?= $(PREFIX)/share
install: build man
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(MANDIR)/man1
	install -m 0755 bin/importer $(DESTDIR)$(BINDIR)/importer
	if [ -f bin/native/diskimport-inflate ]; then install -m 0755 bin/native/diskimport-inflate $(DESTDIR)$(BINDIR)/; fi
	install -m 0644 man/man1/*.1 $(DESTDIR)$(MANDIR)/man1/
	install -d $(DESTDIR)$(DATADIR)/bash-completion/completions $(DESTDIR)$(DATADIR)/zsh/site-functions $(DESTDIR)$(DATADIR)/fish/vendor_completions.d
	bin/importer completion bash > $(DESTDIR)$(DATADIR)/bash-completion/completions/importer
	bin/importer completion zsh > $(DESTDIR)$(DATADIR)/zsh/site-functions/_importer
	bin/importer completion fish > $(DESTDIR)$(DATADIR)/fish/vendor_completions.d/importer.fish

# Man pages of importer and its subcommands, generated from the cobra
# commands (github.com/spf13/cobra/doc) into man/man1.
man:
	$(GO) run ./cmd/importer man man/man1

# The command-line reference in docs/cli, generated from the cobra commands
# as the man pages are; TestCLIReferenceIsGenerated fails when it is stale.
docs:
	rm -rf docs/cli
	$(GO) run ./cmd/importer docs docs/cli

# The library's module and the tools' modules beside it: bench/ (benchtool)
# and deploy/ (the manifests' tests, which need k8s.io/api) are modules of
# their own, so a program that imports the library gets none of their
# requirements; `go test ./...` from the root does not enter them, so each
# target below runs every module.
MODULES := . bench deploy

# The whole suite. Loop-device and namespace tests need root; they skip
# with a reason otherwise. The packages whose goroutines share buffers run
# again under the race detector (about 90 s here): a data race in the
# stream decoder's output stage once passed every plain test.
RACE_PACKAGES := ./internal/streamdecode ./internal/blkhash ./internal/iostage ./internal/buffers ./internal/volume
test: native
	for m in $(MODULES); do $(GO) -C $$m vet ./... || exit 1; done
	status=0; for m in $(MODULES); do PATH=$(CURDIR)/bin/native:$$PATH $(GO) -C $$m test -count=1 -timeout 40m ./... || status=1; done; \
	if command -v $(CC) >/dev/null; then \
		PATH=$(CURDIR)/bin/native:$$PATH CC=$(CC) CGO_ENABLED=1 $(GO) test -race -count=1 -timeout 20m $(RACE_PACKAGES) || status=1; \
	fi; \
	./scripts/test-skips.sh; command -v $(CC) >/dev/null || echo "skipped: the -race run of $(RACE_PACKAGES) (no C compiler: apt-get install gcc)"; exit $$status

test-short: native
	status=0; for m in $(MODULES); do PATH=$(CURDIR)/bin/native:$$PATH $(GO) -C $$m test -short -count=1 ./... || status=1; done; ./scripts/test-skips.sh; exit $$status

# Installs qemu-utils and friends when missing (needs root and apt), builds,
# and imports a small qcow2.xz served on 127.0.0.1.
demo: deps build
	./scripts/demo.sh

deps:
	./scripts/install-deps.sh

vet:
	for m in $(MODULES); do $(GO) -C $$m vet ./... || exit 1; done

# Each module's go.mod and go.sum must be what `go mod tidy` makes of them
# (CI checks).
tidy-check:
	for m in $(MODULES); do $(GO) -C $$m mod tidy -diff || exit 1; done

# Side-by-side benchmarks (root; not part of test): builds a BENCH_SIZE (2G)
# test disk under bench/cache, imports it over HTTP BENCH_RUNS (3) times per
# format with the references interleaved (decoder alone, curl|decoder|dd,
# download + qemu-img convert -W), against CDI's importer times quoted from
# issue 14 and its targets; per row peak RSS and scratch bytes. Table on
# stdout, JSON in bench/results/. BENCH_CASES=all for every case (the
# default, ~25 min at 2G, leaves a few out); BENCH_GO=1 adds the go test
# -bench stage benchmarks. Quick check: BENCH_SIZE=256M BENCH_RUNS=1.
bench:
	GO=$(GO) ./bench/bench.sh

# Every Fuzz* target in the module for FUZZTIME each (default 1m); CI runs
# them for a few seconds each: make fuzz FUZZTIME=5s.
FUZZTIME ?= 1m
fuzz:
	GO=$(GO) FUZZTIME=$(FUZZTIME) ./scripts/fuzz.sh

# The container image, offline: bin/importer (static, stripped) with
# qemu-img, xz, igzip and their libraries and a static busybox from this
# machine (apt-get install qemu-utils xz-utils isal busybox-static). Writes
# $(IMAGE_DIR)/importer-image.tar (podman load -i), importer-image-oci/ and
# importer-image.json; prints the digest and the compressed size.
IMAGE_DIR ?= bin
image: build
	$(GO) run ./cmd/imagebuild -importer bin/importer \
		$(if $(wildcard bin/cdi-containerimage-server),-program bin/cdi-containerimage-server=/usr/bin/cdi-containerimage-server) \
		$(if $(wildcard bin/native/diskimport-inflate),-native-program bin/native/diskimport-inflate=/usr/bin/diskimport-inflate) \
		-version $(VERSION) -revision $(COMMIT) -created $(SOURCE_DATE_EPOCH) -out-dir $(IMAGE_DIR)

# Runs the image in real containers (podman, root): every role that exists,
# the manifests in deploy/ and the image's reproducibility.
image-test: image
	IMAGE_DIR=$(abspath $(IMAGE_DIR)) $(GO) test -count=1 -timeout 30m ./internal/imagebuild ./internal/testkit/imagetest
	IMAGE_DIR=$(abspath $(IMAGE_DIR)) $(GO) -C deploy test -count=1 -timeout 30m ./...

# End-to-end in a real single-node Kubernetes on this machine (root; the
# docs/e2e.md). e2e-build: the Kubernetes
# components of e2e/tools/go.mod, a pause program, DNS for Services, and
# make image, into bin/e2e. e2e-cdi-build: CDI's controller from CDI's
# source (E2E_CDI_GIT). e2e-cluster: build and start; e2e: the tests,
# results in bin/e2e/results.md; e2e-down: stop and remove everything.
e2e-build:
	GO=$(GO) ./scripts/e2e/build.sh

e2e-cdi-build:
	./scripts/e2e/cdi-build.sh

e2e-cluster: e2e-build
	./scripts/e2e/up.sh

e2e:
	./scripts/e2e/run.sh

e2e-down:
	./scripts/e2e/down.sh

# Issue 37's e2e timing table (not part of make e2e or CI): CDI's own
# importer, cloner and upload server images built from CDI's source with
# Debian's qemu-img and nbdkit (e2e-cdi-image), then CDI's controller
# driving them and ours, interleaved, one DataVolume per kind; table in
# bin/e2e/timing.md. Needs make e2e-cluster and make e2e-cdi-build.
e2e-cdi-image:
	GO=$(GO) ./scripts/e2e/cdi-image.sh

e2e-timing:
	./scripts/e2e/timing.sh

# up.sh's and down.sh's netfilter bookkeeping in a network namespace of its
# own, which has no rule, as a fresh machine (root).
e2e-netfilter-test:
	./scripts/e2e/netfilter-test.sh

clean:
	rm -rf bin
