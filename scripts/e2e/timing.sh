#!/bin/bash
# The e2e timing table of issue 37: CDI's controller (cdictl.sh) driving
# CDI's own importer, cloner and upload server images (cdi-image.sh: CDI
# v1.66.0 from its source with Debian's qemu-img and nbdkit), then ours,
# interleaved (CDI, ours, CDI, ours, ... E2E_TIMING_ROUNDS rounds, default
# 2), one DataVolume per kind at a time, under the CDIConfig's default pod
# resources (nothing overrides them; the pods' limits and their cgroups'
# CFS quota are read while they run and printed). A DataVolume's seconds
# run from the host's clock just before it is created to the first poll
# (every 0.2 s) that reads its phase Succeeded. Each target's first
# E2E_DISK_MB (1000) MiB are checked against the raw disk's sha256 through
# its PV. Not part of make e2e (CI): make e2e-timing. Table on stdout and in
# bin/e2e/timing.md. E2E_TIMING_KINDS=REGEX runs some kinds only;
# E2E_TIMING_LOGS=DIR keeps every pod's log there (save_logs).
set -uo pipefail
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/cdictl.sh"
NS=e2e-timing
W=$(mktemp -d)
REG_PID=
cleanup() {
	cdi_stop
	kill $SERVE_PID $REG_PID 2>/dev/null
	rm -rf "$W" "$E2E_REGISTRY_HOSTS/${REG_HOST:-none}"
}
trap cleanup EXIT
ROUNDS=${E2E_TIMING_ROUNDS:-2}
OUT=${E2E_TIMING_RESULTS:-$E2E_BIN/timing.md}
CDI_VERSION=${E2E_CDI_VERSION:-v1.66.0}
for b in cdi-controller cdi-crds benchtool; do
	[ -e "$E2E_BIN/$b" ] || { echo "timing: $E2E_BIN/$b missing; run make e2e-cdi-build and make e2e-build" >&2; exit 1; }
done
# CDI's images into the node's containerd, as up.sh imports ours.
for role in importer cloner uploadserver; do
	tar=$E2E_BIN/cdi-image/$role/importer-image.tar
	[ -f "$tar" ] || { echo "timing: $tar missing; run make e2e-cdi-image" >&2; exit 1; }
	ctr images import --all-platforms "$tar" >/dev/null || exit 1
done
images=$(ctr images ls -q)
for i in "$E2E_IMAGE" localhost/cdi/{importer,cloner,uploadserver}:$CDI_VERSION; do
	grep -qx "$i" <<<"$images" || { echo "timing: $i not in containerd" >&2; exit 1; }
done

# The disk: MB MiB of random data (E2E_TIMING_DATA=random: the decoders
# have nothing to do, gzip -1 and xz -1 store it) or the bench's test disk
# (bench: benchtool gen, 35 % data: binaries, text, zeros), as qcow2.xz,
# qcow2 and raw.gz; the registry's containerdisk is the qcow2 (the c-qcow2
# tag, which this run does not use, is the same file).
MB=${E2E_DISK_MB:-1000}
BYTES=$((MB << 20))
DATA=${E2E_TIMING_DATA:-random}
t=$(date +%s)
case $DATA in
random) ;;
bench) "$E2E_BIN/benchtool" gen "${MB}M" "$W/disk.raw" >/dev/null || exit 1 ;;
*) echo "timing: E2E_TIMING_DATA=$DATA: random or bench" >&2; exit 1 ;;
esac
make_disk "$W" "$MB"
gzip -1 -k -c "$W/disk.raw" > "$W/disk.raw.gz"
ln "$W/disk.qcow2" "$W/disk.c.qcow2"
WANT=$(sha256sum < "$W/disk.raw" | cut -d' ' -f1)
serve "$W" || exit 1
"$E2E_BIN/benchtool" registry -dir "$W" -listen "$E2E_GATEWAY:0" >"$W/registry.out" 2>"$W/registry.err" &
REG_PID=$!
for ((i = 0; i < 900; i++)); do grep -q '^qcow2 ' "$W/registry.out" 2>/dev/null && break; sleep 0.2; done
REG_HOST=$(head -1 "$W/registry.out")
grep -q '^qcow2 ' "$W/registry.out" || { echo "timing: registry did not start: $(cat "$W/registry.err")" >&2; exit 1; }
echo "timing: test disk of $MB MiB ($DATA; qcow2.xz $(stat -c %s "$W/disk.qcow2.xz") bytes, raw.gz $(stat -c %s "$W/disk.raw.gz")), its forms and the registry in $(($(date +%s) - t)) s"

cdi_prepare "$REG_HOST"

