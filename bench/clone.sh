#!/usr/bin/env bash
# bench/clone.sh: the host-assisted clone table of `make bench` (run alone
# too): the data path of a storage-class migration, CDI's cloner pod on the
# source volume streaming to an upload-server pod on the target.
#
# Side by side in one run, interleaved, BENCH_RUNS (3) rounds, medians:
#   - CDI v1.66.0's cloner → CDI's upload server (both built from CDI's
#     source by scripts/e2e/cdi-build.sh, or BENCH_CDI_CLONER= and
#     BENCH_CDI_UPLOADSERVER=/path; BENCH_CDI=0 leaves them out);
#   - ours → ours (the importer binary in both roles, started as CDI starts
#     its pods: no arguments, CDI's environment);
#   - the local copy between the same two volumes, the limit: dd bs=4M
#     with O_DIRECT both ways for block, cp --sparse=always + sync for a
#     filesystem's disk.img.
# Each half runs as its pod would: CDI's environment, its volume at CDI's
# path (/dev/cdi-block-volume, /var/run/cdi/clone/source, /data) in a
# private mount namespace (internal/testkit/testimg/pod.sh), mutual TLS
# over 127.0.0.1, each in cgroups (v1) of its own: memory limited to
# 600000000 bytes (CDI's default, page cache counted), and with
# BENCH_CLONE_LIMITS "cdi" a 75 ms / 100 ms CFS quota (750m), with "none"
# no CPU limit. Every target is compared with its source (sha256).
#
# Rows: BENCH_CLONE_KINDS ("block fs fs-block": block → block, a
# filesystem volume's disk.img → filesystem, and → block, the storage
# migration of a VM disk from a filesystem class to a block one), BENCH_CLONE_DATA ("35 100": percent of
# the BENCH_CLONE_SIZE (2G) source in random 1 MiB blocks, the rest
# zeros), BENCH_CLONE_LINKS ("fast": loopback; "1gbit": through
# `benchtool relay` paced to 125 MB/s each way), BENCH_CLONE_LIMITS
# ("cdi none"). The block target is a used volume: it holds the last
# clone's (first: random) bytes, on a loop device with direct I/O, as the
# pod table's is: a PVC's device has no page cache beneath it, and with
# one a copier's zeroing paid for dropping the backing file's cached pages
# (bench/RESULTS.md, tenth session). After ours, a delta pass of ours
# (IMPORTER_DELTA=true) onto that copy with 1 % of it changed since
# (make_stale), a migration's second pass (BENCH_CLONE_DELTA=0 leaves it
# out). BENCH_CLONER_ENV adds variables to the
# cloners' environment (IMPORTER_DELTA=true: ours as a delta pass).
# BENCH_OURS_BEFORE=/path/to/importer adds that build as the copier
# "before", interleaved with ours (an A/B of a change; the table leaves it
# out, the JSON has its runs). Each
# cloner serves its progress metric on a port of its own (CDI's pods
# have a network each; here they share the host's).
#
# Prints one line per row (median seconds of each copier, ours' speedup
# over CDI, ours against the local copy, CPU seconds and memory peaks of
# both halves of ours and CDI's, the verdict: ≥ 3× CDI, and on the fast
# link within 1.5× of the local copy, or the measured limit that prevents
# it: the local copy, the source's data at the link's rate, the CPU ours'
# halves had) and writes
# bench/results/clone-<timestamp>.json with every run.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
size=${BENCH_CLONE_SIZE:-2G}
runs=${BENCH_RUNS:-3}
kinds=${BENCH_CLONE_KINDS:-block fs fs-block}
# src_block KIND / dst_block KIND: whether that side of KIND is a device.
src_block() { [[ $1 == block ]]; }
dst_block() { [[ $1 == block || $1 == fs-block ]]; }
datas=${BENCH_CLONE_DATA:-35 100}
links=${BENCH_CLONE_LINKS:-fast}
limits=${BENCH_CLONE_LIMITS:-cdi none}
go=${GO:-go}
cdi_version=v1.66.0
mem_limit=600000000 cpu_quota=75000
[[ $(id -u) == 0 ]] || { echo "bench clone: needs root (loop devices, mount namespaces, cgroups)" >&2; exit 1; }
stamp=$(date -u +%Y%m%dT%H%M%SZ)
cache=$root/bench/cache
mkdir -p "$cache/bin" "$root/bench/results"
work=$(mktemp -d "$cache/clone-$stamp-XXXX")
loops=() pids=()
pod_cg=diskimport-clone-$stamp
cleanup() {
	set +e # every step must run, whatever failed before
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
	pod_cgroups_remove
	for l in "${loops[@]}"; do losetup -d "$l" || echo "bench clone: could not detach $l" >&2; done
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

source bench/cgroup.sh # cg_remove, pod_cgroups, pod_usage
source bench/pki.sh    # bench_pki
source bench/cdibin.sh # cdi_program
source bench/hostbusy.sh # cpu_ticks, busy_share: the machine's busy share per run

$go build -trimpath -o "$work/importer" ./cmd/importer
$go -C bench build -trimpath -o "$work/benchtool" ./benchtool
ours=$work/importer
before=""
if [[ -n ${BENCH_OURS_BEFORE:-} ]]; then cp "$BENCH_OURS_BEFORE" "$work/importer-before"; before=$work/importer-before; fi
cdi_cloner="" cdi_server="" cdi_note=""
# cdi_resolve: CDI's two programs, built once into bench/cache/bin.
cdi_resolve() {
	if [[ ${BENCH_CDI:-1} == 0 ]]; then cdi_note="BENCH_CDI=0"; return; fi
	cdi_program cloner "$work/cdi-cloner" && cdi_program uploadserver "$work/cdi-uploadserver" || return 0
	cdi_cloner=$work/cdi-cloner cdi_server=$work/cdi-uploadserver
}
cdi_resolve
[[ -z $cdi_note ]] || echo "bench clone: CDI's rows left out: $cdi_note" >&2

# The sources: BENCH_CLONE_SIZE with PCT % of its 1 MiB blocks random,
# cached across runs.
source_file() {
	local pct=$1 f=$cache/clone-src-$size-$1.img
	if [[ ! -f $f ]]; then
		truncate -s "$size" "$f.part"
		python3 - "$f.part" "$pct" <<'PY'
import os, random, sys
path, pct = sys.argv[1], int(sys.argv[2]) / 100
size = os.path.getsize(path)
rng = random.Random(35)
with open(path, "r+b") as f:
    for block in range(size >> 20):
        if pct >= 1 or rng.random() < pct:
            os.pwrite(f.fileno(), rng.randbytes(1 << 20), block << 20)
PY
		mv "$f.part" "$f"
	fi
	echo "$f"
}
vsize=$(numfmt --from=iec "$size")
# data_bytes FILE: the bytes of FILE's 1 MiB blocks that are not all zeros,
# the data every copier must carry (the link's limit), cached beside it.
data_bytes() {
	[[ -s $1.data ]] || python3 - "$1" >"$1.data" <<'PY'
import sys
n, zero = 0, bytes(1 << 20)
with open(sys.argv[1], "rb") as f:
    while b := f.read(1 << 20):
        n += 0 if b == zero[:len(b)] else len(b)
print(n)
PY
	cat "$1.data"
}

# A CA, the server's certificate for 127.0.0.1, the cloner's as cdi-cloner.
pki=$work/pki
bench_pki "$pki" cdi-cloner

# CDI's cloner as cloner_startup.sh starts it, for each volume mode.
cat >"$work/cdi-cloner.sh" <<'EOF'
#!/bin/sh
if [ "$VOLUME_MODE" = block ]; then
	exec /cdi-cloner -v=3 -alsologtostderr -content-type blockdevice-clone -upload-bytes "$(blockdev --getsize64 "$MOUNT_POINT")" -mount "$MOUNT_POINT"
fi
cd "$MOUNT_POINT" && exec /cdi-cloner -v=3 -alsologtostderr -content-type filesystem-clone -upload-bytes "$(du -s --block-size=1 . | cut -f1)" -mount "$MOUNT_POINT"
EOF
chmod +x "$work/cdi-cloner.sh"

# CDI's controller gives its upload server the TLS profile of the
# CDIConfig (Intermediate by default), as OpenSSL cipher names.
tls_ciphers=TLS_AES_128_GCM_SHA256,TLS_AES_256_GCM_SHA384,TLS_CHACHA20_POLY1305_SHA256,ECDHE-ECDSA-AES128-GCM-SHA256,ECDHE-RSA-AES128-GCM-SHA256,ECDHE-ECDSA-AES256-GCM-SHA384,ECDHE-RSA-AES256-GCM-SHA384,ECDHE-ECDSA-CHACHA20-POLY1305,ECDHE-RSA-CHACHA20-POLY1305

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
now() { date +%s.%N; }
runs_file=$work/runs.jsonl
: >"$runs_file"

# clone COPIER KIND SRC DST LINK LIMIT: one clone by COPIER (cdi, ours)
# of SRC (a loop device, or a directory holding disk.img) onto DST in
# the pods; appends its result.
clone() {
	local copier=$1 kind=$2 src=$3 dst=$4 link=$5 limit=$6
	local port url server_bin cloner_bin srv_pre cl_pre start end c0 c1 spid cpid rpid="" rc=0 src_mount dst_mount dest
	port=$(free_port)
	url=https://127.0.0.1:$port/v1beta1/upload
	if [[ $link == 1gbit ]]; then
		: >"$work/relay.addr"
		"$work/benchtool" relay -to "127.0.0.1:$port" -delay 0 -rate 125M >"$work/relay.addr" 2>>"$work/relay.err" &
		rpid=$!; pids+=("$rpid")
		for _ in $(seq 100); do [[ -s $work/relay.addr ]] && break; sleep 0.05; done
		url=https://127.0.0.1:$(sed 's/.*://' "$work/relay.addr")/v1beta1/upload
	fi
	case $copier in
	cdi) server_bin=$cdi_server cloner_bin=$work/cdi-cloner.sh ;;
	before) server_bin=$before cloner_bin=$before ;;
	*) server_bin=$ours cloner_bin=$ours ;;
	esac
	local delta_env=""
	if [[ $copier == delta ]]; then
		delta_env=IMPORTER_DELTA=true
		make_stale "$kind" "$dst"
	elif dst_block "$kind"; then
		used_target "$dst"
	fi
	if src_block "$kind"; then src_mount=/dev/cdi-block-volume; else src_mount=/var/run/cdi/clone/source; fi
	if dst_block "$kind"; then
		dst_mount=/dev/cdi-block-volume dest=/dev/cdi-block-volume
	else
		[[ $copier == delta ]] || { rm -rf "$dst"; mkdir "$dst"; }
		dst_mount=/data dest=/data/disk.img
	fi
	srv_pre=$(pod_cgroups server "$limit")
	cl_pre=$(pod_cgroups cloner "$limit")
	mkdir -p "$work/root-server" "$work/root-cloner"
	sh -c "${srv_pre}exec env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
