#!/bin/bash
# deploy/'s manifests in the e2e cluster (up.sh): the importer Job on a
# filesystem and a block PVC (a qcow2.xz served on the pod bridge's
# gateway), the upload server Pod + Service (an upload from the host
# through the Service's cluster IP over TLS), the clone Job (the block
# PVC to a block PVC of the other storage class), and the S3 importer Job
# whose only credential is its ServiceAccount's projected token (MinIO's
# STS trusting this cluster's service-account issuer). Each PVC's bytes are read
# on the host through its PV (directory or loop device) and compared; the
# termination message and exit code are read through the API.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
NS=e2e-manifests
W=$(mktemp -d)
MINIO_PID=
trap 'kill $SERVE_PID $MINIO_PID 2>/dev/null; rm -rf "$W"' EXIT
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

# 5. importer Job with the pod's own identity, no Secret: MinIO on the
# gateway as S3 and STS, trusting this cluster's service-account issuer as
# an OIDC provider (the API server's discovery document and JWKS, served
# from $W as a cloud's OIDC endpoint would serve them) for the role
# policy readonly; its role ARN is MinIO's (the client ID's SHA-1).
MINIO=$(command -v minio || echo "$(go env GOPATH 2>/dev/null)/bin/minio")
identity="deploy importer-s3-web-identity.yaml"
if [ ! -x "$MINIO" ]; then
	result "$identity" BLOCKED "no minio binary (.ci/run installs it with go install; see internal/testkit/objtest.MinIOInstall)"
else
	mkdir -p "$W/.well-known" "$W/openid/v1" "$W/minio" "$W/minio-home"
	kubectl get --raw /openid/v1/jwks > "$W/openid/v1/jwks"
	kubectl get --raw /.well-known/openid-configuration |
		python3 -c 'import json, sys; d = json.load(sys.stdin); d["jwks_uri"] = sys.argv[1]; print(json.dumps(d))' "$SERVE_URL/openid/v1/jwks" \
		> "$W/.well-known/openid-configuration"
	free_port() { python3 -c 'import socket, sys; s = socket.socket(); s.bind((sys.argv[1], 0)); print(s.getsockname()[1])' "$1"; }
	MINIO_URL=http://$E2E_GATEWAY:$(free_port "$E2E_GATEWAY")
	ROOT_USER=e2e-root ROOT_SECRET=$(openssl rand -hex 16)
	env MINIO_ROOT_USER=$ROOT_USER MINIO_ROOT_PASSWORD="$ROOT_SECRET" MINIO_SITE_REGION=us-east-1 \
		MINIO_IDENTITY_OPENID_CONFIG_URL="$SERVE_URL/.well-known/openid-configuration" \
		MINIO_IDENTITY_OPENID_CLIENT_ID=sts.amazonaws.com MINIO_IDENTITY_OPENID_ROLE_POLICY=readonly \
		MINIO_BROWSER=off MINIO_UPDATE=off HOME="$W/minio-home" \
		"$MINIO" server --quiet --address "${MINIO_URL#http://}" --console-address "127.0.0.1:$(free_port 127.0.0.1)" "$W/minio" \
		>"$E2E_STATE/log/minio.log" 2>&1 &
	MINIO_PID=$!
	echo "minio $MINIO_PID" >> "$E2E_RUN/pids"
	ROLE="arn:minio:iam:us-east-1::role/$(printf %s sts.amazonaws.com | openssl dgst -sha1 -binary | basenc --base64url | tr -d =)"
	# Ready when its STS exchanges a token of this cluster for credentials
	# (listening comes before its IAM has loaded the policies).
	sts_answer=
	for ((i = 0; i < 120; i++)); do
		tok=$(kubectl -n $NS create token default --audience sts.amazonaws.com --duration 10m)
		sts_answer=$(curl -s -X POST "$MINIO_URL/" --data-urlencode Action=AssumeRoleWithWebIdentity --data-urlencode Version=2011-06-15 \
			--data-urlencode "RoleArn=$ROLE" --data-urlencode "WebIdentityToken=$tok" --data-urlencode DurationSeconds=900 2>&1)
		grep -q '<AccessKeyId>' <<<"$sts_answer" && break
		sleep 0.5
	done
	if ! grep -q '<AccessKeyId>' <<<"$sts_answer"; then
		result "$identity" FAIL "MinIO's STS took no token of this cluster in 60 s: $(head -c 300 <<<"$sts_answer" | tr '\n' ' ') $(tail -3 "$E2E_STATE/log/minio.log" | tr '\n' ' ')"; fail=1
	elif ! python3 "$(dirname "$0")/s3put.py" "$MINIO_URL" "$ROOT_USER" "$ROOT_SECRET" vm-images disk.qcow2.xz "$W/disk.qcow2.xz"; then
		result "$identity" FAIL "could not put the image into MinIO"; fail=1
	else
		anonymous=$(curl -s -o /dev/null -w '%{http_code}' "$MINIO_URL/vm-images/disk.qcow2.xz")
		edit importer-s3-web-identity.yaml |
			sed -e "s#value: https://s3.us-east-1.amazonaws.com/.*#value: $MINIO_URL/vm-images/disk.qcow2.xz#" \
				-e "s#value: https://sts.us-east-1.amazonaws.com#value: $MINIO_URL#" \
				-e "s#arn:aws:iam::111122223333:role/vm-disk-importer#$ROLE#" |
			kubectl -n $NS apply -f - >/dev/null
		if wait_job import-vm-disk-s3 300; then
			t=$(termination import-vm-disk-s3)
			p=$(job_pod $NS import-vm-disk-s3)
			secrets=$(kubectl -n $NS get pod "$p" -o json | grep -c '"secret' || true)
			d=$(pv_path $NS vm-disk-s3)
			got=$(prefix_sha "$d/disk.img" $BYTES)
			check "$identity" "anonymous GET $anonymous; pod under ServiceAccount vm-disk-importer with $secrets Secret references; $t; disk.img first $MB MiB sha256 ${got:0:12} (want ${WANT:0:12})" \
				eval '[ "$got" = "$WANT" ] && exited0 "$t" && [ "$secrets" = 0 ] && [ "$anonymous" = 403 ]'
		else result "$identity" FAIL "job did not complete: $(termination import-vm-disk-s3)"; fail=1; fi
	fi
fi

[ "${E2E_KEEP:-}" = 1 ] || kubectl delete namespace $NS --wait=false >/dev/null
exit $fail