# flavor_start cdi|ours: CDI's controller with that flavor's images, once it
# leads (a DataVolume created before would wait for the lease in its time).
FLAVOR=
flavor_start() {
	[ "$FLAVOR" = "$1" ] && [ -n "$CDI_PID" ] && return 0
	FLAVOR=$1
	cdi_stop
	rm -f "$E2E_STATE/log/cdi-controller.log" # the lease line below must be the new one's
	case $1 in
	cdi) cdi_start localhost/cdi/importer:$CDI_VERSION localhost/cdi/cloner:$CDI_VERSION localhost/cdi/uploadserver:$CDI_VERSION ;;
	ours) cdi_start "$E2E_IMAGE" "$E2E_IMAGE" "$E2E_IMAGE" ;;
	esac
	for ((i = 0; i < 600; i++)); do
		grep -q 'successfully acquired lease' "$E2E_STATE/log/cdi-controller.log" 2>/dev/null && break; sleep 0.1
	done
	((i < 600)) || { echo "timing: CDI's controller did not lead in 60 s: $(tail -3 "$E2E_STATE/log/cdi-controller.log")" >&2; exit 1; }
	for ((i = 0; i < 60; i++)); do
		kubectl get cdiconfig config -o jsonpath='{.spec.insecureRegistries}' 2>/dev/null | grep -qF "$REG_HOST" && break; sleep 1
	done
}

# pod_limits FLAVOR: for every running pod of the namespace not seen yet,
# its first container's limits and its cgroup's CFS quota and memory limit
# (cgroups v1, the kubelet's cgroupfs driver) into $W/pods.
pod_limits() {
	local name uid lim cid q p m
	while read -r name uid lim cid; do
		[ -n "$cid" ] && ! grep -q "^$1 $name " "$W/pods" 2>/dev/null || continue
		cid=${cid#*://}
		q=$(echo /sys/fs/cgroup/cpu/kubepods/*/pod"$uid"/"$cid"/cpu.cfs_quota_us)
		p=$(cat "${q%quota_us}period_us" 2>/dev/null)
		m=$(cat /sys/fs/cgroup/memory/kubepods/*/pod"$uid"/"$cid"/memory.limit_in_bytes 2>/dev/null)
		q=$(cat "$q" 2>/dev/null)
		[ -n "$q" ] && echo "$1 $name limits $lim; cgroup cpu.cfs_quota_us $q / cpu.cfs_period_us $p, memory.limit_in_bytes $m" >> "$W/pods"
	done < <(kubectl -n $NS get pods -o jsonpath='{range .items[?(@.status.phase=="Running")]}{.metadata.name} {.metadata.uid} {.spec.containers[0].resources.limits} {.status.containerStatuses[0].containerID}{"\n"}{end}' 2>/dev/null)
}

# timed NAME FLAVOR SECONDS: polls the DataVolume every 0.2 s from T0 (set
# by the caller just before creating it) until Succeeded or Failed; sets
# PHASE and SECS (to the first poll that read Succeeded).
timed() {
	local n=0
	PHASE= SECS=
	for ((i = 0; i < $3 * 5; i++)); do
		PHASE=$(kubectl -n $NS get dv "$1" -o jsonpath='{.status.phase}' 2>/dev/null)
		case $PHASE in Succeeded | Failed) break ;; esac
		# An upload the server refused ends the wait.
		[ -s "$W/upload.code" ] && [ "$(cat "$W/upload.code")" != 200 ] && PHASE="upload HTTP $(cat "$W/upload.code") $(head -c 200 "$W/curl.err")" && break
		((n++ % 2 == 0)) && pod_limits "$2"
		sleep 0.2
	done
	SECS=$(awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
}
# save_logs NAME: with E2E_TIMING_LOGS=DIR (the DataVolumes then keep
# their pods once done), the log of every pod not saved yet, with
# timestamps, in DIR/NAME.POD.log, and the pod as it ended (its
# conditions' and containers' times) in DIR/NAME.POD.yaml: where a row's
# seconds went.
save_logs() {
	[ -n "${E2E_TIMING_LOGS:-}" ] || return 0
	mkdir -p "$E2E_TIMING_LOGS"
	local p
	for p in $(kubectl -n $NS get pods -o jsonpath='{.items[*].metadata.name}'); do
		compgen -G "$E2E_TIMING_LOGS/*.$p.log" >/dev/null && continue
		kubectl -n $NS logs "$p" --all-containers --timestamps > "$E2E_TIMING_LOGS/$1.$p.log" 2>&1
		kubectl -n $NS get pod "$p" -o yaml > "$E2E_TIMING_LOGS/$1.$p.yaml" 2>&1
	done
}
[ -z "${E2E_TIMING_LOGS:-}" ] || export DV_RETAIN_PODS=1
# why NAME: the DataVolume's conditions and its pods' last log lines, for a row that failed.
why() {
	kubectl -n $NS get dv "$1" -o jsonpath='{range .status.conditions[*]}{.type}={.status} {.reason}: {.message}; {end}' 2>/dev/null | head -c 400
}

# The namespace anew, with a controller running (CDI's finalizers on a
# clone's claims need it), and the clone source, imported once with the
# first flavor's importer.
flavor_start cdi
kubectl delete namespace $NS --ignore-not-found --wait=true >/dev/null
recycle_pvs
kubectl create namespace $NS >/dev/null
kubectl -n $NS wait --for=create serviceaccount/default --timeout=60s >/dev/null
T0=$(date +%s.%N)
DV_SIZE=2Gi dv clone-src e2e-local "{http: {url: \"$SERVE_URL/disk.qcow2.xz\"}}"
timed clone-src cdi 900
[ "$PHASE" = Succeeded ] && disk_ok clone-src || { echo "timing: the clone source: $PHASE $(why clone-src)" >&2; exit 1; }
echo "timing: clone source imported in $SECS s"

# run_kind KIND NAME FLAVOR: creates the kind's DataVolume NAME and times it.
run_kind() {
	local up=
	T0=$(date +%s.%N)
	case $1 in
	http-qcow2xz) DV_SIZE=2Gi dv "$2" e2e-local "{http: {url: \"$SERVE_URL/disk.qcow2.xz\"}}" ;;
	http-block) dv "$2" e2e-local "{http: {url: \"$SERVE_URL/disk.qcow2.xz\"}}" Block ;;
	http-rawgz) DV_SIZE=2Gi dv "$2" e2e-local "{http: {url: \"$SERVE_URL/disk.raw.gz\"}}" ;;
	registry) DV_SIZE=2Gi dv "$2" e2e-local "{registry: {url: \"docker://$REG_HOST/bench/disk:qcow2\"}}" ;;
	upload)
		DV_SIZE=2Gi dv "$2" e2e-local "{upload: {}}"
		rm -f "$W/upload.code"
		{ upload_direct "$2" "$W/disk.qcow2.xz"; echo "$CODE" > "$W/upload.code"; } &
		up=$!
		;;
	clone) DV_SIZE=2Gi dv "$2" fast "{pvc: {namespace: $NS, name: clone-src}}" ;;
	blank) DV_SIZE=2Gi dv "$2" e2e-local "{blank: {}}" ;;
	esac
	timed "$2" "$3" 900
	save_logs "$2"
	[ -z "$up" ] || { wait "$up"; rm -f "$W/upload.code"; }
	if [ "$PHASE" != Succeeded ]; then OK="$PHASE: $(why "$2")"
	elif [ "$1" = blank ]; then zero_after "$(pv_path $NS "$2")/disk.img" 0 && OK=yes || OK="not all zeros"
	else disk_ok "$2" && OK=yes || OK="sha256 differs"; fi
}