TLS_KEY_FILE=/pki/server.key TLS_CERT_FILE=/pki/server.crt CLIENT_CERT_FILE=/pki/ca.crt CLIENT_NAME=cdi-cloner \
TLS_CIPHERS=$tls_ciphers TLS_MIN_VERSION=VersionTLS12 LISTEN_ADDRESS=127.0.0.1 LISTEN_PORT=$port DESTINATION=$dest UPLOAD_IMAGE_SIZE=$vsize FILESYSTEM_OVERHEAD=0 PREALLOCATION=false OWNER_UID=bench \
unshare --mount --propagation private sh $root/internal/testkit/testimg/pod.sh $work/root-server 0 \
/pki $pki $dst_mount $dst /importer $server_bin" >"$work/server.out" 2>"$work/server.err" &
	spid=$!; pids+=("$spid")
	for _ in $(seq 200); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.05; done
	start=$(now) c0=$(cpu_ticks)
	local extra_mount=""
	[[ $copier == cdi ]] && extra_mount="/cdi-cloner $cdi_cloner"
	sh -c "${cl_pre}exec env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
CLIENT_KEY=\"\$(cat $pki/client.key)\" CLIENT_CERT=\"\$(cat $pki/client.crt)\" SERVER_CA_CERT=\"\$(cat $pki/ca.crt)\" \
UPLOAD_URL=$url OWNER_UID=bench PREALLOCATION=false IMPORTER_METRICS_LISTEN=127.0.0.1:$(free_port) $delta_env ${BENCH_CLONER_ENV:-} VOLUME_MODE=$(src_block "$kind" && echo block || echo filesystem) MOUNT_POINT=$src_mount \
unshare --mount --propagation private sh $root/internal/testkit/testimg/pod.sh $work/root-cloner 0 \
$src_mount $src $extra_mount /importer $cloner_bin" >"$work/cloner.out" 2>"$work/cloner.err" &
	cpid=$!; pids+=("$cpid")
	wait "$cpid" || rc=$?
	[[ $rc == 0 ]] || kill "$spid" 2>/dev/null # a server no clone will reach
	wait "$spid" || rc=$((rc == 0 ? $? : rc))
	end=$(now) c1=$(cpu_ticks)
	[[ -n $rpid ]] && { kill "$rpid" 2>/dev/null; wait "$rpid" 2>/dev/null || true; }
	pids=()
	local srv_use cl_use
	srv_use=$(pod_usage server) cl_use=$(pod_usage cloner)
	if [[ $rc != 0 ]]; then
		echo "bench clone: $copier $kind $link $limit failed (exit $rc); the server said: $(tail -3 "$work/server.err" | tr '\n' ' ' | cut -c1-300); the cloner: $(tail -3 "$work/cloner.err" | tr '\n' ' ' | cut -c1-300)" >&2
		exit 1
	fi
	check "$copier $kind" "$kind" "$dst"
	jq -nc --arg copier "$copier" --arg kind "$kind" --arg link "$link" --arg limit "$limit" --argjson pct "$pct" \
		--argjson s "$(echo "$end - $start" | bc)" --argjson v "$vsize" --argjson data "$src_data" --argjson busy "$(busy_share "$c0" "$c1")" \
		--argjson cl_cpu "${cl_use% *}" --argjson cl_mib "${cl_use#* }" --argjson srv_cpu "${srv_use% *}" --argjson srv_mib "${srv_use#* }" \
		'{copier: $copier, kind: $kind, data_pct: $pct, link: $link, limit: $limit, seconds: $s, virtual_bytes: $v, data_bytes: $data, host_busy: $busy,
		  cloner_cpu_s: $cl_cpu, cloner_peak_mib: $cl_mib, server_cpu_s: $srv_cpu, server_peak_mib: $srv_mib}' >>"$runs_file"
}

