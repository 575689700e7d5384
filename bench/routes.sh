#!/usr/bin/env bash
# routes.sh: the convertible images of bench.sh's image set imported over
# HTTP (127.0.0.1) by each route the engine can take for them, forced with
# the CLI's flags, against download + qemu-img convert; interleaved, one
# line per run, medians at the end. For choosing the route in the engine's
# decide and for timing the ranged route's NBD exports (internal/nbdserver).
#
#   auto    the engine's own choice
#   ranged  --no-stream-decode: qemu-img reads our NBD export of HTTP ranges
#   decode  --no-ranged-read: our stream decoder, one GET
#   dl+qemu curl -o file && qemu-img convert -t none -W (-n onto the loop)
#
# Environment: BENCH_SIZE (2G), BENCH_RUNS (3), ROUTE_CASES (qcow2 c.qcow2
# stream.vmdk), ROUTE_TARGETS (loop file), ROUTE_ROUTES (auto ranged decode
# dl+qemu; base-ranged: ranged with $BASE_IMPORTER, an older build to
# compare with), IMPORTER (a binary to time instead of building one). Needs root
# and an image set already built by bench.sh (bench/images.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
size=${BENCH_SIZE:-2G}
runs=${BENCH_RUNS:-3}
cases=${ROUTE_CASES:-qcow2 c.qcow2 stream.vmdk}
targets=${ROUTE_TARGETS:-loop file}
routes=${ROUTE_ROUTES:-auto ranged decode dl+qemu}
img=$root/bench/cache/img-$size
[[ $(id -u) == 0 ]] || { echo "routes: needs root (loop device, blkdiscard)" >&2; exit 1; }
[[ -s $img/xzblocks.txt ]] || { echo "routes: image set $img not built (run make bench first)" >&2; exit 1; }
work=$(mktemp -d "$root/bench/cache/routes-XXXXXX")
imp=${IMPORTER:-}
if [[ -z $imp ]]; then
	go build -trimpath -o "$work/importer" ./cmd/importer
	imp=$work/importer
fi
go build -o "$work/demoserve" ./scripts/demoserve
vsize=$(stat -c %s "$img/disk.raw")
srv_pid="" loop=""
cleanup() {
	set +e
	if [[ -n $srv_pid ]]; then kill "$srv_pid" 2>/dev/null; wait "$srv_pid" 2>/dev/null; fi
	if [[ -n $loop ]]; then losetup -d "$loop" || echo "routes: could not detach $loop" >&2; fi
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
"$work/demoserve" "$img" >"$work/url" 2>"$work/demoserve.err" &
srv_pid=$!
for _ in $(seq 50); do [[ -s $work/url ]] && break; sleep 0.1; done
url=$(head -1 "$work/url")
url=${url%/}
truncate -s "$vsize" "$work/backing"
loop=$(losetup --direct-io=on --show -f "$work/backing")
out=$work/out.img dl=$work/dl
declare -A fmt=([qcow2]=qcow2 [c.qcow2]=qcow2 [stream.vmdk]=vmdk [vhdx]=vhdx [vhd]=vpc [vdi]=vdi)
cat "$img"/disk.* >/dev/null # the sources stand in for a network: cached
: >"$work/times"
for run in $(seq "$runs"); do
	for c in $cases; do
		for t in $targets; do
			for r in $routes; do
				dst=$loop
				[[ $t == file ]] && dst=$out
				case $r in
				auto) cmd="$imp -q $url/disk.$c $dst" ;;
				base-ranged) cmd="$BASE_IMPORTER -q --no-stream-decode $url/disk.$c $dst" ;;
				ranged) cmd="$imp -q --no-stream-decode $url/disk.$c $dst" ;;
				decode) cmd="$imp -q --no-ranged-read $url/disk.$c $dst" ;;
				dl+qemu)
					if [[ $t == loop ]]; then
						cmd="curl -sS -o $dl $url/disk.$c && qemu-img convert -t none -W -n -f ${fmt[$c]} -O raw $dl $dst"
					else
						cmd="curl -sS -o $dl $url/disk.$c && qemu-img convert -t none -W -f ${fmt[$c]} -O raw $dl $dst"
					fi ;;
				esac
				blkdiscard "$loop"
				rm -f "$out" "$dl"
				sync
				t0=$(date +%s.%N)
				rc=0
				bash -c "$cmd" >"$work/log" 2>&1 || rc=$?
				t1=$(date +%s.%N)
				secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.3f", b-a}')
				printf '%s\t%s\t%s\t%s\n' "$c" "$t" "$r" "$secs" >>"$work/times"
				printf 'routes: run %s %-12s %-5s %-8s %7s s%s\n' "$run" "$c" "$t" "$r" "$secs" \
					"$([[ $rc == 0 ]] || echo "  FAILED rc=$rc: $(tail -c 300 "$work/log" | tr '\n' ' ')")" >&2
				if [[ $rc == 0 && $run == 1 && ${ROUTE_CHECK:-1} == 1 ]]; then
					cmp -s -n "$vsize" "$dst" "$img/disk.raw" || echo "routes: CONTENT DIFFERS: $c $t $r" >&2
				fi
			done
		done
	done
done
echo "median seconds ($runs runs, $size image, git $(git rev-parse --short HEAD)):"
# Median per case, target and route (mawk has no asort: sorted by time
# first, then the middle of each group picked).
sort -t$'\t' -k1,1 -k2,2 -k3,3 -k4,4n "$work/times" | awk -F'\t' '
	{ key = $1 FS $2 FS $3; if (!(key in n)) order[++k] = key; v[key, ++n[key]] = $4 }
	END { for (i = 1; i <= k; i++) { key = order[i]; c = n[key]; m = (c % 2) ? v[key, (c+1)/2] : (v[key, c/2] + v[key, c/2+1]) / 2
		split(key, f, FS); printf "%-12s %-5s %-8s %7.3f\n", f[1], f[2], f[3], m } }'
