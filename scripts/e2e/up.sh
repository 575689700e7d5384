#!/bin/bash
# Starts a single-node Kubernetes cluster on this machine (root): Debian's
# etcd, containerd, runc and CNI plugins, and the components build.sh built
# from k8s.io/kubernetes. Nothing is pulled: the pause image and ours are
# imported into containerd. Storage: StorageClasses e2e-local (default) and
# fast, each with filesystem local PVs (directories) and block local PVs
# (loop devices). Stop with down.sh. Prints how long the start took.
set -euo pipefail
. "$(dirname "$0")/env.sh"
. "$(dirname "$0")/netfilter.sh"
say_failures up.sh
t0=$(date +%s.%N)
[ "$(id -u)" = 0 ] || { echo "up.sh: needs root" >&2; exit 1; }
for b in kube-apiserver kube-controller-manager kube-scheduler kube-proxy kubelet kubectl pause clusterdns; do
	[ -x "$E2E_BIN/$b" ] || { echo "up.sh: $E2E_BIN/$b missing; run scripts/e2e/build.sh (make e2e-build)" >&2; exit 1; }
done
for b in etcd containerd runc ctr openssl iptables losetup /usr/lib/cni/bridge; do
	command -v "$b" >/dev/null || { echo "up.sh: $b missing; apt-get install containerd runc containernetworking-plugins etcd-server openssl iptables" >&2; exit 1; }
done
[ -f "$E2E_ROOT/bin/importer-image.tar" ] || { echo "up.sh: bin/importer-image.tar missing; run make image" >&2; exit 1; }
if [ -e "$E2E_RUN/pids" ]; then echo "up.sh: a cluster is running (scripts/e2e/down.sh stops it)" >&2; exit 1; fi

P=$E2E_STATE/pki L=$E2E_STATE/log
mkdir -p "$E2E_STATE" "$E2E_RUN" "$P" "$L"
: > "$E2E_RUN/pids"
# Which netfilter rules are ours: down.sh removes what was not there before.
nf_snapshot "$E2E_RUN/iptables.before"

start() { # name command... : background, logs to $L/name.log, pid recorded
	local n=$1; shift
	"$@" >"$L/$n.log" 2>&1 &
	echo "$n $!" >> "$E2E_RUN/pids"
}
wait_for() { # seconds description command...
	local s=$1 what=$2; shift 2
	for ((i = 0; i < s * 5; i++)); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
	echo "up.sh: $what not ready after ${s}s" >&2; return 1
}

