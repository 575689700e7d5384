#!/bin/bash
# CDI's own controller (cdi-build.sh) driving our image in the e2e cluster:
# IMPORTER_IMAGE, UPLOADSERVER_IMAGE and CLONER_IMAGE are all our image.
# DataVolumes: HTTP qcow2.xz (onto a filesystem and a block PV), a
# containerdisk in a registry on the host (pod pull and node pull), blank,
# upload (straight to the upload pod's Service with the client certificate
# CDI's upload proxy would present, and through cdi-uploadproxy itself),
# host-assisted clone (another storage class), a 404 source, an HTTP
# vmdk.zst that needs scratch, and a paced source whose progress is read
# while it runs (the pod's metric and the DataVolume's), a clone without a
# size and a filesystem -> block clone (CDI's size-detection pod), a
# DataImportCron whose DataSource a sourceRef DataVolume clones and whose
# next poll picks up a new digest (CDI's poller pod), and a node pull whose
# kubelet pull takes over 60 s. Bytes are read on the host through each PV. E2E_CDI_ROWS=REGEX runs only the rows whose
# names match (clone needs http-qcow2xz).
set -uo pipefail
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/cdictl.sh"
NS=e2e-cdi
W=$(mktemp -d)
CDI_PID= REG_PID= PROXY_PID= REG2_PID= REGPROXY_PID=
cleanup() {
	kill $SERVE_PID $CDI_PID $REG_PID $PROXY_PID $REG2_PID $REGPROXY_PID 2>/dev/null
	rm -rf "$W" "$E2E_REGISTRY_HOSTS/${REG_HOST:-none}" "$E2E_REGISTRY_HOSTS/${RP_HOST:-none}"
}
trap cleanup EXIT
for b in cdi-controller cdi-uploadproxy e2e-upload-token cdi-crds benchtool; do
	[ -e "$E2E_BIN/$b" ] || { echo "cdi: $E2E_BIN/$b missing; run make e2e-cdi-build (cdi-*, e2e-upload-token) or make e2e-build (benchtool)" >&2; exit 1; }
done
MB=${E2E_DISK_MB:-64}
BYTES=$((MB << 20))
make_disk "$W" "$MB"
qemu-img convert -f raw -O vmdk -o subformat=monolithicSparse "$W/disk.raw" "$W/disk.vmdk"
zstd -q -f "$W/disk.vmdk" -o "$W/disk.vmdk.zst"
WANT=$(sha256sum < "$W/disk.raw" | cut -d' ' -f1)
mkdir "$W/slow" && ln "$W/disk.qcow2.xz" "$W/slow/disk.qcow2.xz"
serve "$W" || exit 1
# want ROW: E2E_CDI_ROWS (a regular expression, default all) selects rows by name.
# A selected row's seconds start here.
want() { [[ $1 =~ ${E2E_CDI_ROWS:-.} ]] && ROW_T=$(date +%s); }

# Containerdisks of the test disk (benchtool registry: disk/disk.qcow2 at
# :qcow2, disk/disk.img of the raw at :raw-gz, each one gzip layer, 107:107)
# in a registry on the gateway, plain HTTP: CDI's insecureRegistries for the
# pod pull, containerd's hosts.toml for the node pull (the kubelet pulls it).
qemu-img convert -c -f raw -O qcow2 "$W/disk.raw" "$W/disk.c.qcow2"
"$E2E_BIN/benchtool" registry -dir "$W" -listen "$E2E_GATEWAY:0" >"$W/registry.out" 2>"$W/registry.err" &
REG_PID=$!
for ((i = 0; i < 300; i++)); do grep -q '^qcow2 ' "$W/registry.out" 2>/dev/null && break; sleep 0.2; done
REG_HOST=$(head -1 "$W/registry.out")
grep -q '^qcow2 ' "$W/registry.out" || { echo "cdi: registry did not start: $(cat "$W/registry.err")" >&2; exit 1; }
REG_REPO=bench/disk
mkdir -p "$E2E_REGISTRY_HOSTS/$REG_HOST"
hosts_toml() { # HOST: containerd pulls from HOST over plain HTTP
	mkdir -p "$E2E_REGISTRY_HOSTS/$1"
	cat > "$E2E_REGISTRY_HOSTS/$1/hosts.toml" <<TOML
server = "http://$1"
[host."http://$1"]
  capabilities = ["pull", "resolve"]
TOML
}
hosts_toml "$REG_HOST"

