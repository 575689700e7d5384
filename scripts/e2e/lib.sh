# Sourced by the e2e test scripts: results table, waiting on the API, and
# reading a claim's bytes on the host through its PV.
. "$(dirname "${BASH_SOURCE[0]}")/env.sh"
E2E_RESULTS=${E2E_RESULTS:-$E2E_ROOT/bin/e2e/results.md}
mkdir -p "$(dirname "$E2E_RESULTS")"
# A row's seconds run from ROW_T (the previous row's end, or a row's own
# start when it sets ROW_T) to its result.
ROW_T=$(date +%s)
result() { # name PASS|FAIL|BLOCKED detail
	local now; now=$(date +%s)
	printf '| %s | %s | %s | %s |\n' "$1" "$2" "$((now - ROW_T))" "$3" | tee -a "$E2E_RESULTS"
	ROW_T=$now
}
fail=0
check() { # name detail command... : PASS when the command succeeds
	local n=$1 d=$2; shift 2
	if "$@"; then result "$n" PASS "$d"; else result "$n" FAIL "$d"; fail=1; fi
}
# pv_path NAMESPACE CLAIM: the directory or device behind a bound claim.
pv_path() {
	local pv
	pv=$(kubectl -n "$1" get pvc "$2" -o jsonpath='{.spec.volumeName}')
	[ -n "$pv" ] || return 1
	kubectl get pv "$pv" -o jsonpath='{.spec.local.path}'
}
# prefix_sha FILE BYTES: sha256 of the first BYTES bytes.
prefix_sha() { head -c "$2" "$1" | sha256sum | cut -d' ' -f1; }
# zero_after FILE BYTES: everything after BYTES reads as zeros.
zero_after() { tail -c +"$(($2 + 1))" "$1" | tr -d '\0' | head -c 1 | wc -c | grep -qx 0; }
# job_pod NAMESPACE JOB: the newest pod of a Job.
job_pod() { kubectl -n "$1" get pods -l "job-name=$2" --sort-by=.metadata.creationTimestamp -o jsonpath='{.items[-1:].metadata.name}'; }
# terminated NAMESPACE POD FIELD: a field of the first container's terminated state.
terminated() { kubectl -n "$1" get pod "$2" -o jsonpath="{.status.containerStatuses[0].state.terminated.$3}"; }
# serve DIR: an HTTP server on the pod bridge's gateway; sets SERVE_URL,
# SERVE_PID. Files under DIR/slow/ are sent at E2E_SLOW_RATE bytes/s
# (default 2 MiB/s), so an import of them runs long enough to watch.
serve() {
	local port
	port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("'"$E2E_GATEWAY"'", 0)); print(s.getsockname()[1])')
	python3 - "$E2E_GATEWAY" "$port" "$1" "${E2E_SLOW_RATE:-2097152}" >"$1/.http.log" 2>&1 <<'PY' &
import functools, http.server, sys, time
host, port, root, rate = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
class Handler(http.server.SimpleHTTPRequestHandler):
    def copyfile(self, src, dst):
        if not self.path.startswith("/slow/"):
            return super().copyfile(src, dst)
        start, sent = time.monotonic(), 0
        while chunk := src.read(65536):
            dst.write(chunk)
            sent += len(chunk)
            time.sleep(max(0.0, start + sent / rate - time.monotonic()))
http.server.ThreadingHTTPServer((host, port), functools.partial(Handler, directory=root)).serve_forever()
PY
	SERVE_PID=$!
	SERVE_URL=http://$E2E_GATEWAY:$port
	for ((i = 0; i < 50; i++)); do curl -fs -o /dev/null "$SERVE_URL/" && return 0; sleep 0.1; done
	return 1
}
# make_disk DIR MB: DIR/disk.raw (random data, MB MiB, unless DIR/disk.raw
# is there already) and disk.qcow2.xz.
make_disk() {
	[ -f "$1/disk.raw" ] || head -c "$(($2 << 20))" /dev/urandom > "$1/disk.raw"
	qemu-img convert -f raw -O qcow2 "$1/disk.raw" "$1/disk.qcow2"
	xz -T2 -1 -k -f "$1/disk.qcow2"
}
# recycle_pvs: Released PVs (their claim deleted) are emptied and made
# Available again, so the scripts can run more than once on one cluster.
recycle_pvs() {
	local pv path
	for pv in $(kubectl get pv -l e2e=true -o jsonpath='{range .items[?(@.status.phase=="Released")]}{.metadata.name}{"\n"}{end}'); do
		path=$(kubectl get pv "$pv" -o jsonpath='{.spec.local.path}')
		if [ -b "$path" ]; then blkdiscard -f "$path" 2>/dev/null || dd if=/dev/zero of="$path" bs=1M status=none conv=fsync
		else find "$path" -mindepth 1 -delete; fi
		kubectl patch pv "$pv" --type=json -p '[{"op":"remove","path":"/spec/claimRef"}]' >/dev/null
	done
}
