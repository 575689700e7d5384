#!/usr/bin/env bash
# bench/upload.sh: the upload-server role under CDI's pod limits (issue 37):
# an image POSTed to the upload server as CDI's upload proxy forwards it
# (mutual TLS, POST /v1beta1/upload, HTTP/1.1, the server exits when the
# import is done), CDI v1.66.0's upload server (built from CDI's source by
# scripts/e2e/cdi-build.sh, or BENCH_CDI_UPLOADSERVER=/path; BENCH_CDI=0
# leaves it out) against ours, interleaved, BENCH_RUNS (3) rounds, medians.
#
# Each server runs as its pod would: CDI's environment, the filesystem
# volume at /data (the target /data/disk.img) and an empty /scratch in a
# private mount namespace (internal/testkit/testimg/pod.sh), in cgroups
# (v1) of its own: memory limited to 600000000 bytes (page cache counted),
# and with BENCH_UPLOAD_LIMITS "cdi" a 75 ms / 100 ms CFS quota (750m),
# with "none" no CPU limit. The disk: BENCH_UPLOAD_MB (1000) MiB,
# BENCH_UPLOAD_DATA "random" (nothing to decode: xz -1 stores it) or
# "bench" (benchtool gen: 35 % data); BENCH_UPLOAD_FORMATS ("qcow2.xz
# qcow2": the e2e upload row's qcow2.xz, xz -T2 -1, and the plain qcow2
# virtctl sends most). Seconds run from the POST to its response. Every
# target's first BENCH_UPLOAD_MB MiB are compared with the disk (sha256).
# BENCH_OURS_BEFORE=/path/to/importer adds that build, interleaved, as
# "before". Prints one line per row; every run goes to
# bench/results/upload-<timestamp>.jsonl.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
go=${GO:-go}
runs=${BENCH_RUNS:-3}
mb=${BENCH_UPLOAD_MB:-1000}
data=${BENCH_UPLOAD_DATA:-random}
formats=${BENCH_UPLOAD_FORMATS:-qcow2.xz qcow2}
limits=${BENCH_UPLOAD_LIMITS:-cdi none}
cdi_version=v1.66.0
mem_limit=600000000 cpu_quota=75000
[[ $(id -u) == 0 ]] || { echo "bench upload: needs root (mount namespaces, cgroups)" >&2; exit 1; }
stamp=$(date -u +%Y%m%dT%H%M%SZ)
cache=$root/bench/cache
mkdir -p "$cache/bin" "$root/bench/results"
work=$(mktemp -d "$cache/upload-$stamp-XXXX")
pids=()
pod_cg=diskimport-upload-$stamp
cleanup() {
	set +e
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
	pod_cgroups_remove
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
source bench/cgroup.sh # cg_remove, pod_cgroups, pod_usage
source bench/pki.sh    # bench_pki
source bench/cdibin.sh # cdi_program

$go build -trimpath -o "$work/importer" ./cmd/importer
ours=$work/importer before=""
if [[ -n ${BENCH_OURS_BEFORE:-} ]]; then cp "$BENCH_OURS_BEFORE" "$work/importer-before"; before=$work/importer-before; fi
cdi_server="" cdi_note=""
if [[ ${BENCH_CDI:-1} != 0 ]]; then
	if cdi_program uploadserver "$work/cdi-uploadserver"; then
		cdi_server=$work/cdi-uploadserver
	else
		echo "bench upload: CDI's rows left out: $cdi_note" >&2
	fi
fi

# The disk and its forms.
case $data in
random) head -c "$((mb << 20))" /dev/urandom >"$work/disk.raw" ;;
bench) $go -C bench build -trimpath -o "$work/benchtool" ./benchtool && "$work/benchtool" gen "${mb}M" "$work/disk.raw" >/dev/null ;;
*) echo "bench upload: BENCH_UPLOAD_DATA=$data: want random or bench" >&2; exit 2 ;;
esac
want=$(sha256sum <"$work/disk.raw" | cut -d' ' -f1)
qemu-img convert -f raw -O qcow2 "$work/disk.raw" "$work/disk.qcow2"
[[ $formats == *qcow2.xz* ]] && xz -T2 -1 -k -f "$work/disk.qcow2"

# A CA, the server's certificate for 127.0.0.1, the proxy's as cdi-uploadproxy.
pki=$work/pki
bench_pki "$pki" cdi-uploadproxy
# CDI's controller gives the upload server the CDIConfig's TLS profile
# (Intermediate by default), as OpenSSL cipher names.
tls_ciphers=TLS_AES_128_GCM_SHA256,TLS_AES_256_GCM_SHA384,TLS_CHACHA20_POLY1305_SHA256,ECDHE-ECDSA-AES128-GCM-SHA256,ECDHE-RSA-AES128-GCM-SHA256,ECDHE-ECDSA-AES256-GCM-SHA384,ECDHE-RSA-AES256-GCM-SHA384,ECDHE-ECDSA-CHACHA20-POLY1305,ECDHE-RSA-CHACHA20-POLY1305
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
curl_tls=(--cacert "$pki/ca.crt" --cert "$pki/client.crt" --key "$pki/client.key")
out=$root/bench/results/upload-$stamp.jsonl
: >"$out"