# A second registry of another disk (W2, E2E_DISK2_MB), and regproxy.py in
# front of both: golden/disk:latest is the first's qcow2 until $W/regstate
# names the second (a new image pushed to the tag); slow/NAME is the
# first's bench/disk with its blobs sent at E2E_NODE_SLOW_RATE bytes/s.
W2=$W/disk2
mkdir -p "$W2"
make_disk "$W2" "${E2E_DISK2_MB:-16}"
qemu-img convert -c -f raw -O qcow2 "$W2/disk.raw" "$W2/disk.c.qcow2"
WANT2=$(sha256sum < "$W2/disk.raw" | cut -d' ' -f1)
BYTES2=$(stat -c %s "$W2/disk.raw")
"$E2E_BIN/benchtool" registry -dir "$W2" -listen "$E2E_GATEWAY:0" >"$W/registry2.out" 2>"$W/registry2.err" &
REG2_PID=$!
for ((i = 0; i < 300; i++)); do grep -q '^qcow2 ' "$W/registry2.out" 2>/dev/null && break; sleep 0.2; done
REG2_HOST=$(head -1 "$W/registry2.out")
grep -q '^qcow2 ' "$W/registry2.out" || { echo "cdi: second registry did not start: $(cat "$W/registry2.err")" >&2; exit 1; }
echo "$REG_HOST" > "$W/regstate"
python3 "$(dirname "$0")/regproxy.py" "$E2E_GATEWAY" "$W/regstate" "${E2E_NODE_SLOW_RATE:-786432}" "$REG_HOST" "$REG2_HOST" \
	>"$W/regproxy.out" 2>"$E2E_STATE/log/regproxy.log" &
REGPROXY_PID=$!
for ((i = 0; i < 50; i++)); do [ -s "$W/regproxy.out" ] && break; sleep 0.1; done
RP_HOST=$(head -1 "$W/regproxy.out")
[ -n "$RP_HOST" ] || { echo "cdi: regproxy.py did not start: $(cat "$E2E_STATE/log/regproxy.log")" >&2; exit 1; }
hosts_toml "$RP_HOST"

# --- CDI's controller, outside the cluster (cdictl.sh)
cdi_prepare "$REG_HOST" "$RP_HOST"
# What CDI's operator makes for DataImportCrons (pkg/operator/resources:
# namespaced/cronjob.go, cluster/cronjob.go): the poller's ServiceAccount
# in CDI's namespace and its right to patch DataImportCrons. Without the
# ServiceAccount the Job's pods are never created.
kubectl apply -f - >/dev/null <<YAML
apiVersion: v1
kind: ServiceAccount
metadata: {name: cdi-cronjob, namespace: cdi}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: cdi-cronjob}
rules: [{apiGroups: [cdi.kubevirt.io], resources: [dataimportcrons], verbs: [get, list, update, patch]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: cdi-cronjob}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cdi-cronjob}
subjects: [{kind: ServiceAccount, name: cdi-cronjob, namespace: cdi}]
YAML
cdi_start "$E2E_IMAGE" "$E2E_IMAGE" "$E2E_IMAGE"
kubectl delete namespace $NS --ignore-not-found --wait=true >/dev/null
recycle_pvs
kubectl create namespace $NS >/dev/null
kubectl -n $NS wait --for=create serviceaccount/default --timeout=60s >/dev/null
for ((i = 0; i < 60; i++)); do
	kubectl get cdiconfig config -o jsonpath='{.spec.insecureRegistries}' 2>/dev/null | grep -qF "$RP_HOST" && break; sleep 1
done
((i < 60)) || { echo "cdi: CDIConfig has no insecureRegistries $REG_HOST after 60 s: $(kubectl get cdiconfig config -o jsonpath='{.spec}')" >&2; exit 1; }

dv_message() { kubectl -n $NS get dv "$1" -o jsonpath='{range .status.conditions[*]}{.type}={.status} {.reason}: {.message}{"\n"}{end}'; }

if want http-qcow2xz; then
	dv http-qcow2xz e2e-local "{http: {url: \"$SERVE_URL/disk.qcow2.xz\"}}"
	watch_dv http-qcow2xz 300
	check "CDI DataVolume http qcow2.xz" "phase $PHASE, progress seen:$PROGRESS; disk.img first $MB MiB sha256 equal" \
		eval 'succeeded && disk_ok http-qcow2xz'
