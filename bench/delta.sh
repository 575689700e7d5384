#!/usr/bin/env bash
# delta.sh: a delta pass against a full clone, rsync and (when built)
# blocksync-fast, side by side, interleaved round by round, on the bench
# disk (bench/cache/img-SIZE/disk.raw, built here as images.sh does if
# missing) with PCTS percent of its 64 KiB chunks changed since the
# target's copy was made:
#   - full:  importer clone-source (sparse-v2) → importer upload-server onto
#            a new file, over http://127.0.0.1 (a full clone: every data block);
#   - delta: the same with -delta onto the earlier copy (signature back,
#            changed blocks out);
#   - rsync: rsync --inplace --no-whole-file from the source file to an
#            rsync daemon on 127.0.0.1 holding the earlier copy;
#   - bsf:   blocksync-fast --make-delta -b 64K against the digest file of
#            the earlier copy (made untimed: its sender keeps it from the
#            last pass), streamed over TCP to blocksync-fast --apply-delta
#            on the earlier copy. Only when BENCH_BLOCKSYNC_FAST names the
#            binary or blocksync-fast is on PATH (its public source builds
#            with gcc and libgcrypt; nothing of it is in this repository).
# Each over two links (BENCH_LINKS): "lo", plain 127.0.0.1, and "far",
# the same through `benchtool relay` (each direction delayed by
# BENCH_FAR_DELAY, 20ms, paced to BENCH_FAR_RATE, 0 = no cap, at most
# 4 MiB in flight: this kernel has no netem). Each changed chunk gets
# 4 KiB of random bytes at a random place in it (a guest's scattered
# writes). Every run's target is compared with the source (cmp) after it
# is timed. Prints per link, tool and percentage the median wall and CPU
# seconds (user+sys of both ends: the client and the upload server, the
# rsync client and the daemon's receiver, or both blocksync-fast and the
# receiving socket's copy; never the relay's) and the bytes on the wire
# (ours: the clone's request bodies and the signature; rsync: its bytes
# sent and received; bsf: its delta stream), and the ratios to the full
# clone over the same link; no pass/fail. Plain TCP (no TLS), as rsync's
# daemon protocol has none.
#
# Environment: BENCH_SIZE (2G), BENCH_RUNS (3), BENCH_PCTS ("1 10"),
# BENCH_LINKS ("lo far"), BENCH_FAR_DELAY (20ms), BENCH_FAR_RATE (0),
# BENCH_BLOCKSYNC_FAST (path).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
size=${BENCH_SIZE:-2G}
runs=${BENCH_RUNS:-3}
pcts=${BENCH_PCTS:-1 10}
links=${BENCH_LINKS:-lo far}
far_delay=${BENCH_FAR_DELAY:-20ms}
far_rate=${BENCH_FAR_RATE:-0}
bsf=${BENCH_BLOCKSYNC_FAST:-$(command -v blocksync-fast || true)}
img=$root/bench/cache/img-$size
command -v rsync >/dev/null || { echo "delta: rsync is missing (apt-get install -y rsync)" >&2; exit 1; }
work=$(mktemp -d)
pids=()
cleanup() {
	set +e
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
	rm -rf "$work"
}
trap cleanup EXIT

go -C bench build -o "$work/benchtool" ./benchtool
go build -trimpath -o "$work/importer" ./cmd/importer
mkdir -p "$img"
(
	flock 9 # the lock images.sh takes: one builder of a directory at a time
	cd "$img"
	[[ -s disk.raw ]] || { "$work/benchtool" gen "$size" disk.raw.tmp >layout.json && mv disk.raw.tmp disk.raw; }
) 9>>"$img/.images.lock"
bytes=$(stat -c %s "$img/disk.raw")
chunks=$((bytes / 65536))

# The rsync daemon serves $work/rs, where its target lives.
mkdir -p "$work/rs"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat >"$work/rsyncd.conf" <<EOF
pid file = $work/rsyncd.pid
use chroot = no
[t]
path = $work/rs
read only = no
uid = $(id -u)
gid = $(id -g)
EOF
rsync --daemon --no-detach --address=127.0.0.1 --port="$port" --config="$work/rsyncd.conf" </dev/null >/dev/null 2>&1 &
rsyncd=$!
pids+=($rsyncd)

# relay_to PORT: a far link (benchtool relay) to 127.0.0.1:PORT; its port
# in $rport, its pid in $rpid.
relay_to() {
	: >"$work/relay.addr"
	"$work/benchtool" relay -to "127.0.0.1:$1" -delay "$far_delay" -rate "$far_rate" >"$work/relay.addr" 2>>"$work/relay.err" &
	rpid=$!
	pids+=($rpid)
	for _ in $(seq 100); do [[ -s $work/relay.addr ]] && break; sleep 0.05; done
	rport=$(sed 's/.*://' "$work/relay.addr")
}
relay_stop() { kill "$1" 2>/dev/null; wait "$1" 2>/dev/null || true; }

