# Sourced by the e2e scripts: where the cluster's binaries, state and
# addresses are. Everything the cluster makes lives under $E2E_STATE and
# $E2E_RUN, so down.sh can remove it all.
E2E_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
E2E_BIN=${E2E_BIN:-$E2E_ROOT/bin/e2e}
E2E_STATE=${E2E_STATE:-/var/lib/diskimport-e2e}
E2E_RUN=${E2E_RUN:-/run/diskimport-e2e}
E2E_NODE=${E2E_NODE:-e2e-node}
# The pod network: a bridge of its own on a private /24; nothing is routed
# off the machine.
E2E_BRIDGE=${E2E_BRIDGE:-dimp0}
E2E_POD_CIDR=${E2E_POD_CIDR:-10.244.0.0/24}
E2E_GATEWAY=${E2E_GATEWAY:-10.244.0.1}
E2E_SERVICE_CIDR=${E2E_SERVICE_CIDR:-10.96.0.0/16}
# The API server listens on the pod bridge's gateway, where pods reach it
# through the kubernetes Service (10.96.0.1:443, DNAT to the advertised
# address): CDI's DataImportCron poller patches the cron from its pod.
E2E_APISERVER=https://$E2E_GATEWAY:6443
# containerd's registry hosts (hosts.toml per registry, read at each pull):
# the test registry on the gateway is plain HTTP.
E2E_REGISTRY_HOSTS=$E2E_STATE/registry-hosts
# CDI's upload proxy on the host (cdi-build.sh builds this port in).
E2E_UPLOADPROXY_PORT=${E2E_UPLOADPROXY_PORT:-18443}
E2E_CONTAINERD_SOCK=$E2E_RUN/containerd/containerd.sock
E2E_IMAGE=localhost/diskimport/importer:latest
# containerd 1.6's default sandbox image; our own pause program runs under its name.
E2E_PAUSE_IMAGE=registry.k8s.io/pause:3.6
export KUBECONFIG=$E2E_STATE/pki/admin.kubeconfig
kubectl() { "$E2E_BIN/kubectl" "$@"; }
ctr() { command ctr --address "$E2E_CONTAINERD_SOCK" -n k8s.io "$@"; }
# Block PVs: loop devices on sparse files, and filesystem PVs: directories.
E2E_FS_PVS=${E2E_FS_PVS:-36}
E2E_BLOCK_PVS=${E2E_BLOCK_PVS:-6}
E2E_PV_SIZE=${E2E_PV_SIZE:-2Gi}
E2E_BLOCK_SIZE_MB=${E2E_BLOCK_SIZE_MB:-1024}
# say_failures NAME: under set -e, a command that fails ends the script with
# "NAME: line N: COMMAND exited K" rather than silently (set -E: also
# inside functions).
say_failures() {
	set -E
	trap "rc=\$?; echo \"$1: line \$LINENO: \$BASH_COMMAND exited \$rc\" >&2" ERR
}