fi

# Progress while it runs: the same qcow2.xz sent at E2E_SLOW_RATE; the importer pod's metric
# scraped from its IP on 8443 over TLS (as CDI's controller scrapes it), and the DataVolume's progress.
if want http-progress; then
	dv http-progress e2e-local "{http: {url: \"$SERVE_URL/slow/disk.qcow2.xz\"}}"
	PHASE= PROGRESS= METRICS= POD_IP=
	for ((i = 0; i < 600; i++)); do
		read -r p s < <(kubectl -n $NS get dv http-progress -o jsonpath='{.status.phase} {.status.progress}' 2>/dev/null)
		PHASE=$p
		[ -n "${s:-}" ] && [ "${PROGRESS##* }" != "$s" ] && PROGRESS="$PROGRESS $s"
		[ -n "$POD_IP" ] || POD_IP=$(kubectl -n $NS get pod importer-http-progress -o jsonpath='{.status.podIP}' 2>/dev/null)
		if [ -n "$POD_IP" ]; then
			m=$(curl -ks --max-time 2 "https://$POD_IP:8443/metrics" | sed -n 's/^kubevirt_cdi_import_progress_total{.*} \([0-9.e+]*\)$/\1/p')
			[ -n "$m" ] && [ "${METRICS##* }" != "$m" ] && METRICS="$METRICS $m"
		fi
		case $p in Succeeded | Failed) break ;; esac
		sleep 0.5
	done
	# between: a value strictly between 0 and 100 among the words of $1
	between() { awk '{ for (i = 1; i <= NF; i++) { v = $i; sub("%", "", v); if (v + 0 > 0 && v + 0 < 100) f = 1 } } END { exit !f }' <<<"$1"; }
	check "CDI DataVolume http qcow2.xz at $((${E2E_SLOW_RATE:-2097152} >> 10)) KiB/s: progress while it runs" \
		"phase $PHASE; DataVolume progress seen:$PROGRESS; kubevirt_cdi_import_progress_total from https://${POD_IP:-none}:8443/metrics:${METRICS:- none}; disk.img first $MB MiB sha256 equal" \
		eval 'succeeded && between "$PROGRESS" && between "$METRICS" && disk_ok http-progress'
fi

if want blank; then
	dv blank e2e-local "{blank: {}}"
	watch_dv blank 180
	check "CDI DataVolume blank" "phase $PHASE; disk.img all zeros, $(stat -c %s "$(pv_path $NS blank)/disk.img" 2>/dev/null) bytes" \
		eval 'succeeded && zero_disk blank'
fi

# Our message in the DataVolume's condition.
if want http-404; then
	dv http-404 e2e-local "{http: {url: \"$SERVE_URL/no-such-disk.qcow2\"}}"
	msg=
	for ((i = 0; i < 240; i++)); do
		msg=$(dv_message http-404 | grep '^Running=False.*404' | head -1)
		[ -n "$msg" ] && break; sleep 0.5
	done
	check "CDI DataVolume http 404" "condition: ${msg:-none after 120 s}" test -n "$msg"
	kubectl -n $NS delete dv http-404 --wait=false >/dev/null
fi

# A monolithicSparse vmdk in zstd needs scratch; CDI makes the scratch PVC and re-runs the pod.
if want http-vmdk-zst; then
	dv http-vmdk-zst e2e-local "{http: {url: \"$SERVE_URL/disk.vmdk.zst\"}}"
	watch_dv http-vmdk-zst 300
	restarts=$(kubectl -n $NS get events --field-selector involvedObject.name=http-vmdk-zst -o jsonpath='{range .items[*]}{.reason}{" "}{end}')
	check "CDI DataVolume http vmdk.zst (scratch)" "phase $PHASE, scratch PVC seen: $SCRATCH; events: $restarts" \
		eval 'succeeded && [ $SCRATCH = yes ] && disk_ok http-vmdk-zst'
fi

# The same qcow2.xz onto a block PV (a loop device): CDI gives the pod /dev/cdi-block-volume.
if want http-block; then
	dv http-block e2e-local "{http: {url: \"$SERVE_URL/disk.qcow2.xz\"}}" Block
	watch_dv http-block 300
	check "CDI DataVolume http qcow2.xz, volumeMode Block" "phase $PHASE, progress seen:$PROGRESS; $(pv_path $NS http-block) first $MB MiB sha256 equal" \
		eval 'succeeded && disk_ok http-block'