# make_stale KIND DST: the copy a delta pass starts from, ours' last
# clone of the source, with 1 % of it changed since (20 random 1 MiB
# blocks of a 2 GiB volume, spread over it), as a migration's second pass
# finds it.
make_stale() {
	local f=$2 blocks=$((vsize / 1048576)) i
	dst_block "$1" || f=$2/disk.img
	for i in $(seq 0 $((blocks / 100 - 1))); do
		dd if=/dev/urandom of="$f" bs=1M count=1 seek=$((i * 100 + 37)) conv=notrunc status=none
	done
	sync
}

# local_copy KIND SRC DST: the limit, between the same two volumes.
local_copy() {
	local kind=$1 src=$2 dst=$3 start end
	start=$(now)
	if [[ $kind == block ]]; then
		dd if="$src" of="$dst" bs=4M iflag=direct oflag=direct status=none
	elif [[ $kind == fs-block ]]; then
		dd if="$src/disk.img" of="$dst" bs=4M iflag=direct oflag=direct status=none
	else
		rm -rf "$dst"; mkdir "$dst"
		cp --sparse=always "$src/disk.img" "$dst/disk.img"
		sync -f "$dst/disk.img"
	fi
	end=$(now)
	check "local copy" "$kind" "$dst"
	jq -nc --arg kind "$kind" --argjson pct "$pct" --argjson s "$(echo "$end - $start" | bc)" --argjson v "$vsize" \
		'{copier: "local", kind: $kind, data_pct: $pct, link: "local", limit: "none", seconds: $s, virtual_bytes: $v}' >>"$runs_file"
}

