# pods.sh: the pod rows of `make bench` (issue 24 §2, §5), sourced by
# bench.sh after its fixtures and measure/with_scratch_peak helpers.
#
# CDI's importer (cmd/cdi-importer of CDI v1.66.0, built from CDI's public
# source by scripts/e2e/cdi-build.sh importer, or BENCH_CDI_IMPORTER=/path)
# and ours run as a pod runs them: no arguments, CDI's environment
# (IMPORTER_SOURCE=http, IMPORTER_ENDPOINT, IMPORTER_CONTENTTYPE=kubevirt,
# IMPORTER_IMAGE_SIZE, ...), the loop device at /dev/cdi-block-volume and an
# empty /scratch, in a private mount namespace (internal/testkit/testimg/pod.sh, as
# the pod tests run ours), under each of the pods' limits (BENCH_POD_LIMITS
# below) in turn, each inside a fresh memory cgroup (v1) of the limits'
# memory whose peak (memory.max_usage_in_bytes,
# page cache included, which the kernel reclaims at the limit) and OOM
# kills are recorded, and a fresh cpuacct cgroup (v1) whose CPU time
# (cpuacct.usage: every process of the pod, the decoder child included, not
# the loop device's kernel worker) is recorded as cg_cpu_s, with the cores
# (nproc) as cg_cores. BENCH_CDI=0 leaves CDI's rows out; without a CDI
# binary they are left out with a note.

cdi_version=v1.66.0
cdi_bin="" cdi_note=""
cg_root="" ca_root="" cpu_root=""
# BENCH_POD_LIMITS: the pods' limits, a pod table for each mode, in turn in
# every round: cdi, what CDI's controller gives its importer, upload-server
# and cloner pods by default (pkg/controller/config-controller.go: limits
# cpu 750m, memory 600M): a memory limit of 600000000 bytes and a CFS quota
# of 75 ms per 100 ms (cgroup v1 cpu controller); none, a 256 MiB memory
# limit and no CPU limit, as the tables before issue 37.
pod_modes=${BENCH_POD_LIMITS:-cdi none}
for mode in $pod_modes; do
	case $mode in
	cdi | none) ;;
	*)
		echo "bench: BENCH_POD_LIMITS=$BENCH_POD_LIMITS: want cdi, none, or both (\"cdi none\")" >&2
		exit 2
		;;
	esac
done
# pod_memory MODE / pod_quota MODE: the memory limit in bytes, the CFS
# quota in us per 100000 us (empty: none).
pod_memory() { if [[ $1 == cdi ]]; then echo 600000000; else echo $((256 << 20)); fi; }
pod_quota() { [[ $1 != cdi ]] || echo 75000; }
# cdi_resolve: sets cdi_bin (or cdi_note when there is none).
cdi_resolve() {
	if [[ ${BENCH_CDI:-1} == 0 ]]; then
		cdi_note="BENCH_CDI=0"
	elif [[ -n ${BENCH_CDI_IMPORTER:-} ]]; then
		if [[ -x $BENCH_CDI_IMPORTER ]]; then cdi_bin=$BENCH_CDI_IMPORTER; else cdi_note="BENCH_CDI_IMPORTER=$BENCH_CDI_IMPORTER is not executable"; fi
	else
		local b=$cache/bin/cdi-importer-$cdi_version
		if [[ ! -x $b ]]; then
			echo "bench: building CDI's importer $cdi_version (scripts/e2e/cdi-build.sh importer)" >&2
			if E2E_CDI_VERSION=$cdi_version scripts/e2e/cdi-build.sh importer "$b.$$" >"$work/logs/cdi-build.log" 2>&1; then
				mv "$b.$$" "$b"
			else
				rm -f "$b.$$"
				cdi_note="could not build CDI's importer $cdi_version: $(tail -c 200 "$work/logs/cdi-build.log" | tr '\n' ' ') (E2E_CDI_GIT=<git dir or URL> or BENCH_CDI_IMPORTER=/path)"
			fi
		fi
		[[ -x $b ]] && cdi_bin=$b
	fi
	if [[ -n $cdi_bin ]]; then
		# A private copy: a rebuild during the run must not change what is timed.
		cp "$cdi_bin" "$work/cdi-importer"
		cdi_bin=$work/cdi-importer
	else
		echo "bench: CDI's importer rows left out: $cdi_note" >&2
		printf 'N\t%s\n' "CDI's importer rows left out: $cdi_note" >>"$tsv"
	fi
	nbdkit curl --dump-plugin >/dev/null 2>&1 || echo "bench: nbdkit's curl plugin is missing: CDI's importer runs without it (apt-get install nbdkit)" >&2
}

