#!/usr/bin/env bash
# cpu.sh [CASE...]: CPU-seconds of one import per case (issue 37), the
# number a CFS quota turns into wall time. Each case runs BENCH_RUNS (3)
# times as CDI's importer pod (CDI's environment, the loop device at
# /dev/cdi-block-volume, internal/testkit/testimg/pod.sh) from Go's file server on
# 127.0.0.1, in a fresh cpuacct cgroup (v1; cpuacct.usage: every process of
# the pod, decoder children included) under a CFS quota (BENCH_QUOTA_US,
# 75000 per 100000 us: CDI's 750m; 0 for none) and a 600M memory limit; the
# decoder alone (igzip -dc, zstd -dc, xz -dc into /dev/null; for an image
# format, a local qemu-img convert into qemu's null driver) runs the same
# way. The first run of each case is checked: the device's bytes must equal
# disk.raw. Prints one line per case: medians of ours and of the decoder,
# in CPU-seconds and CPU-seconds per GiB of the virtual disk, and ours' wall
# seconds.
#
# Environment: BENCH_IMG (a directory of bench disks made by bench/images.sh;
# default bench/cache/img-256M), BENCH_RUNS (3), BENCH_IMPORTER (a binary;
# default: built from this tree), BENCH_BEFORE (another importer binary, an
# earlier build: each run then imports with it first, interleaved, and the
# line adds its median and the median of the runs' ratios ours/before,
# which the machine's load moves far less than the seconds),
# BENCH_QUOTA_US (75000), BENCH_DECODER (1; 0 leaves the decoder's runs
# out), BENCH_ENV (variables added to the pod's environment, such as
# IMPORTER_CONNECTIONS=1), BENCH_TLS (1: the disks served over HTTPS,
# the pod trusting the server's certificate through IMPORTER_CERT_DIR),
# BENCH_BEFORE_ENV (the before runs' instead;
# set without BENCH_BEFORE, the before runs are this build's, so two
# settings of one build are compared interleaved). Wall seconds (ours_wall,
# bef_wall; the pod's setup included) are medians too: under the quota
# they follow the CPU-seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
img=${BENCH_IMG:-$root/bench/cache/img-256M}
runs=${BENCH_RUNS:-3}
quota=${BENCH_QUOTA_US:-75000}
decoder=${BENCH_DECODER:-1}
cases=("$@")
[[ ${#cases[@]} -gt 0 ]] || cases=(raw.gz stream.vmdk qcow2.gz raw.zst raw.xz raw.mt.xz raw qcow2 qcow2.xz vhdx vhd vdi)
[[ $(id -u) == 0 ]] || { echo "cpu.sh: needs root (loop device, cgroups)" >&2; exit 1; }
[[ -s $img/disk.raw ]] || { echo "cpu.sh: no bench disks in $img (bench/images.sh)" >&2; exit 1; }
work=$(mktemp -d /tmp/cpu-bench.XXXX)
srv="" loop="" cgs=()
cleanup() {
	set +e
	for d in "${cgs[@]}"; do [[ -d $d ]] && rmdir "$d"; done
	[[ -n $loop ]] && losetup -d "$loop"
	[[ -n $srv ]] && kill "$srv" && wait "$srv" 2>/dev/null
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
imp=${BENCH_IMPORTER:-}
if [[ -z $imp ]]; then
	go build -trimpath -o "$work/importer" ./cmd/importer
	imp=$work/importer
fi
go build -o "$work/demoserve" ./scripts/demoserve
# The gzip decoder child, as the image carries it, at /native in the pod
# (BENCH_ENV's PATH=… without /native leaves it out).
make -s native >&2
mkdir -p "$work/native"
cp -r bin/native/. "$work/native/" 2>/dev/null || true
tls=() certs=()
if [[ ${BENCH_TLS:-0} == 1 ]]; then
	tls=(-tls "$work/certs")
	certs=(/certs "$work/certs")
fi
"$work/demoserve" "${tls[@]}" "$img" >"$work/url" 2>/dev/null &
srv=$!
for _ in $(seq 50); do [[ -s $work/url ]] && break; sleep 0.1; done
url=$(head -1 "$work/url")
url=${url%/}
vsize=$(stat -c %s "$img/disk.raw")
truncate -s "$vsize" "$work/backing"
loop=$(losetup --direct-io=on --show -f "$work/backing")
mkdir "$work/podroot" "$work/scratch"
name=diskimport-cpu-$$
ca=/sys/fs/cgroup/cpuacct/$name cq=/sys/fs/cgroup/cpu/$name cm=/sys/fs/cgroup/memory/$name
cgs=("$ca" "$cq" "$cm")

# incg CMD: runs CMD (a shell command) in fresh cgroups; prints its CPU
# seconds and its wall seconds, one line.
incg() {
	mkdir "$ca" "$cq" "$cm"
	if [[ $quota != 0 ]]; then
		echo 100000 >"$cq/cpu.cfs_period_us"
		echo "$quota" >"$cq/cpu.cfs_quota_us"
	fi
	echo 600000000 >"$cm/memory.limit_in_bytes"
	local rc=0 t0 t1
	t0=$(date +%s.%N)
	bash -c "echo \$\$ >$ca/cgroup.procs && echo \$\$ >$cq/cgroup.procs && echo \$\$ >$cm/cgroup.procs && $1" \
		>"$work/out" 2>"$work/err" || rc=$?
	t1=$(date +%s.%N)
	awk -v w="$(awk -v a="$t0" -v b="$t1" 'BEGIN{print b - a}')" '{printf "%.3f %.3f\n", $1 / 1e9, w}' "$ca/cpuacct.usage"
	rmdir "$ca" "$cq" "$cm"
	if [[ $rc != 0 ]]; then
		echo "cpu.sh: failed ($rc): $1: $(tail -c 400 "$work/err")" >&2
		return 1
	fi
}
# pod_cmd CASE [BINARY [ENV]]
pod_cmd() {
	local bin=${2:-$imp} env=${3-${BENCH_ENV:-}}
	echo "exec env -i PATH=/native:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
IMPORTER_SOURCE=http IMPORTER_ENDPOINT=$url/disk.$1 IMPORTER_CONTENTTYPE=kubevirt IMPORTER_IMAGE_SIZE=$vsize \
PREALLOCATION=false FILESYSTEM_OVERHEAD=0 OWNER_UID=bench ${certs:+IMPORTER_CERT_DIR=/certs} $env \
unshare --mount --propagation private sh $root/internal/testkit/testimg/pod.sh $work/podroot 0 \
/dev/cdi-block-volume $loop /importer $bin /scratch $work/scratch /native $work/native ${certs[*]}"
}
decoder_cmd() {
	case $1 in
	*.gz) echo "igzip -dc <$img/disk.$1 >/dev/null" ;;
	*.zst) echo "zstd -dc <$img/disk.$1 >/dev/null" ;;
	*.mt.xz | qcow2.xz) echo "xz -T0 -dc <$img/disk.$1 >/dev/null" ;;
	*.xz) echo "xz -dc <$img/disk.$1 >/dev/null" ;;
	qcow2 | c.qcow2 | stream.vmdk | vhdx | vhd | vdi)
		local f=${1#*.}
		[[ $f == vhd ]] && f=vpc
		echo "qemu-img convert -n -f $f --target-image-opts $img/disk.$1 driver=raw,file.driver=null-co,file.size=$vsize" ;;
	esac
}
median() { sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
gib=$(awk -v s="$vsize" 'BEGIN{print s / 1073741824}')
printf '# %s, %s runs, quota %s us/100 ms, load %s\n' "$img" "$runs" "$quota" "$(cut -d' ' -f1-3 /proc/loadavg)"
before=${BENCH_BEFORE:-}
[[ -z ${BENCH_BEFORE_ENV+set} || -n $before ]] || before=$imp
printf '%-12s %9s %9s %9s %9s %9s %9s %9s %9s  %s\n' case ours_s ours_s/GiB dec_s dec_s/GiB before_s ours/before ours_wall bef_wall runs
# check CASE: the loop device holds disk.raw's bytes.
check() {
	cmp -s -n "$vsize" "$loop" "$img/disk.raw" || { echo "cpu.sh: $1: the device differs from disk.raw" >&2; exit 1; }
}
for c in "${cases[@]}"; do
	[[ -s $img/disk.$c ]] || { echo "cpu.sh: no $img/disk.$c" >&2; continue; }
	o=() ow=() d=() b=() bw=() q=()
	for r in $(seq "$runs"); do
		if [[ -n $before ]]; then
			blkdiscard "$loop"
			x=$(incg "$(pod_cmd "$c" "$before" "${BENCH_BEFORE_ENV-${BENCH_ENV:-}}")")
			b+=("${x% *}") bw+=("${x#* }")
			[[ $r == 1 ]] && check "$c before"
		fi
		blkdiscard "$loop"
		x=$(incg "$(pod_cmd "$c")")
		o+=("${x% *}") ow+=("${x#* }")
		[[ $r == 1 ]] && check "$c"
		[[ -n $before ]] && q+=("$(awk -v a="${o[-1]}" -v b="${b[-1]}" 'BEGIN{printf "%.3f", a / b}')")
		dc=$(decoder_cmd "$c")
		if [[ -n $dc && $decoder != 0 ]]; then
			x=$(incg "$dc")
			d+=("${x% *}")
		fi
	done
	om=$(printf '%s\n' "${o[@]}" | median) owm=$(printf '%s\n' "${ow[@]}" | median)
	dm=- bm=- qm=- bwm=-
	[[ ${#d[@]} -gt 0 ]] && dm=$(printf '%s\n' "${d[@]}" | median)
	[[ ${#b[@]} -gt 0 ]] && bm=$(printf '%s\n' "${b[@]}" | median) && qm=$(printf '%s\n' "${q[@]}" | median) &&
		bwm=$(printf '%s\n' "${bw[@]}" | median)
	printf '%-12s %9s %9.3f %9s %9s %9s %9s %9s %9s  ours %s dec %s%s\n' "$c" "$om" "$(awk -v a="$om" -v g="$gib" 'BEGIN{print a / g}')" \
		"$dm" "$([[ $dm == - ]] && echo - || awk -v a="$dm" -v g="$gib" 'BEGIN{printf "%.3f", a / g}')" "$bm" "$qm" "$owm" "$bwm" \
		"${o[*]}" "${d[*]:-}" "${b:+ before ${b[*]}; wall ours ${ow[*]} before ${bw[*]}}"
done