# used_target DST: the block target as the same used volume before every
# copier: each block of its backing file allocated, nothing of it dirty or
# cached. Left as the last copier left it, the first copier after the
# local copy (dd writes the zeros too) had 1.3 GiB of allocated zeros to
# punch and the next one none: on the 35 % source that one took 3.3-3.9 s
# where the same build took 2.0-2.3 s right after another punching copier.
used_target() {
	fallocate -l "$vsize" "$work/dst.img"
	sync -f "$work/dst.img"
	dd if="$work/dst.img" iflag=nocache count=0 status=none # drops its cached pages
	blockdev --flushbufs "$1"
}

# check WHO KIND DST: the target holds the source's bytes.
check() {
	local sum f=$3
	dst_block "$2" || f=$3/disk.img
	sum=$(head -c "$vsize" "$f" | sha256sum | cut -d' ' -f1)
	[[ $sum == "$src_sum" ]] || { echo "bench clone: $1 left a target that differs from the source ($f)" >&2; exit 1; }
}

old=$(source_file 100)
for pct in $datas; do
	src_file=$(source_file "$pct")
	src_sum=$(sha256sum <"$src_file" | cut -d' ' -f1)
	src_data=$(data_bytes "$src_file")
	for kind in $kinds; do
		if src_block "$kind"; then
			src=$(losetup -f --show -r "$src_file"); loops+=("$src")
		else
			src=$work/src-fs; rm -rf "$src"; mkdir "$src"; ln "$src_file" "$src/disk.img"
		fi
		if dst_block "$kind"; then
			cp --sparse=never "$old" "$work/dst.img" # a used volume
			dst=$(losetup -f --show --direct-io=on "$work/dst.img"); loops+=("$dst")
		else
			dst=$work/dst-fs
		fi
		cat "$src_file" >/dev/null # the page cache holds the source for every copier alike
		for _ in $(seq "$runs"); do
			for link in $links; do
				for limit in $limits; do
					[[ -n $cdi_server ]] && clone cdi "$kind" "$src" "$dst" "$link" "$limit"
					clone ours "$kind" "$src" "$dst" "$link" "$limit"
					[[ -n $before ]] && clone before "$kind" "$src" "$dst" "$link" "$limit"
					[[ ${BENCH_CLONE_DELTA:-1} == 1 ]] && clone delta "$kind" "$src" "$dst" "$link" "$limit"
				done
			done
			local_copy "$kind" "$src" "$dst"
		done
		for l in "${loops[@]}"; do losetup -d "$l"; done
		loops=()
		rm -rf "$work/dst.img" "$work/src-fs" "$work/dst-fs"
	done
done

out=$root/bench/results/clone-$stamp.json
jq -s --arg cdi "$cdi_version" --arg note "$cdi_note" --argjson cores "$(nproc)" '{size: '"$vsize"', cdi_version: $cdi, cdi_note: $note, cores: $cores, runs: .}' "$runs_file" >"$out"
"$work/benchtool" clonetable "$out"
echo "bench clone: medians of $runs runs, virtual size $vsize; every run in $out" >&2