# No route out (a machine or network namespace without one): the gateway.
NODE_IP=$(ip -4 route get 1.1.1.1 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p' || true)
NODE_IP=${NODE_IP:-$E2E_GATEWAY}

# --- certificates and tokens
if [ ! -f "$P/ca.crt" ]; then
	openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj /CN=e2e-ca -keyout "$P/ca.key" -out "$P/ca.crt" 2>/dev/null
	openssl req -newkey rsa:2048 -nodes -subj /CN=kube-apiserver -keyout "$P/apiserver.key" -out "$P/apiserver.csr" 2>/dev/null
	printf 'subjectAltName=IP:127.0.0.1,IP:10.96.0.1,IP:%s,IP:%s,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local\n' "$NODE_IP" "$E2E_GATEWAY" > "$P/apiserver.ext"
	openssl x509 -req -in "$P/apiserver.csr" -CA "$P/ca.crt" -CAkey "$P/ca.key" -CAcreateserial -days 30 -extfile "$P/apiserver.ext" -out "$P/apiserver.crt" 2>/dev/null
	openssl genrsa -out "$P/sa.key" 2048 2>/dev/null
	openssl rsa -in "$P/sa.key" -pubout -out "$P/sa.pub" 2>/dev/null
	echo "$(openssl rand -hex 24),admin,admin,system:masters" > "$P/tokens.csv"
fi
TOKEN=$(cut -d, -f1 "$P/tokens.csv")
cat > "$KUBECONFIG" <<KC
apiVersion: v1
kind: Config
clusters: [{name: e2e, cluster: {server: "$E2E_APISERVER", certificate-authority: "$P/ca.crt"}}]
users: [{name: admin, user: {token: "$TOKEN"}}]
contexts: [{name: e2e, context: {cluster: e2e, user: admin}}]
current-context: e2e
KC

# --- etcd (Debian's 3.4: kube-apiserver 1.34 still speaks to it; ports of our own)
start etcd etcd --name e2e --data-dir "$E2E_STATE/etcd" \
	--listen-client-urls http://127.0.0.1:23790 --advertise-client-urls http://127.0.0.1:23790 \
	--listen-peer-urls http://127.0.0.1:23800 --initial-advertise-peer-urls http://127.0.0.1:23800 \
	--initial-cluster e2e=http://127.0.0.1:23800 --listen-metrics-urls http://127.0.0.1:23810

# --- containerd: its own root, state and socket; cgroupfs; CNI from Debian
mkdir -p "$E2E_STATE/cni/net.d" "$E2E_RUN/containerd" "$E2E_REGISTRY_HOSTS"
# The bridge exists before the first pod so the host can serve test images on its gateway address.
# Pods route the bridge and the Service range (kube-proxy's cluster IPs, the API at 10.96.0.1)
# through the gateway, nothing else: no default route, nothing reaches off the machine.
ip link add "$E2E_BRIDGE" type bridge
ip addr add "$E2E_GATEWAY/${E2E_POD_CIDR#*/}" dev "$E2E_BRIDGE"
ip link set "$E2E_BRIDGE" up
# The node reaches Service cluster IPs (kube-proxy's DNAT) through the bridge, also on a machine
# or network namespace without a default route.
ip route add "$E2E_SERVICE_CIDR" dev "$E2E_BRIDGE"
cat > "$E2E_STATE/cni/net.d/10-e2e.conflist" <<CNI
{"cniVersion": "1.0.0", "name": "e2e", "plugins": [
 {"type": "bridge", "bridge": "$E2E_BRIDGE", "isGateway": true, "ipMasq": false, "hairpinMode": true,
  "ipam": {"type": "host-local", "dataDir": "$E2E_STATE/cni/ipam", "ranges": [[{"subnet": "$E2E_POD_CIDR", "gateway": "$E2E_GATEWAY"}]],
   "routes": [{"dst": "$E2E_SERVICE_CIDR"}]}},
 {"type": "portmap", "capabilities": {"portMappings": true}},
 {"type": "loopback"}]}
CNI
# This VM does not let root lower oom_score_adj: without restrict_oom_score_adj
# every sandbox fails ("can't get final child's PID from pipe: EOF").
# device_ownership_from_security_context: a block PV's device in the pod is
# owned by the pod's runAsUser/runAsGroup (CDI's importer runs as 107;
# without it, open /dev/cdi-block-volume: permission denied).
containerd config default | sed \
	-e "s#^root = .*#root = \"$E2E_STATE/containerd\"#" \
	-e "s#^state = .*#state = \"$E2E_RUN/containerd/state\"#" \
	-e "/^\[grpc\]/,/^\[/ s#^  address = .*#  address = \"$E2E_CONTAINERD_SOCK\"#" \
	-e "/^\[ttrpc\]/,/^\[/ s#^  address = .*#  address = \"$E2E_RUN/containerd/ttrpc.sock\"#" \
	-e "s#restrict_oom_score_adj = false#restrict_oom_score_adj = true#" \
	-e "s#sandbox_image = .*#sandbox_image = \"$E2E_PAUSE_IMAGE\"#" \
	-e "s#^\( *\)bin_dir = .*#\1bin_dir = \"/usr/lib/cni\"#" \
	-e "s#^\( *\)conf_dir = .*#\1conf_dir = \"$E2E_STATE/cni/net.d\"#" \
	-e "s#SystemdCgroup = true#SystemdCgroup = false#" \
	-e "s#disable_apparmor = false#disable_apparmor = true#" \
	-e "s#device_ownership_from_security_context = false#device_ownership_from_security_context = true#" \
	-e "s#^\( *\)config_path = .*#\1config_path = \"$E2E_REGISTRY_HOSTS\"#" \
	> "$E2E_STATE/containerd.toml"
start containerd containerd --config "$E2E_STATE/containerd.toml"
wait_for 30 containerd ctr version

"$(dirname "$0")/pause-image.sh" "$E2E_BIN/pause" "$E2E_PAUSE_IMAGE" "$E2E_STATE/pause-image.tar"
ctr images import "$E2E_STATE/pause-image.tar" >/dev/null
ctr images import --all-platforms "$E2E_ROOT/bin/importer-image.tar" >/dev/null
# Listed first, then searched: under pipefail, grep -q ending the pipe early
# makes ctr die of SIGPIPE, and the check fail on an image that is there.
images=$(ctr images ls -q)
grep -qx "$E2E_IMAGE" <<<"$images" || { echo "up.sh: $E2E_IMAGE not in containerd after import" >&2; echo "$images" >&2; exit 1; }
t_images=$(date +%s.%N)

# --- control plane
wait_for 30 etcd curl -fsS http://127.0.0.1:23790/health
start kube-apiserver "$E2E_BIN/kube-apiserver" --etcd-servers=http://127.0.0.1:23790 \
	--bind-address="$E2E_GATEWAY" --advertise-address="$E2E_GATEWAY" --secure-port=6443 \
	--tls-cert-file="$P/apiserver.crt" --tls-private-key-file="$P/apiserver.key" --client-ca-file="$P/ca.crt" \
	--token-auth-file="$P/tokens.csv" --authorization-mode=AlwaysAllow --allow-privileged=true \
	--service-cluster-ip-range="$E2E_SERVICE_CIDR" --kubelet-preferred-address-types=InternalIP \
	--service-account-issuer=https://kubernetes.default.svc --service-account-key-file="$P/sa.pub" \
	--service-account-signing-key-file="$P/sa.key" --cert-dir="$E2E_STATE/apiserver"
wait_for 90 kube-apiserver kubectl get --raw /readyz
start kube-controller-manager "$E2E_BIN/kube-controller-manager" --kubeconfig="$KUBECONFIG" \
	--leader-elect=false --bind-address=127.0.0.1 --service-account-private-key-file="$P/sa.key" \
	--root-ca-file="$P/ca.crt"
# The pods' DNS server (kubelet's clusterDNS): Service names to cluster IPs.
start clusterdns "$E2E_BIN/clusterdns" -listen "$E2E_GATEWAY:53" -kubeconfig "$KUBECONFIG"
start kube-scheduler "$E2E_BIN/kube-scheduler" --kubeconfig="$KUBECONFIG" --leader-elect=false --bind-address=127.0.0.1

# --- node: cgroups v1 (failCgroupV1: false), cgroupfs like containerd's runc
cat > "$E2E_STATE/kubelet.yaml" <<KL
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://$E2E_CONTAINERD_SOCK
address: $NODE_IP
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
authentication: {anonymous: {enabled: true}, webhook: {enabled: false}}
authorization: {mode: AlwaysAllow}
clusterDomain: cluster.local
clusterDNS: ["$E2E_GATEWAY"]
failSwapOn: false
serializeImagePulls: false
imageGCHighThresholdPercent: 100
evictionHard: {"nodefs.available": "1%", "imagefs.available": "1%", "memory.available": "100Mi"}
registerNode: true
KL
start kubelet "$E2E_BIN/kubelet" --config="$E2E_STATE/kubelet.yaml" --kubeconfig="$KUBECONFIG" \
	--root-dir="$E2E_STATE/kubelet" --hostname-override="$E2E_NODE" --node-ip="$NODE_IP" --v=1
# Service traffic is masqueraded (--masquerade-all): a reply between two pods
# of the bridge then returns through the host's conntrack whether or not
# bridged traffic is seen by iptables (net.bridge.bridge-nf-call-iptables).
start kube-proxy "$E2E_BIN/kube-proxy" --kubeconfig="$KUBECONFIG" --proxy-mode=iptables \
	--hostname-override="$E2E_NODE" --cluster-cidr="$E2E_POD_CIDR" --bind-address=127.0.0.1 \
	--healthz-bind-address=127.0.0.1:10256 --metrics-bind-address=127.0.0.1:10249 --conntrack-max-per-core=0 \
	--masquerade-all=true
wait_for 120 "node $E2E_NODE" sh -c "\"$E2E_BIN/kubectl\" get node $E2E_NODE -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}' | grep -qx True"
wait_for 60 "default service account" kubectl -n default get serviceaccount default

# --- storage
mkdir -p "$E2E_STATE/pv"
{
	for sc in e2e-local fast; do
		default=false; [ $sc = e2e-local ] && default=true
		cat <<SC
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: $sc, annotations: {storageclass.kubernetes.io/is-default-class: "$default"}}
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: Immediate
reclaimPolicy: Retain
---
SC
	done
	pv() { # name class mode path size
		cat <<PV
apiVersion: v1
kind: PersistentVolume
metadata: {name: $1, labels: {e2e: "true"}}
spec:
  capacity: {storage: $5}
  accessModes: [ReadWriteOnce]
  volumeMode: $3
  storageClassName: $2
  persistentVolumeReclaimPolicy: Retain
  local: {path: "$4"}
  nodeAffinity: {required: {nodeSelectorTerms: [{matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [$E2E_NODE]}]}]}}
