#!/usr/bin/env bash
# digest.sh: the content digest's speed and cost, side by side, interleaved
# round by round, on the bench disk (bench/cache/img-SIZE/disk.raw and its
# qcow2, built here like images.sh does if missing):
#   - hashing a raw file already in the page cache: sha256sum, blksum (if on
#     PATH: build it from nirs/blkhash v0.10.1) and `importer digest --content`,
#     and the same on a qcow2 and on an all-hole file of the same size;
#   - the cost of contentDigest on an import: disk.raw and disk.qcow2.gz
#     onto a file and disk.qcow2 onto a loop device (root), by the importer
#     built from BENCH_BASE (default: main before contentDigest) and from
#     this tree.
# Prints per label the median seconds, MB/s of the file's size and the
# ratio to sha256sum of the same file (the imports: of the raw disk); no
# pass/fail.
#
# Environment: BENCH_SIZE (2G), BENCH_RUNS (3), BENCH_BASE (a commit).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
size=${BENCH_SIZE:-2G}
runs=${BENCH_RUNS:-3}
img=$root/bench/cache/img-$size
work=$(mktemp -d)
loop=""
cleanup() {
	set +e
	[[ -n $loop ]] && losetup -d "$loop"
	rm -rf "$work"
}
trap cleanup EXIT

go -C bench build -o "$work/benchtool" ./benchtool
go build -trimpath -o "$work/new" ./cmd/importer
base=${BENCH_BASE:-$(git log --format=%H -1 --grep='^engine: every disk import records contentDigest')^}
git archive --prefix=base/ "$base" | tar -x -C "$work"
(cd "$work/base" && go build -trimpath -o "$work/old" ./cmd/importer)

mkdir -p "$img"
(
	flock 9 # the lock images.sh takes: one builder of a directory at a time
	cd "$img"
	[[ -s disk.raw ]] || { "$work/benchtool" gen "$size" disk.raw.tmp >layout.json && mv disk.raw.tmp disk.raw; }
	[[ -s disk.qcow2 ]] || { qemu-img convert -q -f raw -O qcow2 disk.raw disk.qcow2.tmp && mv disk.qcow2.tmp disk.qcow2; }
	[[ -s disk.qcow2.gz ]] || { gzip -1 -c disk.qcow2 >disk.qcow2.gz.tmp && mv disk.qcow2.gz.tmp disk.qcow2.gz; }
) 9>>"$img/.images.lock"
bytes=$(stat -c %s "$img/disk.raw")
truncate -s "$bytes" "$work/hole.raw"
# All data, no zeros: the hash's speed on data alone (MB/s of this file's
# size in its rows).
dbytes=$((bytes / 4))
head -c "$dbytes" /dev/urandom >"$work/data.raw"
data=$(du -B1 "$img/disk.raw" | cut -f1)
cat "$img/disk.raw" "$img/disk.qcow2" >/dev/null # the page cache holds both, as for sha256sum's first run
if [[ $(id -u) == 0 ]]; then
	truncate -s "$bytes" "$work/backing"
	loop=$(losetup --direct-io=on --show -f "$work/backing")
fi
blksum=$(command -v blksum || true)

# one LABEL CMD...: one timed run, wall and CPU (user+sys of the command
# and its children: on a shared machine the CPU seconds are the steadier
# figure); the command's stdout is kept for the digest check.
one() {
	local label=$1; shift
	local TIMEFORMAT='%R %U %S' t
	t=$({ time "$@" >"$work/out" 2>"$work/err"; } 2>&1) || echo "digest: $label FAILED: $(tail -c 300 "$work/err")" >&2
	t=$(tail -1 <<<"$t")
	printf '%s\t%s\n' "$label" "$(awk '{printf "%.3f\t%.3f", $1, $2 + $3}' <<<"$t")" >>"$work/runs.tsv"
	printf 'digest: %-40s %s\n' "$label" "$(tail -1 "$work/runs.tsv" | cut -f2- | awk '{printf "%7.3f s  cpu %7.3f s", $1, $2}')" >&2
}
digest_of() { awk '{print $1}' "$work/out" | sed 's/^blk-sha256://'; }
: >"$work/runs.tsv"
for run in $(seq "$runs"); do
	one "sha256sum raw" sha256sum "$img/disk.raw"
	one "importer digest raw" "$work/new" digest --content "$img/disk.raw"
	ours=$(digest_of)
	one "importer digest qcow2" "$work/new" digest --content "$img/disk.qcow2"
	[[ $(digest_of) == "$ours" ]] || echo "digest: qcow2 digest differs from raw's" >&2
	one "importer digest hole" "$work/new" digest --content "$work/hole.raw"
	one "sha256sum data" sha256sum "$work/data.raw"
	one "importer digest data" "$work/new" digest --content "$work/data.raw"
	one "sha256sum hole" sha256sum "$work/hole.raw"
	if [[ -n $blksum ]]; then
		one "blksum raw" "$blksum" "$img/disk.raw"
		[[ $(digest_of) == "$ours" ]] || echo "digest: blksum's digest differs from ours" >&2
		one "blksum qcow2" "$blksum" "$img/disk.qcow2"
		one "blksum hole" "$blksum" "$work/hole.raw"
		one "blksum data" "$blksum" "$work/data.raw"
	fi
	for v in old new; do
		rm -f "$work/t.img"
		one "import raw → file ($v)" "$work/$v" -q "$img/disk.raw" "$work/t.img"
		rm -f "$work/t.img"
		one "import qcow2.gz → file ($v)" "$work/$v" -q "$img/disk.qcow2.gz" "$work/t.img"
		rm -f "$work/t.img"
		if [[ -n $loop ]]; then
			blkdiscard "$loop"
			one "import qcow2 → loop ($v)" "$work/$v" -q "$img/disk.qcow2" "$loop"
		fi
	done
done
printf 'disk: %s bytes, %s allocated; data file %s bytes; %s runs, medians; %s cores\n' "$bytes" "$data" "$dbytes" "$runs" "$(nproc)"
printf 'label\twall_s\tcpu_s\tMB/s\tMB per cpu-s\twall vs sha256sum of the same file\n'
sort -t$'\t' -k1,1 -s "$work/runs.tsv" | awk -F'\t' -v bytes="$bytes" -v dbytes="$dbytes" '
	function med(a, n,  i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
		return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
	function flush() { if (k) { m[cur] = med(w, k); c[cur] = med(u, k); order[++n] = cur }; k = 0 }
	$1 != cur { flush(); cur = $1 }
	{ k++; w[k] = $2; u[k] = $3 }
	END { flush()
		for (i = 1; i <= n; i++) { l = order[i]; b = bytes; ref = m["sha256sum raw"]
			if (l ~ /data$/) { b = dbytes; ref = m["sha256sum data"] } else if (l ~ /hole$/) ref = m["sha256sum hole"]
			printf "%s\t%.3f\t%.3f\t%.0f\t%.0f\t%.2fx\n", l, m[l], c[l], b / m[l] / 1e6, (c[l] > 0 ? b / c[l] / 1e6 : 0), ref / m[l] } }'
