#!/bin/bash
# Stops the cluster up.sh started and removes what it made: pods first (so
# the kubelet unmounts their volumes), then the kubelet, kube-proxy's rules,
# the control plane, containerd and its shims, mounts under the state
# directory, loop devices, the bridge, netfilter rules that were not there
# before, the kubepods cgroups and the state itself (E2E_KEEP_STATE=1 keeps
# the state directory, e.g. for its logs).
set -uo pipefail
. "$(dirname "$0")/env.sh"
. "$(dirname "$0")/netfilter.sh"
t0=$(date +%s)
[ -e "$E2E_RUN/pids" ] || [ -d "$E2E_STATE" ] || { echo "down: no cluster"; exit 0; }

pid_of() { awk -v n="$1" '$1 == n { print $2 }' "$E2E_RUN/pids" 2>/dev/null; }
stop() { # name: SIGTERM, then SIGKILL after 20 s
	local p; p=$(pid_of "$1"); [ -n "$p" ] || return 0
	kill "$p" 2>/dev/null || return 0
	for ((i = 0; i < 100; i++)); do kill -0 "$p" 2>/dev/null || return 0; sleep 0.2; done
	kill -9 "$p" 2>/dev/null
}
if [ -n "$(pid_of kube-apiserver)" ] && kill -0 "$(pid_of kube-apiserver)" 2>/dev/null; then
	kubectl delete namespace cdi --ignore-not-found --wait=false >/dev/null 2>&1
	for ns in $(kubectl get ns -o name 2>/dev/null | sed 's#namespace/##'); do
		kubectl -n "$ns" delete pods --all --grace-period=5 --timeout=60s >/dev/null 2>&1
	done
fi
stop kube-controller-manager; stop kube-scheduler
stop kubelet
stop kube-proxy
[ -x "$E2E_BIN/kube-proxy" ] && "$E2E_BIN/kube-proxy" --cleanup >/dev/null 2>&1
# Sandboxes the kubelet left: stop them through the CRI, then containerd.
if [ -S "$E2E_CONTAINERD_SOCK" ]; then
	for t in $(ctr tasks ls -q 2>/dev/null); do ctr tasks kill -s KILL "$t" >/dev/null 2>&1; done
	sleep 1
	for t in $(ctr tasks ls -q 2>/dev/null); do ctr tasks delete -f "$t" >/dev/null 2>&1; done
fi
stop clusterdns; stop cdi-controller; stop cdi-uploadproxy
stop kube-apiserver; stop etcd
stop containerd
# Shims outlive containerd by design; ours are the ones serving our state dir.
for p in $(pgrep -f "containerd-shim-runc-v2 .*-address $E2E_CONTAINERD_SOCK" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
for p in $(awk '{print $2}' "$E2E_RUN/pids" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done

# Mounts under our directories (kubelet volumes, overlay snapshots, netns, shm), deepest first.
for m in $(awk -v a="$E2E_STATE" -v b="$E2E_RUN" 'index($2, a) == 1 || index($2, b) == 1 { print $2 }' /proc/self/mounts | sort -r); do
	umount "$m" 2>/dev/null || umount -l "$m"
done
# Network namespaces containerd made for our pods (cni-<uuid>) in /run/netns.
for ns in /run/netns/cni-*; do
	[ -e "$ns" ] || continue
	if [ -n "$(ip netns pids "$(basename "$ns")" 2>/dev/null)" ]; then continue; fi
	umount "$ns" 2>/dev/null; rm -f "$ns"
done
[ -f "$E2E_RUN/loops" ] && while read -r dev; do [ -n "$dev" ] && losetup -d "$dev" 2>/dev/null; done < "$E2E_RUN/loops"
for f in "$E2E_STATE"/pv/block-*.img; do
	[ -e "$f" ] || continue
	for dev in $(losetup -j "$f" -O NAME -n 2>/dev/null); do losetup -d "$dev"; done
done
ip link del "$E2E_BRIDGE" 2>/dev/null
# Netfilter: remove the rules and chains that were not there before up.sh.
[ -f "$E2E_RUN/iptables.before" ] && nf_remove_new "$E2E_RUN/iptables.before"
# Empty kubepods cgroups the kubelet made (v1: one tree per controller).
for c in /sys/fs/cgroup/*/kubepods; do
	[ -d "$c" ] && find "$c" -depth -type d -exec rmdir {} \; 2>/dev/null
done
if [ "${E2E_KEEP_STATE:-}" = 1 ]; then rm -rf "$E2E_STATE/containerd" "$E2E_STATE/kubelet" "$E2E_STATE/etcd" "$E2E_STATE/pv"; else rm -rf "$E2E_STATE"; fi
# CDI's clone-token keys live at a path CDI's controller fixes; cdi.sh marks that it made them.
[ -e "$E2E_RUN/cdi-keys" ] && rm -rf /var/run/cdi
rm -rf "$E2E_RUN"
echo "down: stopped in $(($(date +%s) - t0)) s"
left=$(losetup -a | grep -c "$E2E_STATE"; grep -c -e "$E2E_STATE" -e "$E2E_RUN" /proc/self/mounts)
echo "down: left behind: $(echo $left | awk '{print $1}') loop devices, $(echo $left | awk '{print $2}') mounts, $(iptables-save | grep -c -E 'KUBE-|CNI-') KUBE-/CNI- rules"