---
PV
	}
	for ((i = 0; i < E2E_FS_PVS; i++)); do
		sc=e2e-local; ((i % 3 == 2)) && sc=fast
		d=$E2E_STATE/pv/fs-$i; mkdir -p "$d"; chmod 0777 "$d"
		pv "e2e-fs-$i" $sc Filesystem "$d" "$E2E_PV_SIZE"
	done
	for ((i = 0; i < E2E_BLOCK_PVS; i++)); do
		sc=e2e-local; ((i % 2 == 1)) && sc=fast
		f=$E2E_STATE/pv/block-$i.img
		truncate -s "${E2E_BLOCK_SIZE_MB}M" "$f"
		dev=$(losetup --find --show "$f")
		echo "$dev" >> "$E2E_RUN/loops"
		pv "e2e-block-$i" $sc Block "$dev" "${E2E_BLOCK_SIZE_MB}Mi"
	done
} > "$E2E_STATE/storage.yaml"
kubectl apply -f "$E2E_STATE/storage.yaml" >/dev/null
t1=$(date +%s.%N)
awk -v a="$t0" -v b="$t_images" -v c="$t1" -v n="$E2E_NODE" -v k="$KUBECONFIG" \
	'BEGIN { printf "up: cluster ready in %.1f s (images imported after %.1f s); node %s, KUBECONFIG=%s\n", c - a, b - a, n, k }'
