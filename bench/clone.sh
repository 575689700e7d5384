#!/usr/bin/env bash
# bench/clone.sh: the host-assisted clone case of `make bench` (run alone
# too). A BENCH_CLONE_SIZE (2G) virtual source, 35 % random data in 1 MiB
# blocks, on one loop device is cloned onto a second loop device of the
# same size over loopback HTTPS with mutual TLS by our two halves
# (importer clone-source → importer upload-server): in our sparse-v2 format
# and in CDI's protocol (snappy framing); the reference is dd bs=4M between
# the devices locally. Prints MB/s of virtual size and the bytes on the
# wire, checks every target against the source, and writes
# bench/results/clone-<timestamp>.json. BENCH_RUNS (3) rounds.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
size=${BENCH_CLONE_SIZE:-2G}
runs=${BENCH_RUNS:-3}
go=${GO:-go}
[[ $(id -u) == 0 ]] || { echo "bench clone: needs root (loop devices)" >&2; exit 1; }
stamp=$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$root/bench/cache" "$root/bench/results"
work=$(mktemp -d "$root/bench/cache/clone-$stamp-XXXX")
src_loop="" dst_loop="" srv_pid=""
cleanup() {
	set +e # every step must run, whatever failed before
	if [[ -n $srv_pid ]]; then kill "$srv_pid" 2>/dev/null; wait "$srv_pid" 2>/dev/null; fi
	for l in "$src_loop" "$dst_loop"; do
		[[ -n $l ]] && { losetup -d "$l" || echo "bench clone: could not detach $l" >&2; }
	done
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

$go build -trimpath -o "$work/importer" ./cmd/importer
imp=$work/importer

# The source: a sparse file with 35 % of its 1 MiB blocks random.
truncate -s "$size" "$work/src.img"
python3 - "$work/src.img" <<'PY'
import os, random, sys
path = sys.argv[1]
size = os.path.getsize(path)
rng = random.Random(35)
with open(path, "r+b") as f:
    for block in range(size >> 20):
        if rng.random() < 0.35:
            os.pwrite(f.fileno(), rng.randbytes(1 << 20), block << 20)
PY
truncate -s "$size" "$work/dst.img"
src_loop=$(losetup -f --show "$work/src.img")
dst_loop=$(losetup -f --show "$work/dst.img")
vsize=$(blockdev --getsize64 "$src_loop")
src_sum=$(sha256sum <"$src_loop" | cut -d' ' -f1)

# A CA, the server's certificate for 127.0.0.1, the cloner's as cdi-cloner.
pki=$work/pki
mkdir "$pki"
ossl() { openssl "$@" 2>>"$work/openssl.log"; }
ossl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$pki/ca.key" -out "$pki/ca.crt" -days 1 -subj /CN=bench-ca
for who in server client; do
	ossl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$pki/$who.key" -out "$pki/$who.csr" -subj "/CN=$([[ $who == server ]] && echo upload-server || echo cdi-cloner)"
	ext="subjectAltName=IP:127.0.0.1"; [[ $who == client ]] && ext="extendedKeyUsage=clientAuth"
	ossl x509 -req -in "$pki/$who.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial -out "$pki/$who.crt" -days 1 -extfile <(echo "$ext")
done

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
now() { date +%s.%N; }
results=$work/results.jsonl
: >"$results"

# clone PROTOCOL: one clone between the loop devices; appends its result.
clone() {
	local proto=$1 port start end
	blkdiscard "$dst_loop"
	port=$(free_port)
	"$imp" upload-server -q --listen "127.0.0.1:$port" --tls-cert "$pki/server.crt" --tls-key "$pki/server.key" \
		--client-ca "$pki/ca.crt" --client-name cdi-cloner --exact-size "$dst_loop" 2>>"$work/server.log" &
	srv_pid=$!
	for _ in $(seq 100); do curl -skf "https://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.05; done
	start=$(now)
	"$imp" clone-source -q -content-type blockdevice-clone -mount "$src_loop" -protocol "$proto" -json \
		-url "https://127.0.0.1:$port/v1beta1/upload" -client-cert "$pki/client.crt" -client-key "$pki/client.key" \
		-server-ca "$pki/ca.crt" >"$work/clone.json" 2>>"$work/cloner.log"
	wait "$srv_pid"
	srv_pid=""
	end=$(now)
	check "$proto"
	jq -c --arg case "clone $proto" --argjson s "$(echo "$end - $start" | bc)" --argjson v "$vsize" \
		'{case: $case, seconds: $s, mbps: ($v / $s / 1e6), wire_bytes: .wireBytes, virtual_bytes: $v}' "$work/clone.json" >>"$results"
}

# dd: the local reference.
dd_copy() {
	local start end
	blkdiscard "$dst_loop"
	start=$(now)
	dd if="$src_loop" of="$dst_loop" bs=4M conv=fsync status=none
	end=$(now)
	check dd
	jq -nc --argjson s "$(echo "$end - $start" | bc)" --argjson v "$vsize" \
		'{case: "dd bs=4M (local)", seconds: $s, mbps: ($v / $s / 1e6), wire_bytes: null, virtual_bytes: $v}' >>"$results"
}

check() {
	local sum
	sum=$(sha256sum <"$dst_loop" | cut -d' ' -f1)
	[[ $sum == "$src_sum" ]] || { echo "bench clone: $1 left a target that differs from the source" >&2; exit 1; }
}

cat "$work/src.img" >/dev/null # the page cache holds the source for every case alike
for _ in $(seq "$runs"); do
	clone sparse-v2
	clone snappy
	dd_copy
done
out=$root/bench/results/clone-$stamp.json
jq -s '{size: '"$vsize"', data_fraction: 0.35, runs: .}' "$results" >"$out"
printf '%-22s %10s %10s %16s\n' case "MB/s" seconds "wire bytes"
jq -rs 'group_by(.case)[] | [.[0].case, (map(.mbps) | sort | .[length/2|floor]), (map(.seconds) | sort | .[length/2|floor]), (.[0].wire_bytes // "-")] | @tsv' "$results" |
	while IFS=$'\t' read -r c m s w; do printf '%-22s %10.0f %10.2f %16s\n' "$c" "$m" "$s" "$w"; done
echo "bench clone: median of $runs runs, virtual size $vsize; results in $out" >&2
