#!/bin/bash
# deploy/'s manifests in the e2e cluster (up.sh): the importer Job on a
# filesystem and a block PVC (a qcow2.xz served on the pod bridge's
# gateway), the upload server Pod + Service (an upload from the host
# through the Service's cluster IP over TLS), and the clone Job (the block
# PVC to a block PVC of the other storage class). Each PVC's bytes are read
# on the host through its PV (directory or loop device) and compared; the
# termination message and exit code are read through the API.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
NS=e2e-manifests
W=$(mktemp -d)
trap 'kill $SERVE_PID 2>/dev/null; rm -rf "$W"' EXIT
MB=${E2E_DISK_MB:-64}
BYTES=$((MB << 20))
make_disk "$W" "$MB"
WANT=$(sha256sum < "$W/disk.raw" | cut -d' ' -f1)
serve "$W" || { echo "manifests: HTTP server on $E2E_GATEWAY did not start" >&2; exit 1; }
kubectl delete namespace $NS --ignore-not-found --wait=true >/dev/null
recycle_pvs
kubectl create namespace $NS >/dev/null
kubectl -n $NS wait --for=create serviceaccount/default --timeout=60s >/dev/null
# The manifests as shipped, with a reachable source and sizes that fit this node's PVs.
edit() { sed -e "s#value: https://cloud.debian.org/.*#value: $SERVE_URL/disk.qcow2.xz#" \
	-e 's#storage: 10Gi#storage: 1Gi#' -e 's#value: 10Gi#value: 1Gi#' "$E2E_ROOT/deploy/$1"; }

wait_job() { # job seconds
	kubectl -n $NS wait --for=condition=complete "job/$1" --timeout="$2s" >/dev/null 2>&1 ||
		{ kubectl -n $NS describe job "$1" | tail -5 >&2; kubectl -n $NS get pods,pvc -o wide >&2
		  kubectl -n $NS describe pods -l job-name="$1" | tail -30 >&2; return 1; }
}
exited0() { case $1 in "exit=0 "*) return 0 ;; esac; return 1; }
termination() { # job -> "exit=N message=..."
	local p; p=$(job_pod $NS "$1")
	echo "exit=$(terminated $NS "$p" exitCode) message=$(terminated $NS "$p" message | head -c 300)"
}

# 1. importer Job, filesystem PVC
edit importer-filesystem.yaml | kubectl -n $NS apply -f - >/dev/null
if wait_job import-vm-disk 300; then
	t=$(termination import-vm-disk)
	d=$(pv_path $NS vm-disk)
	got=$(prefix_sha "$d/disk.img" $BYTES)
	check "deploy importer-filesystem.yaml" "$t; disk.img first $MB MiB sha256 ${got:0:12} (want ${WANT:0:12})" \
		eval '[ "$got" = "$WANT" ] && exited0 "$t"'
else result "deploy importer-filesystem.yaml" FAIL "job did not complete: $(termination import-vm-disk)"; fail=1; fi

# 2. importer Job, block PVC
edit importer-block.yaml | kubectl -n $NS apply -f - >/dev/null
if wait_job import-vm-disk-block 300; then
	t=$(termination import-vm-disk-block)
	d=$(pv_path $NS vm-disk-block)
	got=$(prefix_sha "$d" $BYTES)
	check "deploy importer-block.yaml" "$t; $d first $MB MiB sha256 ${got:0:12} (want ${WANT:0:12})" \
		eval '[ "$got" = "$WANT" ] && exited0 "$t"'
else result "deploy importer-block.yaml" FAIL "job did not complete: $(termination import-vm-disk-block)"; fail=1; fi

# 3. clone Job: block PVC -> block PVC on the storage class "fast"
edit clone.yaml | kubectl -n $NS apply -f - >/dev/null
if wait_job clone-vm-disk-block 300; then
	t=$(termination clone-vm-disk-block)
	src=$(pv_path $NS vm-disk-block) dst=$(pv_path $NS vm-disk-block-migrated)
	a=$(sha256sum < "$src" | cut -d' ' -f1) b=$(sha256sum < "$dst" | cut -d' ' -f1)
	check "deploy clone.yaml" "$t; whole device sha256 ${a:0:12} -> ${b:0:12} ($src -> $dst)" \
		eval '[ "$a" = "$b" ] && exited0 "$t"'
else result "deploy clone.yaml" FAIL "job did not complete: $(termination clone-vm-disk-block)"; fail=1; fi

# 4. upload server Pod + Service: TLS with a certificate for the Service's name, bearer token
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=upload-server \
	-addext "subjectAltName=DNS:upload-server,DNS:upload-server.$NS.svc" -keyout "$W/tls.key" -out "$W/tls.crt" 2>/dev/null
TOKEN=$(openssl rand -hex 32)
kubectl -n $NS create secret tls upload-server-tls --cert="$W/tls.crt" --key="$W/tls.key" >/dev/null
kubectl -n $NS create secret generic upload-token --from-literal=token="$TOKEN" >/dev/null
edit upload-server.yaml | kubectl -n $NS apply -f - >/dev/null
if kubectl -n $NS wait --for=condition=ready pod/upload-server --timeout=120s >/dev/null; then
	IP=$(kubectl -n $NS get service upload-server -o jsonpath='{.spec.clusterIP}')
	# Ready is not yet routed: kube-proxy writes the Service's rules on its next sync.
	for ((i = 0; i < 100; i++)); do
		curl -fsS -o /dev/null --cacert "$W/tls.crt" --resolve "upload-server:443:$IP" https://upload-server/healthz 2>/dev/null && break
		sleep 0.3
	done
	code=$(curl -sS -o "$W/upload.out" -w '%{http_code}' --cacert "$W/tls.crt" --resolve "upload-server:443:$IP" \
		-H "Authorization: Bearer $TOKEN" -T "$W/disk.qcow2.xz" https://upload-server/v1beta1/upload)
	kubectl -n $NS wait --for=jsonpath='{.status.phase}'=Succeeded pod/upload-server --timeout=120s >/dev/null
	t="exit=$(terminated $NS upload-server exitCode) message=$(terminated $NS upload-server message | head -c 300)"
	d=$(pv_path $NS uploaded-disk)
	got=$(prefix_sha "$d/disk.img" $BYTES)
	check "deploy upload-server.yaml" "HTTP $code from https://upload-server (cluster IP $IP); $t; disk.img sha256 ${got:0:12} (want ${WANT:0:12})" \
		eval '[ "$code" = 200 ] && [ "$got" = "$WANT" ] && exited0 "$t"'
else result "deploy upload-server.yaml" FAIL "pod not ready: $(kubectl -n $NS get pod upload-server -o jsonpath='{.status}' | head -c 400)"; fail=1; fi

[ "${E2E_KEEP:-}" = 1 ] || kubectl delete namespace $NS --wait=false >/dev/null
exit $fail