# The rsync daemon as the far link reaches it.
relay_to "$port"
rsync_far=$rport

# change PCT FILE: 4 KiB of random bytes at a random place in PCT % of the
# file's 64 KiB chunks (the same chunks for the same PCT).
change() {
	python3 - "$1" "$2" "$chunks" <<'EOF'
import os, random, sys
pct, path, chunks = float(sys.argv[1]), sys.argv[2], int(sys.argv[3])
rng = random.Random(int(pct * 1000))
fd = os.open(path, os.O_WRONLY)
for c in rng.sample(range(chunks), int(chunks * pct / 100)):
    os.pwrite(fd, rng.randbytes(4096), c * 65536 + rng.randrange(0, 65536 - 4096, 512))
os.fsync(fd)
os.close(fd)
EOF
}

# serve TARGET: an upload server for one clone onto TARGET, on a free port
# ($sport; $spid the process); its CPU seconds go to server.time when it
# exits.
serve() {
	sport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
	(
		TIMEFORMAT='%U %S'
		{ time "$work/importer" upload-server -q --listen "127.0.0.1:$sport" "$1" >"$work/server.out" 2>"$work/server.err"; } 2>"$work/server.time"
	) </dev/null >/dev/null 2>&1 &
	spid=$!
	for _ in $(seq 100); do
		curl -s -o /dev/null "http://127.0.0.1:$sport/healthz" && break
		sleep 0.05
	done
}

# timed LABEL PCT CMD...: runs CMD; wall and CPU (user+sys, its children
# included) seconds in $wall and $cpu.
timed() {
	local label=$1 pct=$2; shift 2
	local TIMEFORMAT='%R %U %S' t
	t=$({ time "$@" >"$work/out" 2>"$work/err"; } 2>&1) || echo "delta: $label $pct% FAILED: $(tail -c 300 "$work/err")" >&2
	t=$(tail -1 <<<"$t")
	wall=$(awk '{print $1}' <<<"$t")
	cpu=$(awk '{print $2 + $3}' <<<"$t")
}

# clone LINK LABEL PCT TARGET [FLAGS]: clone-source to an upload server
# onto TARGET over LINK; the server's CPU is added to the client's.
clone() {
	local link=$1 label=$2 pct=$3 target=$4 at rp=""
	shift 4
	serve "$target"
	at=$sport
	if [[ $link == far ]]; then
		relay_to "$sport"
		at=$rport rp=$rpid
	fi
	timed "$label" "$pct" "$work/importer" clone-source -q -json "$@" \
		-content-type blockdevice-clone -mount "$work/src.raw" -url "http://127.0.0.1:$at/v1beta1/upload"
	wait "$spid" || echo "delta: the upload server of $label failed: $(tail -c 300 "$work/server.err")" >&2
	[[ -z $rp ]] || relay_stop "$rp"
	cpu=$(awk -v c="$cpu" '{print c + $1 + $2}' "$work/server.time")
	wire=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["wireBytes"])' "$work/out")
	final=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])).get("delta"); print("-" if d is None else ("final" if d["final"] else "warm"))' "$work/out")
}

# daemon_cpu: CPU seconds of the rsync daemon's reaped children (its
# per-connection receivers).
tck=$(getconf CLK_TCK)
daemon_cpu() { awk -v t="$tck" '{print ($16 + $17) / t}' "/proc/$rsyncd/stat"; }

# bsf_pass LINK TARGET: blocksync-fast's delta of src.raw against
# bsf.digest, sent over LINK to a socket that hands it to --apply-delta on
# TARGET; the stream's length goes to bsf.bytes.
bsf_pass() {
	local link=$1 target=$2 at rp="" recv
	: >"$work/bsf.port"
	python3 -c '
import socket, sys
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(1)
open(sys.argv[1], "w").write(str(s.getsockname()[1]))
c, _ = s.accept(); n = 0; out = sys.stdout.buffer
while True:
    b = c.recv(1 << 20)
    if not b: break
    out.write(b); n += len(b)
out.flush(); open(sys.argv[2], "w").write(str(n))
' "$work/bsf.port" "$work/bsf.bytes" | "$bsf" -d "$target" --apply-delta &
	recv=$!
	for _ in $(seq 100); do [[ -s $work/bsf.port ]] && break; sleep 0.05; done
	at=$(cat "$work/bsf.port")
	if [[ $link == far ]]; then
		relay_to "$at"
		at=$rport rp=$rpid
	fi
	"$bsf" -s "$work/src.raw" -f "$work/bsf.digest" -b 64K --make-delta >"/dev/tcp/127.0.0.1/$at"
	wait "$recv"
	[[ -z $rp ]] || relay_stop "$rp"
}