# cg_setup: the memory and cpuacct cgroup (v1) parents of the pods' cgroups.
cg_setup() {
	local m=/sys/fs/cgroup/memory a=/sys/fs/cgroup/cpuacct
	if [[ -w $m/cgroup.procs ]]; then
		cg_root=$m/diskimport-bench-$stamp
		mkdir "$cg_root"
	else
		echo "bench: no memory cgroup v1 at $m: the pods run without a memory limit" >&2
	fi
	if [[ -w $a/cgroup.procs && -r $a/cpuacct.usage ]]; then
		ca_root=$a/diskimport-bench-$stamp
		mkdir "$ca_root"
	else
		echo "bench: no cpuacct cgroup v1 at $a: the pod table has no CPU time" >&2
	fi
	if [[ " $pod_modes " == *" cdi "* ]]; then
		local c=/sys/fs/cgroup/cpu
		[[ -w $c/cgroup.procs && -w $c/cpu.cfs_quota_us ]] || { echo "bench: BENCH_POD_LIMITS=cdi needs the cgroup v1 cpu controller at $c" >&2; exit 2; }
		cpu_root=$c/diskimport-bench-$stamp
		mkdir "$cpu_root"
	fi
	local mode cpu
	for mode in $pod_modes; do
		cpu="none"
		[[ $mode == cdi ]] && cpu="$(($(pod_quota cdi) / 100))m (CFS quota $(pod_quota cdi) us per 100000 us; cg_throttled_s: the time the quota held the pod)"
		printf 'N\t%s\n' "pods' limits, $mode: memory $(pod_memory "$mode") bytes, CPU $cpu" >>"$tsv"
	done
}
source bench/cgroup.sh # cg_remove
cg_cleanup() {
	if [[ -n $cg_root ]]; then
		cg_remove "$cg_root/pod"
		cg_remove "$cg_root"
	fi
	if [[ -n $ca_root ]]; then
		cg_remove "$ca_root/pod"
		cg_remove "$ca_root"
	fi
	if [[ -n $cpu_root ]]; then
		cg_remove "$cpu_root/pod"
		cg_remove "$cpu_root"
	fi
}

# pod_import LABEL BIN FILE MODE [PREP]: one import of $url/FILE onto the
# loop device by BIN as CDI's importer pod under the limits MODE, measured,
# with its scratch peak and its cgroups' memory peak and CPU time.
pod_import() {
	local label=$1 bin=$2 file=$3 mode=$4 prep=${5:-reset_loop} cg="" ca="" cq="" cpu_quota
	cpu_quota=$(pod_quota "$mode")
	if [[ -n $cg_root ]]; then
		cg=$cg_root/pod
		mkdir "$cg"
		pod_memory "$mode" >"$cg/memory.limit_in_bytes"
	fi
	if [[ -n $ca_root ]]; then
		ca=$ca_root/pod
		mkdir "$ca"
	fi
	if [[ -n $cpu_quota ]]; then
		cq=$cpu_root/pod
		mkdir "$cq"
		echo 100000 >"$cq/cpu.cfs_period_us"
		echo "$cpu_quota" >"$cq/cpu.cfs_quota_us"
	fi
	mkdir -p "$work/podroot"
	# The measured shell joins the cgroups, then becomes the pod.
	with_scratch_peak "$label" "$prep" "${cg:+echo \$\$ >$cg/cgroup.procs && }${ca:+echo \$\$ >$ca/cgroup.procs && }${cq:+echo \$\$ >$cq/cgroup.procs && }exec env -i \
PATH=/native:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin IMPORTER_SOURCE=http IMPORTER_ENDPOINT=$url/$file \
IMPORTER_CONTENTTYPE=kubevirt IMPORTER_IMAGE_SIZE=$vsize PREALLOCATION=false FILESYSTEM_OVERHEAD=0 OWNER_UID=bench \
unshare --mount --propagation private sh $root/internal/testkit/testimg/pod.sh $work/podroot 0 \
/dev/cdi-block-volume $loop /importer $bin /scratch $scratch /native $work/native"
	if [[ $last_rc != 0 ]]; then
		# The error line (klog's E..., slog's level=ERROR), not the stack
		# trace CDI prints after it; tabs would split the runs file's fields.
		local why
		why=$(grep -E '^E[0-9]{4} |level=ERROR' "$log.err" | tail -1)
		[[ -n $why ]] || why=$(grep -v '^[[:space:]]*$' "$log.err" | tail -1)
		printf 'N\t%s\n' "$label failed (exit $last_rc): $(tr '\t' ' ' <<<"$why" | cut -c1-240)" >>"$tsv"
	fi
	if [[ -n $cg ]]; then
		extra "$label" cg_peak "$(cat "$cg/memory.max_usage_in_bytes")"
		extra "$label" cg_oom_kills "$(awk '$1=="oom_kill"{print $2}' "$cg/memory.oom_control")"
		cg_remove "$cg"
	fi
	if [[ -n $ca ]]; then
		extra "$label" cg_cpu_s "$(awk '{printf "%.4f", $1 / 1e9}' "$ca/cpuacct.usage")"
		extra "$label" cg_cores "$(nproc)"
		cg_remove "$ca"
	fi
	if [[ -n $cq ]]; then
		extra "$label" cg_throttled_s "$(awk '$1=="throttled_time"{printf "%.3f", $2 / 1e9}' "$cq/cpu.stat")"
		extra "$label" cg_quota_cores "$(awk -v q="$cpu_quota" 'BEGIN{printf "%.3f", q / 100000}')"
		cg_remove "$cq"
	fi
}
# pod_label WHO CASE MODE
pod_label() {
	if [[ $3 == cdi ]]; then echo "$1 $2 env→loop (pod, 750m)"; else echo "$1 $2 env→loop (pod)"; fi
}

# pod_round CASE: CDI's importer and ours in env mode, one run each under
# each of the pods' limits.
pod_round() {
	local c=$1 mode
	for mode in $pod_modes; do
		[[ -n $cdi_bin ]] && pod_import "$(pod_label CDI "$c" "$mode")" "$cdi_bin" "disk.$c" "$mode"
		pod_import "$(pod_label ours "$c" "$mode")" "$work/importer" "disk.$c" "$mode"
	done
}
# pod_setup_round: what the pod's namespace, mounts and cgroup cost alone
# (/bin/true in the same pod), to read the short rows against.
pod_setup_round() {
	pod_import "pod setup alone (/bin/true)" /bin/true disk.raw none reset_none
}
