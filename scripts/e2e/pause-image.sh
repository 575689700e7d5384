#!/bin/bash
# Writes an OCI image archive holding only the static pause program as
# /pause, named for containerd's sandbox image, for `ctr images import`.
# Usage: pause-image.sh PAUSE_BINARY NAME OUT.tar
set -euo pipefail
bin=$1 name=$2 out=$3
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
mkdir -p "$d/rootfs" "$d/oci/blobs/sha256"
install -m 0755 "$bin" "$d/rootfs/pause"
tar -C "$d/rootfs" --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -cf "$d/layer.tar" pause
put() { # file mediatype -> prints descriptor fields "digest size"
	local s; s=$(sha256sum "$1" | cut -d' ' -f1)
	cp "$1" "$d/oci/blobs/sha256/$s"
	echo "sha256:$s $(stat -c %s "$1")"
}
read -r ld ls < <(put "$d/layer.tar")
printf '{"architecture":"amd64","os":"linux","config":{"Entrypoint":["/pause"],"User":"65535:65535"},"rootfs":{"type":"layers","diff_ids":["%s"]}}' "$ld" > "$d/config.json"
read -r cd cs < <(put "$d/config.json")
printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"%s","size":%s}]}' "$cd" "$cs" "$ld" "$ls" > "$d/manifest.json"
read -r md ms < <(put "$d/manifest.json")
printf '{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"%s","size":%s,"annotations":{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"%s"}}]}' "$md" "$ms" "$name" "${name##*:}" > "$d/oci/index.json"
echo '{"imageLayoutVersion":"1.0.0"}' > "$d/oci/oci-layout"
tar -C "$d/oci" --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -cf "$out" oci-layout index.json blobs