KINDS="http-qcow2xz http-block http-rawgz registry upload clone blank"
declare -A SEC CHECK
for ((r = 1; r <= ROUNDS; r++)); do
	for f in cdi ours; do
		flavor_start $f
		for k in $KINDS; do
			[[ $k =~ ${E2E_TIMING_KINDS:-.} ]] || continue
			run_kind "$k" "$k-$f-$r" "$f"
			SEC[$k,$f,$r]=$SECS
			[ "$OK" = yes ] || CHECK[$k]="${CHECK[$k]:-}$f round $r: $OK. "
			echo "timing: round $r $f $k ${SECS} s, bytes: $OK; load average $(cut -d' ' -f1 /proc/loadavg)"
		done
		# The targets go (with the controller running); their volumes are
		# emptied for the next flavor.
		kubectl -n $NS delete $(kubectl -n $NS get dv -o name | grep -v '/clone-src$') --wait=true >/dev/null
		for ((i = 0; i < 120; i++)); do
			[ "$(kubectl -n $NS get pvc -o name | grep -vc '/clone-src$')" = 0 ] && break; sleep 0.5
		done
		recycle_pvs
	done
done
[ "${E2E_KEEP:-}" = 1 ] || kubectl delete namespace $NS --wait=true >/dev/null
cdi_stop
recycle_pvs

# median of the words of $1
median() { tr ' ' '\n' <<<"$1" | grep . | sort -n | awk '{ v[NR] = $1 } END { if (NR % 2) printf "%.1f", v[(NR + 1) / 2]; else printf "%.1f", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
{
	echo "| kind | CDI s | ours s | CDI / ours | CDI rounds | ours rounds | bytes |"
	echo "|---|---|---|---|---|---|---|"
	for k in $KINDS; do
		[[ $k =~ ${E2E_TIMING_KINDS:-.} ]] || continue
		c= o=
		for ((r = 1; r <= ROUNDS; r++)); do c="$c ${SEC[$k,cdi,$r]}" o="$o ${SEC[$k,ours,$r]}"; done
		mc=$(median "$c") mo=$(median "$o")
		echo "| $k | $mc | $mo | $(awk -v a="$mc" -v b="$mo" 'BEGIN { printf "%.2f×", a / b }') |$c |$o | ${CHECK[$k]:-equal} |"
	done
	echo
	echo "Pods (first container) as they ran, by flavor and role:"
	echo
	awk '{ role = $2 ~ /^importer-/ ? "importer" : $2 ~ /^cdi-upload-/ ? "upload server" : $2 ~ /source-pod$/ ? "clone source" : $2
		$2 = ""; n[$1 " " role ":" substr($0, length($1) + 2)]++ }
		END { for (k in n) printf "- %s (%d pods)\n", k, n[k] }' "$W/pods" | sort
} | tee "$OUT"
