#!/bin/bash
# Builds what the e2e cluster runs that Debian does not ship: the Kubernetes
# components of e2e/tools/go.mod (one release, from the Go module proxy), a
# static pause program, and the project's image (make image). Output in
# bin/e2e/. Prints how long each part took.
set -euo pipefail
. "$(dirname "$0")/env.sh"
say_failures build.sh
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${E2E_BIN:-$ROOT/bin/e2e}
GO=${GO:-go}
mkdir -p "$OUT"
export CGO_ENABLED=0

t0=$(date +%s)
cd "$ROOT/e2e/tools"
# The version the binaries report (without it: v0.0.0-master+$Format:%H$).
KVER=$("$GO" list -m -f '{{.Version}}' k8s.io/kubernetes)
KMINOR=${KVER#v1.}; KMINOR=${KMINOR%%.*}
VP=k8s.io/component-base/version
KLDFLAGS="-s -w -X $VP.gitVersion=$KVER -X $VP.gitMajor=1 -X $VP.gitMinor=$KMINOR -X $VP.gitTreeState=clean"
for c in kube-apiserver kube-controller-manager kube-scheduler kube-proxy kubelet kubectl; do
	s=$(date +%s)
	nice -n 19 "$GO" build -trimpath -ldflags "$KLDFLAGS" -o "$OUT/$c" "k8s.io/kubernetes/cmd/$c"
	echo "build: $c $(($(date +%s) - s)) s"
done
s=$(date +%s)
nice -n 19 "$GO" build -trimpath -ldflags "-s -w" -o "$OUT/pause" ./pause
nice -n 19 "$GO" build -trimpath -ldflags "-s -w" -o "$OUT/clusterdns" ./clusterdns
echo "build: pause, clusterdns $(($(date +%s) - s)) s"
t1=$(date +%s)
echo "build: kubernetes $(( t1 - t0 )) s"

# The bench's tool serves the registry DataVolumes' containerdisks (benchtool registry).
s=$(date +%s)
cd "$ROOT"
nice -n 19 "$GO" -C bench build -trimpath -ldflags "-s -w" -o "$OUT/benchtool" ./benchtool
echo "build: benchtool $(($(date +%s) - s)) s"

if [ "${E2E_SKIP_IMAGE:-}" != 1 ]; then
	cd "$ROOT"
	nice -n 19 make image >/dev/null
	echo "build: image $(($(date +%s) - t1)) s"
fi
echo "build: total $(($(date +%s) - t0)) s"