fi

# Registry, pod pull: our importer pulls docker://<gateway>/e2e/containerdisk:v1 itself (plain HTTP,
# CDI's insecureRegistries sets INSECURE_TLS); CDI gives it a scratch PVC up front.
if want registry-pod; then
	dv registry-pod e2e-local "{registry: {url: \"docker://$REG_HOST/$REG_REPO:qcow2\"}}"
	watch_dv registry-pod 300
	check "CDI DataVolume registry, pod pull" "docker://$REG_HOST/$REG_REPO:qcow2; phase $PHASE, progress seen:$PROGRESS, scratch PVC seen: $SCRATCH; disk.img first $MB MiB sha256 equal" \
		eval 'succeeded && disk_ok registry-pod'
fi

# Registry, node pull: the kubelet pulls the containerdisk through containerd (hosts.toml: plain
# HTTP), our image's init container copies /usr/bin/cdi-containerimage-server to /shared, the
# containerdisk runs it as the "server" container, our importer reads it on localhost:8100.
if want registry-node; then
	dv registry-node e2e-local "{registry: {url: \"docker://$REG_HOST/$REG_REPO:raw-gz\", pullMethod: node}}"
	watch_dv registry-node 300
	pulled=$(ctr images ls -q | grep -F "$REG_HOST/" | tr '\n' ' ')
	check "CDI DataVolume registry, node pull" "docker://$REG_HOST/$REG_REPO:raw-gz; phase $PHASE, progress seen:$PROGRESS; in containerd: ${pulled:-nothing}; disk.img first $MB MiB sha256 equal" \
		eval 'succeeded && [ -n "$pulled" ] && disk_ok registry-node'
fi

# Upload: to the upload pod's Service as CDI's upload proxy sends it (mutual TLS, the proxy's client name).
if want upload; then
	dv upload e2e-local "{upload: {}}"
	upload_direct upload "$W/disk.qcow2.xz"
	code=$CODE
	watch_dv upload 300
	check "CDI DataVolume upload" "HTTP $code $(head -c 200 "$W/curl.err") to https://$H:8443 (pod ${IP:-none}) with the client signer's certificate; phase $PHASE" \
		eval 'succeeded && [ "$code" = 200 ] && disk_ok upload'
fi

