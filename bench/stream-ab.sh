#!/usr/bin/env bash
# stream-ab.sh OLD_IMPORTER NEW_IMPORTER: the stream route's A/B. Imports
# disk.raw.{zst,gz,xz,mt.xz} over HTTP (127.0.0.1) onto a direct-io loop
# device with two importer binaries, interleaved run by run with the
# decoders alone (benchtool decode, xz -dc, xz -T0 -dc), and prints each
# label's median wall time and the importer's own CPU seconds (perf
# samples, so the xz child's are apart). Needs root and the images that
# bench.sh builds (it does not build them: run `make bench` once).
#
# Environment: BENCH_SIZE (2G), BENCH_RUNS (3), BENCH_CASES (zst gz xz mt.xz).
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $# == 2 ]] || { echo "usage: $0 OLD_IMPORTER NEW_IMPORTER" >&2; exit 2; }
old=$(realpath "$1") new=$(realpath "$2")
img=$PWD/bench/cache/img-${BENCH_SIZE:-2G}
runs=${BENCH_RUNS:-3}
cases=${BENCH_CASES:-zst gz xz mt.xz}
[[ -s $img/xzblocks.txt ]] || { echo "stream-ab: no images in $img (run make bench once)" >&2; exit 1; }
[[ $(id -u) == 0 ]] || { echo "stream-ab: needs root (loop device)" >&2; exit 1; }
work=$(mktemp -d)
bt=$work/benchtool
go -C bench build -o "$bt" ./benchtool
go build -o "$work/demoserve" ./scripts/demoserve
srv="" loop=""
cleanup() {
	set +e
	[[ -n $srv ]] && kill "$srv" && wait "$srv" 2>/dev/null
	[[ -n $loop ]] && losetup -d "$loop"
	rm -rf "$work"
}
trap cleanup EXIT
"$work/demoserve" "$img" >"$work/url" &
srv=$!
for _ in $(seq 50); do [[ -s $work/url ]] && break; sleep 0.1; done
url=$(head -1 "$work/url") url=${url%/}
truncate -s "$(stat -c %s "$img/disk.raw")" "$work/backing"
loop=$(losetup --direct-io=on --show -f "$work/backing")

# one LABEL CMD...: one run; wall seconds and the importer's CPU seconds.
one() {
	local label=$1; shift
	blkdiscard "$loop"; sync
	local t0 t1 cpu
	t0=$(date +%s.%N)
	perf record -q -F 1000 -o "$work/perf.data" -- "$@" >/dev/null 2>"$work/err" || echo "stream-ab: $label FAILED: $(tail -c 300 "$work/err")" >&2
	t1=$(date +%s.%N)
	cpu=$(perf report -i "$work/perf.data" --sort comm --stdio -n 2>/dev/null | awk '/%/ && $3 != "xz" {s += $2} END {printf "%.2f", s/1000}')
	printf '%s\t%s\t%s\n' "$label" "$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.3f", b-a}')" "$cpu" >>"$work/runs.tsv"
	printf 'stream-ab: %-24s %7.3f s  cpu %5.2f s (without xz)\n' "$label" "$(tail -1 "$work/runs.tsv" | cut -f2)" "$cpu" >&2
}
: >"$work/runs.tsv"
for run in $(seq "$runs"); do
	for c in $cases; do
		one "$c old" "$old" -q --json "$url/disk.raw.$c" "$loop"
		one "$c new" "$new" -q --json "$url/disk.raw.$c" "$loop"
		one "$c decoder" "$bt" decode "$img/disk.raw.$c"
		case $c in
		xz) one "$c xz -dc" sh -c "xz -dc $img/disk.raw.xz >/dev/null" ;;
		mt.xz) one "$c xz -T0 -dc" sh -c "xz -T0 -dc $img/disk.raw.mt.xz >/dev/null" ;;
		esac
	done
done
echo "label	median_s	median_cpu_s (importer or decoder, without xz)"
sort -t$'\t' -k1,1 -s "$work/runs.tsv" | awk -F'\t' '
	function med(a, n,  i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
		return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
	function flush() { if (k) printf "%s\t%.3f\t%.2f\n", cur, med(w, k), med(c, k); k = 0 }
	$1 != cur { flush(); cur = $1 }
	{ k++; w[k] = $2; c[k] = $3 }
	END { flush() }'
