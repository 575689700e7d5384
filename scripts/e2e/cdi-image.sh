#!/bin/bash
# Builds CDI's own importer, cloner and upload server images for the e2e
# timing run (timing.sh), offline: CDI's programs from its source at one
# release (cdi-build.sh) and Debian's qemu-img, nbdkit (with the curl plugin
# and the filters CDI's importer asks for: pkg/image/nbdkit.go), bash and
# the tools cloner_startup.sh and CDI's programs run, laid out at the paths CDI's pods run
# (cmd/*/BUILD.bazel): entrypoints /usr/bin/cdi-importer -alsologtostderr,
# /usr/bin/cdi-uploadserver -alsologtostderr, /usr/bin/cloner_startup.sh.
# One recipe (cmd/imagebuild), three entrypoints; the layers are the same.
# Output: bin/e2e/cdi-image/{importer,cloner,uploadserver}/importer-image.tar,
# tagged localhost/cdi/ROLE:VERSION; up.sh imports them when they exist.
set -euo pipefail
. "$(dirname "$0")/env.sh"
say_failures cdi-image.sh
CDI_VERSION=${E2E_CDI_VERSION:-v1.66.0}
OUT=$E2E_BIN/cdi-image
GO=${GO:-go}
mkdir -p "$OUT/bin"
t0=$(date +%s)
for role in importer cloner uploadserver; do
	[ -x "$OUT/bin/cdi-$role" ] || "$(dirname "$0")/cdi-build.sh" "$role" "$OUT/bin/cdi-$role"
done
SRC=${E2E_CDI_SRC:-/var/cache/diskimport-e2e/cdi-$CDI_VERSION}
NBDKIT_LIB=/usr/lib/x86_64-linux-gnu/nbdkit
for f in /usr/bin/qemu-img /usr/bin/nbdkit "$NBDKIT_LIB/plugins/nbdkit-curl-plugin.so" "$SRC/cmd/cdi-cloner/cloner_startup.sh"; do
	[ -e "$f" ] || { echo "cdi-image.sh: $f missing (apt-get install qemu-utils nbdkit nbdkit-plugin-libcurl; CDI's source: make e2e-cdi-build)" >&2; exit 1; }
done
args=(-importer "" -version "$CDI_VERSION" -revision "$CDI_VERSION" -created 0
	-source https://github.com/kubevirt/containerized-data-importer -max-compressed-size 200000000
	-path /usr/sbin:/usr/bin:/sbin:/bin
	-program "$OUT/bin/cdi-importer=/usr/bin/cdi-importer"
	-program "$OUT/bin/cdi-cloner=/usr/bin/cdi-cloner"
	-program "$OUT/bin/cdi-uploadserver=/usr/bin/cdi-uploadserver"
	-script "$SRC/cmd/cdi-cloner/cloner_startup.sh=/usr/bin/cloner_startup.sh")
# CDI's programs run /usr/bin/tar (the cloner's stream, an archive upload),
# /usr/bin/ln and /usr/sbin/blockdev by these paths (cmd/cdi-cloner,
# pkg/util, pkg/importer/file.go), qemu-img and nbdkit by name.
for p in /usr/bin/qemu-img /usr/bin/nbdkit /bin/bash /usr/bin/du /usr/bin/cut /usr/sbin/blockdev /usr/bin/tar /usr/bin/ln; do args+=(-host-program "$p"); done
for p in plugins/nbdkit-curl-plugin.so plugins/nbdkit-file-plugin.so filters/nbdkit-xz-filter.so filters/nbdkit-gzip-filter.so \
	filters/nbdkit-tar-filter.so filters/nbdkit-retry-filter.so filters/nbdkit-readahead-filter.so filters/nbdkit-cacheextents-filter.so; do
	args+=(-host-library "$NBDKIT_LIB/$p")
done
cd "$E2E_ROOT"
"$GO" build -o "$OUT/imagebuild" ./cmd/imagebuild
for role in importer cloner uploadserver; do
	case $role in
	importer) ep=/usr/bin/cdi-importer,-alsologtostderr ;;
	uploadserver) ep=/usr/bin/cdi-uploadserver,-alsologtostderr ;;
	cloner) ep=/usr/bin/cloner_startup.sh ;;
	esac
	nice -n 19 "$OUT/imagebuild" "${args[@]}" -entrypoint "$ep" -repository "localhost/cdi/$role" -out-dir "$OUT/$role" | sed "s/^/cdi-image $role: /"
done
echo "build: CDI's images $CDI_VERSION $(($(date +%s) - t0)) s"