# Upload through CDI's upload proxy: cdi-uploadproxy (built from CDI's source) on the host, its
# resolver the cluster's DNS (a private mount namespace with its own resolv.conf, as its pod would
# have), the token as cdi-apiserver issues it; the proxy checks the token, waits for the upload pod
# and forwards to https://cdi-upload-<pvc>.<ns>.svc:8443 with the client signer's certificate.
if want upload-proxy; then
	printf 'nameserver %s\nsearch cluster.local\noptions ndots:5\n' "$E2E_GATEWAY" > "$C/resolv.conf"
	# It binds 0.0.0.0:$E2E_UPLOADPROXY_PORT (cdi-build.sh); its namespace is "cdi" outside a pod.
	unshare -m sh -c 'mount --bind "$0" /etc/resolv.conf && exec "$@"' "$C/resolv.conf" \
		env APISERVER_PUBLIC_KEY="$(cat "$C/token-signer.pub")" SERVER_CERT_FILE="$C/proxy.crt" SERVER_KEY_FILE="$C/proxy.key" \
		UPLOAD_CLIENT_CERT_FILE="$C/client.crt" UPLOAD_CLIENT_KEY_FILE="$C/client.key" \
		"$E2E_BIN/cdi-uploadproxy" -kubeconfig "$KUBECONFIG" -v=3 >"$E2E_STATE/log/cdi-uploadproxy.log" 2>&1 &
	PROXY_PID=$!
	echo "cdi-uploadproxy $PROXY_PID" >> "$E2E_RUN/pids"
	P="--cacert $C/proxy.crt --resolve cdi-uploadproxy:$E2E_UPLOADPROXY_PORT:$E2E_GATEWAY https://cdi-uploadproxy:$E2E_UPLOADPROXY_PORT"
	dv upload-proxy e2e-local "{upload: {}}"
	for ((i = 0; i < 240; i++)); do
		[ "$(kubectl -n $NS get dv upload-proxy -o jsonpath='{.status.phase}')" = UploadReady ] && break; sleep 0.5
	done
	for ((i = 0; i < 100; i++)); do curl -fs -o /dev/null $P/healthz && break; sleep 0.3; done
	TOKEN=$("$E2E_BIN/e2e-upload-token" "$C/token-signer.key" $NS upload-proxy)
	code=$(curl -sS -o "$W/upload-proxy.out" -w '%{http_code}' -H "Authorization: Bearer $TOKEN" \
		-T "$W/disk.qcow2.xz" $P/v1beta1/upload 2>"$W/curl.err")
	watch_dv upload-proxy 300
	check "CDI DataVolume upload through cdi-uploadproxy" "HTTP $code $(head -c 200 "$W/curl.err") $(grep -o '"message":"[^"]*"' "$W/upload-proxy.out") from https://cdi-uploadproxy:$E2E_UPLOADPROXY_PORT ($E2E_GATEWAY) with an upload token; phase $PHASE; $(grep -o 'Received valid token[^"]*' "$E2E_STATE/log/cdi-uploadproxy.log" | head -1)" \
		eval 'succeeded && [ "$code" = 200 ] && disk_ok upload-proxy'
	kill $PROXY_PID 2>/dev/null
fi

# Host-assisted clone: the HTTP DataVolume's PVC to the other storage class.
if want clone; then
	kubectl -n $NS apply -f - >/dev/null <<YAML
apiVersion: cdi.kubevirt.io/v1beta1
kind: DataVolume
metadata: {name: clone}
spec:
  source: {pvc: {namespace: $NS, name: http-qcow2xz}}
  pvc:
    accessModes: [ReadWriteOnce]
    volumeMode: Filesystem
    storageClassName: fast
    resources: {requests: {storage: 1Gi}}
YAML
	watch_dv clone 300
	check "CDI DataVolume host-assisted clone (e2e-local -> fast)" "phase $PHASE, progress seen:$PROGRESS; $(dv_message clone | tr '\n' ';' | head -c 300)" \
		eval 'succeeded && disk_ok clone'
fi

# CDI's size-detection pod: the source PVC's virtual size, cached by CDI in
# these annotations of the source, removed before each row so that each
# row runs its own pod.
ANN_VSIZE='cdi.Kubervirt.io/virtualSize' ANN_SRCCAP='cdi.Kubervirt.io/sourceCapacity'
forget_size() { kubectl -n $NS annotate pvc "$1" "$ANN_VSIZE-" "$ANN_SRCCAP-" >/dev/null 2>&1; }
# The import grew the source's raw disk.img to its volume: that is its virtual size.
SRC_IMG=$(stat -c %s "$(pv_path $NS http-qcow2xz 2>/dev/null)/disk.img" 2>/dev/null)
source_vsize() { kubectl -n $NS get pvc "$1" -o jsonpath="{.metadata.annotations.${ANN_VSIZE//./\\.}}"; }
dv_events() { kubectl -n $NS get events --field-selector "involvedObject.name=$1" -o jsonpath='{range .items[*]}{.reason}{" "}{end}'; }
clone_dv() { # name source-claim storage-or-pvc-yaml
	kubectl -n $NS apply -f - >/dev/null <<YAML
apiVersion: cdi.kubevirt.io/v1beta1
kind: DataVolume
metadata: {name: $1}
spec:
  source: {pvc: {namespace: $NS, name: $2}}
  $3
YAML
}

# A clone without a size (spec.storage, no resources): CDI's clone
# controller runs /usr/bin/cdi-image-size-detection from our image on the
# source and sizes the target from its termination message.
if want clone-nosize; then
	forget_size http-qcow2xz
	clone_dv clone-nosize http-qcow2xz "storage: {accessModes: [ReadWriteOnce], volumeMode: Filesystem, storageClassName: fast}"
	watch_dv clone-nosize 300
	vsize=$(source_vsize http-qcow2xz)
	req=$(kubectl -n $NS get pvc clone-nosize -o jsonpath='{.spec.resources.requests.storage}' 2>/dev/null)
	ev=$(dv_events clone-nosize)
	check "CDI DataVolume clone without a size (size-detection pod)" "phase $PHASE; the size-detection pod's virtual size ${vsize:-none} (the source's raw disk.img: $SRC_IMG bytes); target request ${req:-none}; events: $ev; disk.img first $MB MiB sha256 equal" \
		eval 'succeeded && [ "$vsize" = "$SRC_IMG" ] && [[ $ev == *SizeDetectionPodCreated* ]] && disk_ok clone-nosize'
fi

# Filesystem -> block clone of a kubevirt PVC, the data path of a stopped
# VM's storage-class migration (kubevirt-migration-controller's DataVolume
# uses spec.storage): CDI detects the size even with one given.
if want clone-fs-block; then
	forget_size http-qcow2xz
	clone_dv clone-fs-block http-qcow2xz "storage: {accessModes: [ReadWriteOnce], volumeMode: Block, storageClassName: fast, resources: {requests: {storage: 1Gi}}}"
	watch_dv clone-fs-block 300
	vsize=$(source_vsize http-qcow2xz)
	ev=$(dv_events clone-fs-block)
	check "CDI DataVolume clone filesystem -> block (size-detection pod)" "phase $PHASE; the size-detection pod's virtual size ${vsize:-none} (disk.img $SRC_IMG bytes); events: $ev; $(pv_path $NS clone-fs-block) first $MB MiB sha256 equal" \
		eval 'succeeded && [ "$vsize" = "$SRC_IMG" ] && [[ $ev == *SizeDetectionPodCreated* ]] && disk_ok clone-fs-block'
fi

# The golden-image flow: a DataImportCron on golden/disk:latest (pod pull),
# polled by CDI's CronJob with our image (its first Job at once), imports
# the digest, and its DataSource becomes Ready; a DataVolume with sourceRef
# to the DataSource clones it. Then a new image under the tag: the next
# scheduled poll (every minute) records the new digest and CDI imports it.
ANN_DIGEST='cdi.kubevirt.io/storage.import.sourceDesiredDigest'
cron_digest() { kubectl -n $NS get dataimportcron golden -o jsonpath="{.metadata.annotations.${ANN_DIGEST//./\\.}}" 2>/dev/null; }
# manifest_digest HOST: the digest regproxy's golden/disk:latest has, as the registry says it.
manifest_digest() {
	curl -fsSI -H 'Accept: application/vnd.docker.distribution.manifest.v2+json' "http://$1/v2/golden/disk/manifests/latest" |
		tr -d '\r' | sed -n 's/^[Dd]ocker-[Cc]ontent-[Dd]igest: //p'
}
# source_ok CLAIM SHA BYTES: the claim's disk.img starts with the disk of that sha256.
source_ok() { local d; d=$(pv_path $NS "$1") || return 1; [ "$(prefix_sha "$d/disk.img" "$3")" = "$2" ]; }
ds_claim() { kubectl -n $NS get datasource golden -o jsonpath='{.spec.source.pvc.name}' 2>/dev/null; }
ds_ready() { kubectl -n $NS get datasource golden -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null; }
if want golden; then
	echo "$REG_HOST" > "$W/regstate"
	D1=$(manifest_digest "$RP_HOST")
	kubectl -n $NS apply -f - >/dev/null <<YAML
apiVersion: cdi.kubevirt.io/v1beta1
kind: DataImportCron
metadata: {name: golden}
spec:
  managedDataSource: golden
  schedule: "* * * * *"
  garbageCollect: Outdated
  importsToKeep: 2
  template:
    spec:
      source: {registry: {url: "docker://$RP_HOST/golden/disk:latest"}}
      storage: {accessModes: [ReadWriteOnce], volumeMode: Filesystem, storageClassName: e2e-local, resources: {requests: {storage: 1Gi}}}
YAML
	for ((i = 0; i < 600; i++)); do [ "$(ds_ready)" = True ] && break; sleep 0.5; done
	got=$(cron_digest) claim=$(ds_claim)
	polled=$(kubectl -n $NS get dataimportcron golden -o jsonpath='{.metadata.annotations.cdi\.kubevirt\.io/storage\.import\.lastCronTime}' 2>/dev/null)
	check "CDI DataImportCron (registry, pod pull): DataSource Ready" "digest recorded by our poller (CDI's CronJob, SA cdi-cronjob) ${got:-none} at ${polled:-never}, registry's $D1; DataSource golden Ready=$(ds_ready) -> ${claim:-none}; disk.img first $MB MiB sha256 equal" \
		eval '[ -n "$D1" ] && [ "$got" = "$D1" ] && [ "$(ds_ready)" = True ] && [ -n "$claim" ] && source_ok "$claim" "$WANT" $BYTES'
	GOLDEN_CLAIM=$claim
	kubectl -n $NS apply -f - >/dev/null <<YAML
apiVersion: cdi.kubevirt.io/v1beta1
kind: DataVolume
metadata: {name: golden-vm}
spec:
  sourceRef: {kind: DataSource, name: golden}
  storage: {accessModes: [ReadWriteOnce], volumeMode: Filesystem, storageClassName: fast, resources: {requests: {storage: 1Gi}}}
YAML
	watch_dv golden-vm 300
	check "CDI DataVolume with sourceRef to the DataSource" "sourceRef DataSource golden (${GOLDEN_CLAIM:-none}); phase $PHASE; disk.img first $MB MiB sha256 equal" \
		eval 'succeeded && disk_ok golden-vm'

	echo "$REG2_HOST" > "$W/regstate"
	D2=$(manifest_digest "$RP_HOST")
	ROW_T=$(date +%s)
	for ((i = 0; i < 600; i++)); do
		claim=$(ds_claim)
		[ "$(cron_digest)" = "$D2" ] && [ -n "$claim" ] && [ "$claim" != "$GOLDEN_CLAIM" ] && [ "$(ds_ready)" = True ] && break
		sleep 0.5
	done
	got=$(cron_digest)
	check "CDI DataImportCron: a second digest, picked up by the next poll" "registry's new digest $D2; recorded ${got:-none}; DataSource golden -> ${claim:-none} (was $GOLDEN_CLAIM), Ready=$(ds_ready); disk.img first $((BYTES2 >> 20)) MiB sha256 of the new disk equal" \
		eval '[ -n "$D2" ] && [ "$D2" != "$D1" ] && [ "$got" = "$D2" ] && [ "$claim" != "$GOLDEN_CLAIM" ] && source_ok "$claim" "$WANT2" $BYTES2'
	kubectl -n $NS delete dataimportcron golden --wait=false >/dev/null
fi

# Node pull whose kubelet pull takes over 60 s: the containerdisk's layer
# comes from regproxy at E2E_NODE_SLOW_RATE (a name containerd has never
# pulled, and the c-qcow2 layer no other row pulls through containerd).
# CDI's own importer gives up after 60 s (CDI issue 4253); ours waits,
# logging, and the import succeeds with the importer never restarted.
if want registry-node-slow; then
	ref=$RP_HOST/slow/n$(date +%s):c-qcow2
	kubectl -n $NS apply -f - >/dev/null <<YAML
apiVersion: cdi.kubevirt.io/v1beta1
kind: DataVolume
metadata: {name: registry-node-slow, annotations: {cdi.kubevirt.io/storage.pod.retainAfterCompletion: "true"}}
spec:
  source: {registry: {url: "docker://$ref", pullMethod: node}}
  pvc: {accessModes: [ReadWriteOnce], volumeMode: Filesystem, storageClassName: e2e-local, resources: {requests: {storage: 1Gi}}}
YAML
	watch_dv registry-node-slow 900
	P=importer-registry-node-slow
	pulled=$(kubectl -n $NS get events --field-selector "involvedObject.name=$P" -o jsonpath='{range .items[*]}{.message}{"\n"}{end}' 2>/dev/null | grep -F "$ref" | grep -o 'Successfully pulled image.* in [0-9hms.]*' | head -1)
	secs=$(grep -o ' in [0-9ms.]*$' <<<"$pulled" | awk '{ d = $2; m = 0; if (d ~ /m/) { split(d, a, "m"); m = a[1]; d = a[2] } sub("s", "", d); printf "%d", m * 60 + d }')
	restarts=$(kubectl -n $NS get pod $P -o jsonpath='{.status.containerStatuses[?(@.name=="importer")].restartCount}' 2>/dev/null)
	waits=$(kubectl -n $NS logs $P -c importer 2>/dev/null | grep -c 'waiting for the ready file')
	check "CDI DataVolume registry, node pull, kubelet pull over 60 s" "docker://$ref at $((${E2E_NODE_SLOW_RATE:-786432} >> 10)) KiB/s; ${pulled:-no pull event} (${secs:-?} s); importer restarts ${restarts:-?}, $waits 'waiting' log lines; phase $PHASE; disk.img first $MB MiB sha256 equal" \
		eval 'succeeded && [ "${secs:-0}" -gt 60 ] && [ "$restarts" = 0 ] && [ "$waits" -gt 0 ] && disk_ok registry-node-slow'
fi

[ "${E2E_KEEP:-}" = 1 ] || kubectl delete namespace $NS --wait=false >/dev/null
exit $fail
