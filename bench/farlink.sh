# farlink.sh: the far-link rows of `make bench` (issue 24 §4), sourced by
# bench.sh after its fixtures and measure/ours/compare helpers.
#
# A far or busy mirror caps each connection, not the link. This kernel has
# no netem and no fq qdisc (tbf/htb shape only in aggregate), so `benchtool
# farmirror` shapes the server itself: every connection paced to
# BENCH_FAR_RATE (8M: 8 MB/s), every response delayed by BENCH_FAR_DELAY
# (30ms), on 127.0.0.1. A 96 MiB test disk (benchtool gen) is imported from
# it onto a file by ours with the default connections and with
# --connections 1 (CDI's importer, like every single-GET client, gets what
# one connection gets), against one curl connection and aria2c -x8 -s8 (when
# installed: apt-get install aria2). On plain 127.0.0.1 (no cap) the raw
# bench disk is imported onto the loop device with --connections 1 beside
# the default row: parallel ranges must cost nothing there.
# BENCH_FARLINK=0 leaves these rows out.

far_pid="" far_url=""
far_setup() {
	local d=$work/far
	mkdir -p "$d"
	[[ -s $cache/far-96M.raw ]] || { "$bt" gen 96M "$cache/far-96M.raw.$$" >/dev/null && mv "$cache/far-96M.raw.$$" "$cache/far-96M.raw"; }
	ln -sf "$cache/far-96M.raw" "$d/far.raw"
	"$bt" farmirror -dir "$d" -rate "${BENCH_FAR_RATE:-8M}" -first-byte "${BENCH_FAR_DELAY:-30ms}" >"$work/far.url" 2>"$work/logs/farmirror.err" &
	far_pid=$!
	for _ in $(seq 50); do [[ -s $work/far.url ]] && break; sleep 0.1; done
	far_url=$(head -1 "$work/far.url")
	[[ -n $far_url ]] || { echo "bench: far mirror did not start" >&2; exit 1; }
	cat "$d/far.raw" >/dev/null
	echo "bench: far mirror at $far_url (${BENCH_FAR_RATE:-8M}B/s per connection, ${BENCH_FAR_DELAY:-30ms} first byte)" >&2
}
far_stop() {
	if [[ -n $far_pid ]]; then kill "$far_pid" 2>/dev/null; wait "$far_pid" 2>/dev/null; fi
	far_pid=""
}

far_round() {
	local dldir=$work/far-dl measure_bytes
	measure_bytes=$(stat -c %s "$cache/far-96M.raw") # MB/s of these rows: the far file's
	ours "ours far raw →file" reset_file "$imp $far_url/far.raw $out"
	ours "ours far raw --connections 1 →file" reset_file "$imp --connections 1 $far_url/far.raw $out"
	measure "curl far raw (one connection) → file" reset_none "curl -sS -o $dl $far_url/far.raw"
	if command -v aria2c >/dev/null; then
		measure "aria2c -x8 -s8 far raw → file" reset_none "rm -rf $dldir && aria2c -q -x8 -s8 -d $dldir -o far.raw $far_url/far.raw"
	fi
	measure_bytes=""
	if [[ " $cases " == *" raw "* ]]; then
		ours "ours raw http→loop --connections 1" reset_loop "$imp --connections 1 $url/disk.raw $loop"
	fi
}

far_compare() {
	local F="ours far raw →file"
	compare "$F" "ours far raw --connections 1 →file" 10 "≥10× one connection (CDI)"
	command -v aria2c >/dev/null && compare "$F" "aria2c -x8 -s8 far raw → file" 1 "≥1× aria2c -x8 -s8"
	compare "$F" "curl far raw (one connection) → file"
	if [[ " $cases " == *" raw "* ]]; then
		compare "ours raw http→loop" "ours raw http→loop --connections 1" 0.95 "no slower uncapped (noise 5%)"
	fi
}
