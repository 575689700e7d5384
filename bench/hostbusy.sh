# hostbusy.sh: sourced by bench.sh and clone.sh: how busy the machine's
# cores were while a command ran (every core: the loop devices' kernel
# workers, the network's softirqs and the HTTP server included, which a
# pod's cgroups leave out).

# cpu_ticks: the machine's CPU time so far, all cores, in clock ticks: the
# total and the idle part (idle and iowait; steal counts as busy: the
# hypervisor ran something else when a vCPU wanted to run).
cpu_ticks() { awk '/^cpu /{t=0; for (i = 2; i <= 9; i++) t += $i; print t, $5 + $6; exit}' /proc/stat; }

# busy_share BEFORE AFTER: the busy share of the cores between two
# cpu_ticks (1 is every core busy throughout).
busy_share() {
	awk -v a="$1" -v b="$2" 'BEGIN{split(a, x, " "); split(b, y, " ");
		t = y[1] - x[1]; printf "%.3f", (t > 0 ? 1 - (y[2] - x[2]) / t : 0)}'
}
