# cgroup.sh: sourced by the bench scripts that run pods in cgroups (v1) of
# their own (pods.sh, clone.sh, upload.sh).

# cg_remove DIR: kills what is left in the cgroup (only processes of this
# run are put there) and removes it.
cg_remove() {
	local d=$1 p
	[[ -d $d ]] || return 0
	for _ in 1 2 3 4 5; do
		[[ -s $d/cgroup.procs ]] || break
		while read -r p; do kill -9 "$p" 2>/dev/null; done <"$d/cgroup.procs"
		sleep 0.2
	done
	rmdir "$d" || echo "bench: could not remove cgroup $d" >&2
}

# The pods of clone.sh and upload.sh: each in cgroups named $pod_cg-NAME
# (the script sets pod_cg, unique to its run) under memory (limited to
# $mem_limit bytes, page cache counted), cpuacct and, with the limit
# "cdi", cpu ($cpu_quota us per 100000 us: CDI's 750m).

# pod_cgroups NAME LIMIT: makes the pod's cgroups; prints the shell
# prefix that joins them.
pod_cgroups() {
	local name=$1 limit=$2 c d prefix=""
	for c in memory cpuacct $([[ $limit == cdi ]] && echo cpu); do
		d=/sys/fs/cgroup/$c/$pod_cg-$name
		mkdir "$d"
		prefix+="echo \$\$ >$d/cgroup.procs && "
	done
	echo "$mem_limit" >"/sys/fs/cgroup/memory/$pod_cg-$name/memory.limit_in_bytes"
	if [[ $limit == cdi ]]; then
		echo 100000 >"/sys/fs/cgroup/cpu/$pod_cg-$name/cpu.cfs_period_us"
		echo "$cpu_quota" >"/sys/fs/cgroup/cpu/$pod_cg-$name/cpu.cfs_quota_us"
	fi
	echo "$prefix"
}

# pod_usage NAME: the pod's CPU seconds and memory peak (MiB), then
# removes its cgroups.
pod_usage() {
	local name=$1 c
	printf '%s %s\n' "$(awk '{printf "%.3f", $1 / 1e9}' "/sys/fs/cgroup/cpuacct/$pod_cg-$name/cpuacct.usage")" \
		"$(awk '{printf "%.0f", $1 / 1048576}' "/sys/fs/cgroup/memory/$pod_cg-$name/memory.max_usage_in_bytes")"
	for c in memory cpuacct cpu; do cg_remove "/sys/fs/cgroup/$c/$pod_cg-$name"; done
}

# pod_cgroups_remove: the pods' cgroups a failed run left behind.
pod_cgroups_remove() {
	local d
	for d in /sys/fs/cgroup/{memory,cpuacct,cpu}/"$pod_cg"-*; do cg_remove "$d"; done
}