record() {
	printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$wall" "$cpu" "$4" "$5" >>"$work/runs.tsv"
	printf 'delta: %-3s %-6s %3s%%  %6.2f s wall, %6.2f s cpu, %11d wire bytes %s\n' "$1" "$2" "$3" "$wall" "$cpu" "$4" "$5" >&2
}

same() { cmp -s "$work/src.raw" "$1" || echo "delta: $2: the target differs from the source" >&2; }

: >"$work/runs.tsv"
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
for pct in $pcts; do
	cp --sparse=always "$img/disk.raw" "$work/src.raw"
	change "$pct" "$work/src.raw"
	for run in $(seq "$runs"); do
		for link in $links; do
			rm -f "$work/full.raw"
			clone "$link" full "$pct" "$work/full.raw"
			record "$link" full "$pct" "$wire" "$final"
			same "$work/full.raw" "$link full"
			rm -f "$work/full.raw"

			cp --sparse=always "$img/disk.raw" "$work/base.raw"
			sync -f "$work/base.raw"
			clone "$link" delta "$pct" "$work/base.raw" -delta
			record "$link" delta "$pct" "$wire" "$final"
			same "$work/base.raw" "$link delta"
			rm -f "$work/base.raw"

			cp --sparse=always "$img/disk.raw" "$work/rs/base.raw"
			sync -f "$work/rs/base.raw"
			at=$port
			[[ $link == lo ]] || at=$rsync_far
			before=$(daemon_cpu)
			timed rsync "$pct" rsync --inplace --no-whole-file --stats "$work/src.raw" "rsync://127.0.0.1:$at/t/base.raw"
			sleep 0.2 # the daemon reaps its receiver
			cpu=$(awk -v c="$cpu" -v a="$before" -v b="$(daemon_cpu)" 'BEGIN{print c + b - a}')
			wire=$(awk '/^Total bytes sent:/{gsub(",","",$4); s=$4} /^Total bytes received:/{gsub(",","",$4); r=$4} END{print s+r}' "$work/out")
			record "$link" rsync "$pct" "$wire" "-"
			same "$work/rs/base.raw" "$link rsync"
			rm -f "$work/rs/base.raw"

			if [[ -n $bsf ]]; then
				cp --sparse=always "$img/disk.raw" "$work/base.raw"
				"$bsf" -s "$work/base.raw" -f "$work/bsf.digest" -b 64K --make-digest >/dev/null 2>&1
				sync -f "$work/base.raw"
				timed bsf "$pct" bsf_pass "$link" "$work/base.raw"
				record "$link" bsf "$pct" "$(cat "$work/bsf.bytes")" "-"
				same "$work/base.raw" "$link bsf"
				rm -f "$work/base.raw" "$work/bsf.digest"
			fi
		done
	done
done
data=$(du -B1 "$img/disk.raw" | cut -f1)
printf 'disk: %s bytes, %s allocated, %s chunks of 64 KiB; %s runs, medians; %s cores; load %s at the start, %s at the end; far: %s each way, rate %s\n' \
	"$bytes" "$data" "$chunks" "$runs" "$(nproc)" "$load_start" "$(cut -d' ' -f1-3 /proc/loadavg)" "$far_delay" "$far_rate"
printf 'link\tchanged\ttool\twall_s\tcpu_s\twire_bytes\twire %% of disk\twall vs full\twire vs full\tpass\n'
# Grouped by link (lo first), percentage, then tool in the order run.
awk -F'\t' -v OFS='\t' '{ r = index("full delta rsync bsf", $2); print ($1 == "lo" ? 0 : 1), $3 + 0, r, $0 }' "$work/runs.tsv" |
	sort -t$'\t' -k1,1n -k2,2n -k3,3n -s | cut -f4- | awk -F'\t' -v bytes="$bytes" '
	function med(a, n,  i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
		return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
	function flush() { if (k) { W[cur] = med(w, k); C[cur] = med(u, k); B[cur] = med(b, k); F[cur] = f; order[++n] = cur }; k = 0 }
	{ key = $1 "\t" $3 "%\t" $2 }
	key != cur { flush(); cur = key }
	{ k++; w[k] = $4; u[k] = $5; b[k] = $6; f = $7 }
	END { flush()
		for (i = 1; i <= n; i++) { l = order[i]; split(l, p, "\t"); full = p[1] "\t" p[2] "\tfull"
			printf "%s\t%.2f\t%.2f\t%d\t%.3f\t%.2fx\t%.4fx\t%s\n", l, W[l], C[l], B[l], B[l] * 100 / bytes, W[l] / W[full], B[l] / B[full], F[l] } }'
