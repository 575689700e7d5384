#!/bin/bash
# Builds CDI's controller and upload proxy (cmd/cdi-controller,
# cmd/cdi-uploadproxy) from CDI's public source at
# one release, outside this repository, with the modules of its go.sum from the Go module proxy (Go 1.26 refuses
# v1.66.0's vendor/modules.txt: "kubevirt.io/containerized-data-importer-api:
# is replaced in go.mod, but not marked as replaced in vendor/modules.txt"), and
# extracts its CRDs. E2E_CDI_GIT is a git directory or URL of
# github.com/kubevirt/containerized-data-importer (the Go module proxy does
# not serve it).
# Output: bin/e2e/cdi-controller, cdi-uploadproxy, e2e-upload-token, cdi-crds/.
# `cdi-build.sh importer|cloner|uploadserver OUT` builds CDI's importer
# (cmd/cdi-importer), cloner or upload server to OUT instead, for make
# bench: the importer's VDDK source (the upload server links it too) needs libnbd's cgo bindings, which
# the Go module proxy refuses (403), so a build overlay swaps that one file
# for CDI's own arm64 stub of it (VDDK is not measured).
set -euo pipefail
. "$(dirname "$0")/env.sh"
say_failures cdi-build.sh
CDI_VERSION=${E2E_CDI_VERSION:-v1.66.0}
CDI_GIT=${E2E_CDI_GIT:-https://github.com/kubevirt/containerized-data-importer}
SRC=${E2E_CDI_SRC:-/var/cache/diskimport-e2e/cdi-$CDI_VERSION}
t0=$(date +%s)
PATHS="go.mod go.sum cmd pkg staging"
# The source is extracted beside SRC and renamed into place, so a failed
# extraction leaves no SRC that a later run would take as complete.
if [ ! -f "$SRC/go.mod" ]; then
	rm -rf "$SRC.part"; mkdir -p "$SRC.part"
	if [ -d "$CDI_GIT" ]; then git --git-dir="$CDI_GIT" archive "$CDI_VERSION" -- $PATHS | tar -x -C "$SRC.part"
	else
		tmp=$(mktemp -d); git clone -q --depth 1 --branch "$CDI_VERSION" "$CDI_GIT" "$tmp/cdi"
		git -C "$tmp/cdi" archive HEAD -- $PATHS | tar -x -C "$SRC.part"; rm -rf "$tmp"
	fi
	rm -rf "$SRC"; mv "$SRC.part" "$SRC"
fi
cd "$SRC"
case "${1:-}" in importer | cloner | uploadserver)
	what=$1
	out=${2:?cdi-build.sh $what OUT}
	ov=$(mktemp -d)
	trap 'rm -rf "$ov"' EXIT
	sed 's/^\/\/go:build arm64$/\/\/go:build amd64/; s/^\/\/ +build arm64$/\/\/ +build amd64/' pkg/importer/vddk-datasource_arm64.go >"$ov/vddk-stub.go"
	printf '{"Replace":{"%s":"%s"}}' "$SRC/pkg/importer/vddk-datasource_amd64.go" "$ov/vddk-stub.go" >"$ov/overlay.json"
	CGO_ENABLED=0 nice -n 19 go build -mod=mod -overlay "$ov/overlay.json" -trimpath -ldflags "-s -w" -o "$out" "./cmd/cdi-$what"
	echo "build: cdi-$what $CDI_VERSION $(($(date +%s) - t0)) s" >&2
	exit 0
	;;
esac
mkdir -p "$E2E_BIN"
# Two constants changed by a build overlay, as both run on the host's
# network namespace, not each in its pod: the controller's metrics server
# is off (BindAddress "0"; its fixed :8443 is also the importer's default
# metrics port, which tests on a shared host bind), and the upload proxy
# listens on E2E_UPLOADPROXY_PORT instead of its fixed 8443.
ov=$(mktemp -d)
trap 'rm -rf "$ov"' EXIT
replace() { # file sed-expression: one changed copy of a CDI file in the overlay
	local out; out="$ov/$(basename "$1")"
	sed "$2" "$1" > "$out"
	! cmp -s "$1" "$out" || { echo "cdi-build.sh: $2 changed nothing in $1" >&2; exit 1; }
	printf '"%s":"%s",' "$SRC/$1" "$out" >> "$ov/replace"
}
replace cmd/cdi-controller/controller.go 's/^\(\s*BindAddress: *\)":8443",$/\1"0",/'
replace cmd/cdi-uploadproxy/uploadproxy.go "s/^\(\s*defaultPort = \)8443$/\1$E2E_UPLOADPROXY_PORT/"
printf '{"Replace":{%s}}' "$(sed 's/,$//' "$ov/replace")" > "$ov/overlay.json"
CGO_ENABLED=0 nice -n 19 go build -mod=mod -overlay "$ov/overlay.json" -trimpath -ldflags "-s -w" -o "$E2E_BIN/cdi-controller" ./cmd/cdi-controller
CGO_ENABLED=0 nice -n 19 go build -mod=mod -overlay "$ov/overlay.json" -trimpath -ldflags "-s -w" -o "$E2E_BIN/cdi-uploadproxy" ./cmd/cdi-uploadproxy
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
# An upload token as cdi-apiserver's UploadTokenRequest issues it (CDI's
# pkg/token, issuer cdi-apiserver, 5 minutes), signed with a key of the
# e2e's own: cdi-uploadproxy checks it with APISERVER_PUBLIC_KEY.
mkdir -p "$SRC/cmd/e2e-upload-token"
cat > "$SRC/cmd/e2e-upload-token/main.go" <<'GO'
package main

import (
	"crypto/rsa"
	"fmt"
	"os"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/keyutil"

	"kubevirt.io/containerized-data-importer/pkg/common"
	"kubevirt.io/containerized-data-importer/pkg/token"
)

// usage: e2e-upload-token KEY.pem NAMESPACE PVC
func main() {
	key, err := keyutil.PrivateKeyFromFile(os.Args[1])
	if err != nil {
		panic(err)
	}
	tok, err := token.NewGenerator(common.UploadTokenIssuer, key.(*rsa.PrivateKey), 5*time.Minute).Generate(&token.Payload{
		Operation: token.OperationUpload,
		Name:      os.Args[3],
		Namespace: os.Args[2],
		Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "persistentvolumeclaims"},
	})
	if err != nil {
		panic(err)
	}
	fmt.Print(tok)
}
GO
CGO_ENABLED=0 nice -n 19 go build -mod=mod -trimpath -ldflags "-s -w" -o "$E2E_BIN/e2e-upload-token" ./cmd/e2e-upload-token
echo "build: cdi-controller, cdi-uploadproxy $CDI_VERSION $(($(date +%s) - t0)) s"
