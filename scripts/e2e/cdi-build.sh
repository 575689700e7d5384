#!/bin/bash
# Builds CDI's controller (cmd/cdi-controller) from CDI's public source at
# one release, outside this repository, with the modules of its go.sum from the Go module proxy (Go 1.26 refuses
# v1.66.0's vendor/modules.txt: "kubevirt.io/containerized-data-importer-api:
# is replaced in go.mod, but not marked as replaced in vendor/modules.txt"), and
# extracts its CRDs. E2E_CDI_GIT is a git directory or URL of
# github.com/kubevirt/containerized-data-importer (the Go module proxy does
# not serve it).
# Output: bin/e2e/cdi-controller, bin/e2e/cdi-crds/.
# `cdi-build.sh importer OUT` builds CDI's importer (cmd/cdi-importer) to OUT
# instead, for make bench: its VDDK source needs libnbd's cgo bindings, which
# the Go module proxy refuses (403), so a build overlay swaps that one file
# for CDI's own arm64 stub of it (VDDK is not measured).
set -euo pipefail
. "$(dirname "$0")/env.sh"
CDI_VERSION=${E2E_CDI_VERSION:-v1.66.0}
CDI_GIT=${E2E_CDI_GIT:-https://github.com/kubevirt/containerized-data-importer}
SRC=${E2E_CDI_SRC:-/var/cache/diskimport-e2e/cdi-$CDI_VERSION}
t0=$(date +%s)
PATHS="go.mod go.sum cmd pkg staging"
if [ ! -f "$SRC/go.mod" ]; then
	mkdir -p "$SRC"
	if [ -d "$CDI_GIT" ]; then git --git-dir="$CDI_GIT" archive "$CDI_VERSION" -- $PATHS | tar -x -C "$SRC"
	else
		tmp=$(mktemp -d); git clone -q --depth 1 --branch "$CDI_VERSION" "$CDI_GIT" "$tmp/cdi"
		git -C "$tmp/cdi" archive HEAD -- $PATHS | tar -x -C "$SRC"; rm -rf "$tmp"
	fi
fi
cd "$SRC"
if [ "${1:-}" = importer ]; then
	out=${2:?cdi-build.sh importer OUT}
	ov=$(mktemp -d)
	trap 'rm -rf "$ov"' EXIT
	sed 's/^\/\/go:build arm64$/\/\/go:build amd64/; s/^\/\/ +build arm64$/\/\/ +build amd64/' pkg/importer/vddk-datasource_arm64.go >"$ov/vddk-stub.go"
	printf '{"Replace":{"%s":"%s"}}' "$SRC/pkg/importer/vddk-datasource_amd64.go" "$ov/vddk-stub.go" >"$ov/overlay.json"
	CGO_ENABLED=0 nice -n 19 go build -mod=mod -overlay "$ov/overlay.json" -trimpath -ldflags "-s -w" -o "$out" ./cmd/cdi-importer
	echo "build: cdi-importer $CDI_VERSION $(($(date +%s) - t0)) s" >&2
	exit 0
fi
mkdir -p "$E2E_BIN"
CGO_ENABLED=0 nice -n 19 go build -mod=mod -trimpath -ldflags "-s -w" -o "$E2E_BIN/cdi-controller" ./cmd/cdi-controller
# CDI keeps its CRDs as YAML strings in Go (pkg/operator/resources); a
# three-line program in CDI's tree (outside this repository) writes them out.
mkdir -p "$SRC/cmd/e2e-write-crds" "$E2E_BIN/cdi-crds"
cat > "$SRC/cmd/e2e-write-crds/main.go" <<'GO'
package main

import (
	"os"
	"path/filepath"

	"kubevirt.io/containerized-data-importer/pkg/operator/resources"
)

func main() {
	for name, crd := range resources.CDICRDs {
		if err := os.WriteFile(filepath.Join(os.Args[1], name+".yaml"), []byte(crd), 0o644); err != nil {
			panic(err)
		}
	}
}
GO
CGO_ENABLED=0 nice -n 19 go run -mod=mod ./cmd/e2e-write-crds "$E2E_BIN/cdi-crds"
echo "build: cdi-controller $CDI_VERSION $(($(date +%s) - t0)) s"
