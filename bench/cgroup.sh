# cgroup.sh: sourced by the bench scripts that run pods in cgroups (v1) of
# their own (pods.sh, clone.sh).

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