# upload WHO FORMAT LIMIT: one upload to WHO's server (cdi, ours, before).
upload() {
	local who=$1 format=$2 limit=$3 bin port pre spid t0 t1 code rc=0 usage
	case $who in cdi) bin=$cdi_server ;; before) bin=$before ;; *) bin=$ours ;; esac
	port=$(free_port)
	rm -rf "$work/data" "$work/scratch"
	mkdir -p "$work/data" "$work/scratch" "$work/root"
	pre=$(pod_cgroups server "$limit")
	sh -c "${pre}exec env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
TLS_KEY_FILE=/pki/server.key TLS_CERT_FILE=/pki/server.crt CLIENT_CERT_FILE=/pki/ca.crt CLIENT_NAME=cdi-uploadproxy \
TLS_CIPHERS=$tls_ciphers TLS_MIN_VERSION=VersionTLS12 LISTEN_ADDRESS=127.0.0.1 LISTEN_PORT=$port DESTINATION=/data/disk.img \
UPLOAD_IMAGE_SIZE=2147483648 FILESYSTEM_OVERHEAD=0.055 PREALLOCATION=false OWNER_UID=bench \
unshare --mount --propagation private sh $root/internal/testkit/testimg/pod.sh $work/root 0 \
/pki $pki /data $work/data /scratch $work/scratch /importer $bin" >"$work/server.out" 2>"$work/server.err" &
	spid=$!; pids+=("$spid")
	for _ in $(seq 200); do curl -s -o /dev/null "${curl_tls[@]}" "https://127.0.0.1:$port/healthz" && break; sleep 0.05; done
	rm -f "$work/response" # a failure must not quote the last upload's answer
	t0=$(date +%s.%N)
	code=$(curl -sS --http1.1 -X POST -o "$work/response" -w '%{http_code}' "${curl_tls[@]}" -T "$work/disk.$format" "https://127.0.0.1:$port/v1beta1/upload" 2>"$work/curl.err") || rc=$?
	t1=$(date +%s.%N)
	for _ in $(seq 100); do kill -0 "$spid" 2>/dev/null || break; sleep 0.1; done
	kill "$spid" 2>/dev/null || true # gone already, as it should be
	wait "$spid" 2>/dev/null || true
	pids=()
	usage=$(pod_usage server)
	if [[ $rc != 0 || $code != 200 ]]; then
		echo "bench upload: $who $format $limit: HTTP $code (curl exit $rc): $(head -c 300 "$work/curl.err") $(head -c 300 "$work/response"); the server said: $(tail -3 "$work/server.err" | cut -c1-300)" >&2
		exit 1
	fi
	[[ $(head -c "$((mb << 20))" "$work/data/disk.img" | sha256sum | cut -d' ' -f1) == "$want" ]] ||
		{ echo "bench upload: $who $format $limit left a disk that differs from the image" >&2; exit 1; }
	jq -nc --arg who "$who" --arg format "$format" --arg limit "$limit" --arg data "$data" --argjson mb "$mb" \
		--argjson s "$(echo "$t1 - $t0" | bc)" --argjson cpu "${usage% *}" --argjson peak "${usage#* }" \
		'{who: $who, format: $format, limit: $limit, data: $data, mib: $mb, seconds: $s, cpu_s: $cpu, peak_mib: $peak}' >>"$out"
}

for _ in $(seq "$runs"); do
	for format in $formats; do
		for limit in $limits; do
			[[ -n $cdi_server ]] && upload cdi "$format" "$limit"
			upload ours "$format" "$limit"
			[[ -n $before ]] && upload before "$format" "$limit"
		done
	done
done

# One line per row: the medians of each server's seconds, CPU seconds and peaks.
jq -rs '
	def median: sort | if length == 0 then null else .[(length - 1) / 2 | floor] end;
	def r2: . * 100 | round / 100;
	group_by([.format, .limit])[] as $row
	| ($row | group_by(.who) | map({key: .[0].who, value: {s: (map(.seconds) | median | r2), cpu: (map(.cpu_s) | median | r2), peak: (map(.peak_mib) | max), rounds: (map(.seconds | r2 | tostring) | join(" "))}}) | from_entries) as $m
	| "\($row[0].format) \($row[0].limit): "
	  + ([$m | to_entries[] | "\(.key) \(.value.s) s (\(.value.rounds)), \(.value.cpu) CPU-s, peak \(.value.peak) MiB"] | join("; "))
	  + (if $m.cdi and $m.ours then "; CDI / ours \($m.cdi.s / $m.ours.s | r2)×" else "" end)
	  + (if $m.before and $m.ours then "; ours / before CPU \($m.ours.cpu / $m.before.cpu | r2)" else "" end)
' "$out"
echo "bench upload: $data disk of $mb MiB, medians of $runs runs; every run in $out" >&2
