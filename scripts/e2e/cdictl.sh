# Sourced by cdi.sh and timing.sh: CDI's controller (cdi-build.sh) outside
# the cluster, as cdi-deployment would run it, and the DataVolume helpers.
# Expects lib.sh, NS (the DataVolumes' namespace), and for disk_ok BYTES and
# WANT (the raw disk's size and sha256).
C=$E2E_STATE/cdi
CDI_PID=
# cdi_prepare REGISTRY...: the signers and keys, CDI's CRDs, the
# namespace cdi with the upload signer bundles, and the CDI object whose
# insecureRegistries are the REGISTRYs.
cdi_prepare() {
	local regs; regs=$(printf '"%s",' "$@")
	if [ ! -f "$C/proxy.crt" ]; then
		mkdir -p "$C"
		for s in server-signer client-signer; do
			openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=cdi-uploadserver-$s" \
				-keyout "$C/$s.key" -out "$C/$s.crt" 2>/dev/null
		done
		openssl req -newkey rsa:2048 -nodes -subj /CN=client.upload-server.cdi.kubevirt.io -keyout "$C/client.key" -out "$C/client.csr" 2>/dev/null
		openssl x509 -req -in "$C/client.csr" -CA "$C/client-signer.crt" -CAkey "$C/client-signer.key" -CAcreateserial -days 1 -out "$C/client.crt" 2>/dev/null
		# The upload proxy's own: the key upload tokens are signed with (cdi-apiserver's) and its serving certificate.
		openssl genrsa -out "$C/token-signer.key" 2048 2>/dev/null
		openssl rsa -in "$C/token-signer.key" -pubout -out "$C/token-signer.pub" 2>/dev/null
		openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=cdi-uploadproxy \
			-addext "subjectAltName=DNS:cdi-uploadproxy,DNS:cdi-uploadproxy.cdi.svc" -keyout "$C/proxy.key" -out "$C/proxy.crt" 2>/dev/null
	fi
	# The clone controller's token keys are at a fixed path; down.sh removes it.
	[ -f /var/run/cdi/token/keys/id_rsa ] || {
		[ -e /var/run/cdi ] || touch "$E2E_RUN/cdi-keys"
		mkdir -p /var/run/cdi/token/keys
		openssl genrsa -out /var/run/cdi/token/keys/id_rsa 2048 2>/dev/null
		openssl rsa -in /var/run/cdi/token/keys/id_rsa -pubout -out /var/run/cdi/token/keys/id_rsa.pub 2>/dev/null
	}
	for f in "$E2E_BIN"/cdi-crds/*.yaml; do kubectl apply --server-side -f "$f" >/dev/null || exit 1; done
	kubectl wait --for=condition=established crd --all --timeout=60s >/dev/null
	kubectl create namespace cdi --dry-run=client -o yaml | kubectl apply -f - >/dev/null
	kubectl -n cdi create configmap cdi-uploadserver-signer-bundle --from-file=ca-bundle.crt="$C/server-signer.crt" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
	kubectl -n cdi create configmap cdi-uploadserver-client-signer-bundle --from-file=ca-bundle.crt="$C/client-signer.crt" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
	kubectl apply -f - >/dev/null <<YAML
apiVersion: cdi.kubevirt.io/v1beta1
kind: CDI
# CDI's config controller copies spec.config into the CDIConfig only when the CR has this annotation.
metadata: {name: cdi, annotations: {cdi.kubevirt.io/configAuthority: ""}}
spec: {config: {insecureRegistries: [${regs%,}]}}
YAML
}
# cdi_start IMPORTER CLONER UPLOADSERVER: CDI's controller with these images
# for its importer (and populator), cloner and upload server pods; sets CDI_PID.
cdi_start() {
	(cd "$C" && exec env IMPORTER_IMAGE=$1 CLONER_IMAGE=$2 UPLOADSERVER_IMAGE=$3 \
		OVIRT_POPULATOR_IMAGE=$1 UPLOADPROXY_SERVICE=cdi-uploadproxy PULL_POLICY=IfNotPresent \
		UPLOAD_SERVER_KEY_FILE="$C/server-signer.key" UPLOAD_SERVER_CERT_FILE="$C/server-signer.crt" \
		UPLOAD_CLIENT_KEY_FILE="$C/client-signer.key" UPLOAD_CLIENT_CERT_FILE="$C/client-signer.crt" \
		"$E2E_BIN/cdi-controller" -kubeconfig "$KUBECONFIG" -v=3 >"$E2E_STATE/log/cdi-controller.log" 2>&1) &
	CDI_PID=$!
	echo "cdi-controller $CDI_PID" >> "$E2E_RUN/pids"
}
# cdi_stop: stops the controller cdi_start started.
cdi_stop() {
	[ -n "$CDI_PID" ] || return 0
	kill "$CDI_PID" 2>/dev/null; wait "$CDI_PID" 2>/dev/null
	CDI_PID=
}

dv() { # name class source-yaml [volumeMode]: a DataVolume of DV_SIZE (1Gi); DV_RETAIN_PODS=1 keeps its pods once done
	local meta="{name: $1}"
	[ -z "${DV_RETAIN_PODS:-}" ] || meta="{name: $1, annotations: {cdi.kubevirt.io/storage.pod.retainAfterCompletion: 'true'}}"
	kubectl -n $NS apply -f - >/dev/null <<YAML
apiVersion: cdi.kubevirt.io/v1beta1
kind: DataVolume
metadata: $meta
spec:
  source: $3
  pvc:
    accessModes: [ReadWriteOnce]
    volumeMode: ${4:-Filesystem}
    storageClassName: $2
    resources: {requests: {storage: ${DV_SIZE:-1Gi}}}
YAML
}
# watch_dv name seconds: waits for Succeeded (or Failed), recording every
# progress value and whether a scratch PVC appeared; sets PHASE, PROGRESS, SCRATCH.
watch_dv() {
	PHASE= PROGRESS= SCRATCH=no
	local p s
	for ((i = 0; i < $2 * 2; i++)); do
		read -r p s < <(kubectl -n $NS get dv "$1" -o jsonpath='{.status.phase} {.status.progress}' 2>/dev/null)
		PHASE=$p
		[ -n "${s:-}" ] && [ "${PROGRESS##* }" != "$s" ] && PROGRESS="$PROGRESS $s"
		kubectl -n $NS get pvc "$1-scratch" >/dev/null 2>&1 && SCRATCH=yes
		case $p in Succeeded | Failed) return 0 ;; esac
		sleep 0.5
	done
}
disk_ok() { # claim: disk.img's (or the block device's) first BYTES bytes are the raw disk
	local d; d=$(pv_path $NS "$1") || return 1
	[ -b "$d" ] || d=$d/disk.img
	[ "$(prefix_sha "$d" $BYTES)" = "$WANT" ]
}

succeeded() { [ "$PHASE" = Succeeded ]; }
zero_disk() { # claim: disk.img is all zeros and at least 64 MiB
	local d; d=$(pv_path $NS "$1") || return 1
	[ "$(stat -c %s "$d/disk.img")" -ge $((64 << 20)) ] && zero_after "$d/disk.img" 0
}
# upload_direct CLAIM FILE: once the upload DataVolume CLAIM is UploadReady,
# POSTs FILE to its upload pod's Service as CDI's upload proxy forwards
# virtctl's upload (mutual TLS, the client signer's certificate for the
# proxy's name; HTTP/1.1, as the proxy's Go transport with its own TLS
# config speaks). CDI's own upload server takes POST only (404 to a PUT)
# and answers curl's HTTP/2 with a stream error. CDI's upload Service is
# headless on 8443, so the name resolves to the pod's address.
# Sets CODE (the HTTP status), H (the Service's name), IP (the pod's);
# curl's errors in $W/curl.err.
upload_direct() {
	for ((i = 0; i < 240; i++)); do
		[ "$(kubectl -n $NS get dv "$1" -o jsonpath='{.status.phase}')" = UploadReady ] && break; sleep 0.5
	done
	H=cdi-upload-$1.$NS.svc
	for ((i = 0; i < 100; i++)); do
		IP=$(kubectl -n $NS get endpointslices -l kubernetes.io/service-name=cdi-upload-$1 -o jsonpath='{.items[0].endpoints[0].addresses[0]}' 2>/dev/null)
		[ -n "$IP" ] && curl -fs -o /dev/null --cacert "$C/server-signer.crt" --cert "$C/client.crt" --key "$C/client.key" \
			--resolve "$H:8443:$IP" "https://$H:8443/healthz" && break
		sleep 0.3
	done
	CODE=$(curl -sS --http1.1 -X POST -o "$W/upload.out" -w '%{http_code}' --cacert "$C/server-signer.crt" --cert "$C/client.crt" --key "$C/client.key" \
		--resolve "$H:8443:${IP:-0.0.0.0}" -T "$2" "https://$H:8443/v1beta1/upload" 2>"$W/curl.err")
}
