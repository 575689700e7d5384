#!/usr/bin/env bash
# Installs what `make bench` needs when it is missing (Debian; needs root).
set -euo pipefail
declare -A pkg=(
	[/usr/bin/time]=time [qemu-img]=qemu-utils [xz]=xz-utils [zstd]=zstd [pigz]=pigz
	[gzip]=gzip [curl]=curl [losetup]=mount [blkdiscard]=util-linux [dd]=coreutils
	[igzip]=isal [unshare]=util-linux
	# CDI's importer starts nbdkit's curl plugin (in the nbdkit package) for
	# an HTTP source.
	[nbdkit]=nbdkit
)
missing=()
for cmd in "${!pkg[@]}"; do
	command -v "$cmd" >/dev/null 2>&1 || missing+=("${pkg[$cmd]}")
done
# qemu-img's http driver (the "qemu-img reads the URL" reference) lives in
# qemu-block-extra.
if command -v dpkg-query >/dev/null && ! dpkg-query -W -f='${Status}' qemu-block-extra 2>/dev/null | grep -q installed; then
	missing+=(qemu-block-extra)
fi
if ((${#missing[@]})); then
	echo "bench: installing ${missing[*]}" >&2
	if [[ $(id -u) != 0 ]]; then
		echo "bench: need root to install ${missing[*]}" >&2
		exit 1
	fi
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
